#include "proxy/session/self_addresses.h"

#include <ifaddrs.h>
#include <netinet/in.h>

#include <algorithm>

namespace ferry::session {
namespace {

common::IpAddress plain(const common::IpAddress& ip) {
  // A dual-stack socket reports IPv4 as ::ffff:a.b.c.d.
  if (ip.is_v6() && ip.to_v6().is_v4_mapped()) {
    return boost::asio::ip::make_address_v4(boost::asio::ip::v4_mapped, ip.to_v6());
  }
  return ip;
}

}  // namespace

SelfAddresses::SelfAddresses(std::vector<common::HostPort> listeners,
                             std::vector<common::IpAddress> local, bool own_netns)
    : listeners_(std::move(listeners)), local_(std::move(local)), own_netns_(own_netns) {
  for (auto& l : listeners_) l.ip = plain(l.ip);
  for (auto& ip : local_) ip = plain(ip);
}

std::vector<common::IpAddress> SelfAddresses::interfaceAddresses() {
  std::vector<common::IpAddress> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (auto* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    if (i->ifa_addr->sa_family == AF_INET) {
      const auto* a = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
      out.push_back(boost::asio::ip::address_v4(ntohl(a->sin_addr.s_addr)));
    } else if (i->ifa_addr->sa_family == AF_INET6) {
      const auto* a = reinterpret_cast<const sockaddr_in6*>(i->ifa_addr);
      boost::asio::ip::address_v6::bytes_type bytes;
      std::copy(a->sin6_addr.s6_addr, a->sin6_addr.s6_addr + 16, bytes.begin());
      out.push_back(boost::asio::ip::address_v6(bytes, a->sin6_scope_id));
    }
  }
  ::freeifaddrs(list);
  return out;
}

bool SelfAddresses::isLocal(const common::IpAddress& ip) const {
  if (ip.is_loopback()) return true;
  if (ip.is_v4() && (ip.to_v4().to_uint() >> 24) == 127) return true;
  return std::find(local_.begin(), local_.end(), ip) != local_.end();
}

bool SelfAddresses::contains(const common::HostPort& destination) const {
  auto ip = plain(destination.ip);
  // Connecting to an unspecified address reaches the local stack too.
  if (ip.is_unspecified()) ip = ip.is_v4() ? common::IpAddress(boost::asio::ip::address_v4::loopback())
                                           : common::IpAddress(boost::asio::ip::address_v6::loopback());
  if (own_netns_ && isLocal(ip)) return true;
  for (const auto& l : listeners_) {
    if (l.port != destination.port) continue;
    if (l.ip == ip) return true;
    if (l.ip.is_unspecified() && isLocal(ip)) return true;
  }
  return false;
}

}  // namespace ferry::session
