#pragma once
// The admission limits against the memory ferryd may use (docs/configuration.md, "Memory").
// Each admitted connection costs memory; the limits bound how many there are, so their worst
// case is a sum of costs. ferryd fits it into its memory limit (the cgroup's, read at start,
// or limits.memory) less a headroom for everything else: limits left at their defaults are
// lowered together; limits written in the file are kept, and when those alone cannot fit,
// the configuration is refused (at start: ferryd does not start; on reload: the running
// configuration stays), naming the limit and the settings.
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proxy/config/config.h"

namespace ferry::config {

// Costs per admitted connection (docs/configuration.md, "Limits", measured by
// tests/integration/admission_test.cc): an HBONE tunnel costs at most what an idle
// established one does (~175 KB; one mid-handshake ~89 KB), a proxied connection on
// 15001/15006 ~6.5 KB, rounded up.
inline constexpr uint64_t kHboneConnectionBytes = 175 * 1024;
// And what each may read past the receive budget while it is exceeded (one record,
// hbone::kPressuredRead; proxy/server/server.cc checks that they agree).
inline constexpr uint64_t kHboneReceiveOvershootBytes = 16 * 1024;
inline constexpr uint64_t kProxiedConnectionBytes = 7 * 1024;
// Kept back from the admission limits: ferryd's own state (the workload registry, policies,
// certificates, the preallocated sockets, heap the allocator keeps). At least 64 MiB, and a
// quarter of the limit.
inline constexpr uint64_t kMinHeadroomBytes = 64ull << 20;
// limits.receive_buffer: auto: this share of what the memory limit leaves after the
// headroom; without a memory limit, kDefaultReceiveBuffer. An eighth of 768 MiB (the chart's
// 1 GiB) is 96 MiB: 24 connections' full windows, far above what workloads that read hold.
inline constexpr uint64_t kReceiveBufferShare = 8;
inline constexpr uint64_t kDefaultReceiveBuffer = 256ull << 20;
// Lowered limits stay at least this (a node must still carry something).
inline constexpr uint32_t kMinFittedConnections = 16;


// The limit limits.memory names: the cgroup's (auto; 0 when none is found), the bytes
// written, or 0 (none). `root` prefixes the paths read (tests).
absl::StatusOr<MemoryBudget> resolveMemoryLimit(const MemorySetting& setting, const std::string& root = "");

// The worst case of the admission limits, by the costs above.
uint64_t worstCase(const Limits& limits);

// Fits `limits` and the receive budget (limits.receive_buffer) into `budget.limit` (0:
// leaves the limits alone) and fills the rest of `budget`. An error when the limits written
// in the file cannot fit, or the memory limit leaves nothing for them.
absl::Status fitToMemory(Limits& limits, MemoryBudget& budget);

// One line for the log: the limit and where it came from, the headroom, the worst case.
std::string describeBudget(const MemoryBudget& budget);

// resolveMemoryLimit, then fitToMemory, into config.memory_budget and config.limits; errors
// name limits.memory or the limits (prefixed "limits: ").
absl::Status fitConfigToMemory(Config& config, const std::string& root = "");

}  // namespace ferry::config
