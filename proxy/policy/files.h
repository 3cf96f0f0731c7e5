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
  // start() in two steps, for a reload that must not apply a list whose files do not load:
  // load() reads and decodes every file (the error names the first that fails as a whole),
  // apply() hands what it read to `store`.
  absl::Status load();
  void apply(Store& store);
  const std::vector<std::string>& paths() const { return paths_; }
  // What `store` holds from `path` is the origin of this name.
  static std::string origin(const std::string& path);
  // Reads every file that changed into `store`; true when something was published.
  bool poll(Store& store);
  // Versions of a file refused as a whole (unreadable, not YAML) since start.
  uint64_t failures() const { return failures_; }

 private:
  // store.replace, logged; true when something changed.
  static bool replaceFrom(Store& store, const std::string& from, std::vector<Decoded> objects);

  std::vector<std::string> paths_;
  std::vector<std::unique_ptr<common::WatchedFile>> files_;
  std::vector<std::pair<std::string, std::vector<Decoded>>> loaded_;  // by load(), for apply()
  absl::Status last_error_;  // of the last poll() (the first file that failed as a whole)
  uint64_t failures_ = 0;
};

}  // namespace ferry::policy
