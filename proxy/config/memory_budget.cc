#include "proxy/config/memory_budget.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proxy/common/cgroup.h"

namespace ferry::config {
namespace {

struct Listener {
  const char* name;
  ListenerLimits Limits::*limits;
  uint64_t cost;
};
constexpr Listener kListeners[] = {
    {"hbone", &Limits::hbone, kHboneConnectionBytes + kHboneReceiveOvershootBytes},
    {"outbound", &Limits::outbound, kProxiedConnectionBytes},
    {"inbound_plaintext", &Limits::inbound_plaintext, kProxiedConnectionBytes},
};

uint32_t scaled(uint32_t value, double factor, uint32_t floor) {
  return std::max<uint32_t>(floor, static_cast<uint32_t>(static_cast<double>(value) * factor));
}

// limits.receive_buffer's bytes, `auto_bytes` for auto.
uint64_t receiveBuffer(const MemorySetting& setting, uint64_t auto_bytes) {
  switch (setting.source) {
    case MemorySetting::Source::kBytes:
      return setting.bytes;
    case MemorySetting::Source::kNone:
      return 0;
    case MemorySetting::Source::kAuto:
      break;
  }
  return auto_bytes;
}

}  // namespace

absl::StatusOr<MemoryBudget> resolveMemoryLimit(const MemorySetting& setting, const std::string& root) {
  MemoryBudget budget;
  switch (setting.source) {
    case MemorySetting::Source::kNone:
      budget.source = "none";
      return budget;
    case MemorySetting::Source::kBytes:
      budget.limit = setting.bytes;
      budget.source = "limits.memory";
      return budget;
    case MemorySetting::Source::kAuto:
      break;
  }
  auto found = common::cgroupMemoryLimit(root);
  if (!found.ok()) {
    return absl::Status(found.status().code(),
                        absl::StrCat("limits.memory: auto: reading the cgroup's memory limit: ", found.status().message(),
                                     " (write limits.memory: <size> or none)"));
  }
  if (!*found) {
    budget.source = "none (no cgroup memory limit)";
    return budget;
  }
  budget.limit = (*found)->bytes;
  budget.source = absl::StrCat("cgroup v", (*found)->version, " ", (*found)->file);
  return budget;
}

uint64_t worstCase(const Limits& limits) {
  uint64_t total = 0;
  for (const auto& l : kListeners) total += uint64_t{(limits.*l.limits).max_connections} * l.cost;
  return total;
}

absl::Status fitToMemory(Limits& limits, MemoryBudget& budget) {
  budget.default_worst_case = budget.worst_case = worstCase(limits);
  budget.lowered = false;
  if (budget.limit == 0) {
    budget.headroom = budget.available = 0;
    budget.receive_buffer = receiveBuffer(limits.receive_buffer, kDefaultReceiveBuffer);
    return absl::OkStatus();
  }
  budget.headroom = std::max(kMinHeadroomBytes, budget.limit / 4);
  if (budget.limit <= budget.headroom + 16 * kHboneConnectionBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the memory limit ", common::formatBytes(budget.limit), " (", budget.source,
        ") leaves nothing for connections: ferryd keeps ", common::formatBytes(budget.headroom),
        " for its own state; give it at least ", common::formatBytes(budget.headroom * 4 / 3 + (32ull << 20))));
  }
  const uint64_t after_headroom = budget.limit - budget.headroom;
  budget.receive_buffer = receiveBuffer(limits.receive_buffer, after_headroom / kReceiveBufferShare);
  if (budget.receive_buffer >= after_headroom) {
    return absl::InvalidArgumentError(absl::StrCat(
        "limits.receive_buffer ", common::formatBytes(budget.receive_buffer), " does not fit the memory limit ",
        common::formatBytes(budget.limit), " (", budget.source, "), which leaves ",
        common::formatBytes(after_headroom), " after ", common::formatBytes(budget.headroom),
        " for ferryd's own state: lower it (auto takes an eighth), or raise the memory limit"));
  }
  budget.available = after_headroom - budget.receive_buffer;
  // What the limits written in the file cost, what the defaults would, and what the
  // defaults would at their floor.
  uint64_t written = 0, defaults = 0, floor_cost = 0;
  std::vector<std::string> written_names;
  for (const auto& l : kListeners) {
    const ListenerLimits& ll = limits.*l.limits;
    uint64_t cost = uint64_t{ll.max_connections} * l.cost;
    if (ll.written & kWrittenConnections) {
      written += cost;
      written_names.push_back(absl::StrCat("limits.", l.name, ".max_connections ", ll.max_connections, " x ",
                                            common::formatBytes(l.cost)));
    } else {
      defaults += cost;
      floor_cost += kMinFittedConnections * l.cost;
    }
  }
  if (written + defaults <= budget.available) return absl::OkStatus();
  if (written + floor_cost > budget.available) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the admission limits written in the file cost up to ", common::formatBytes(written), " (",
        absl::StrJoin(written_names, ", "), ") and the memory limit ", common::formatBytes(budget.limit), " (",
        budget.source, ") leaves ", common::formatBytes(budget.available), " for connections after ",
        common::formatBytes(budget.headroom), " for ferryd's own state and ",
        common::formatBytes(budget.receive_buffer), " for received data (limits.receive_buffer): lower them, or "
        "raise the memory limit (docs/configuration.md, \"Memory\")"));
  }
  // The defaults come down together, each dependent limit with the one it is part of.
  double factor = static_cast<double>(budget.available - written) / static_cast<double>(defaults);
  for (const auto& l : kListeners) {
    ListenerLimits& ll = limits.*l.limits;
    if (ll.written & kWrittenConnections) continue;
    ll.max_connections = scaled(ll.max_connections, factor, kMinFittedConnections);
    if (!(ll.written & kWrittenConnectionsPerSource)) {
      ll.max_connections_per_source = scaled(ll.max_connections_per_source, factor, 1);
    }
    if (!(ll.written & kWrittenPending)) ll.max_pending = scaled(ll.max_pending, factor, 1);
    if (!(ll.written & kWrittenPendingPerSource)) ll.max_pending_per_source = scaled(ll.max_pending_per_source, factor, 1);
    // A written part above a lowered whole follows it down, as the parser does for defaults.
    ll.max_connections_per_source = std::min(ll.max_connections_per_source, ll.max_connections);
    ll.max_pending = std::min(ll.max_pending, ll.max_connections);
    ll.max_pending_per_source =
        std::min({ll.max_pending_per_source, ll.max_pending, ll.max_connections_per_source});
  }
  budget.worst_case = worstCase(limits);
  budget.lowered = true;
  return absl::OkStatus();
}

std::string describeBudget(const MemoryBudget& b) {
  std::string received =
      b.receive_buffer == 0 ? std::string("; received data bounded by the HTTP/2 windows only")
                            : absl::StrCat("; received data held to ", common::formatBytes(b.receive_buffer));
  if (b.limit == 0) {
    return absl::StrCat("no memory limit (", b.source, "): the admission limits cost at most ",
                        common::formatBytes(b.worst_case), ", unchecked", received);
  }
  return absl::StrCat("limit ", common::formatBytes(b.limit), " (", b.source, "), ",
                      common::formatBytes(b.headroom), " kept for ferryd's own state; the admission limits cost at most ",
                      common::formatBytes(b.worst_case),
                      b.lowered ? absl::StrCat(" (lowered from ", common::formatBytes(b.default_worst_case),
                                               ": the defaults came down to fit)")
                                : std::string(),
                      received);
}

absl::Status fitConfigToMemory(Config& config, const std::string& root) {
  auto budget = resolveMemoryLimit(config.limits.memory, root);
  if (!budget.ok()) return budget.status();
  if (auto st = fitToMemory(config.limits, *budget); !st.ok()) {
    return absl::Status(st.code(), absl::StrCat("limits: ", st.message()));
  }
  config.memory_budget = std::move(*budget);
  return absl::OkStatus();
}

}  // namespace ferry::config
