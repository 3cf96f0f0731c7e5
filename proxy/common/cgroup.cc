#include "proxy/common/cgroup.h"

#include <charconv>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace ferry::common {
namespace {

// v1 writes a page-rounded LONG_MAX for "no limit"; anything this large limits nothing.
constexpr uint64_t kUnlimited = uint64_t{1} << 60;

std::optional<std::string> readAll(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Mount {
  std::string root;   // the cgroup path mounted there ("/" with a cgroup namespace)
  std::string point;  // where
};

// The mount of cgroup v1's memory controller (`version` 1) or of cgroup2 (2), from
// /proc/self/mountinfo: "id parent major:minor root point options [optional...] - type source super".
std::optional<Mount> findMount(const std::string& mountinfo, int version) {
  for (absl::string_view line : absl::StrSplit(mountinfo, '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    size_t dash = 0;
    while (dash < f.size() && f[dash] != "-") ++dash;
    if (dash < 5 || dash + 1 >= f.size()) continue;
    absl::string_view type = f[dash + 1];
    bool match = version == 2 ? type == "cgroup2"
                              : type == "cgroup" && dash + 3 < f.size() &&
                                    absl::StrContains(absl::StrCat(",", f[dash + 3], ","), ",memory,");
    if (match) return Mount{std::string(f[3]), std::string(f[4])};
  }
  return std::nullopt;
}

// This process's path in the hierarchy of `version` (v1: the line naming memory).
std::optional<std::string> findPath(const std::string& proc_cgroup, int version) {
  for (absl::string_view line : absl::StrSplit(proc_cgroup, '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> f = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (f.size() != 3) continue;
    if (version == 2 && f[0] == "0" && f[1].empty()) return std::string(f[2]);
    if (version == 1) {
      for (absl::string_view c : absl::StrSplit(f[1], ',')) {
        if (c == "memory") return std::string(f[2]);
      }
    }
  }
  return std::nullopt;
}

// The value of a limit file; nullopt for no limit; an error for anything unreadable.
absl::StatusOr<std::optional<uint64_t>> readLimit(const std::string& path) {
  auto text = readAll(path);
  if (!text) return std::optional<uint64_t>();  // a level without the file (v2's root)
  absl::string_view v = absl::StripAsciiWhitespace(*text);
  if (v == "max") return std::optional<uint64_t>();
  uint64_t bytes = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), bytes);
  if (v.empty() || ec != std::errc() || end != v.data() + v.size()) {
    return absl::DataLossError(absl::StrCat(path, ": '", v.substr(0, 40), "' is not a number of bytes"));
  }
  if (bytes >= kUnlimited) return std::optional<uint64_t>();
  return std::optional<uint64_t>(bytes);
}

}  // namespace

absl::StatusOr<std::optional<CgroupMemoryLimit>> cgroupMemoryLimit(const std::string& root) {
  auto proc_cgroup = readAll(root + "/proc/self/cgroup");
  auto mountinfo = readAll(root + "/proc/self/mountinfo");
  if (!proc_cgroup || !mountinfo) return std::optional<CgroupMemoryLimit>();
  for (int version : {1, 2}) {
    auto mount = findMount(*mountinfo, version);
    auto path = findPath(*proc_cgroup, version);
    if (!mount || !path) continue;
    // The part of our path below the mount's root (without a cgroup namespace, a
    // container's mount root is its own cgroup: the rest is empty).
    std::string rel = *path;
    if (mount->root != "/" && rel.rfind(mount->root, 0) == 0) rel = rel.substr(mount->root.size());
    const char* name = version == 1 ? "memory.limit_in_bytes" : "memory.max";
    std::optional<CgroupMemoryLimit> lowest;
    for (std::string dir = rel;;) {
      std::string file = absl::StrCat(mount->point, dir == "/" ? "" : dir, "/", name);
      auto limit = readLimit(root + file);
      if (!limit.ok()) return limit.status();
      if (*limit && (!lowest || **limit < lowest->bytes)) lowest = CgroupMemoryLimit{**limit, file, version};
      if (dir.empty() || dir == "/") break;
      auto slash = dir.rfind('/');
      dir = slash == 0 || slash == std::string::npos ? "/" : dir.substr(0, slash);
    }
    return lowest;
  }
  return std::optional<CgroupMemoryLimit>();
}

std::optional<uint64_t> parseByteSize(std::string_view text) {
  uint64_t shift = 0;
  for (auto [suffix, s] : {std::pair{"Ki", 10}, {"Mi", 20}, {"Gi", 30}, {"Ti", 40}}) {
    if (text.size() > 2 && text.substr(text.size() - 2) == suffix) {
      shift = s;
      text.remove_suffix(2);
      break;
    }
  }
  uint64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  if (shift > 0 && value > (~uint64_t{0} >> shift)) return std::nullopt;
  return value << shift;
}

std::string formatBytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char out[32];
  if (u == 0) {
    std::snprintf(out, sizeof(out), "%llu B", static_cast<unsigned long long>(bytes));
  } else {
    std::snprintf(out, sizeof(out), v < 10 ? "%.1f %s" : "%.0f %s", v, units[u]);
  }
  return out;
}

}  // namespace ferry::common
