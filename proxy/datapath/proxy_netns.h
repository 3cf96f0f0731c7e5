#pragma once
// `datapath.proxy_netns: auto`: ferryd makes its own proxy netns on a real node, where no
// lab script prepared one (docs/install.md, "How ferryd sits on a node"). What the lab's
// setup_proxy does with ip(8), done over rtnetlink and /proc/sys:
//
//   node netns                                   proxy netns (unnamed; ferryd holds its fd)
//   <host_interface> 169.254.77.2/32  <--veth-->  <proxy_interface> 169.254.77.1/32
//   route 169.254.77.1/32 dev <host_interface>    default via 169.254.77.2 dev eth0 onlink
//   rp_filter 0 on <host_interface>               ip rule fwmark M/M lookup T (pref P)
//                                                 route local 0.0.0.0/0 dev lo table T
//                                                 rp_filter 0 (all, default, eth0, lo)
//
// The netns lives as long as ferryd: when ferryd exits, the kernel removes it and the veth
// pair with it, and pods steered into the proxy (failure_mode: closed) lose their mesh
// connections rather than fall back to plaintext.
#include <chrono>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "proxy/datapath/netns.h"

namespace ferry::datapath {

struct ProxyNetnsSpec {
  std::string host_interface;   // in the node netns, e.g. "ferry-px"
  std::string proxy_interface;  // in the proxy netns, e.g. "eth0"
  uint32_t proxy_address = 0;   // network byte order; the host side gets proxy_address + 1
  uint32_t mark = 0;            // the mark to_proxy sets (datapath.mark)
  uint32_t table = 0;           // the routing table of the local-delivery rule
  uint32_t rule_priority = 0;
  // A device named host_interface may be the previous ferryd's, going away with its netns
  // (the kernel tears a netns down asynchronously, after its last process exited: a rolling
  // update starts the next ferryd at once). Waited for this long before it is an error.
  std::chrono::milliseconds stale_wait{10'000};
};

// Creates the proxy netns and its plumbing from the calling thread's netns (the node's).
// Fails, undoing what it did, when `host_interface` already exists (another ferryd, or a
// lab's device of that name).
absl::StatusOr<NetnsFd> createProxyNetns(const ProxyNetnsSpec& spec);

}  // namespace ferry::datapath
