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
#include "proxy/common/unique_fd.h"

namespace ferry::datapath {

struct ProxyNetnsSpec {
  std::string host_interface;   // in the node netns, e.g. "ferry-proxy"
  std::string proxy_interface;  // in the proxy netns, e.g. "eth0"
  uint32_t proxy_address = 0;   // network byte order; the host side gets proxy_address + 1
  uint32_t mark = 0;            // the mark to_proxy sets (datapath.mark)
  uint32_t table = 0;           // the routing table of the local-delivery rule
  uint32_t rule_priority = 0;
  // A device named host_interface that is not a dead ferryd's veth (see below) may still be
  // going away with its netns (the kernel tears a netns down asynchronously). Waited for
  // this long before it is an error.
  std::chrono::milliseconds stale_wait{10'000};
};

// Proof that no other live ferryd uses `host_interface` on this node: an abstract unix
// socket bound in the node netns under "ferryd/<host_interface>", held for ferryd's life.
// The kernel releases it the moment the process ends (SIGKILL and crashes included), unlike
// the proxy netns, which orphaned TCP sockets of a dead ferryd keep alive for up to
// tcp_fin_timeout (60 s) with its veth pair: without the claim the next ferryd could not
// tell such a leftover from a live ferryd's device and had to wait.
class HostInterfaceClaim {
 public:
  // Fails (AlreadyExists) while another process holds the claim.
  static absl::StatusOr<HostInterfaceClaim> take(const std::string& host_interface);
  // The claim's descriptor received from the process that held it (a handover).
  static HostInterfaceClaim adopt(int fd, std::string host_interface) {
    return HostInterfaceClaim(fd, std::move(host_interface));
  }
  int fd() const { return fd_.get(); }
  HostInterfaceClaim(HostInterfaceClaim&& other) noexcept = default;
  HostInterfaceClaim& operator=(HostInterfaceClaim&&) = delete;
  const std::string& hostInterface() const { return host_interface_; }

 private:
  HostInterfaceClaim(int fd, std::string host_interface) : fd_(fd), host_interface_(std::move(host_interface)) {}
  common::UniqueFd fd_;
  std::string host_interface_;
};

// Creates the proxy netns and its plumbing from the calling thread's netns (the node's).
// `claim` is for spec.host_interface: a veth of that name whose peer is in another netns is
// then a dead ferryd's and is deleted (its netns, kept alive by orphaned sockets, loses its
// device). Fails, undoing what it did, when any other device has the name (a lab's, or
// someone else's).
absl::StatusOr<NetnsFd> createProxyNetns(const ProxyNetnsSpec& spec, const HostInterfaceClaim& claim);

}  // namespace ferry::datapath
