#include "tests/bpf/test_support.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/net_namespace.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <cerrno>
#include <system_error>

namespace ferry::bpftest {
namespace {

std::string errnoText(const std::string& what) { return what + ": " + std::strerror(errno); }

std::string bringLoopbackUp() {
  Fd sock(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (sock.get() < 0) return errnoText("socket");
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
  if (::ioctl(sock.get(), SIOCGIFFLAGS, &ifr) < 0) return errnoText("SIOCGIFFLAGS lo");
  ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP);
  if (::ioctl(sock.get(), SIOCSIFFLAGS, &ifr) < 0) return errnoText("SIOCSIFFLAGS lo");
  return "";
}

void addAttr(nlmsghdr* nh, uint16_t type, const void* data, uint16_t len) {
  auto* rta = reinterpret_cast<rtattr*>(reinterpret_cast<char*>(nh) + NLMSG_ALIGN(nh->nlmsg_len));
  rta->rta_type = type;
  rta->rta_len = static_cast<uint16_t>(RTA_LENGTH(len));
  std::memcpy(RTA_DATA(rta), data, len);
  nh->nlmsg_len = NLMSG_ALIGN(nh->nlmsg_len) + RTA_ALIGN(rta->rta_len);
}

// RTM_NEWNSID: give the current netns the id `nsid` for itself, as
// `ip netns set NAME ID` does from inside NAME.
std::string assignSelfNsid(int32_t nsid) {
  Fd self(::open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC));
  if (self.get() < 0) return errnoText("open /proc/self/ns/net");
  Fd nl(::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE));
  if (nl.get() < 0) return errnoText("netlink socket");

  alignas(nlmsghdr) char buf[256] = {};
  auto* nh = reinterpret_cast<nlmsghdr*>(buf);
  nh->nlmsg_len = NLMSG_LENGTH(sizeof(rtgenmsg));
  nh->nlmsg_type = RTM_NEWNSID;
  nh->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
  nh->nlmsg_seq = 1;
  reinterpret_cast<rtgenmsg*>(NLMSG_DATA(nh))->rtgen_family = AF_UNSPEC;
  const uint32_t fd = static_cast<uint32_t>(self.get());
  addAttr(nh, NETNSA_FD, &fd, sizeof(fd));
  addAttr(nh, NETNSA_NSID, &nsid, sizeof(nsid));
  if (::send(nl.get(), nh, nh->nlmsg_len, 0) < 0) return errnoText("RTM_NEWNSID send");

  alignas(nlmsghdr) char reply[1024];
  const ssize_t n = ::recv(nl.get(), reply, sizeof(reply), 0);
  if (n < 0) return errnoText("RTM_NEWNSID recv");
  const auto* rh = reinterpret_cast<const nlmsghdr*>(reply);
  if (!NLMSG_OK(rh, static_cast<unsigned>(n)) || rh->nlmsg_type != NLMSG_ERROR)
    return "RTM_NEWNSID: unexpected reply";
  const auto* err = reinterpret_cast<const nlmsgerr*>(NLMSG_DATA(rh));
  if (err->error != 0) return std::string("RTM_NEWNSID: ") + std::strerror(-err->error);
  return "";
}

[[noreturn]] void throwErrno(const std::string& what) {
  throw std::system_error(errno, std::generic_category(), what);
}

sockaddr_in inet(uint32_t ip, uint16_t port) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = ip;
  sa.sin_port = htons(port);
  return sa;
}

}  // namespace

std::string enterFreshNetns() {
  if (::unshare(CLONE_NEWNET) != 0) return errnoText("unshare(CLONE_NEWNET)");
  if (std::string err = bringLoopbackUp(); !err.empty()) return err;
  return assignSelfNsid(kTestNsid);
}

Fd& Fd::operator=(Fd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.release();
  }
  return *this;
}

Fd::~Fd() {
  if (fd_ >= 0) ::close(fd_);
}

Fd tcpListener(uint16_t port) {
  Fd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (s.get() < 0) throwErrno("socket");
  const int one = 1;
  if (::setsockopt(s.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0) throwErrno("SO_REUSEADDR");
  const sockaddr_in sa = inet(INADDR_ANY, port);
  if (::bind(s.get(), reinterpret_cast<const sockaddr*>(&sa), sizeof(sa)) < 0)
    throwErrno("bind 0.0.0.0:" + std::to_string(port));
  if (::listen(s.get(), 16) < 0) throwErrno("listen");
  return s;
}

Fd tcpConnection(uint32_t local_ip, uint16_t local_port, uint32_t remote_ip, uint16_t remote_port) {
  Fd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (s.get() < 0) throwErrno("socket");
  const int on = 1;  // TCP_REPAIR_ON
  if (::setsockopt(s.get(), IPPROTO_TCP, TCP_REPAIR, &on, sizeof(on)) < 0) throwErrno("TCP_REPAIR");
  const sockaddr_in local = inet(local_ip, local_port);
  if (::bind(s.get(), reinterpret_cast<const sockaddr*>(&local), sizeof(local)) < 0) throwErrno("bind");
  const sockaddr_in remote = inet(remote_ip, remote_port);
  if (::connect(s.get(), reinterpret_cast<const sockaddr*>(&remote), sizeof(remote)) < 0)
    throwErrno("connect (repair)");
  return s;
}

}  // namespace ferry::bpftest
