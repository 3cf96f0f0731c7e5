#include "proxy/datapath/netlink.h"

#include <linux/if.h>
#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ferry::datapath {
namespace {

#ifndef IFLA_TARGET_NETNSID
#define IFLA_TARGET_NETNSID IFLA_IF_NETNSID
#endif

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
    int sock = ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
    if (sock < 0) return absl::InternalError(absl::StrCat(what, ": netlink socket: ", strerror(errno)));
    if (::send(sock, buf_, len_, 0) < 0) {
      int e = errno;
      ::close(sock);
      return absl::InternalError(absl::StrCat(what, ": netlink send: ", strerror(e)));
    }
    std::string answer(16384, '\0');
    ssize_t n = ::recv(sock, answer.data(), answer.size(), 0);
    int e = errno;
    ::close(sock);
    if (n < 0) return absl::InternalError(absl::StrCat(what, ": netlink recv: ", strerror(e)));
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

absl::StatusOr<LinkInfo> linkByIndexInNetns(int ifindex, int32_t netnsid) {
  return getLink(ifindex, "", netnsid);
}

std::string formatMac(const MacAddress& m) {
  return absl::StrFormat("%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5]);
}

}  // namespace ferry::datapath
