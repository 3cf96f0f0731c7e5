#include "proxy/identity/ca_cert_source.h"

#include <openssl/err.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "proxy/common/log.h"
#include "proxy/common/status_macros.h"
#include "proxy/identity/string_compat.h"

namespace ferry::identity {
namespace {

using std::chrono::system_clock;

bool isSelfSigned(X509* cert) { return (X509_get_extension_flags(cert) & EXFLAG_SS) != 0; }

std::string describe(X509* cert) { return nameToString(X509_get_subject_name(cert)); }

std::vector<X509Ptr> upRefAll(const std::vector<X509Ptr>& certs) {
  std::vector<X509Ptr> out;
  for (const X509Ptr& cert : certs) out.push_back(upRef(cert.get()));
  return out;
}

// The lifetime `what`, issued at `now` by `ca` whose chain expires at `not_after`, may have:
// `wanted`, cut so that it does not outlive its issuer (it would then fail verification on
// every peer).
absl::StatusOr<std::chrono::seconds> cutLifetime(X509* ca, system_clock::time_point not_after,
                                                 system_clock::time_point now, std::chrono::seconds wanted,
                                                 std::string_view what) {
  if (now >= not_after) {
    return absl::FailedPreconditionError(
        absl::StrCat("the issuing CA ", describe(ca), " (or its chain) expired at ", formatTime(not_after)));
  }
  std::chrono::seconds lifetime = std::min(wanted, std::chrono::floor<std::chrono::seconds>(not_after - now));
  if (lifetime.count() <= 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("the issuing CA ", describe(ca), " expires at ", formatTime(not_after)));
  }
  if (lifetime < wanted) {
    FERRY_LOG(kWarn, "the issuing CA %s expires at %s; %s is cut to %ds: renew the CA", describe(ca),
              formatTime(not_after), toAbsl(what), lifetime.count());
  }
  return lifetime;
}

}  // namespace

const Clock& systemClock() {
  static const SystemClock clock;
  return clock;
}

CaCertSource::CaCertSource(std::shared_ptr<const Authority> authority,
                           std::shared_ptr<const TrustBundle> bundle, std::chrono::seconds leaf_lifetime,
                           const Clock& clock)
    : trust_domain_(bundle->trust_domain),
      leaf_lifetime_(leaf_lifetime),
      clock_(clock),
      authority_(std::move(authority)),
      bundle_(std::move(bundle)) {}

absl::StatusOr<std::unique_ptr<CaCertSource>> CaCertSource::create(
    CertificateAuthority ca, std::vector<X509Ptr> chain, std::vector<X509Ptr> roots,
    std::string trust_domain, std::chrono::seconds leaf_lifetime, const Clock& clock) {
  if (leaf_lifetime.count() <= 0) {
    return absl::InvalidArgumentError("built-in CA: leaf certificate lifetime must be positive");
  }
  auto bundle = makeBundle(std::move(trust_domain), std::move(roots));
  if (!bundle.ok()) return bundle.status();
  auto authority = makeAuthority(std::move(ca), std::move(chain), 0);
  if (!authority.ok()) return authority.status();
  if ((*authority)->ca.trustDomain() != (*bundle)->trust_domain) {
    return absl::InvalidArgumentError(absl::StrCat("built-in CA: the CA certificate is for trust domain ",
                                                   (*authority)->ca.trustDomain(), ", not ",
                                                   (*bundle)->trust_domain));
  }
  if (absl::Status s = checkTrusted(**authority, **bundle, clock.now()); !s.ok()) return s;
  return std::unique_ptr<CaCertSource>(
      new CaCertSource(*std::move(authority), *std::move(bundle), leaf_lifetime, clock));
}

absl::StatusOr<std::shared_ptr<const CaCertSource::Authority>> CaCertSource::makeAuthority(
    CertificateAuthority ca, std::vector<X509Ptr> chain, uint64_t generation) {
  std::vector<X509Ptr> intermediates;
  system_clock::time_point not_after = asn1TimeToTimePoint(X509_get0_notAfter(ca.cert()));
  if (!isSelfSigned(ca.cert())) intermediates.push_back(upRef(ca.cert()));
  for (X509Ptr& cert : chain) {
    if (!cert) return absl::InvalidArgumentError("built-in CA: null certificate in the CA chain");
    if (X509_check_ca(cert.get()) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("built-in CA: chain certificate ", describe(cert.get()), " is not a CA certificate"));
    }
    not_after = std::min(not_after, asn1TimeToTimePoint(X509_get0_notAfter(cert.get())));
    // Roots are in every peer's bundle already; sending them only costs bytes.
    if (isSelfSigned(cert.get()) || X509_cmp(cert.get(), ca.cert()) == 0) continue;
    intermediates.push_back(std::move(cert));
  }
  return std::shared_ptr<const Authority>(
      new Authority{std::move(ca), std::move(intermediates), not_after, generation});
}

absl::StatusOr<std::shared_ptr<const TrustBundle>> CaCertSource::makeBundle(std::string trust_domain,
                                                                            std::vector<X509Ptr> roots) {
  if (absl::Status s = validateTrustDomain(trust_domain); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("built-in CA: trust domain: ", s.message()));
  }
  if (roots.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("built-in CA: the trust bundle of ", trust_domain, " holds no root"));
  }
  for (size_t i = 0; i < roots.size(); ++i) {
    if (!roots[i] || X509_check_ca(roots[i].get()) == 0) {
      return absl::InvalidArgumentError(absl::StrCat("built-in CA: trust bundle certificate #", i + 1,
                                                     " is not a CA certificate"));
    }
  }
  auto bundle = std::make_shared<TrustBundle>();
  bundle->trust_domain = std::move(trust_domain);
  bundle->roots = std::move(roots);
  return std::shared_ptr<const TrustBundle>(std::move(bundle));
}

absl::Status CaCertSource::checkTrusted(const Authority& authority, const TrustBundle& bundle,
                                        system_clock::time_point at) {
  // intermediates[0] is the CA itself (unless it is a root); the rest lead to the root.
  std::vector<X509*> untrusted;
  for (size_t i = 1; i < authority.intermediates.size(); ++i) untrusted.push_back(authority.intermediates[i].get());
  if (absl::Status s = verifyChain(authority.ca.cert(), untrusted, bundle, at); !s.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "built-in CA: CA certificate ", describe(authority.ca.cert()),
        " does not verify against the trust bundle of ", bundle.trust_domain, ": ", s.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const TrustBundle>> CaCertSource::bundle() {
  std::lock_guard<std::mutex> lock(mu_);
  return bundle_;
}

absl::Status CaCertSource::setBundle(std::vector<X509Ptr> roots) {
  auto bundle = makeBundle(trust_domain_, std::move(roots));
  if (!bundle.ok()) return bundle.status();
  std::lock_guard<std::mutex> lock(mu_);
  if (absl::Status s = checkTrusted(*authority_, **bundle, clock_.now()); !s.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("refusing the new trust bundle: it would not trust the issuing CA; ", s.message()));
  }
  bundle_ = *std::move(bundle);
  return absl::OkStatus();
}

absl::Status CaCertSource::setAuthority(CertificateAuthority ca, std::vector<X509Ptr> chain) {
  if (ca.trustDomain() != trust_domain_) {
    return absl::InvalidArgumentError(absl::StrCat("built-in CA: the new CA certificate is for trust domain ",
                                                   ca.trustDomain(), ", not ", trust_domain_));
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto authority = makeAuthority(std::move(ca), std::move(chain), authority_->generation + 1);
  if (!authority.ok()) return authority.status();
  if (absl::Status s = checkTrusted(**authority, *bundle_, clock_.now()); !s.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("refusing the new CA (add its root to the bundle first); ",
                                                      s.message()));
  }
  authority_ = *std::move(authority);
  return absl::OkStatus();
}

absl::Status CaCertSource::setAuthorityAndBundle(CertificateAuthority ca, std::vector<X509Ptr> chain,
                                                 std::vector<X509Ptr> roots) {
  if (ca.trustDomain() != trust_domain_) {
    return absl::InvalidArgumentError(absl::StrCat("built-in CA: the new CA certificate is for trust domain ",
                                                   ca.trustDomain(), ", not ", trust_domain_));
  }
  auto bundle = makeBundle(trust_domain_, std::move(roots));
  if (!bundle.ok()) return bundle.status();
  std::lock_guard<std::mutex> lock(mu_);
  auto authority = makeAuthority(std::move(ca), std::move(chain), authority_->generation + 1);
  if (!authority.ok()) return authority.status();
  if (absl::Status s = checkTrusted(**authority, **bundle, clock_.now()); !s.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("refusing the new CA and bundle: ", s.message()));
  }
  authority_ = *std::move(authority);
  bundle_ = *std::move(bundle);
  return absl::OkStatus();
}

void CaCertSource::forget(const SpiffeId& id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (entries_.erase(id) != 0) forgotten_.fetch_add(1, std::memory_order_relaxed);
}

size_t CaCertSource::retain(const absl::flat_hash_set<SpiffeId>& keep) {
  std::lock_guard<std::mutex> lock(mu_);
  size_t dropped = 0;
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (keep.contains(it->first)) {
      ++it;
      continue;
    }
    entries_.erase(it++);
    ++dropped;
  }
  forgotten_.fetch_add(dropped, std::memory_order_relaxed);
  return dropped;
}

uint64_t CaCertSource::authorityGeneration() {
  std::lock_guard<std::mutex> lock(mu_);
  return authority_->generation;
}

system_clock::time_point CaCertSource::authorityNotAfter() {
  std::lock_guard<std::mutex> lock(mu_);
  return authority_->not_after;
}

size_t CaCertSource::cachedCount() {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

std::vector<std::shared_ptr<const Svid>> CaCertSource::held() {
  std::vector<std::shared_ptr<Entry>> entries;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, entry] : entries_) entries.push_back(entry);
  }
  std::vector<std::shared_ptr<const Svid>> out;
  for (const auto& entry : entries) {
    std::unique_lock<std::mutex> lock(entry->mu, std::try_to_lock);  // never wait on an issuance
    if (lock.owns_lock() && entry->svid) out.push_back(entry->svid);
  }
  return out;
}

absl::StatusOr<std::shared_ptr<const Svid>> CaCertSource::issue(const SpiffeId& id,
                                                                const Authority& authority,
                                                                system_clock::time_point now,
                                                                std::chrono::seconds* lifetime) const {
  FERRY_ASSIGN_OR_RETURN(*lifetime, cutLifetime(authority.ca.cert(), authority.not_after, now, leaf_lifetime_,
                                                absl::StrCat("the certificate for ", id.str())));
  auto leaf = authority.ca.issueLeaf(id, *lifetime);
  if (!leaf.ok()) return leaf.status();
  auto svid = std::make_shared<Svid>();
  svid->id = id;
  svid->not_before = asn1TimeToTimePoint(X509_get0_notBefore(leaf->cert.get()));
  svid->not_after = asn1TimeToTimePoint(X509_get0_notAfter(leaf->cert.get()));
  svid->leaf = std::move(leaf->cert);
  svid->key = std::move(leaf->key);
  svid->intermediates = upRefAll(authority.intermediates);
  return std::shared_ptr<const Svid>(std::move(svid));
}

absl::StatusOr<CaCertSource::Signed> CaCertSource::signWith(std::string_view what, std::chrono::seconds lifetime,
                                                            const SignWith& sign) {
  std::shared_ptr<const Authority> authority;
  {
    std::lock_guard<std::mutex> lock(mu_);
    authority = authority_;
  }
  FERRY_ASSIGN_OR_RETURN(std::chrono::seconds cut,
                         cutLifetime(authority->ca.cert(), authority->not_after, clock_.now(), lifetime, what));
  FERRY_ASSIGN_OR_RETURN(X509Ptr leaf, sign(authority->ca, cut));
  Signed out;
  out.not_after = asn1TimeToTimePoint(X509_get0_notAfter(leaf.get()));
  out.leaf = std::move(leaf);
  out.intermediates = upRefAll(authority->intermediates);
  out.generation = authority->generation;
  return out;
}

absl::StatusOr<CaCertSource::Signed> CaCertSource::signFor(const SpiffeId& id, EVP_PKEY* public_key,
                                                           std::chrono::seconds lifetime) {
  FERRY_RETURN_IF_ERROR(checkWorkloadId(id));
  return signWith(absl::StrCat("the certificate for ", id.str()), lifetime,
                  [&](const CertificateAuthority& ca, std::chrono::seconds cut) {
                    return ca.issueLeafForKey(id, public_key, cut);
                  });
}

absl::StatusOr<CaCertSource::Signed> CaCertSource::signServing(const std::vector<std::string>& dns_names,
                                                               EVP_PKEY* public_key, std::chrono::seconds lifetime) {
  return signWith("the serving certificate", lifetime, [&](const CertificateAuthority& ca, std::chrono::seconds cut) {
    return ca.issueServing(dns_names, public_key, cut);
  });
}

absl::Status CaCertSource::checkWorkloadId(const SpiffeId& id) const {
  if (id.trustDomain() != trust_domain_) {
    return absl::InvalidArgumentError(absl::StrCat("identity ", id.str(), " is not in trust domain ",
                                                   trust_domain_, " of the built-in CA"));
  }
  if (auto parsed = SpiffeId::parse(id.str()); !parsed.ok()) return parsed.status();
  if (id.path().empty()) {
    return absl::InvalidArgumentError(absl::StrCat("identity ", id.str(), " has no path; a workload SVID needs one"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const Svid>> CaCertSource::svid(const SpiffeId& id) {
  FERRY_RETURN_IF_ERROR(checkWorkloadId(id));

  std::shared_ptr<const Authority> authority;
  std::shared_ptr<Entry> entry;
  {
    std::lock_guard<std::mutex> lock(mu_);
    authority = authority_;
    auto& slot = entries_[id];
    if (!slot) slot = std::make_shared<Entry>();
    entry = slot;
  }

  std::lock_guard<std::mutex> lock(entry->mu);
  system_clock::time_point now = clock_.now();
  bool current = entry->svid && entry->generation == authority->generation;
  if (current && now < entry->refresh_at) return entry->svid;
  bool usable = entry->svid && now < entry->expires_at;
  if (now < entry->retry_at) {
    if (usable) return entry->svid;
    return entry->error;
  }

  std::chrono::seconds lifetime{0};
  auto fresh = issue(id, *authority, now, &lifetime);
  if (fresh.ok()) {
    issued_.fetch_add(1, std::memory_order_relaxed);
    if (entry->svid) refreshes_.fetch_add(1, std::memory_order_relaxed);
    entry->svid = *std::move(fresh);
    entry->generation = authority->generation;
    entry->refresh_at = now + lifetime / 2;
    entry->expires_at = now + lifetime;
    entry->error = absl::OkStatus();
    entry->retry_at = {};
    entry->retry_interval = std::chrono::seconds(0);
    return entry->svid;
  }

  failures_.fetch_add(1, std::memory_order_relaxed);
  entry->error = absl::Status(fresh.status().code(), absl::StrCat("built-in CA: cannot issue a certificate for ",
                                                                  id.str(), ": ", fresh.status().message()));
  entry->retry_interval = entry->retry_interval.count() == 0
                              ? kIssueRetryInterval
                              : std::min(2 * entry->retry_interval, kMaxIssueRetryInterval);
  entry->retry_at = now + entry->retry_interval;
  if (usable) {
    FERRY_LOG(kWarn, "%s; keeping the previous certificate until %s, retrying in %ds", entry->error.message(),
              formatTime(entry->expires_at), entry->retry_interval.count());
    return entry->svid;
  }
  return entry->error;
}

}  // namespace ferry::identity
