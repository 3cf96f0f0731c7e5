#pragma once
// rtnetlink (links, addresses, routes, rules, neighbours, netkit and veth pairs, netns ids),
// on the calling thread's netns: one message builder, no libbpf, so that ferryctl
// (`ferryctl netkit`) and the datapath share it (docs/architecture.md, "Layers").
#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace ferry::rtnetlink {

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

// A pod's host-side device, found from what the CNI left in the node netns (no guessing
// from names): the route to the pod IP (ptp, Calico, Cilium with per-endpoint routes:
// `<ip> dev <host side>`), or, when that route leads to a bridge (the bridge plugin,
// flannel), the bridge port behind which the pod's MAC sits (neighbour entry for the IP,
// then the bridge's forwarding entry for that MAC). `how` says which.
struct PodInterface {
  LinkInfo link;
  std::string how;  // "route" or "bridge <name>"
};
// `ip` in network byte order. NotFound when the pod is not (yet) reachable through a
// device of this netns: no route, a route via a gateway (a pod of another node), a bridge
// that has not seen the pod yet (retry: the entries appear with the pod's first packet).
//
// A bridge learns a pod only from the pod's packets, and a pod that has sent nothing yet
// has no neighbour entry on the node. Then findPodInterface asks the kernel to resolve the
// IP (a managed neighbour entry, NTF_EXT_MANAGED, 5.16+: the kernel ARPs for it and keeps
// it fresh), sets *managed_bridge to the bridge's ifindex, and returns NotFound: the next
// try finds the pod. The caller removes the entry when the pod leaves (deleteNeighbour).
absl::StatusOr<PodInterface> findPodInterface(uint32_t ip, int* managed_bridge = nullptr);
absl::Status deleteNeighbour(uint32_t ip, int ifindex);

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

// The plumbing of a netns ferryd makes itself (proxy_netns.h), on the calling thread's
// netns. Addresses in network byte order.
// A veth pair: `name` here, `peer_name` in `peer_netns_fd`.
absl::Status createVethPair(const std::string& name, const std::string& peer_name, int peer_netns_fd);
absl::Status deleteLink(const std::string& name);
absl::Status setLinkUp(int ifindex);
// One IPv4 setting of a device (IPV4_DEVCONF_*, linux/ip.h), as net.ipv4.conf.<dev>.<key>
// would set it, but over rtnetlink (IFLA_AF_SPEC/AF_INET/IFLA_INET_CONF): a container's
// /proc/sys is read-only even with CAP_NET_ADMIN.
absl::Status setIpv4DeviceConf(int ifindex, uint16_t key, uint32_t value);
// `address`/32 on the device, scope global.
absl::Status addAddress(int ifindex, uint32_t address);
// A route in `table` (RT_TABLE_MAIN = 254): `dst/dst_len` out of `ifindex`, via `gateway`
// (0: none) with onlink; `local` makes it a local route (ip route add local ...).
struct RouteSpec {
  uint32_t dst = 0;
  uint8_t dst_len = 0;
  int ifindex = 0;
  uint32_t gateway = 0;
  uint32_t table = 254;
  bool local = false;
};
absl::Status addRoute(const RouteSpec& route);
// ip rule add pref `priority` fwmark `mark`/`mark` lookup `table`.
absl::Status addFwmarkRule(uint32_t mark, uint32_t table, uint32_t priority);

// The id under which this netns knows the netns open as `netns_fd` (RTM_GETNSID); -1 when
// it has none yet.
absl::StatusOr<int32_t> netnsId(int netns_fd);
// Asks the kernel to pick an id for the netns open as `netns_fd` (RTM_NEWNSID, NETNSA_NSID
// -1).
absl::Status assignNetnsId(int netns_fd);

}  // namespace ferry::rtnetlink
