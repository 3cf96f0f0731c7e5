#include "proxy/common/readiness_file.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "proxy/common/duration.h"
#include "proxy/common/file.h"

namespace ferry::common {

namespace {

// One state line, with room to spare: a longer file is not ferryd's.
constexpr size_t kMaxReadinessFile = 4096;

}  // namespace

absl::Status publishReadiness(const std::string& path, std::string_view state, std::string* last) {
  if (*last == state) {
    if (::utimensat(AT_FDCWD, path.c_str(), nullptr, 0) == 0) return absl::OkStatus();
    // Removed under us (a cleanup of the folder): written again below.
    if (errno != ENOENT) return absl::UnavailableError(absl::StrCat("cannot touch ", path, ": ", errnoText(errno)));
  }
  // World-readable: the probe may run as another user; what it says is no secret.
  if (auto st = writeFileAtomic(path, std::string(state) + "\n", 0644); !st.ok()) return st;
  *last = std::string(state);
  return absl::OkStatus();
}

ReadinessVerdict probeReadinessFile(const std::string& path, std::chrono::milliseconds max_age, bool live,
                                    std::chrono::system_clock::time_point now) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return {false, absl::StrCat("no readiness file ", path, ": ferryd has not started or has exited")};
    return {false, absl::StrCat("cannot stat ", path, ": ", errnoText(errno))};
  }
  auto mtime = std::chrono::system_clock::time_point(std::chrono::duration_cast<std::chrono::system_clock::duration>(
      std::chrono::seconds(st.st_mtim.tv_sec) + std::chrono::nanoseconds(st.st_mtim.tv_nsec)));
  auto text = readFile(path, kMaxReadinessFile);
  if (!text.ok()) return {false, std::string(text.status().message())};
  std::string line = text->substr(0, text->find('\n'));
  if (line.empty()) return {false, absl::StrCat(path, " is empty")};
  auto age = std::chrono::duration_cast<std::chrono::milliseconds>(now - mtime);
  if (age > max_age) {
    return {false, absl::StrCat("stale: ", path, " was last refreshed ", formatDuration(age),
                                " ago (ferryd hangs or has exited); it said: ", line)};
  }
  return {live || line == kReadyLine, line};
}

}  // namespace ferry::common
