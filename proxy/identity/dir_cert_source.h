#pragma once
// Certificates from a directory, as cert-manager or SPIRE helpers (or `ferryctl ca issue`)
// write them:
//   <dir>/bundle.pem                         roots of the trust domain (one or more)
//   <dir>/<namespace>/<service-account>/cert.pem   leaf first, then intermediates
//   <dir>/<namespace>/<service-account>/key.pem    PKCS#8 or EC PEM
// Files are loaded on first use and re-read when they change by the daemon's one rule
// (common::WatchedFile), checked at most once per `recheck_interval` per identity, so
// rotated files are picked up without a restart. A rotation that leaves a broken file set keeps serving the previous SVID until it
// expires (docs/security.md, "Certificate lifecycle").
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <sys/types.h>

#include "absl/container/flat_hash_map.h"
#include "proxy/common/file.h"
#include "proxy/identity/cert_source.h"
#include "proxy/identity/openssl_util.h"

namespace ferry::identity {

// Stat-ing three files per identity on every handshake would be wasted syscalls; one second
// is well below any rotation lead time (ztunnel refreshes at 50 % of a 24 h lifetime).
inline constexpr std::chrono::milliseconds kDefaultRecheckInterval{1000};

// The directory holding `id`'s files: <dir>/<ns>/<sa>. Fails unless id is a valid
// spiffe://<td>/ns/<ns>/sa/<sa> (so no "..", "/" or empty segment reaches a path).
absl::StatusOr<std::string> svidDirectory(const std::string& dir, const SpiffeId& id);

class DirCertSource : public CertSource {
 public:
  DirCertSource(std::string dir, std::string trust_domain,
                std::chrono::milliseconds recheck_interval = kDefaultRecheckInterval);

  absl::StatusOr<std::shared_ptr<const Svid>> svid(const SpiffeId& id) override;
  absl::StatusOr<std::shared_ptr<const TrustBundle>> bundle() override;
  // The certificate last loaded for `id` (by svid()), expired or not; null when none ever
  // loaded. For the expiry metric, which must keep naming a certificate that ran out.
  std::shared_ptr<const Svid> lastLoaded(const SpiffeId& id);

 private:
  struct BundleEntry {
    explicit BundleEntry(std::string path) : file(std::move(path), kMaxPemFileBytes) {}
    std::mutex mu;
    std::chrono::steady_clock::time_point checked;
    bool loaded = false;
    common::WatchedFile file;
    absl::StatusOr<std::shared_ptr<const TrustBundle>> result = absl::UnknownError("not loaded");
  };
  struct SvidEntry {
    SvidEntry(const std::string& base)
        : cert(base + "/cert.pem", kMaxPemFileBytes), key(base + "/key.pem", kMaxPemFileBytes) {}
    std::mutex mu;
    std::chrono::steady_clock::time_point checked;
    bool loaded = false;
    common::WatchedFile cert, key;
    std::shared_ptr<const TrustBundle> verified_against;
    absl::Status error;                     // of the last load, when it failed
    std::shared_ptr<const Svid> svid;       // the last good one, kept across failed reloads
  };

  absl::StatusOr<std::shared_ptr<const Svid>> load(const SpiffeId& id, const std::string& cert_path,
                                                   const std::string& key_path,
                                                   const TrustBundle& bundle) const;

  const std::string dir_;
  const std::string trust_domain_;
  const std::chrono::milliseconds recheck_interval_;
  BundleEntry bundle_;
  std::mutex mu_;  // guards svids_ (the map, not the entries)
  absl::flat_hash_map<SpiffeId, std::shared_ptr<SvidEntry>> svids_;
};

}  // namespace ferry::identity
