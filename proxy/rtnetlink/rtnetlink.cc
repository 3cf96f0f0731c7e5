#include "proxy/rtnetlink/rtnetlink.h"

#include <linux/if.h>
#include <linux/fib_rules.h>
#include <linux/if_link.h>
#include <linux/neighbour.h>
#include <linux/net_namespace.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "proxy/common/unique_fd.h"

namespace ferry::rtnetlink {
namespace {

#ifndef IFLA_TARGET_NETNSID
#define IFLA_TARGET_NETNSID IFLA_IF_NETNSID
#endif

std::string formatIp(uint32_t ip) {
  const auto* b = reinterpret_cast<const uint8_t*>(&ip);
  return absl::StrFormat("%d.%d.%d.%d", b[0], b[1], b[2], b[3]);
}

// One rtnetlink request with (nested) attributes; begin()/end() bracket a nest.
class Request {
 public:
  // `flags` besides NLM_F_REQUEST; acknowledge() needs NLM_F_ACK among them.
  Request(uint16_t type, uint16_t flags) {
    auto* nh = header();
    nh->nlmsg_type = type;
    nh->nlmsg_flags = static_cast<uint16_t>(NLM_F_REQUEST | flags);
    nh->nlmsg_seq = 1;
    len_ = NLMSG_LENGTH(0);
  }
  template <typename T>
  void putStruct(const T& value) { append(&value, sizeof(value)); }
  void put(uint16_t type, const void* data, size_t size) {
    rtattr rta{};
    rta.rta_type = type;
    rta.rta_len = static_cast<unsigned short>(RTA_LENGTH(size));
    align();
    append(&rta, sizeof(rta));
    append(data, size);
  }
  void putU32(uint16_t type, uint32_t v) { put(type, &v, sizeof(v)); }
  void putString(uint16_t type, const std::string& s) { put(type, s.c_str(), s.size() + 1); }
  size_t begin(uint16_t type) {
    align();
    size_t at = len_;
    put(type, nullptr, 0);
    return at;
  }
  void end(size_t at) {
    align();
    reinterpret_cast<rtattr*>(buf_ + at)->rta_len = static_cast<unsigned short>(len_ - at);
  }
  // Sends the request and returns the first answer message, whole.
  absl::StatusOr<std::string> exchange(const std::string& what) {
    align();
    header()->nlmsg_len = static_cast<uint32_t>(len_);
    common::UniqueFd sock(::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE));
    if (!sock) return absl::InternalError(absl::StrCat(what, ": netlink socket: ", strerror(errno)));
    if (::send(sock.get(), buf_, len_, 0) < 0) {
      return absl::InternalError(absl::StrCat(what, ": netlink send: ", strerror(errno)));
    }
    std::string answer(16384, '\0');
    ssize_t n = ::recv(sock.get(), answer.data(), answer.size(), 0);
    if (n < 0) return absl::InternalError(absl::StrCat(what, ": netlink recv: ", strerror(errno)));
    answer.resize(static_cast<size_t>(n));
    if (!NLMSG_OK(reinterpret_cast<const nlmsghdr*>(answer.data()), static_cast<unsigned>(n))) {
      return absl::InternalError(absl::StrCat(what, ": short netlink answer"));
    }
    return answer;
  }

  // Sends the request (built with NLM_F_ACK) and waits for its acknowledgement.
  absl::Status acknowledge(const std::string& what) {
    auto answer = exchange(what);
    if (!answer.ok()) return answer.status();
    auto* nh = reinterpret_cast<const nlmsghdr*>(answer->data());
    if (nh->nlmsg_type != NLMSG_ERROR) return absl::InternalError(absl::StrCat(what, ": unexpected netlink answer"));
    int err = static_cast<const nlmsgerr*>(NLMSG_DATA(nh))->error;
    if (err == 0) return absl::OkStatus();
    if (err == -EOPNOTSUPP) {
      return absl::FailedPreconditionError(absl::StrCat(what, ": ", strerror(-err),
                                                        " (is the kernel built with CONFIG_NETKIT?)"));
    }
    return absl::InternalError(absl::StrCat(what, ": ", strerror(-err)));
  }

 private:
  nlmsghdr* header() { return reinterpret_cast<nlmsghdr*>(buf_); }
  void align() {
    size_t aligned = NLMSG_ALIGN(len_);
    std::memset(buf_ + len_, 0, aligned - len_);
    len_ = aligned;
  }
  void append(const void* data, size_t size) {
    if (len_ + size > sizeof(buf_)) std::abort();  // requests here are a few hundred bytes
    if (size > 0) std::memcpy(buf_ + len_, data, size);
    len_ += size;
  }
  alignas(nlmsghdr) char buf_[1024]{};
  size_t len_ = 0;
};

absl::StatusOr<LinkInfo> getLink(int ifindex, const std::string& name, int32_t target_nsid) {
  std::string what = name.empty() ? absl::StrCat("ifindex ", ifindex) : absl::StrCat("'", name, "'");
  Request req(RTM_GETLINK, 0);
  ifinfomsg query{};
  query.ifi_family = AF_UNSPEC;
  query.ifi_index = ifindex;
  req.putStruct(query);
  if (!name.empty()) req.putString(IFLA_IFNAME, name);
  if (target_nsid >= 0) req.put(IFLA_TARGET_NETNSID, &target_nsid, sizeof(target_nsid));
  auto answer = req.exchange(absl::StrCat("network interface ", what));
  if (!answer.ok()) return answer.status();
  auto* nh = reinterpret_cast<const nlmsghdr*>(answer->data());
  if (nh->nlmsg_type == NLMSG_ERROR) {
    auto* err = static_cast<const nlmsgerr*>(NLMSG_DATA(nh));
    return absl::NotFoundError(absl::StrCat("network interface ", what, ": ", strerror(-err->error)));
  }
  auto* ifi = static_cast<const ifinfomsg*>(NLMSG_DATA(nh));
  LinkInfo info;
  info.ifindex = ifi->ifi_index;
  int alen = static_cast<int>(nh->nlmsg_len) - static_cast<int>(NLMSG_LENGTH(sizeof(ifinfomsg)));
  for (auto* rta = IFLA_RTA(ifi); RTA_OK(rta, alen); rta = RTA_NEXT(rta, alen)) {
    switch (rta->rta_type) {
      case IFLA_IFNAME:
        info.name = static_cast<const char*>(RTA_DATA(rta));
        break;
      case IFLA_ADDRESS:
        if (RTA_PAYLOAD(rta) == 6) std::memcpy(info.mac.data(), RTA_DATA(rta), 6);
        break;
      case IFLA_LINK:
        std::memcpy(&info.peer_ifindex, RTA_DATA(rta), sizeof(int));
        break;
      case IFLA_LINK_NETNSID:
        std::memcpy(&info.peer_netnsid, RTA_DATA(rta), sizeof(int32_t));
        break;
      case IFLA_LINKINFO: {
        int ilen = static_cast<int>(RTA_PAYLOAD(rta));
        for (auto* in = static_cast<rtattr*>(RTA_DATA(rta)); RTA_OK(in, ilen); in = RTA_NEXT(in, ilen)) {
          if (in->rta_type == IFLA_INFO_KIND) {
            info.kind.assign(static_cast<const char*>(RTA_DATA(in)), strnlen(static_cast<const char*>(RTA_DATA(in)), RTA_PAYLOAD(in)));
          }
        }
        break;
      }
      default:
        break;
    }
  }
  return info;
}

// enum netkit_action and the IFLA_NETKIT_* attributes of 6.7+, which Debian 12's headers lack.
constexpr uint16_t kIflaNetkitPeerInfo = 1;
constexpr uint16_t kIflaNetkitPolicy = 3;
constexpr uint16_t kIflaNetkitPeerPolicy = 4;
constexpr uint16_t kIflaNetkitMode = 5;
constexpr uint32_t kNetkitPass = 0;  // default policy: forward when no program decides

}  // namespace

absl::Status createNetkitPair(const NetkitPairSpec& spec) {
  if (spec.name.empty() || spec.name.size() >= IFNAMSIZ || spec.peer_name.empty() ||
      spec.peer_name.size() >= IFNAMSIZ) {
    return absl::InvalidArgumentError("netkit: device names must have 1 to 15 characters");
  }
  std::string what = absl::StrCat("creating netkit pair ", spec.name, " <-> ", spec.peer_name);
  Request req(RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL | NLM_F_ACK);
  ifinfomsg ifi{};
  ifi.ifi_family = AF_UNSPEC;
  req.putStruct(ifi);
  req.putString(IFLA_IFNAME, spec.name);
  size_t linkinfo = req.begin(IFLA_LINKINFO);
  req.putString(IFLA_INFO_KIND, "netkit");
  size_t data = req.begin(IFLA_INFO_DATA);
  req.putU32(kIflaNetkitMode, static_cast<uint32_t>(spec.mode));
  req.putU32(kIflaNetkitPolicy, kNetkitPass);
  req.putU32(kIflaNetkitPeerPolicy, kNetkitPass);
  // The peer's own ifinfomsg and attributes, as for veth.
  size_t peer = req.begin(kIflaNetkitPeerInfo);
  req.putStruct(ifi);
  req.putString(IFLA_IFNAME, spec.peer_name);
  if (spec.peer_netns_fd >= 0) req.putU32(IFLA_NET_NS_FD, static_cast<uint32_t>(spec.peer_netns_fd));
  req.end(peer);
  req.end(data);
  req.end(linkinfo);
  return req.acknowledge(what);
}

absl::StatusOr<LinkInfo> linkByName(const std::string& name) { return getLink(0, name, -1); }

absl::Status createVethPair(const std::string& name, const std::string& peer_name, int peer_netns_fd) {
  if (name.empty() || name.size() >= IFNAMSIZ || peer_name.empty() || peer_name.size() >= IFNAMSIZ) {
    return absl::InvalidArgumentError("veth: device names must have 1 to 15 characters");
  }
  Request req(RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL | NLM_F_ACK);
  ifinfomsg ifi{};
  ifi.ifi_family = AF_UNSPEC;
  req.putStruct(ifi);
  req.putString(IFLA_IFNAME, name);
  size_t linkinfo = req.begin(IFLA_LINKINFO);
  req.putString(IFLA_INFO_KIND, "veth");
  size_t data = req.begin(IFLA_INFO_DATA);
  size_t peer = req.begin(1);  // VETH_INFO_PEER: the peer's ifinfomsg and attributes
  req.putStruct(ifi);
  req.putString(IFLA_IFNAME, peer_name);
  if (peer_netns_fd >= 0) req.putU32(IFLA_NET_NS_FD, static_cast<uint32_t>(peer_netns_fd));
  req.end(peer);
  req.end(data);
  req.end(linkinfo);
  return req.acknowledge(absl::StrCat("creating veth pair ", name, " <-> ", peer_name));
}

absl::Status deleteLink(const std::string& name) {
  Request req(RTM_DELLINK, NLM_F_ACK);
  ifinfomsg ifi{};
  ifi.ifi_family = AF_UNSPEC;
  req.putStruct(ifi);
  req.putString(IFLA_IFNAME, name);
  return req.acknowledge(absl::StrCat("deleting ", name));
}

absl::Status setLinkUp(int ifindex) {
  Request req(RTM_NEWLINK, NLM_F_ACK);
  ifinfomsg ifi{};
  ifi.ifi_family = AF_UNSPEC;
  ifi.ifi_index = ifindex;
  ifi.ifi_flags = IFF_UP;
  ifi.ifi_change = IFF_UP;
  req.putStruct(ifi);
  return req.acknowledge(absl::StrCat("setting ifindex ", ifindex, " up"));
}

absl::Status setIpv4DeviceConf(int ifindex, uint16_t key, uint32_t value) {
  Request req(RTM_NEWLINK, NLM_F_ACK);
  ifinfomsg ifi{};
  ifi.ifi_family = AF_UNSPEC;
  ifi.ifi_index = ifindex;
  req.putStruct(ifi);
  size_t spec = req.begin(IFLA_AF_SPEC);
  size_t inet = req.begin(AF_INET);
  size_t conf = req.begin(IFLA_INET_CONF);
  req.putU32(key, value);
  req.end(conf);
  req.end(inet);
  req.end(spec);
  return req.acknowledge(absl::StrCat("setting IPv4 setting ", key, " = ", value, " on ifindex ", ifindex));
}

absl::Status addAddress(int ifindex, uint32_t address) {
  Request req(RTM_NEWADDR, NLM_F_CREATE | NLM_F_REPLACE | NLM_F_ACK);
  ifaddrmsg ifa{};
  ifa.ifa_family = AF_INET;
  ifa.ifa_prefixlen = 32;
  ifa.ifa_scope = RT_SCOPE_UNIVERSE;
  ifa.ifa_index = static_cast<uint32_t>(ifindex);
  req.putStruct(ifa);
  req.put(IFA_LOCAL, &address, sizeof(address));
  req.put(IFA_ADDRESS, &address, sizeof(address));
  return req.acknowledge(absl::StrCat("adding ", formatIp(address), "/32 to ifindex ", ifindex));
}

absl::Status addRoute(const RouteSpec& r) {
  Request req(RTM_NEWROUTE, NLM_F_CREATE | NLM_F_REPLACE | NLM_F_ACK);
  rtmsg rt{};
  rt.rtm_family = AF_INET;
  rt.rtm_dst_len = r.dst_len;
  rt.rtm_table = static_cast<uint8_t>(r.table < 256 ? r.table : uint32_t{RT_TABLE_UNSPEC});
  rt.rtm_protocol = RTPROT_STATIC;
  rt.rtm_type = r.local ? RTN_LOCAL : RTN_UNICAST;
  rt.rtm_scope = r.local ? RT_SCOPE_HOST : (r.gateway != 0 ? RT_SCOPE_UNIVERSE : RT_SCOPE_LINK);
  if (r.gateway != 0) rt.rtm_flags = RTNH_F_ONLINK;
  req.putStruct(rt);
  req.putU32(RTA_TABLE, r.table);
  if (r.dst_len > 0) req.put(RTA_DST, &r.dst, sizeof(r.dst));
  req.putU32(RTA_OIF, static_cast<uint32_t>(r.ifindex));
  if (r.gateway != 0) req.put(RTA_GATEWAY, &r.gateway, sizeof(r.gateway));
  return req.acknowledge(absl::StrCat("adding ", r.local ? "local " : "", "route ", formatIp(r.dst), "/", r.dst_len,
                                      " table ", r.table));
}

absl::Status addFwmarkRule(uint32_t mark, uint32_t table, uint32_t priority) {
  Request req(RTM_NEWRULE, NLM_F_CREATE | NLM_F_EXCL | NLM_F_ACK);
  fib_rule_hdr h{};
  h.family = AF_INET;
  h.table = static_cast<uint8_t>(table < 256 ? table : uint32_t{RT_TABLE_UNSPEC});
  h.action = FR_ACT_TO_TBL;
  req.putStruct(h);
  req.putU32(FRA_PRIORITY, priority);
  req.putU32(FRA_FWMARK, mark);
  req.putU32(FRA_FWMASK, mark);
  req.putU32(FRA_TABLE, table);
  return req.acknowledge(absl::StrCat("adding rule fwmark ", mark, " lookup ", table));
}

namespace {

// The error an answer carries, or OK for a data message.
absl::Status answerError(const std::string& answer, const std::string& what) {
  auto* nh = reinterpret_cast<const nlmsghdr*>(answer.data());
  if (nh->nlmsg_type != NLMSG_ERROR) return absl::OkStatus();
  int err = -static_cast<const nlmsgerr*>(NLMSG_DATA(nh))->error;
  if (err == ENOENT || err == ENETUNREACH || err == EHOSTUNREACH || err == ESRCH) {
    return absl::NotFoundError(absl::StrCat(what, ": ", strerror(err)));
  }
  return absl::InternalError(absl::StrCat(what, ": ", strerror(err)));
}

// RTM_GETNEIGH (a get, not a dump: 5.0+) for `ip` on `ifindex`: the MAC it resolved to.
absl::StatusOr<MacAddress> neighbourMac(uint32_t ip, int ifindex, const std::string& dev) {
  std::string what = absl::StrCat("neighbour entry of ", formatIp(ip), " on ", dev);
  Request req(RTM_GETNEIGH, 0);
  ndmsg q{};
  q.ndm_family = AF_INET;
  q.ndm_ifindex = ifindex;
  req.putStruct(q);
  req.put(NDA_DST, &ip, sizeof(ip));
  auto answer = req.exchange(what);
  if (!answer.ok()) return answer.status();
  if (auto st = answerError(*answer, what); !st.ok()) return st;
  auto* nh = reinterpret_cast<const nlmsghdr*>(answer->data());
  auto* nd = static_cast<const ndmsg*>(NLMSG_DATA(nh));
  if (nd->ndm_state & (NUD_FAILED | NUD_INCOMPLETE)) {
    return absl::NotFoundError(absl::StrCat(what, ": not resolved"));
  }
  int alen = static_cast<int>(nh->nlmsg_len) - static_cast<int>(NLMSG_LENGTH(sizeof(ndmsg)));
  for (auto* rta = reinterpret_cast<const rtattr*>(reinterpret_cast<const char*>(nd) + NLMSG_ALIGN(sizeof(ndmsg)));
       RTA_OK(rta, alen); rta = RTA_NEXT(rta, alen)) {
    if (rta->rta_type == NDA_LLADDR && RTA_PAYLOAD(rta) == 6) {
      MacAddress mac{};
      std::memcpy(mac.data(), RTA_DATA(rta), 6);
      return mac;
    }
  }
  return absl::NotFoundError(absl::StrCat(what, ": no link-layer address"));
}

// The bridge port behind which `mac` was learnt (`bridge fdb get MAC br BRIDGE`, 5.1+).
absl::StatusOr<int> bridgePortOf(const MacAddress& mac, int bridge, const std::string& dev) {
  std::string what = absl::StrCat("forwarding entry of ", formatMac(mac), " on bridge ", dev);
  Request req(RTM_GETNEIGH, 0);
  ndmsg q{};
  q.ndm_family = AF_BRIDGE;
  req.putStruct(q);
  req.put(NDA_LLADDR, mac.data(), mac.size());
  req.putU32(NDA_MASTER, static_cast<uint32_t>(bridge));
  auto answer = req.exchange(what);
  if (!answer.ok()) return answer.status();
  if (auto st = answerError(*answer, what); !st.ok()) return st;
  auto* nd = static_cast<const ndmsg*>(NLMSG_DATA(reinterpret_cast<const nlmsghdr*>(answer->data())));
  if (nd->ndm_ifindex == bridge) return absl::NotFoundError(absl::StrCat(what, ": the bridge's own address"));
  return nd->ndm_ifindex;
}

// A managed neighbour entry for `ip` on `ifindex`: the kernel resolves it and keeps it fresh.
absl::Status addManagedNeighbour(uint32_t ip, int ifindex) {
  Request req(RTM_NEWNEIGH, NLM_F_CREATE | NLM_F_EXCL | NLM_F_ACK);
  ndmsg q{};
  q.ndm_family = AF_INET;
  q.ndm_ifindex = ifindex;
  q.ndm_state = NUD_NONE;
  req.putStruct(q);
  req.put(NDA_DST, &ip, sizeof(ip));
  req.putU32(NDA_FLAGS_EXT, NTF_EXT_MANAGED);
  auto st = req.acknowledge(absl::StrCat("asking the kernel to resolve ", formatIp(ip)));
  if (!st.ok() && absl::StrContains(st.message(), strerror(EEXIST))) return absl::OkStatus();
  return st;
}

}  // namespace

absl::Status deleteNeighbour(uint32_t ip, int ifindex) {
  Request req(RTM_DELNEIGH, NLM_F_ACK);
  ndmsg q{};
  q.ndm_family = AF_INET;
  q.ndm_ifindex = ifindex;
  req.putStruct(q);
  req.put(NDA_DST, &ip, sizeof(ip));
  return req.acknowledge(absl::StrCat("deleting the neighbour entry of ", formatIp(ip)));
}

absl::StatusOr<PodInterface> findPodInterface(uint32_t ip, int* managed_bridge) {
  std::string what = absl::StrCat("route to ", formatIp(ip));
  Request req(RTM_GETROUTE, 0);
  rtmsg q{};
  q.rtm_family = AF_INET;
  q.rtm_dst_len = 32;
  req.putStruct(q);
  req.put(RTA_DST, &ip, sizeof(ip));
  auto answer = req.exchange(what);
  if (!answer.ok()) return answer.status();
  if (auto st = answerError(*answer, what); !st.ok()) return st;
  auto* nh = reinterpret_cast<const nlmsghdr*>(answer->data());
  auto* rt = static_cast<const rtmsg*>(NLMSG_DATA(nh));
  if (rt->rtm_type != RTN_UNICAST) {
    return absl::NotFoundError(absl::StrCat(what, ": not a unicast route (type ", rt->rtm_type,
                                            "; a local or unreachable address)"));
  }
  int oif = 0;
  uint32_t gateway = 0;
  int alen = static_cast<int>(RTM_PAYLOAD(nh));
  for (auto* rta = RTM_RTA(rt); RTA_OK(rta, alen); rta = RTA_NEXT(rta, alen)) {
    if (rta->rta_type == RTA_OIF) std::memcpy(&oif, RTA_DATA(rta), sizeof(oif));
    if (rta->rta_type == RTA_GATEWAY && RTA_PAYLOAD(rta) == 4) std::memcpy(&gateway, RTA_DATA(rta), 4);
  }
  if (oif == 0) return absl::NotFoundError(absl::StrCat(what, ": no output device"));
  if (gateway != 0) {
    return absl::NotFoundError(absl::StrCat(what, ": via gateway ", formatIp(gateway),
                                            " (a pod of another node, or not set up yet)"));
  }
  auto dev = getLink(oif, "", -1);
  if (!dev.ok()) return dev.status();
  if (dev->kind != "bridge") return PodInterface{*std::move(dev), "route"};
  auto mac = neighbourMac(ip, dev->ifindex, dev->name);
  if (absl::IsNotFound(mac.status()) && managed_bridge != nullptr) {
    if (auto st = addManagedNeighbour(ip, dev->ifindex); st.ok()) {
      *managed_bridge = dev->ifindex;
      return absl::NotFoundError(absl::StrCat(mac.status().message(), " (the kernel is resolving it; retried)"));
    }
  }
  if (!mac.ok()) return mac.status();
  auto port = bridgePortOf(*mac, dev->ifindex, dev->name);
  if (!port.ok()) return port.status();
  auto link = getLink(*port, "", -1);
  if (!link.ok()) return link.status();
  return PodInterface{*std::move(link), absl::StrCat("bridge ", dev->name)};
}

absl::StatusOr<LinkInfo> linkByIndexInNetns(int ifindex, int32_t netnsid) {
  return getLink(ifindex, "", netnsid);
}

namespace {

// RTM_GETNSID / RTM_NEWNSID about the netns open as `netns_fd`.
Request nsidRequest(uint16_t type, uint16_t flags, int netns_fd) {
  Request req(type, flags);
  rtgenmsg g{};
  g.rtgen_family = AF_UNSPEC;
  req.putStruct(g);
  req.putU32(NETNSA_FD, static_cast<uint32_t>(netns_fd));
  return req;
}

}  // namespace

absl::StatusOr<int32_t> netnsId(int netns_fd) {
  Request req = nsidRequest(RTM_GETNSID, 0, netns_fd);
  auto answer = req.exchange("netns id request");
  if (!answer.ok()) return answer.status();
  auto* nh = reinterpret_cast<const nlmsghdr*>(answer->data());
  if (nh->nlmsg_type == NLMSG_ERROR) {
    return absl::InternalError(
        absl::StrCat("netns id request: ", strerror(-static_cast<const nlmsgerr*>(NLMSG_DATA(nh))->error)));
  }
  if (nh->nlmsg_type != RTM_NEWNSID) return absl::InternalError("netns id request: unexpected netlink answer");
  int alen = static_cast<int>(nh->nlmsg_len) - static_cast<int>(NLMSG_LENGTH(sizeof(rtgenmsg)));
  const auto* rta = reinterpret_cast<const rtattr*>(static_cast<const char*>(NLMSG_DATA(nh)) +
                                                    NLMSG_ALIGN(sizeof(rtgenmsg)));
  for (; RTA_OK(rta, alen); rta = RTA_NEXT(rta, alen)) {
    if (rta->rta_type != NETNSA_NSID) continue;
    int32_t id = 0;
    std::memcpy(&id, RTA_DATA(rta), sizeof(id));
    return id;
  }
  return -1;
}

absl::Status assignNetnsId(int netns_fd) {
  Request req = nsidRequest(RTM_NEWNSID, NLM_F_ACK, netns_fd);
  req.putU32(NETNSA_NSID, static_cast<uint32_t>(-1));
  return req.acknowledge("assigning a netns id");
}

std::string formatMac(const MacAddress& m) {
  return absl::StrFormat("%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5]);
}

}  // namespace ferry::rtnetlink
