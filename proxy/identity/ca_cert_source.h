#pragma once
// Certificates minted in-process by the built-in CA (docs/security.md, "Certificate lifecycle"):
// ferryd holds a CA key (the lab gives each node an intermediate signed by the lab root) and
// issues one X.509-SVID per local identity on first use. Keys are generated in memory and
// never written to disk. Each SVID is replaced once half of its lifetime has passed; holders
// of the previous one keep it (shared_ptr) until they drop it, so rotation cuts no
// connection. The trust bundle may hold several roots, so a root rotates with overlap:
// setBundle({old, new}) → setAuthority(CA under new) → setBundle({new}).
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proxy/identity/ca.h"
#include "proxy/identity/cert_source.h"

namespace ferry::identity {

// Istio's and SPIRE's default workload certificate lifetime: short enough that a stolen key
// is useful for a day at most, long enough that a CA outage of hours drops nothing (SVIDs
// are refreshed at half life, so a fresh one always has >= 12 h left).
inline constexpr std::chrono::seconds kDefaultLeafLifetime = std::chrono::hours(24);

// After a failed issuance the next attempt waits this long, doubling per failure up to
// kMaxIssueRetryInterval: a broken CA would otherwise be retried (and logged) on every
// handshake, while a transient failure is retried well before the old SVID's remaining half
// life runs out.
inline constexpr std::chrono::seconds kIssueRetryInterval{1};
inline constexpr std::chrono::seconds kMaxIssueRetryInterval{60};

// Wall-clock time, behind a seam so that tests move time instead of sleeping.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual std::chrono::system_clock::time_point now() const = 0;
};

class SystemClock : public Clock {
 public:
  std::chrono::system_clock::time_point now() const override { return std::chrono::system_clock::now(); }
};

// A process-wide SystemClock, the default for sources that take a Clock.
const Clock& systemClock();

class CaCertSource : public CertSource {
 public:
  // `ca` issues the leaves; `chain` holds the CA certificates from `ca`'s issuer up to its
  // root, issuer first (empty when `ca` is a root or signed directly by one; a self-signed
  // root or `ca`'s own certificate in it is tolerated and never sent). `roots` is the trust
  // bundle of `trust_domain` and must contain the root `ca` chains to. `clock` must outlive
  // the source. Leaves never outlive `ca` or its chain: their lifetime is cut short instead.
  static absl::StatusOr<std::unique_ptr<CaCertSource>> create(
      CertificateAuthority ca, std::vector<X509Ptr> chain, std::vector<X509Ptr> roots,
      std::string trust_domain, std::chrono::seconds leaf_lifetime = kDefaultLeafLifetime,
      const Clock& clock = systemClock());

  // Thread-safe. Issues on first use and at half life; identities of other trust domains are
  // refused. If a refresh fails, the previous SVID is served until it expires.
  absl::StatusOr<std::shared_ptr<const Svid>> svid(const SpiffeId& id) override;
  // Thread-safe. Never fails once created; same pointer until setBundle.
  absl::StatusOr<std::shared_ptr<const TrustBundle>> bundle() override;

  // Replaces the trust bundle. Refused (and nothing changes) if it is empty, holds a non-CA
  // certificate, or no longer trusts the issuing CA (removing the old root before switching
  // the CA would break every new SVID).
  absl::Status setBundle(std::vector<X509Ptr> roots);
  // Replaces the issuing CA (root rotation, or a renewed intermediate); every cached SVID is
  // re-issued by the new CA on its next use. Refused unless the current bundle trusts it.
  absl::Status setAuthority(CertificateAuthority ca, std::vector<X509Ptr> chain);

  // Replaces CA and bundle together, for when both changed at once (a root rotation whose
  // steps were written faster than they were picked up). Refused unless `roots` trusts `ca`.
  absl::Status setAuthorityAndBundle(CertificateAuthority ca, std::vector<X509Ptr> chain,
                                     std::vector<X509Ptr> roots);

  // A certificate this source's CA signed for a key made elsewhere, with what goes after it.
  struct Signed {
    X509Ptr leaf;
    std::vector<X509Ptr> intermediates;  // the leaf's issuer first, no root (as in Svid)
    std::chrono::system_clock::time_point not_after;  // the leaf's
    uint64_t generation = 0;  // authorityGeneration() of the CA that signed it
  };
  // Thread-safe. ferry-ca signing a node's CSR: an X.509-SVID for `id` (this trust domain,
  // with a path) with `public_key`, the same profile as svid()'s. The lifetime is cut to the
  // CA's (and its chain's) remaining life, as svid()'s is; nothing is cached or counted.
  absl::StatusOr<Signed> signFor(const SpiffeId& id, EVP_PKEY* public_key, std::chrono::seconds lifetime);
  // Thread-safe. ferry-ca's own HTTPS certificate from the current CA (issueServing), cut
  // the same way. Make a new one when authorityGeneration() moves past `generation` (the CA
  // was replaced, and peers may trust only the new one's root) or at half its life.
  absl::StatusOr<Signed> signServing(const std::vector<std::string>& dns_names, EVP_PKEY* public_key,
                                     std::chrono::seconds lifetime);

  // Drops the cached SVID of `id` (its last local workload left); the next svid(id) issues
  // anew. Holders of the old one keep it.
  void forget(const SpiffeId& id);
  // forget() for every identity not in `keep` (the identities of the local workloads).
  // Returns how many were dropped.
  size_t retain(const absl::flat_hash_set<SpiffeId>& keep);

  // Bumped by every accepted setAuthority / setAuthorityAndBundle (0 for the first CA).
  uint64_t authorityGeneration();
  // When the issuing CA, or a certificate of its chain, expires: no SVID is issued after.
  std::chrono::system_clock::time_point authorityNotAfter();
  // SVIDs held for identities now.
  size_t cachedCount();
  // The SVIDs held now (for the admin endpoint's /certs): never issues. An identity whose
  // SVID is being issued at this moment is left out.
  std::vector<std::shared_ptr<const Svid>> held();

  // For metrics: every SVID issued (first ones and refreshes), those that replaced a cached
  // SVID (half life or a new CA), and failed issuances.
  uint64_t issued() const { return issued_.load(std::memory_order_relaxed); }
  uint64_t refreshes() const { return refreshes_.load(std::memory_order_relaxed); }
  uint64_t failures() const { return failures_.load(std::memory_order_relaxed); }
  uint64_t forgotten() const { return forgotten_.load(std::memory_order_relaxed); }

 private:
  // The issuing CA with what is sent after the leaf; replaced as a whole by setAuthority.
  struct Authority {
    CertificateAuthority ca;
    std::vector<X509Ptr> intermediates;  // ca's own certificate first unless it is a root
    std::chrono::system_clock::time_point not_after;  // earliest expiry of ca and its chain
    uint64_t generation = 0;
  };
  // One identity's SVID. Times come from clock_, so tests control refresh and expiry.
  struct Entry {
    std::mutex mu;  // held while issuing, so concurrent first uses wait for one issuance
    std::shared_ptr<const Svid> svid;
    uint64_t generation = 0;  // of the Authority that issued svid
    std::chrono::system_clock::time_point refresh_at, expires_at;
    absl::Status error;  // of the last attempt, when it failed
    std::chrono::system_clock::time_point retry_at;
    std::chrono::seconds retry_interval{0};
  };

  CaCertSource(std::shared_ptr<const Authority> authority, std::shared_ptr<const TrustBundle> bundle,
               std::chrono::seconds leaf_lifetime, const Clock& clock);

  static absl::StatusOr<std::shared_ptr<const Authority>> makeAuthority(CertificateAuthority ca,
                                                                        std::vector<X509Ptr> chain,
                                                                        uint64_t generation);
  static absl::StatusOr<std::shared_ptr<const TrustBundle>> makeBundle(std::string trust_domain,
                                                                       std::vector<X509Ptr> roots);
  // Whether `bundle` trusts `authority`'s certificate through its chain; the error says why not.
  static absl::Status checkTrusted(const Authority& authority, const TrustBundle& bundle,
                                   std::chrono::system_clock::time_point at);

  // signFor and signServing: `sign` makes the certificate with the current CA and the cut
  // lifetime; `what` names it in errors ("the certificate for <id>").
  using SignWith = std::function<absl::StatusOr<X509Ptr>(const CertificateAuthority&, std::chrono::seconds)>;
  // This trust domain, parsed, with a path.
  absl::Status checkWorkloadId(const SpiffeId& id) const;
  absl::StatusOr<Signed> signWith(std::string_view what, std::chrono::seconds lifetime, const SignWith& sign);

  absl::StatusOr<std::shared_ptr<const Svid>> issue(const SpiffeId& id, const Authority& authority,
                                                    std::chrono::system_clock::time_point now,
                                                    std::chrono::seconds* lifetime) const;

  const std::string trust_domain_;
  const std::chrono::seconds leaf_lifetime_;
  const Clock& clock_;

  std::mutex mu_;  // guards authority_, bundle_ and entries_ (the map, not the entries)
  std::shared_ptr<const Authority> authority_;
  std::shared_ptr<const TrustBundle> bundle_;
  absl::flat_hash_map<SpiffeId, std::shared_ptr<Entry>> entries_;

  std::atomic<uint64_t> issued_{0};
  std::atomic<uint64_t> refreshes_{0};
  std::atomic<uint64_t> failures_{0};
  std::atomic<uint64_t> forgotten_{0};
};

}  // namespace ferry::identity
