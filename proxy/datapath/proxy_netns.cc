#include "proxy/datapath/proxy_netns.h"

#include <arpa/inet.h>
#include <linux/ip.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "proxy/common/log.h"
#include "proxy/rtnetlink/rtnetlink.h"
#include "proxy/common/unique_fd.h"

namespace ferry::datapath {
namespace {

// /proc/sys/net is per netns, resolved at open time from the opening thread's netns.
absl::Status writeSysctl(const std::string& key, const char* value, bool optional = false) {
  std::string path = absl::StrCat("/proc/sys/", key);
  common::UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) {
    // Optional settings: absent (no IPv6), or /proc/sys read-only (a container).
    if (optional && (errno == ENOENT || errno == EROFS || errno == EACCES)) return absl::OkStatus();
    return absl::InternalError(absl::StrCat("sysctl ", key, ": ", strerror(errno)));
  }
  if (::write(fd.get(), value, std::strlen(value)) < 0) {
    return absl::InternalError(absl::StrCat("sysctl ", key, " = ", value, ": ", strerror(errno)));
  }
  return absl::OkStatus();
}

// A new netns, made by a thread of its own (unshare is per thread) so that the caller's
// thread stays where it is; it lives on through the returned fd.
absl::StatusOr<NetnsFd> newNetns() {
  absl::StatusOr<NetnsFd> out = absl::InternalError("unset");
  std::thread t([&] {
    if (::unshare(CLONE_NEWNET) != 0) {
      out = absl::PermissionDeniedError(absl::StrCat("creating a network namespace: ", strerror(errno)));
      return;
    }
    out = NetnsFd::current();
  });
  t.join();
  return out;
}

uint32_t plusOne(uint32_t be) { return htonl(ntohl(be) + 1); }

// Everything inside the proxy netns; the caller's thread is in it.
absl::Status plumbInside(const ProxyNetnsSpec& spec, uint32_t gateway) {
  auto lo = rtnetlink::linkByName("lo");
  if (!lo.ok()) return lo.status();
  if (auto st = rtnetlink::setLinkUp(lo->ifindex); !st.ok()) return st;
  auto eth = rtnetlink::linkByName(spec.proxy_interface);
  if (!eth.ok()) return eth.status();
  // No IPv6 here: the mesh carries IPv4 only (docs/datapath.md).
  for (const char* k : {"net/ipv6/conf/all/disable_ipv6", "net/ipv6/conf/default/disable_ipv6"}) {
    if (auto st = writeSysctl(k, "1", /*optional=*/true); !st.ok()) return st;
  }
  // Captured packets carry pod addresses this netns does not own, and ferryd's upstream
  // packets leave with them as source: no reverse-path filtering on its devices (over
  // rtnetlink: a container's /proc/sys is read-only). `all` (inherited from the node, and the
  // effective value is the larger) can only be set through /proc/sys: where that is read-only
  // it stays as it is, which is harmless here: the only route is the default one via eth0,
  // where every packet arrives, so strict and loose checks both pass.
  for (int ifindex : {lo->ifindex, eth->ifindex}) {
    if (auto st = rtnetlink::setIpv4DeviceConf(ifindex, IPV4_DEVCONF_RP_FILTER, 0); !st.ok()) return st;
  }
  for (const char* k : {"net/ipv4/conf/all/rp_filter", "net/ipv4/conf/default/rp_filter"}) {
    if (auto st = writeSysctl(k, "0", /*optional=*/true); !st.ok()) return st;
  }
  if (auto st = rtnetlink::setLinkUp(eth->ifindex); !st.ok()) return st;
  if (auto st = rtnetlink::addAddress(eth->ifindex, spec.proxy_address); !st.ok()) return st;
  if (auto st = rtnetlink::addRoute({.dst = 0, .dst_len = 0, .ifindex = eth->ifindex, .gateway = gateway}); !st.ok()) return st;
  // bpf_sk_assign needs the "local" routing decision for packets to any address.
  if (auto st = rtnetlink::addFwmarkRule(spec.mark, spec.table, spec.rule_priority); !st.ok()) return st;
  return rtnetlink::addRoute({.dst = 0, .dst_len = 0, .ifindex = lo->ifindex, .table = spec.table, .local = true});
}

}  // namespace

absl::StatusOr<HostInterfaceClaim> HostInterfaceClaim::take(const std::string& host_interface) {
  common::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return absl::InternalError(absl::StrCat("socket(AF_UNIX): ", strerror(errno)));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  // Abstract (leading NUL): no file, per netns, gone with the last fd.
  std::string name = absl::StrCat("ferryd/", host_interface);
  std::memcpy(addr.sun_path + 1, name.data(), std::min(name.size(), sizeof(addr.sun_path) - 1));
  socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    int e = errno;
    if (e == EADDRINUSE) {
      return absl::AlreadyExistsError(absl::StrCat("another ferryd on this node uses ", host_interface,
                                                   " (it holds the abstract socket @", name, ")"));
    }
    return absl::InternalError(absl::StrCat("binding the abstract socket @", name, ": ", strerror(e)));
  }
  return HostInterfaceClaim(fd.release(), host_interface);
}

absl::StatusOr<NetnsFd> createProxyNetns(const ProxyNetnsSpec& spec, const HostInterfaceClaim& claim) {
  if (claim.hostInterface() != spec.host_interface) {
    return absl::InvalidArgumentError(absl::StrCat("the claim is for ", claim.hostInterface(), ", not ", spec.host_interface));
  }
  if (auto old = rtnetlink::linkByName(spec.host_interface); old.ok() && old->kind == "veth" && old->peer_netnsid >= 0) {
    // Ours by name and shape, and no live ferryd claims it: a dead ferryd's pair, its netns
    // held by orphaned sockets. Deleting this end deletes the pair.
    if (auto st = rtnetlink::deleteLink(spec.host_interface); !st.ok()) {
      return absl::Status(st.code(), absl::StrCat("removing the dead ferryd's ", spec.host_interface, ": ", st.message()));
    }
    FERRY_LOG(kInfo, "datapath: removed %s, left by a ferryd that is gone", spec.host_interface);
  }
  const auto deadline = std::chrono::steady_clock::now() + spec.stale_wait;
  bool waited = false;
  while (rtnetlink::linkByName(spec.host_interface).ok()) {
    if (std::chrono::steady_clock::now() >= deadline) {
      return absl::AlreadyExistsError(absl::StrCat(
          "the node already has a device named ", spec.host_interface,
          waited ? absl::StrCat(" (still there after ", spec.stale_wait.count(), " ms)") : "",
          " that is not a ferryd's (datapath.host_proxy_interface names someone else's device)"));
    }
    waited = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // no event for a netns's teardown
  }
  if (waited) FERRY_LOG(kInfo, "datapath: the previous proxy netns's %s went away", spec.host_interface);
  auto ns = newNetns();
  if (!ns.ok()) return ns.status();
  if (auto st = rtnetlink::createVethPair(spec.host_interface, spec.proxy_interface, ns->fd()); !st.ok()) return st;
  // From here on a failure removes the pair (its peer goes with it) before returning.
  auto fail = [&](const absl::Status& st) {
    (void)rtnetlink::deleteLink(spec.host_interface);
    return absl::Status(st.code(), absl::StrCat("setting up the proxy netns: ", st.message()));
  };
  const uint32_t host_address = plusOne(spec.proxy_address);
  auto host = rtnetlink::linkByName(spec.host_interface);
  if (!host.ok()) return fail(host.status());
  // Packets ferryd sends as a pod leave through this device when they are not injected
  // (injection none, or failure_mode open): its reverse path is the pod's device.
  if (auto st = rtnetlink::setIpv4DeviceConf(host->ifindex, IPV4_DEVCONF_RP_FILTER, 0); !st.ok()) return fail(st);
  if (auto st = rtnetlink::addAddress(host->ifindex, host_address); !st.ok()) return fail(st);
  if (auto st = rtnetlink::setLinkUp(host->ifindex); !st.ok()) return fail(st);
  if (auto st = rtnetlink::addRoute({.dst = spec.proxy_address, .dst_len = 32, .ifindex = host->ifindex}); !st.ok()) {
    return fail(st);
  }
  {
    auto inside = ScopedNetns::enter(*ns);
    if (!inside.ok()) return fail(inside.status());
    if (auto st = plumbInside(spec, host_address); !st.ok()) return fail(st);
  }
  return ns;
}

}  // namespace ferry::datapath
