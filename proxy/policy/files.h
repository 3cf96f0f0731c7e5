#pragma once
// Policy files (config `policy.files`): YAML streams of AuthorizationPolicy and
// PeerAuthentication objects, each a common::WatchedFile (the daemon's one change rule),
// polled from the control thread. A version that does not parse keeps what the file
// applied before; a broken object is refused alone (Store).
#include <memory>
#include <string>
#include <vector>

#include "proxy/common/file.h"
#include "proxy/policy/store.h"

namespace ferry::policy {

class PolicyFiles {
 public:
  // Files larger than this are refused: thousands of policies fit in a few MB.
  static constexpr size_t kMaxFileBytes = 64u << 20;

  explicit PolicyFiles(std::vector<std::string> paths);
  // Start-up: every file is read into `store`; one that cannot be read or parsed as a whole
  // is a start-up error (a refused object in it is not: it is logged and reported).
  absl::Status start(Store& store);
  // Reads every file that changed into `store`; true when something was published.
  bool poll(Store& store);
  // Versions of a file refused as a whole (unreadable, not YAML) since start.
  uint64_t failures() const { return failures_; }

 private:
  std::vector<std::unique_ptr<common::WatchedFile>> files_;
  absl::Status last_error_;  // of the last poll() (the first file that failed as a whole)
  uint64_t failures_ = 0;
};

}  // namespace ferry::policy
