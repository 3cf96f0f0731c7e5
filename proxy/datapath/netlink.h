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
};

// RTM_GETLINK by name in the current netns.
absl::StatusOr<LinkInfo> linkByName(const std::string& name);
// RTM_GETLINK by index in the netns known here by `netnsid` (IFLA_TARGET_NETNSID), e.g. a
// pod's eth0 seen from the node netns.
absl::StatusOr<LinkInfo> linkByIndexInNetns(int ifindex, int32_t netnsid);

std::string formatMac(const MacAddress& mac);

}  // namespace ferry::datapath
