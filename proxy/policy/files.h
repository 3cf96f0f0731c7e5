#pragma once
// Policy files (config `policy.files`): YAML streams of AuthorizationPolicy and
// PeerAuthentication objects, each a common::WatchedFile (the daemon's one change rule),
// polled from the control thread. A version that does not parse keeps what the file
// applied before; a broken object is refused alone (Store).
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "proxy/common/file.h"
#include "proxy/policy/store.h"

namespace ferry::policy {

class PolicyFiles {
 public:
  // Files larger than this are refused: thousands of policies fit in a few MB.
  static constexpr size_t kMaxFileBytes = 64u << 20;

  explicit PolicyFiles(const std::vector<std::string>& paths = {});
  // Start-up: every file is read into `store`; one that cannot be read or parsed as a whole
  // is a start-up error (a refused object in it is not: it is logged and reported).
  absl::Status start(Store& store);
  // A new list (a reload), in two steps, so that a list whose files do not load is never
  // applied: load() reads and decodes every file of `paths` afresh (the root namespace may
  // have changed: all are judged again); an error names the first that fails as a whole and
  // changes nothing. apply() then hands them to `store`, withdraws what the files no longer
  // listed applied, and follows the new list from then on. failures() counts on.
  absl::Status load(const std::vector<std::string>& paths);
  void apply(Store& store);
  // What `store` holds from `path` is the origin of this name.
  static std::string origin(const std::string& path);
  // Reads every file that changed into `store`; true when something was published.
  bool poll(Store& store);
  // Versions of a file refused as a whole (unreadable, not YAML) since start.
  uint64_t failures() const { return failures_; }

 private:
  using Files = std::vector<std::unique_ptr<common::WatchedFile>>;
  static Files watch(const std::vector<std::string>& paths);
  // The file's objects when it changed; nullopt when it did not; an error when it cannot be
  // read or parsed as a whole.
  static absl::StatusOr<std::optional<std::vector<Decoded>>> read(common::WatchedFile& file);
  // store.replace, logged; true when something changed.
  static bool replaceFrom(Store& store, const std::string& from, std::vector<Decoded> objects);

  Files files_;
  // By load(), for apply(): the new list's files and what they hold.
  Files next_files_;
  std::vector<std::pair<std::string, std::vector<Decoded>>> loaded_;
  absl::Status last_error_;  // of the last poll() (the first file that failed as a whole)
  uint64_t failures_ = 0;
};

}  // namespace ferry::policy
