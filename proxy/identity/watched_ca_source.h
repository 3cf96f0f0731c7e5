#pragma once
// The built-in CA as ferryd runs it (identity.source: ca): a CaCertSource built from files
// that are watched, so that a renewed intermediate or a root rotation needs no restart.
//
// - Start with missing or broken files: not fatal. status() says why (readiness reports it)
//   and every svid() fails with that reason, so connections that need a certificate fail
//   closed; when good files appear, the next poll() builds the CA and the node is ready.
// - The files are watched with the daemon's one change rule (common::WatchedFile: stamp,
//   re-read while younger than 2 s, content compare), so a rewrite within one coarse clock
//   tick is seen and a rewrite with the same content applies nothing.
// - A later change is applied as a whole (CA, bundle, or both at once); a broken change keeps
//   the previous material, logs why once per version of the files and counts a failure.
// - Root rotation with overlap is three file writes (docs/security.md): bundle {old,new} →
//   CA under new → bundle {new}. Each step is refused (and counted) if it would leave the
//   issuing CA untrusted, e.g. removing the old root before the CA was switched.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "proxy/common/file.h"
#include "proxy/identity/ca_cert_source.h"

namespace ferry::identity {

struct CaFiles {
  std::string ca_cert;  // the issuing CA first, then its chain up to (not incl.) the root
  std::string ca_key;
  std::string bundle;   // the trust domain's roots, one or more
};

class WatchedCaSource : public CertSource {
 public:
  WatchedCaSource(CaFiles files, std::string trust_domain, std::chrono::seconds leaf_lifetime,
                  const Clock& clock = systemClock());

  // Control thread only. Reads the files and, if any of them changed since the last call,
  // applies them. Returns true when new material took effect.
  bool poll();

  // Thread-safe. OK once a CA is loaded (later broken changes keep it OK: the previous
  // material still works); before that, why there is none.
  absl::Status status() const;

  absl::StatusOr<std::shared_ptr<const Svid>> svid(const SpiffeId& id) override;
  absl::StatusOr<std::shared_ptr<const TrustBundle>> bundle() override;

  // Forgets the SVIDs of identities not in `keep`; 0 while not ready.
  size_t retain(const absl::flat_hash_set<SpiffeId>& keep);

  // nullptr until the first good material; then the same source for life.
  std::shared_ptr<CaCertSource> current() const;
  // Changes applied / refused since start (the first load counts as a reload).
  uint64_t reloads() const { return reloads_.load(std::memory_order_relaxed); }
  uint64_t reloadFailures() const { return reload_failures_.load(std::memory_order_relaxed); }

 private:
  // Each file's content version (bumped when its content changes), or why it cannot be read.
  struct Stamps {
    std::string ca_cert, ca_key, bundle;
    friend bool operator==(const Stamps&, const Stamps&) = default;
  };
  struct Watched {
    common::WatchedFile file;
    uint64_t version = 0;
    std::string stamp() const;
  };
  Stamps stampNow();
  // Loads what changed between applied_ and `now` and applies it; the error says which file.
  absl::Status apply(const Stamps& now);

  const CaFiles files_;
  const std::string trust_domain_;
  const std::chrono::seconds leaf_lifetime_;
  const Clock& clock_;

  // Control thread only.
  Watched ca_cert_file_, ca_key_file_, bundle_file_;
  bool polled_ = false;
  Stamps seen_;     // at the last poll that read the files
  Stamps applied_;  // of the material in effect

  mutable std::mutex mu_;  // guards status_ and source_
  absl::Status status_ = absl::UnavailableError("identity: the built-in CA has not been loaded yet");
  std::shared_ptr<CaCertSource> source_;

  std::atomic<uint64_t> reloads_{0};
  std::atomic<uint64_t> reload_failures_{0};
};

}  // namespace ferry::identity
