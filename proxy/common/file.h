#pragma once
// Files the daemon reads while it runs (config, workloads, certificates), and the one rule by
// which it notices that a watched file changed.
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include <sys/types.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ferry::common {

inline constexpr size_t kNoSizeLimit = std::numeric_limits<size_t>::max();

// The whole file. Errors name the path: "cannot open <path>: <reason>" (NotFound when it does
// not exist), "cannot read <path>: ...", "<path> is not a regular file", "<path> is larger
// than <max_bytes> bytes". Opened non-blocking: a FIFO put in a file's place must not hang
// the control thread.
// strerror's text for an errno value, thread-safe.
std::string errnoText(int err);

absl::StatusOr<std::string> readFile(const std::string& path, size_t max_bytes = kNoSizeLimit);

// Writes `content` to a temporary file beside `path` with `mode`, fsyncs it and renames it
// over `path`, so that readers see the old or the new file, never a torn one. The temporary
// name ends in random digits (`<path>.tmp.<pid>.<digits>`), so that nothing that lists the
// folder by extension (a CNI runtime reading *.conflist) takes it for a real file.
absl::Status writeFileAtomic(const std::string& path, std::string_view content, mode_t mode);

// A file polled for changes from one thread (the control thread). The change rule, the same
// for every file ferryd watches (docs/configuration.md, "Watched files"):
//  1. Its stamp (device, inode, size, mtime and ctime in ns) is taken with fstat() of the
//     opened file. A stamp equal to the last one means unchanged and nothing is read: a 20 MB
//     workloads file costs an open() and an fstat() per poll.
//  2. Otherwise the file is read, or a version read while its mtime was under kRacyWindow old
//     is read once more: a rewrite of the same size within one timestamp tick (coarse clocks,
//     1-2 s on some filesystems) leaves the stamp equal (git's "racy" rule).
//  3. What was read is compared with the last content read (SHA-256): equal content is
//     unchanged, so a no-op rewrite (a controller writing the same file again, `touch`) does
//     not reload anything.
// A failure (missing, unreadable, not a regular file, too large) is reported once per cause
// and version: polling a broken file again returns kUnchanged until it changes. A file that
// comes back with the content last read is unchanged.
class WatchedFile {
 public:
  // Rewrites of a file younger than this are re-checked by content (rule 2).
  static constexpr int64_t kRacyWindowNs = 2'000'000'000;

  explicit WatchedFile(std::string path, size_t max_bytes = kNoSizeLimit);

  enum class Result { kUnchanged, kChanged, kFailed };
  // kChanged: content() holds the new text. kFailed: error() says why.
  Result poll();
  // Forgets what was seen: the next poll() reads the file and returns kChanged or kFailed.
  void reset();

  const std::string& path() const { return path_; }
  const std::string& content() const { return content_; }
  // Moves the content out (large files); content() is empty afterwards.
  std::string takeContent() { return std::move(content_); }
  const absl::Status& error() const { return error_; }
  // The last poll found the file broken (missing, unreadable...): kUnchanged then means
  // "still broken", not "still the content last read".
  bool failing() const { return failing_; }

 private:
  struct Stamp {
    int error = -1;  // errno of stat/open, 0 when the file was stat-ed; -1: never looked
    uint64_t dev = 0, ino = 0;
    int64_t size = 0, mtime_ns = 0, ctime_ns = 0;
    friend bool operator==(const Stamp&, const Stamp&) = default;
  };
  Result fail(absl::Status status);

  const std::string path_;
  const size_t max_bytes_;
  Stamp stamp_;
  bool racy_ = false;          // the last read saw an mtime younger than kRacyWindowNs
  bool have_digest_ = false;   // content was read at least once
  std::array<unsigned char, 32> digest_{};
  std::string content_;
  absl::Status error_;
  bool failing_ = false;
};

}  // namespace ferry::common
