#pragma once
// The few rtnetlink queries the datapath needs, on the calling thread's netns.
#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace ferry::datapath {

using MacAddress = std::array<uint8_t, 6>;

struct LinkInfo {
  int ifindex = 0;
  std::string name;
  MacAddress mac{};
  // For veth/netkit: the peer's ifindex and the id of the netns it lives in (as seen
  // from here); -1 when the peer is in this netns or unknown.
  int peer_ifindex = 0;
  int32_t peer_netnsid = -1;
  std::string kind;  // IFLA_INFO_KIND: "veth", "netkit", ... ("" for physical devices)
  bool isNetkit() const { return kind == "netkit"; }
};

// RTM_GETLINK by name in the current netns.
absl::StatusOr<LinkInfo> linkByName(const std::string& name);
// RTM_GETLINK by index in the netns known here by `netnsid` (IFLA_TARGET_NETNSID), e.g. a
// pod's eth0 seen from the node netns.
absl::StatusOr<LinkInfo> linkByIndexInNetns(int ifindex, int32_t netnsid);

std::string formatMac(const MacAddress& mac);

// netkit (6.7+, CONFIG_NETKIT): a BPF-programmable device pair. Debian 12's iproute2 (6.1)
// cannot create one, so ferry speaks RTM_NEWLINK itself. The primary stays in the calling
// netns; the peer is created in `peer_netns_fd` (or here when -1).
enum class NetkitMode : uint32_t { kL2 = 0, kL3 = 1 };  // enum netkit_mode
struct NetkitPairSpec {
  std::string name;       // the primary, e.g. the pod's host-side device
  std::string peer_name;  // e.g. "eth0" inside the pod
  int peer_netns_fd = -1;
  NetkitMode mode = NetkitMode::kL2;
};
absl::Status createNetkitPair(const NetkitPairSpec& spec);

}  // namespace ferry::datapath
