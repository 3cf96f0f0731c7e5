// `ferryctl explain` (proxy/ferryctl/explain.h) read from the /explain answers that ferryd's
// own handler makes (proxy/server/explain_admin.h) over a real registry and real policies, so
// that the two cannot drift apart: a working connection, a policy denial, plaintext to a
// STRICT port, a destination whose ferryd is down, a failed close and a Service's endpoint;
// and the workers' rings of recent closes those answers read.
#include "proxy/ferryctl/explain.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "proxy/ferryctl/json_read.h"
#include "proxy/policy/decode.h"
#include "proxy/server/explain_admin.h"
#include "proxy/session/recent_closes.h"
#include "tests/integration/policy_fixtures.h"
#include "tests/support/test_pod.h"

namespace ferry::ferryctl {
namespace {

namespace json = boost::json;
using ::testing::HasSubstr;

constexpr char kOrigin[] = "file policies.yaml";
constexpr char kClientId[] = "spiffe://cluster.local/ns/default/sa/client";
constexpr char kServerId[] = "spiffe://cluster.local/ns/default/sa/server";

workloads::Workload pod(const char* name, const char* sa, const char* node, const char* ip, const char* app) {
  return ferry::test_support::testPod(name, sa, node, ip, {{"app", app}});
}

json::object closed(const char* src, const char* dst, const char* reason, int64_t unix_ms, const char* direction,
                    const char* detail = "") {
  json::object c{{"direction", direction}, {"reason", reason},         {"source", src},    {"destination", dst},
                 {"time_unix_ms", unix_ms}, {"duration_ms", 3},        {"sent_bytes", 10}, {"received_bytes", 20}};
  if (*detail != '\0') c["detail"] = detail;
  return c;
}

class FerryctlExplainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (auto* store : {&n1_, &n2_}) {
      store->replaceAll({pod("s1", "server", "n2", "10.0.2.10", "server"), pod("s2", "server", "n2", "10.0.2.11", "server"),
                         pod("c1", "client", "n1", "10.0.1.10", "client")});
    }
  }
  void loadPolicies(const std::string& yaml) {
    auto decoded = policy::decodeYamlFile(yaml, "policies.yaml", kOrigin);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    auto result = policies_.replace(kOrigin, *std::move(decoded));
    ASSERT_TRUE(result.refused.empty()) << result.refused.front();
  }
  // `node`'s answer to /explain?from=..&to=.., with these recent closes.
  NodeAnswer ask(workloads::Store& store, const char* node, const std::string& from, const std::string& to,
                 json::array recent = {}) {
    server::ExplainFacts facts{*store.current(), *store.services(), *policies_.current(), "cluster.local", true, {}, {}, {}};
    facts.node = json::object{{"node", node}, {"ready", true}, {"datapath", "disabled"}};
    for (const char* id : {kClientId, kServerId}) {
      facts.certificates[id] = json::object{{"not_after", "2026-12-08T12:00:00Z"}, {"expires_in_seconds", 86000}};
    }
    auto query = server::parseExplainQuery(absl::StrCat("from=", from, "&to=", to));
    EXPECT_TRUE(query.ok()) << query.status();
    json::object view = server::explainView(*query, facts);
    view["closed"] = std::move(recent);
    return NodeAnswer{node, true, "", std::move(view)};
  }
  ExplainEnds ends(std::string from_ip, std::string to_address) {
    ExplainEnds e;
    e.from = from_ip == "10.0.1.10" ? "default/c1" : from_ip;
    e.from_ip = std::move(from_ip);
    e.to = e.to_address = std::move(to_address);
    return e;
  }
  static std::string stateOf(const Explanation& e, const std::string& step) {
    for (const auto& s : e.steps) {
      if (s.step == step) return s.state;
    }
    return "absent";
  }

  workloads::Store n1_{"n1"};
  workloads::Store n2_{"n2"};
  policy::Store policies_{"istio-system"};
};

TEST_F(FerryctlExplainTest, AWorkingConnectionHasNoCauseAndExitsZero) {
  json::array recent{closed("10.0.1.10:40000", "10.0.2.10:8080", "ok", 1'700'000'000'000, "inbound")};
  auto source = ask(n1_, "n1", "10.0.1.10", "10.0.2.10:8080");
  auto destination = ask(n2_, "n2", "10.0.1.10", "10.0.2.10:8080", recent);
  Explanation e = explainConnection(ends("10.0.1.10", "10.0.2.10:8080"), source, destination);
  EXPECT_EQ(e.exit_code, 0) << e.cause;
  EXPECT_EQ(e.cause, "");
  for (const char* step : {"source", "destination", "mtls", "policy", "recent"}) EXPECT_EQ(stateOf(e, step), "ok") << step;
  std::string text = renderExplanation(ends("10.0.1.10", "10.0.2.10:8080"), e);
  EXPECT_THAT(text, HasSubstr("default/c1 (10.0.1.10) -> 10.0.2.10:8080\n"));
  EXPECT_THAT(text, HasSubstr(absl::StrCat("default/c1 on node n1: datapath off, identity ", kClientId,
                                           ", certificate valid until 2026-12-08T12:00:00Z (23h53m left)")));
  EXPECT_THAT(text, HasSubstr("PERMISSIVE (no PeerAuthentication: the workload's default); the source comes over mTLS"));
  EXPECT_THAT(text, HasSubstr("\nno problem found: ferry carries such a connection\n"));
  EXPECT_THAT(text, HasSubstr("inbound    ok      10.0.1.10:40000  10.0.2.10:8080"));
}

TEST_F(FerryctlExplainTest, APolicyDenialNamesThePolicyAndTheCommandThatShowsEachMatch) {
  loadPolicies(testing::kAllowOtherOnly);
  json::array recent{closed("10.0.1.10:40001", "10.0.2.10:8080", "policy_denied", 1'700'000'000'000, "inbound")};
  Explanation e = explainConnection(ends("10.0.1.10", "10.0.2.10:8080"), ask(n1_, "n1", "10.0.1.10", "10.0.2.10:8080"),
                                    ask(n2_, "n2", "10.0.1.10", "10.0.2.10:8080", recent));
  EXPECT_EQ(e.exit_code, 1);
  EXPECT_EQ(stateOf(e, "policy"), "FAIL");
  EXPECT_EQ(stateOf(e, "recent"), "FAIL");
  EXPECT_THAT(e.cause, HasSubstr("an authorization policy denies it: denied"));
  EXPECT_THAT(e.fix, HasSubstr("ferryctl --node n2 policy check --from 10.0.1.10 --to default/s1:8080"));
  EXPECT_THAT(e.fix, HasSubstr("default/only-other"));
}

TEST_F(FerryctlExplainTest, PlaintextFromOutsideTheMeshToAStrictPortIsTheCause) {
  loadPolicies(testing::kMeshStrict);
  auto view = ask(n2_, "n2", "10.9.9.9", "10.0.2.10:8080");
  Explanation e = explainConnection(ends("10.9.9.9", "10.0.2.10:8080"), view, view);
  EXPECT_EQ(e.exit_code, 1);
  EXPECT_EQ(stateOf(e, "source"), "info");
  EXPECT_EQ(stateOf(e, "mtls"), "FAIL");
  EXPECT_EQ(stateOf(e, "policy"), "absent") << "the STRICT refusal is the cause; no second FAIL for the same verdict";
  EXPECT_EQ(e.cause, "plaintext refused: 10.9.9.9 is not in the mesh and port 8080 of default/s1 is STRICT "
                     "(PeerAuthentication istio-system/mesh)");
  EXPECT_THAT(e.fix, HasSubstr("ferry.io/dataplane=enabled"));
}

TEST_F(FerryctlExplainTest, ADestinationWhoseFerrydIsDownExitsFourAndSaysSo) {
  NodeAnswer down{"n2", false, "no running ferryd pod on node n2 in namespace ferry-system", {}};
  Explanation e = explainConnection(ends("10.0.1.10", "10.0.2.10:8080"), ask(n1_, "n1", "10.0.1.10", "10.0.2.10:8080"), down);
  EXPECT_EQ(e.exit_code, 4);
  EXPECT_EQ(stateOf(e, "source"), "ok");
  EXPECT_EQ(stateOf(e, "destination"), "FAIL");
  EXPECT_THAT(e.cause, HasSubstr("ferryd on the destination's node (node n2) is not running or not reachable: no "
                                 "running ferryd pod on node n2"));
  EXPECT_THAT(e.fix, HasSubstr("spec.nodeName=n2"));
  json::object out = explanationJson(ends("10.0.1.10", "10.0.2.10:8080"), e, ask(n1_, "n1", "10.0.1.10", "10.0.2.10:8080"), down);
  EXPECT_EQ(out.at("destination_node").as_object().at("reached").as_bool(), false);
  EXPECT_EQ(out.at("cause").as_string(), e.cause);
  // One node runs both, and its ferryd is down: said once, for both.
  NodeAnswer n1_down{"n1", false, "no running ferryd pod on node n1 in namespace ferry-system", {}};
  Explanation both = explainConnection(ends("10.0.1.10", "10.0.1.11:8080"), n1_down, n1_down);
  EXPECT_EQ(both.exit_code, 4);
  EXPECT_THAT(both.cause, HasSubstr("ferryd on the source's and the destination's node (node n1) is not running"));
}

TEST_F(FerryctlExplainTest, TheNewestFailedCloseIsTheCauseWhenTheStateIsFine) {
  json::array recent{closed("10.0.1.10:40002", "10.0.2.10:8080", "ok", 1'700'000'000'000, "inbound"),
                     closed("10.0.1.10:40003", "10.0.2.10:8080", "connect_failed", 1'700'000'001'000, "inbound",
                            "connect 10.0.2.10:8080: Connection refused")};
  Explanation e = explainConnection(ends("10.0.1.10", "10.0.2.10:8080"), ask(n1_, "n1", "10.0.1.10", "10.0.2.10:8080"),
                                    ask(n2_, "n2", "10.0.1.10", "10.0.2.10:8080", recent));
  EXPECT_EQ(e.exit_code, 1);
  EXPECT_THAT(e.cause, HasSubstr("the last connection closed with connect_failed: the next hop refused"));
  ASSERT_EQ(e.closed.size(), 2u);
  EXPECT_EQ(text(e.closed[0].as_object(), "reason"), "connect_failed") << "the newest first";
  EXPECT_THAT(renderExplanation(ends("10.0.1.10", "10.0.2.10:8080"), e),
              HasSubstr("connect_failed  10.0.1.10:40003  10.0.2.10:8080"));
}

TEST_F(FerryctlExplainTest, AServiceIsFollowedToTheEndpointOfTheLastConnection) {
  auto vip = common::canonicalIp(*common::parseIp("10.96.0.10"));
  workloads::ServiceBackends backends{workloads::intern("default/web"),
                                      {{common::canonicalIp(*common::parseIp("10.0.2.10")), 8080},
                                       {common::canonicalIp(*common::parseIp("10.0.2.11")), 8080}}};
  n1_.applyServices({workloads::ServiceUpdate{{vip, 80}, backends}});
  auto source = ask(n1_, "n1", "10.0.1.10", "10.96.0.10:80",
                    json::array{closed("10.0.1.10:40004", "10.0.2.11:8080", "ok", 1'700'000'000'000, "outbound")});
  auto endpoint = pickEndpoint(source.view);
  ASSERT_TRUE(endpoint.has_value());
  EXPECT_EQ(endpoint->address, "10.0.2.11:8080");
  EXPECT_EQ(endpoint->node, "n2");
  EXPECT_EQ(endpoint->workload, "default/s2");
  ExplainEnds e_ends = ends("10.0.1.10", "10.96.0.10:80");
  e_ends.to = "Service default/web:80";
  e_ends.to_is_service = true;
  Explanation e = explainConnection(e_ends, source, ask(n2_, "n2", "10.0.1.10", endpoint->address));
  EXPECT_EQ(e.exit_code, 0) << e.cause;
  EXPECT_EQ(stateOf(e, "service"), "ok");
  EXPECT_THAT(renderExplanation(e_ends, e), HasSubstr("default/web 10.96.0.10:80 is captured; 2 mesh endpoint(s): "
                                                      "default/s1 10.0.2.10:8080, default/s2 10.0.2.11:8080; "
                                                      "following 10.0.2.11:8080 on node n2"));
  // Without a closed connection: the first endpoint.
  EXPECT_EQ(pickEndpoint(ask(n1_, "n1", "10.0.1.10", "10.96.0.10:80").view)->address, "10.0.2.10:8080");
}

TEST_F(FerryctlExplainTest, OneNodeAskedForAServiceAndItsEndpointListsEachCloseOnce) {
  auto vip = common::canonicalIp(*common::parseIp("10.96.0.10"));
  workloads::ServiceBackends backends{workloads::intern("default/web"),
                                      {{common::canonicalIp(*common::parseIp("10.0.2.10")), 8080}}};
  n2_.applyServices({workloads::ServiceUpdate{{vip, 80}, backends}});
  // A client on n2 itself: its node holds both legs, and is asked for the VIP and for the endpoint.
  json::array recent{closed("10.0.2.11:40005", "10.0.2.10:8080", "ok", 1'700'000'000'000, "outbound"),
                     closed("10.0.2.11:40005", "10.0.2.10:8080", "ok", 1'700'000'000'000, "inbound")};
  auto source = ask(n2_, "n2", "10.0.2.11", "10.96.0.10:80", recent);
  auto destination = ask(n2_, "n2", "10.0.2.11", pickEndpoint(source.view)->address, recent);
  ExplainEnds e_ends = ends("10.0.2.11", "10.96.0.10:80");
  e_ends.to_is_service = true;
  Explanation e = explainConnection(e_ends, source, destination);
  EXPECT_EQ(e.closed.size(), 2u) << "each record once";
  EXPECT_THAT(renderExplanation(e_ends, e), HasSubstr("2 closed recently (0 failed)"));
}

TEST_F(FerryctlExplainTest, AnIpv6EndpointIsBracketedAsFerrydWritesIt) {
  json::object endpoint{{"ip", "fd00::2:10"}, {"port", 8080}, {"node", "n2"}};
  json::object service{{"name", "default/web"}, {"endpoints", json::array{endpoint}}};
  json::object view{{"service", service}};
  EXPECT_EQ(pickEndpoint(view)->address, "[fd00::2:10]:8080");
}

TEST_F(FerryctlExplainTest, AServiceFerryDoesNotCaptureIsSaidToPassAsPlainTcp) {
  ExplainEnds e_ends = ends("10.0.1.10", "10.96.0.99:80");
  e_ends.to = "Service default/plain:80";
  e_ends.to_is_service = true;
  Explanation e = explainConnection(e_ends, ask(n1_, "n1", "10.0.1.10", "10.96.0.99:80"), std::nullopt);
  EXPECT_EQ(stateOf(e, "service"), "info");
  EXPECT_THAT(renderExplanation(e_ends, e), HasSubstr("is not captured: it has no ready endpoint that is a mesh pod"));
}

TEST_F(FerryctlExplainTest, EveryCloseReasonHasItsOwnCause) {
  for (int r = 0; r < static_cast<int>(session::CloseReason::kCount); ++r) {
    std::string label = session::closeReasonLabel(static_cast<session::CloseReason>(r));
    auto [cause, fix] = closeReasonCause(label);
    if (label == "ok") {
      EXPECT_EQ(cause, "");
      continue;
    }
    EXPECT_NE(cause, absl::StrCat("the connection closed with reason ", label)) << label << " has no cause of its own";
    EXPECT_FALSE(fix.empty()) << label;
  }
}

TEST(ExplainAdminTest, ConcernsMatchesTheTwoEndsAndTheServicesEndpointsOnly) {
  auto query = server::parseExplainQuery("from=10.0.1.10&to=10.96.0.10:80");
  ASSERT_TRUE(query.ok());
  workloads::ServiceBackends backends{workloads::intern("default/web"),
                                      {{common::canonicalIp(*common::parseIp("10.0.2.10")), 8080}}};
  session::ClosedConnection c;
  c.src = "10.0.1.10:40000";
  c.dst = "10.0.2.10:8080";
  EXPECT_TRUE(server::concerns(c, *query, &backends));
  EXPECT_FALSE(server::concerns(c, *query, nullptr)) << "no Service: the endpoint is another destination";
  c.dst = "10.96.0.10:80";
  EXPECT_TRUE(server::concerns(c, *query, nullptr));
  c.dst = "10.0.2.10:9090";
  EXPECT_FALSE(server::concerns(c, *query, &backends)) << "another port of the endpoint";
  c.src = "10.0.1.11:40000";
  c.dst = "10.0.2.10:8080";
  EXPECT_FALSE(server::concerns(c, *query, &backends)) << "another source";
  EXPECT_FALSE(server::parseExplainQuery("from=pod&to=10.0.0.1:80").ok());
  EXPECT_FALSE(server::parseExplainQuery("from=10.0.0.1&to=10.0.0.1").ok());
}

TEST(RecentClosesTest, SuccessesNeverPushTheLastFailuresOutAndTheNewestComeFirst) {
  session::RecentCloses ring;
  auto at = [](int s) { return std::chrono::system_clock::time_point(std::chrono::seconds(s)); };
  for (int i = 0; i < 10; ++i) {
    auto& slot = ring.next(false);
    slot.reason = session::CloseReason::kConnectFailed;
    slot.src = absl::StrCat("fail-", i);
    slot.time = at(i);
  }
  for (size_t i = 0; i < 3 * session::RecentCloses::kSuccesses; ++i) {
    auto& slot = ring.next(true);
    slot.src = absl::StrCat("ok-", i);
    slot.time = at(100 + static_cast<int>(i));
  }
  auto all = ring.snapshot();
  ASSERT_EQ(all.size(), 10 + session::RecentCloses::kSuccesses);
  EXPECT_EQ(all.front().src, absl::StrCat("ok-", 3 * session::RecentCloses::kSuccesses - 1));
  EXPECT_EQ(all.back().src, "fail-0") << "every failure is still there, the oldest last";
  for (size_t i = 1; i < all.size(); ++i) EXPECT_GE(all[i - 1].time, all[i].time);
  for (size_t i = 0; i < 2 * session::RecentCloses::kFailures; ++i) ring.next(false).time = at(1000);
  EXPECT_EQ(ring.size(), session::RecentCloses::kFailures + session::RecentCloses::kSuccesses) << "bounded";
}

}  // namespace
}  // namespace ferry::ferryctl
