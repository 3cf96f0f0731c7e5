#include "proxy/session/proxy_protocol.h"
#include "proxy/net/deadline.h"

#include <cstring>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "absl/strings/str_cat.h"

namespace ferry::session {
namespace asio = boost::asio;

namespace {
constexpr uint8_t kSignature[12] = {0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D,
                                    0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A};
constexpr uint8_t kVersion2Proxy = 0x21;  // version 2, command PROXY
constexpr uint8_t kTcp4 = 0x11;
constexpr uint8_t kTcp6 = 0x21;

uint16_t be16(const uint8_t* p) { return static_cast<uint16_t>((p[0] << 8) | p[1]); }
}  // namespace

absl::StatusOr<size_t> proxyV2Remaining(std::span<const uint8_t> fixed) {
  if (fixed.size() < kProxyV2FixedSize || std::memcmp(fixed.data(), kSignature, 12) != 0) {
    return absl::InvalidArgumentError("no PROXY protocol v2 signature");
  }
  if (fixed[12] != kVersion2Proxy) {
    return absl::InvalidArgumentError(absl::StrCat(
        "PROXY header version/command 0x", absl::Hex(fixed[12]), " is not v2 PROXY"));
  }
  size_t len = be16(fixed.data() + 14);
  if (kProxyV2FixedSize + len > kProxyV2MaxSize) {
    return absl::InvalidArgumentError(absl::StrCat("PROXY header of ", len, " bytes is too long"));
  }
  return len;
}

absl::StatusOr<ProxyHeader> parseProxyV2(std::span<const uint8_t> header) {
  auto remaining = proxyV2Remaining(header);
  if (!remaining.ok()) return remaining.status();
  if (header.size() != kProxyV2FixedSize + *remaining) {
    return absl::InvalidArgumentError("PROXY header length mismatch");
  }
  const uint8_t* p = header.data() + kProxyV2FixedSize;
  ProxyHeader out;
  if (header[13] == kTcp4) {
    if (*remaining < 12) return absl::InvalidArgumentError("PROXY TCP4 header too short");
    asio::ip::address_v4::bytes_type s, d;
    std::memcpy(s.data(), p, 4);
    std::memcpy(d.data(), p + 4, 4);
    out.source = {asio::ip::address_v4(s), be16(p + 8)};
    out.destination = {asio::ip::address_v4(d), be16(p + 10)};
  } else if (header[13] == kTcp6) {
    if (*remaining < 36) return absl::InvalidArgumentError("PROXY TCP6 header too short");
    asio::ip::address_v6::bytes_type s, d;
    std::memcpy(s.data(), p, 16);
    std::memcpy(d.data(), p + 16, 16);
    out.source = {asio::ip::address_v6(s), be16(p + 32)};
    out.destination = {asio::ip::address_v6(d), be16(p + 34)};
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("PROXY header family 0x", absl::Hex(header[13]), " is not TCP over IPv4/IPv6"));
  }
  if (out.destination.port == 0) return absl::InvalidArgumentError("PROXY header destination port 0");
  return out;
}

std::vector<uint8_t> encodeProxyV2(const common::HostPort& source,
                                   const common::HostPort& destination) {
  std::vector<uint8_t> out(kSignature, kSignature + 12);
  out.push_back(kVersion2Proxy);
  auto put16 = [&](uint16_t v) {
    out.push_back(static_cast<uint8_t>(v >> 8));
    out.push_back(static_cast<uint8_t>(v & 0xff));
  };
  if (source.ip.is_v4()) {
    out.push_back(kTcp4);
    put16(12);
    for (auto b : source.ip.to_v4().to_bytes()) out.push_back(b);
    for (auto b : destination.ip.to_v4().to_bytes()) out.push_back(b);
  } else {
    out.push_back(kTcp6);
    put16(36);
    for (auto b : source.ip.to_v6().to_bytes()) out.push_back(b);
    for (auto b : destination.ip.to_v6().to_bytes()) out.push_back(b);
  }
  put16(source.port);
  put16(destination.port);
  return out;
}

asio::awaitable<absl::StatusOr<ProxyHeader>> readProxyV2(asio::ip::tcp::socket& socket,
                                                         std::chrono::milliseconds timeout) {
  std::vector<uint8_t> buf(kProxyV2FixedSize);
  auto read_header = [&]() -> asio::awaitable<absl::StatusOr<ProxyHeader>> {
    auto [ec, n] = co_await asio::async_read(socket, asio::buffer(buf), asio::as_tuple(asio::use_awaitable));
    if (ec) co_return absl::UnavailableError(absl::StrCat("reading PROXY header: ", ec.message()));
    auto remaining = proxyV2Remaining(buf);
    if (!remaining.ok()) co_return remaining.status();
    buf.resize(kProxyV2FixedSize + *remaining);
    auto [ec2, n2] = co_await asio::async_read(
        socket, asio::buffer(buf.data() + kProxyV2FixedSize, *remaining), asio::as_tuple(asio::use_awaitable));
    if (ec2) co_return absl::UnavailableError(absl::StrCat("reading PROXY header: ", ec2.message()));
    co_return parseProxyV2(buf);
  };
  auto result = co_await net::withTimeout(read_header(), timeout);
  if (!result) co_return absl::DeadlineExceededError("no PROXY header before the timeout");
  co_return std::move(*result);
}

}  // namespace ferry::session
