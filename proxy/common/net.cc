#include "proxy/common/net.h"

#include <charconv>

#include "absl/strings/str_cat.h"
#include "proxy/common/strings.h"

namespace ferry::common {

absl::StatusOr<IpAddress> parseIp(std::string_view text) {
  boost::system::error_code ec;
  auto ip = boost::asio::ip::make_address(std::string(text), ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("'", toAbsl(text), "' is not an IP address"));
  if (ip.is_v6() && ip.to_v6().scope_id() != 0) {
    return absl::InvalidArgumentError(absl::StrCat("'", toAbsl(text), "': scoped IPv6 addresses are not supported"));
  }
  return ip;
}

absl::StatusOr<HostPort> parseHostPort(std::string_view text, bool allow_zero_port) {
  std::string_view host;
  std::string_view port;
  if (!text.empty() && text.front() == '[') {
    auto close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return absl::InvalidArgumentError(absl::StrCat("'", toAbsl(text), "' is not [ipv6]:port"));
    }
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
    auto ip = parseIp(host);
    if (!ip.ok() || !ip->is_v6()) {
      return absl::InvalidArgumentError(absl::StrCat("'", toAbsl(text), "' is not [ipv6]:port"));
    }
  } else {
    auto colon = text.rfind(':');
    if (colon == std::string_view::npos || text.find(':') != colon) {
      return absl::InvalidArgumentError(absl::StrCat("'", toAbsl(text), "' is not ip:port"));
    }
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  auto ip = parseIp(host);
  if (!ip.ok()) return absl::InvalidArgumentError(absl::StrCat("'", toAbsl(text), "': ", ip.status().message()));
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat("'", toAbsl(text), "': port is not a number"));
  }
  unsigned value = 0;
  std::from_chars(port.data(), port.data() + port.size(), value);
  if (value > 65535) return absl::InvalidArgumentError(absl::StrCat("'", toAbsl(text), "': port above 65535"));
  if (value == 0 && !allow_zero_port) return absl::InvalidArgumentError(absl::StrCat("'", toAbsl(text), "': port 0"));
  return HostPort{*ip, static_cast<uint16_t>(value)};
}

std::string formatHostPort(const IpAddress& ip, uint16_t port) {
  if (ip.is_v6()) return absl::StrCat("[", ip.to_string(), "]:", port);
  return absl::StrCat(ip.to_string(), ":", port);
}

IpAddress canonicalIp(const IpAddress& ip) {
  if (ip.is_v6() && ip.to_v6().is_v4_mapped()) {
    return boost::asio::ip::make_address_v4(boost::asio::ip::v4_mapped, ip.to_v6());
  }
  return ip;
}

}  // namespace ferry::common
