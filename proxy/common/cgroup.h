#pragma once
// The memory limit of the cgroup this process runs in (docs/configuration.md, "Memory"):
// cgroup v1's memory.limit_in_bytes where the v1 memory controller is mounted (hybrid
// hosts, this lab's), else cgroup v2's memory.max; the lowest on the way up to the
// hierarchy's mount point, since a parent's limit binds its children.
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace ferry::common {

struct CgroupMemoryLimit {
  uint64_t bytes = 0;
  std::string file;  // the file that set it, e.g. /sys/fs/cgroup/memory.max
  int version = 2;   // 1 or 2
};

// nullopt: no limit (none written, "max", or v1's "unlimited"), or no memory cgroup is
// mounted where this process can see it. `root` prefixes every path read (tests build a
// fake /proc and /sys under it). An error: files that exist but cannot be read or parsed.
absl::StatusOr<std::optional<CgroupMemoryLimit>> cgroupMemoryLimit(const std::string& root = "");

// "1Gi", "512Mi", "64Ki", "1073741824": bytes. Accepts Kubernetes' binary suffixes only.
std::optional<uint64_t> parseByteSize(std::string_view text);
// 1.0 GiB, 768 MiB, 12 KiB, 100 B: for messages.
std::string formatBytes(uint64_t bytes);

}  // namespace ferry::common
