#pragma once
// Address helpers shared by config, workloads and the data plane.
#include <cstdint>
#include <string>
#include <string_view>

#include <boost/asio/ip/address.hpp>

#include "absl/status/statusor.h"

namespace ferry::common {

using IpAddress = boost::asio::ip::address;

struct HostPort {
  IpAddress ip;
  uint16_t port = 0;
  friend bool operator==(const HostPort&, const HostPort&) = default;
};

// Dual-stack sockets report IPv4 peers as ::ffff:a.b.c.d: the plain IPv4 form, so that both
// spellings find the same workload. Anything else unchanged.
IpAddress canonicalIp(const IpAddress& ip);
// Parses "1.2.3.4" or "fd00::1" (no brackets, no port).
absl::StatusOr<IpAddress> parseIp(std::string_view text);
// Parses "1.2.3.4:80" or "[fd00::1]:80". Port 0 is rejected unless allow_zero_port.
absl::StatusOr<HostPort> parseHostPort(std::string_view text, bool allow_zero_port = false);
// "1.2.3.4:80" / "[fd00::1]:80": the form HTTP/2 :authority and `forwarded` use.
std::string formatHostPort(const IpAddress& ip, uint16_t port);
inline std::string formatHostPort(const HostPort& hp) { return formatHostPort(hp.ip, hp.port); }

}  // namespace ferry::common
