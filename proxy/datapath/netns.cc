#include "proxy/datapath/netns.h"

#include <fcntl.h>
#include <linux/net_namespace.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace ferry::datapath {

absl::StatusOr<NetnsFd> NetnsFd::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrCat("network namespace ", path, ": ", strerror(errno)));
  }
  return NetnsFd(fd, path);
}

absl::StatusOr<NetnsFd> NetnsFd::current() { return open("/proc/thread-self/ns/net"); }

NetnsFd& NetnsFd::operator=(NetnsFd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    path_ = std::move(other.path_);
    other.fd_ = -1;
  }
  return *this;
}

NetnsFd::~NetnsFd() {
  if (fd_ >= 0) ::close(fd_);
}

absl::Status enterNetns(const NetnsFd& ns) {
  if (::setns(ns.fd(), CLONE_NEWNET) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("entering network namespace ", ns.path(), ": ", strerror(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<ScopedNetns> ScopedNetns::enter(const NetnsFd& ns) {
  auto original = NetnsFd::current();
  if (!original.ok()) return original.status();
  if (auto st = enterNetns(ns); !st.ok()) return st;
  return ScopedNetns(std::move(*original));
}

ScopedNetns::~ScopedNetns() {
  if (original_.fd() >= 0) ::setns(original_.fd(), CLONE_NEWNET);
}

namespace {

// One request/answer on a NETLINK_ROUTE socket about `peer_fd`. Returns the NETNSA_NSID
// of the answer (RTM_GETNSID) or 0 (RTM_NEWNSID acknowledged).
absl::StatusOr<int32_t> nsidRequest(uint16_t type, int peer_fd, int32_t nsid) {
  int sock = ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  if (sock < 0) return absl::InternalError(absl::StrCat("netlink socket: ", strerror(errno)));
  struct {
    nlmsghdr nh;
    rtgenmsg g;
    char attrs[64];
  } req{};
  req.nh.nlmsg_type = type;
  req.nh.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
  req.nh.nlmsg_seq = 1;
  req.g.rtgen_family = AF_UNSPEC;
  size_t len = NLMSG_LENGTH(sizeof(rtgenmsg));
  auto put = [&](uint16_t attr, int32_t value) {
    auto* rta = reinterpret_cast<rtattr*>(reinterpret_cast<char*>(&req) + NLMSG_ALIGN(len));
    rta->rta_type = attr;
    rta->rta_len = RTA_LENGTH(sizeof(int32_t));
    std::memcpy(RTA_DATA(rta), &value, sizeof(value));
    len = NLMSG_ALIGN(len) + RTA_ALIGN(rta->rta_len);
  };
  put(NETNSA_FD, peer_fd);
  if (type == RTM_NEWNSID) put(NETNSA_NSID, nsid);
  req.nh.nlmsg_len = static_cast<uint32_t>(len);
  if (::send(sock, &req, len, 0) < 0) {
    ::close(sock);
    return absl::InternalError(absl::StrCat("netlink send: ", strerror(errno)));
  }
  char buf[4096];
  int32_t result = 0;
  bool found = false;
  for (;;) {
    ssize_t n = ::recv(sock, buf, sizeof(buf), 0);
    if (n < 0) {
      ::close(sock);
      return absl::InternalError(absl::StrCat("netlink recv: ", strerror(errno)));
    }
    for (auto* nh = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(nh, static_cast<unsigned>(n));
         nh = NLMSG_NEXT(nh, n)) {
      if (nh->nlmsg_type == NLMSG_ERROR) {
        auto* err = static_cast<nlmsgerr*>(NLMSG_DATA(nh));
        ::close(sock);
        if (err->error != 0) {
          return absl::InternalError(absl::StrCat("netns id request: ", strerror(-err->error)));
        }
        return found ? result : 0;
      }
      if (nh->nlmsg_type == RTM_NEWNSID) {
        int alen = static_cast<int>(nh->nlmsg_len) - NLMSG_LENGTH(sizeof(rtgenmsg));
        for (auto* rta = reinterpret_cast<rtattr*>(
                 reinterpret_cast<char*>(NLMSG_DATA(nh)) + NLMSG_ALIGN(sizeof(rtgenmsg)));
             RTA_OK(rta, alen); rta = RTA_NEXT(rta, alen)) {
          if (rta->rta_type == NETNSA_NSID) {
            std::memcpy(&result, RTA_DATA(rta), sizeof(result));
            found = true;
          }
        }
      }
    }
  }
}

}  // namespace

absl::StatusOr<int32_t> netnsIdOf(const NetnsFd& peer) {
  auto id = nsidRequest(RTM_GETNSID, peer.fd(), 0);
  if (id.ok() && *id >= 0) return id;
  // No id yet: let the kernel pick one (NETNSA_NSID = -1), then read it back.
  if (auto assigned = nsidRequest(RTM_NEWNSID, peer.fd(), -1); !assigned.ok()) {
    return absl::Status(assigned.status().code(),
                        absl::StrCat("assigning an id to ", peer.path(), ": ", assigned.status().message()));
  }
  id = nsidRequest(RTM_GETNSID, peer.fd(), 0);
  if (!id.ok()) return id.status();
  if (*id < 0) return absl::InternalError(absl::StrCat("no netns id for ", peer.path()));
  return id;
}

}  // namespace ferry::datapath
