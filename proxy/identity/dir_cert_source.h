#pragma once
// Certificates from a directory, as cert-manager or SPIRE helpers (or `ferryctl ca issue`)
// write them:
//   <dir>/bundle.pem                         roots of the trust domain (one or more)
//   <dir>/<namespace>/<service-account>/cert.pem   leaf first, then intermediates
//   <dir>/<namespace>/<service-account>/key.pem    PKCS#8 or EC PEM
// Files are loaded on first use and re-read when their inode, size or mtime change, checked at
// most once per `recheck_interval` per identity, so rotated files are picked up without a
// restart. A rotation that leaves a broken file set keeps serving the previous SVID until it
// expires (design.md §5: the old certificate is kept until expiry).
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <sys/types.h>

#include "absl/container/flat_hash_map.h"
#include "proxy/identity/cert_source.h"

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

 private:
  // What identifies one version of a file: a rename-into-place changes the inode, an
  // in-place rewrite changes size or mtime.
  struct FileStamp {
    bool exists = false;
    dev_t dev = 0;
    ino_t ino = 0;
    off_t size = 0;
    int64_t mtime_ns = 0;
    friend bool operator==(const FileStamp&, const FileStamp&) = default;
  };
  static FileStamp stat(const std::string& path);

  struct BundleEntry {
    std::mutex mu;
    std::chrono::steady_clock::time_point checked;
    bool loaded = false;
    FileStamp stamp;
    absl::StatusOr<std::shared_ptr<const TrustBundle>> result = absl::UnknownError("not loaded");
  };
  struct SvidEntry {
    std::mutex mu;
    std::chrono::steady_clock::time_point checked;
    bool loaded = false;
    FileStamp cert_stamp, key_stamp;
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
