// How the destination judges a CONNECT (session::validateConnect, proxy/session/connect_target.h):
// each request as specified, a target no longer local, IPv6 authorities.
#include <gtest/gtest.h>

#include "proxy/session/connect_target.h"
#include "proxy/workloads/file_source.h"

namespace ferry {
namespace {

using common::HostPort;
using hbone::Header;

HostPort hp(const char* ip, uint16_t port) { return {boost::asio::ip::make_address(ip), port}; }

std::shared_ptr<const workloads::Registry> registry() {
  auto r = workloads::parseRegistry(R"(workloads:
  - {name: s1, namespace: default, service_account: server, node: n2, ips: [10.0.2.10, "fd00::2:10"], hbone: true}
  - {name: c1, namespace: default, service_account: client, node: n1, ips: [10.0.1.10], hbone: true}
)", "w.yaml", "n2");
  EXPECT_TRUE(r.ok()) << r.status();
  return *r;
}

const std::vector<uint16_t> kFerryPorts = {15000, 15001, 15006, 15008, 15020, 15021};

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

}  // namespace
}  // namespace ferry
