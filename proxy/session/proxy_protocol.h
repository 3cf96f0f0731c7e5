#pragma once
// PROXY protocol v2 (haproxy.org/download/2.8/doc/proxy-protocol.txt), accepted on 15001 and
// 15006 only with `original_destination: proxy_protocol`: a trusted redirector in front of
// ferryd tells it the connection's original destination. The header's source must equal
// the TCP peer, so the header can not be used to impersonate another pod.
#include <cstdint>
#include <optional>
#include <span>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "absl/status/statusor.h"
#include "proxy/common/net.h"

namespace ferry::session {

struct ProxyHeader {
  common::HostPort source;
  common::HostPort destination;
};

inline constexpr size_t kProxyV2FixedSize = 16;
// Largest header we accept: addresses plus a few TLVs (ignored).
inline constexpr size_t kProxyV2MaxSize = 16 + 512;

// Given the first 16 bytes: how many more bytes the header has, or an error.
absl::StatusOr<size_t> proxyV2Remaining(std::span<const uint8_t> fixed);
// Parses a whole header (fixed part + remaining bytes).
absl::StatusOr<ProxyHeader> parseProxyV2(std::span<const uint8_t> header);
// Encodes a PROXY v2 TCP header (used by tests and tools).
std::vector<uint8_t> encodeProxyV2(const common::HostPort& source, const common::HostPort& destination);

// Reads and parses the header from `socket` within `timeout`.
boost::asio::awaitable<absl::StatusOr<ProxyHeader>> readProxyV2(
    boost::asio::ip::tcp::socket& socket, std::chrono::milliseconds timeout);

}  // namespace ferry::session
