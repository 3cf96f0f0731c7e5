#include "proxy/datapath/netlink.h"

#include <linux/if.h>
#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ferry::datapath {
namespace {

#ifndef IFLA_TARGET_NETNSID
#define IFLA_TARGET_NETNSID IFLA_IF_NETNSID
#endif

absl::StatusOr<LinkInfo> getLink(int ifindex, const std::string& name, int32_t target_nsid) {
  int sock = ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  if (sock < 0) return absl::InternalError(absl::StrCat("netlink socket: ", strerror(errno)));
  struct {
    nlmsghdr nh;
    ifinfomsg ifi;
    char attrs[128];
  } req{};
  req.nh.nlmsg_type = RTM_GETLINK;
  req.nh.nlmsg_flags = NLM_F_REQUEST;
  req.nh.nlmsg_seq = 1;
  req.ifi.ifi_family = AF_UNSPEC;
  req.ifi.ifi_index = ifindex;
  size_t len = NLMSG_LENGTH(sizeof(ifinfomsg));
  auto put = [&](uint16_t type, const void* data, size_t size) {
    auto* rta = reinterpret_cast<rtattr*>(reinterpret_cast<char*>(&req) + NLMSG_ALIGN(len));
    rta->rta_type = type;
    rta->rta_len = static_cast<unsigned short>(RTA_LENGTH(size));
    std::memcpy(RTA_DATA(rta), data, size);
    len = NLMSG_ALIGN(len) + RTA_ALIGN(rta->rta_len);
  };
  if (!name.empty()) put(IFLA_IFNAME, name.c_str(), name.size() + 1);
  if (target_nsid >= 0) put(IFLA_TARGET_NETNSID, &target_nsid, sizeof(target_nsid));
  req.nh.nlmsg_len = static_cast<uint32_t>(len);
  std::string what = name.empty() ? absl::StrCat("ifindex ", ifindex) : absl::StrCat("'", name, "'");
  if (::send(sock, &req, len, 0) < 0) {
    ::close(sock);
    return absl::InternalError(absl::StrCat("netlink send: ", strerror(errno)));
  }
  char buf[16384];
  ssize_t n = ::recv(sock, buf, sizeof(buf), 0);
  ::close(sock);
  if (n < 0) return absl::InternalError(absl::StrCat("netlink recv: ", strerror(errno)));
  auto* nh = reinterpret_cast<nlmsghdr*>(buf);
  if (!NLMSG_OK(nh, static_cast<unsigned>(n))) return absl::InternalError("short netlink answer");
  if (nh->nlmsg_type == NLMSG_ERROR) {
    auto* err = static_cast<nlmsgerr*>(NLMSG_DATA(nh));
    return absl::NotFoundError(absl::StrCat("network interface ", what, ": ", strerror(-err->error)));
  }
  auto* ifi = static_cast<ifinfomsg*>(NLMSG_DATA(nh));
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
      default:
        break;
    }
  }
  return info;
}

}  // namespace

absl::StatusOr<LinkInfo> linkByName(const std::string& name) { return getLink(0, name, -1); }

absl::StatusOr<LinkInfo> linkByIndexInNetns(int ifindex, int32_t netnsid) {
  return getLink(ifindex, "", netnsid);
}

std::string formatMac(const MacAddress& m) {
  return absl::StrFormat("%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5]);
}

}  // namespace ferry::datapath
