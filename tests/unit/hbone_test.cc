// HBONE's CONNECT request (the headers ztunnel sends, the traceparent) and the pool's key.
#include <gtest/gtest.h>

#include <set>

#include "absl/hash/hash.h"
#include "proxy/hbone/connect_request.h"
#include "proxy/hbone/pool.h"

namespace ferry {
namespace {

using common::HostPort;
using hbone::Header;

HostPort hp(const char* ip, uint16_t port) { return {boost::asio::ip::make_address(ip), port}; }

std::string value(const std::vector<Header>& hs, const std::string& name) {
  for (const auto& h : hs) {
    if (h.name == name) return h.value;
  }
  return "<absent>";
}

TEST(ConnectRequest, BuildsZtunnelCompatibleHeaders) {
  auto hs = hbone::buildConnectHeaders({hp("10.0.2.10", 8080), hp("10.0.1.10", 40000), "default", "c1", {}});
  ASSERT_GE(hs.size(), 2u);
  EXPECT_EQ(hs[0].name, ":method");
  EXPECT_EQ(hs[0].value, "CONNECT");
  EXPECT_EQ(value(hs, ":authority"), "10.0.2.10:8080");
  EXPECT_EQ(value(hs, "forwarded"), "for=\"10.0.1.10:40000\"");
  EXPECT_NE(value(hs, "baggage").find("k8s.namespace.name=default"), std::string::npos);
  EXPECT_EQ(value(hs, ":scheme"), "<absent>");
  EXPECT_EQ(value(hs, ":path"), "<absent>");
}

TEST(ConnectRequest, BracketsIpv6Authority) {
  auto hs = hbone::buildConnectHeaders({hp("fd00::2:10", 80), hp("fd00::1:10", 5), {}, {}, {}});
  EXPECT_EQ(value(hs, ":authority"), "[fd00::2:10]:80");
  EXPECT_EQ(value(hs, "forwarded"), "for=\"[fd00::1:10]:5\"");
}

TEST(ConnectRequest, TraceparentIsRandomAndWellFormed) {
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    auto t = hbone::makeTraceparent();
    ASSERT_EQ(t.size(), 55u) << t;
    EXPECT_EQ(t.substr(0, 3), "00-");
    EXPECT_EQ(t[35], '-');
    EXPECT_EQ(t.substr(52), "-00");
    EXPECT_EQ(t.find_first_not_of("0123456789abcdef-"), std::string::npos);
    seen.insert(t);
  }
  EXPECT_EQ(seen.size(), 100u);
}

hbone::PoolKey key(const char* src_id, const char* src_ip, const char* dst_id, const char* dst_ip) {
  return {src_id, boost::asio::ip::make_address(src_ip), dst_id, hp(dst_ip, 15008)};
}

TEST(PoolKey, IsPerSourceAndDestinationWorkload) {
  auto a = key("spiffe://td/ns/a/sa/x", "10.0.1.10", "spiffe://td/ns/b/sa/y", "10.0.2.10");
  EXPECT_EQ(a, key("spiffe://td/ns/a/sa/x", "10.0.1.10", "spiffe://td/ns/b/sa/y", "10.0.2.10"));
  EXPECT_NE(a, key("spiffe://td/ns/a/sa/x", "10.0.1.11", "spiffe://td/ns/b/sa/y", "10.0.2.10"));
  EXPECT_NE(a, key("spiffe://td/ns/a/sa/z", "10.0.1.10", "spiffe://td/ns/b/sa/y", "10.0.2.10"));
  EXPECT_NE(a, key("spiffe://td/ns/a/sa/x", "10.0.1.10", "spiffe://td/ns/b/sa/y", "10.0.2.11"));
  EXPECT_EQ(absl::HashOf(a),
            absl::HashOf(key("spiffe://td/ns/a/sa/x", "10.0.1.10", "spiffe://td/ns/b/sa/y", "10.0.2.10")));
}

}  // namespace
}  // namespace ferry
