// CONNECT request building and validation, pool keys, PROXY v2 parsing.
#include <gtest/gtest.h>

#include <set>

#include "proxy/hbone/connect_request.h"
#include "proxy/session/connect_target.h"
#include "proxy/workloads/file_source.h"
#include "proxy/hbone/pool.h"
#include "proxy/session/context.h"
#include "proxy/session/proxy_protocol.h"

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

std::shared_ptr<const workloads::Registry> registry() {
  auto r = workloads::parseRegistry(R"(workloads:
  - {name: s1, namespace: default, service_account: server, node: n2, ips: [10.0.2.10, "fd00::2:10"], hbone: true}
  - {name: c1, namespace: default, service_account: client, node: n1, ips: [10.0.1.10], hbone: true}
)", "w.yaml", "n2");
  EXPECT_TRUE(r.ok()) << r.status();
  return *r;
}

const std::vector<uint16_t> kFerryPorts = {15000, 15001, 15006, 15008, 15020, 15021};

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

struct Case {
  const char* name;
  std::vector<Header> request;
  int status;
  const char* code;
};

TEST(ValidateConnect, JudgesEachRequestAsSpecified) {
  auto reg = registry();
  auto local = boost::asio::ip::make_address("10.0.2.10");
  const std::vector<Case> cases = {
      {"ok", {{":method", "CONNECT"}, {":authority", "10.0.2.10:8080"}}, 200, ""},
      {"not connect", {{":method", "GET"}, {":authority", "10.0.2.10:8080"}}, 400, "not_connect"},
      {"no method", {{":authority", "10.0.2.10:8080"}}, 400, "not_connect"},
      {"no authority", {{":method", "CONNECT"}}, 400, "bad_authority"},
      {"two authorities", {{":method", "CONNECT"}, {":authority", "10.0.2.10:1"}, {":authority", "10.0.2.10:2"}}, 400, "bad_authority"},
      {"with path", {{":method", "CONNECT"}, {":authority", "10.0.2.10:80"}, {":path", "/"}}, 400, "bad_pseudo_header"},
      {"with scheme", {{":method", "CONNECT"}, {":authority", "10.0.2.10:80"}, {":scheme", "https"}}, 400, "bad_pseudo_header"},
      {"extended connect", {{":method", "CONNECT"}, {":authority", "10.0.2.10:80"}, {":protocol", "websocket"}}, 400, "bad_pseudo_header"},
      {"hostname", {{":method", "CONNECT"}, {":authority", "svc.ns:80"}}, 400, "bad_authority"},
      {"no port", {{":method", "CONNECT"}, {":authority", "10.0.2.10"}}, 400, "bad_authority"},
      {"port 0", {{":method", "CONNECT"}, {":authority", "10.0.2.10:0"}}, 400, "bad_authority"},
      {"port too big", {{":method", "CONNECT"}, {":authority", "10.0.2.10:65536"}}, 400, "bad_authority"},
      {"other ip", {{":method", "CONNECT"}, {":authority", "10.0.1.10:80"}}, 400, "authority_mismatch"},
      {"metadata ip", {{":method", "CONNECT"}, {":authority", "169.254.169.254:80"}}, 400, "authority_mismatch"},
      {"loopback", {{":method", "CONNECT"}, {":authority", "127.0.0.1:80"}}, 400, "authority_mismatch"},
      {"ferry port 15008", {{":method", "CONNECT"}, {":authority", "10.0.2.10:15008"}}, 400, "ferry_port"},
      {"ferry port 15001", {{":method", "CONNECT"}, {":authority", "10.0.2.10:15001"}}, 400, "ferry_port"},
      {"ferry port 15006", {{":method", "CONNECT"}, {":authority", "10.0.2.10:15006"}}, 400, "ferry_port"},
  };
  for (const auto& c : cases) {
    auto v = session::validateConnect(c.request, local, *reg, kFerryPorts);
    EXPECT_EQ(v.status, c.status) << c.name << ": " << v.reason;
    EXPECT_EQ(v.code, c.code) << c.name;
    if (c.status == 200) {
      EXPECT_EQ(v.target, hp("10.0.2.10", 8080));
      ASSERT_NE(v.workload, nullptr);
      EXPECT_EQ(v.workload->name, "s1");
    } else {
      EXPECT_FALSE(v.reason.empty()) << c.name;
    }
  }
}

TEST(ValidateConnect, TargetThatIsNoLongerLocalIs503) {
  auto reg = registry();
  // 10.0.1.10 is c1 on another node: a connection whose destination is that IP.
  auto v = session::validateConnect({{":method", "CONNECT"}, {":authority", "10.0.1.10:80"}},
                                  boost::asio::ip::make_address("10.0.1.10"), *reg, kFerryPorts);
  EXPECT_EQ(v.status, 503);
  EXPECT_EQ(v.code, "unknown_destination");
}

TEST(ValidateConnect, AcceptsIpv6Authority) {
  auto reg = registry();
  auto v = session::validateConnect({{":method", "CONNECT"}, {":authority", "[fd00::2:10]:443"}},
                                  boost::asio::ip::make_address("fd00::2:10"), *reg, kFerryPorts);
  EXPECT_EQ(v.status, 200) << v.reason;
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
