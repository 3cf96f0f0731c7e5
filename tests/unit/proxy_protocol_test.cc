// PROXY protocol v2 (proxy/session/proxy_protocol.h): round trips, and the headers refused.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "proxy/session/proxy_protocol.h"

namespace ferry {
namespace {

using common::HostPort;

HostPort hp(const char* ip, uint16_t port) { return {boost::asio::ip::make_address(ip), port}; }

TEST(ProxyProtocol, RoundTripsIpv4AndIpv6) {
  for (auto [s, d] : {std::pair{hp("10.0.1.10", 40000), hp("10.0.2.10", 8080)},
                      std::pair{hp("fd00::1", 1), hp("fd00::2", 65535)}}) {
    auto bytes = session::encodeProxyV2(s, d);
    auto parsed = session::parseProxyV2(bytes);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(parsed->source, s);
    EXPECT_EQ(parsed->destination, d);
  }
}

TEST(ProxyProtocol, RejectsBadHeaders) {
  auto good = session::encodeProxyV2(hp("10.0.1.10", 1), hp("10.0.2.10", 2));
  auto bad_sig = good;
  bad_sig[0] = 'G';
  EXPECT_FALSE(session::parseProxyV2(bad_sig).ok());
  auto local_cmd = good;
  local_cmd[12] = 0x20;  // LOCAL: carries no addresses, useless for a captured connection
  EXPECT_FALSE(session::parseProxyV2(local_cmd).ok());
  auto udp = good;
  udp[13] = 0x12;
  EXPECT_FALSE(session::parseProxyV2(udp).ok());
  auto short_len = good;
  short_len[15] = 4;
  short_len.resize(16 + 4);
  EXPECT_FALSE(session::parseProxyV2(short_len).ok());
  auto huge = good;
  huge[14] = 0xff;
  EXPECT_FALSE(session::proxyV2Remaining(huge).ok());
  auto port0 = session::encodeProxyV2(hp("10.0.1.10", 1), hp("10.0.2.10", 0));
  EXPECT_FALSE(session::parseProxyV2(port0).ok());
  EXPECT_FALSE(session::parseProxyV2(std::vector<uint8_t>(good.begin(), good.begin() + 20)).ok());
}

}  // namespace
}  // namespace ferry
