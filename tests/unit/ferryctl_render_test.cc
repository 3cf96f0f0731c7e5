// How ferryctl reads ferryd's policy answers (proxy/ferryctl/policy_render.h), rendered from
// the JSON that ferryd's own admin handlers (proxy/server/policy_admin.h) make, so that the
// two cannot drift apart; and what ferryctl refuses before asking ferryd at all.
#include "proxy/ferryctl/policy_render.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "proxy/common/strings.h"
#include "proxy/ferryctl/admin_client.h"
#include "proxy/ferryctl/admin_render.h"
#include "proxy/policy/decode.h"
#include "proxy/server/policy_admin.h"
#include "tests/integration/policy_fixtures.h"
#include "tests/support/test_pod.h"

namespace ferry::ferryctl {
namespace {

using ::testing::HasSubstr;

constexpr char kOrigin[] = "file policies.yaml";

// A mesh-wide STRICT mode, s1 PERMISSIVE on 8080 alone, a dry-run DENY and a DENY that
// names an L7 field.
constexpr char kPolicies[] = R"(apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: web-ports, namespace: default}
spec:
  selector: {matchLabels: {app: web}}
  portLevelMtls: {"8080": {mode: PERMISSIVE}}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: try-deny, namespace: default, annotations: {istio.io/dry-run: "true"}}
spec:
  action: DENY
  rules: [{from: [{source: {namespaces: [default]}}]}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: no-posts, namespace: default}
spec:
  selector: {matchLabels: {app: web}}
  action: DENY
  rules: [{to: [{operation: {methods: [POST], ports: ["9090"]}}]}]
)";

using ferry::test_support::testPod;

class FerryctlPolicyRenderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    registry_.replaceAll({testPod("s1", "server", "n2", "10.0.2.10", {{"app", "web"}}),
                          testPod("c1", "client", "n1", "10.0.1.10")});
    auto decoded = policy::decodeYamlFile(std::string(testing::kMeshStrict) + "---\n" + kPolicies, "policies.yaml",
                                          kOrigin);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    auto result = policies_.replace(kOrigin, *std::move(decoded));
    ASSERT_TRUE(result.refused.empty()) << result.refused.front();
  }
  // ferryd's answer to /policy/check?<query>.
  server::HttpResponse ask(const std::string& query, bool node_exempt = true) {
    return server::policyCheck(query, *registry_.current(), *policies_.current(), "cluster.local", node_exempt);
  }

  workloads::Store registry_{"n2"};
  policy::Store policies_{"istio-system"};
};

TEST_F(FerryctlPolicyRenderTest, CheckNamesThePortLevelModeAndMarksDryRunPolicies) {
  auto answer = ask("from=default%2Fc1&to=default%2Fs1&port=8080");
  ASSERT_EQ(answer.status, 200) << answer.body;
  auto verdict = renderCheck(answer.body);
  ASSERT_TRUE(verdict.ok()) << verdict.status();
  EXPECT_TRUE(verdict->allowed);
  EXPECT_EQ(verdict->text,
            "verdict: allow (allowed: no ALLOW policy applies)\n"
            "source: default/c1 10.0.1.10 principal cluster.local/ns/default/sa/client\n"
            "destination: default/s1 10.0.2.10 port 8080\n"
            "mtls: PERMISSIVE (PeerAuthentication default/web-ports, port level)\n"
            "policies:\n"
            "  DENY default/no-posts: no rule matched; rule 0 uses L7 fields (spec.rules[0].to[0].operation.methods): "
            "judged on its L4 fields\n"
            "  DENY default/try-deny (dry run): rule 0 matched\n");
}

TEST_F(FerryctlPolicyRenderTest, PlaintextToAStrictPortIsADenyFromAnAddressNoWorkloadOwns) {
  auto verdict = renderCheck(ask("from=10.9.9.9&to=default%2Fs1&port=9090").body);
  ASSERT_TRUE(verdict.ok()) << verdict.status();
  EXPECT_FALSE(verdict->allowed);
  EXPECT_THAT(verdict->text, HasSubstr("verdict: deny (denied: plaintext to port 9090, whose mTLS mode is STRICT)\n"
                                       "source: 10.9.9.9 (no workload) plaintext (no peer identity)\n"));
  EXPECT_THAT(verdict->text, HasSubstr("mtls: STRICT (PeerAuthentication istio-system/mesh)\n"));
  EXPECT_THAT(verdict->text, HasSubstr("  DENY default/no-posts: rule 0 matched;")) << "the DENY would also refuse it";
}

TEST_F(FerryctlPolicyRenderTest, TheNodesOwnConnectionToAStrictPortPassesWithoutFerryd) {
  // The kubelet's probe (docs/security.md, "Probes"): the same STRICT port, the same DENY.
  auto verdict = renderCheck(ask("from=node&to=default%2Fs1&port=9090").body);
  ASSERT_TRUE(verdict.ok()) << verdict.status();
  EXPECT_TRUE(verdict->allowed);
  EXPECT_EQ(verdict->text,
            "verdict: allow (allowed: a socket of the node itself (the kubelet's probes) reaches the pod without "
            "ferryd, whatever its mTLS mode and policies (datapath.exempt_node; docs/security.md, \"Probes\"))\n"
            "source: the node itself (the kubelet's probes), plaintext\n"
            "destination: default/s1 10.0.2.10 port 9090\n"
            "mtls, policies: not applied (the connection does not pass through ferryd)\n");
  auto refused = ask("from=node&to=default%2Fs1&port=9090", /*node_exempt=*/false);
  EXPECT_EQ(refused.status, 400);
  EXPECT_THAT(errorMessage(refused.status, refused.body), HasSubstr("datapath.exempt_node is off"));
}

TEST_F(FerryctlPolicyRenderTest, ListShowsScopesPortsDryRunAndL7Fields) {
  auto text = renderList(server::policyDump(policies_).body);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text,
            "in force: 2 AuthorizationPolicies, 2 PeerAuthentications (root namespace istio-system, generation 1)\n"
            "  AuthorizationPolicy default/no-posts: DENY, selects app=web, 1 rule, L7 fields "
            "spec.rules[0].to[0].operation.methods [file policies.yaml]\n"
            "  AuthorizationPolicy default/try-deny: DENY (dry run: logged, not enforced), whole namespace, 1 rule "
            "[file policies.yaml]\n"
            "  PeerAuthentication default/web-ports: UNSET, selects app=web, port 8080 PERMISSIVE [file policies.yaml]\n"
            "  PeerAuthentication istio-system/mesh: STRICT, mesh-wide [file policies.yaml]\n"
            "refused: 0\n");
}

TEST_F(FerryctlPolicyRenderTest, ErrorAnswersSayWhatFerrydSaid) {
  auto answer = ask("from=default%2Fc1&to=default%2Fs1&port=0");
  EXPECT_EQ(answer.status, 400);
  EXPECT_EQ(errorMessage(answer.status, answer.body), "port: '0' is not a port (1 to 65535)");
  // A ferryd from before policies has no such page.
  EXPECT_EQ(errorMessage(404, "not found; try: /certs /workloads\n"), "HTTP 404: not found; try: /certs /workloads");
  EXPECT_FALSE(renderCheck("{\"error\": \"x\"}").ok()) << "no verdict";
  EXPECT_FALSE(renderList("not json").ok());
}

TEST(FerryctlPolicyArgsTest, TargetIsNamespaceWorkloadAndPort) {
  auto target = parseCheckTarget("shop/web-1:8080");
  ASSERT_TRUE(target.ok());
  EXPECT_EQ(target->workload, "shop/web-1");
  EXPECT_EQ(target->port, 8080);
  for (const char* bad : {"shop/web", "web:80", "/web:80", "shop/:80", "shop/web:", "shop/web:0", "shop/web:65536",
                          "shop/web:8o"}) {
    EXPECT_FALSE(parseCheckTarget(bad).ok()) << bad;
  }
}

TEST(FerryctlPolicyArgsTest, QueryValuesArePercentEncoded) {
  EXPECT_EQ(common::percentEncode("default/c1"), "default%2Fc1");
  EXPECT_EQ(common::percentEncode("a b&c=d%~._-"), "a%20b%26c%3Dd%25~._-");
  EXPECT_EQ(checkRequestTarget("fd00::1", CheckTarget{"ns/w", 80}, true),
            "/policy/check?from=fd00%3A%3A1&to=ns%2Fw&port=80&plaintext=true");
}

TEST(FerryctlPolicyArgsTest, AdminAddressIsHostAndPort) {
  EXPECT_EQ(common::formatHostPort(*parseAdminAddress("localhost:15000")), "127.0.0.1:15000");
  EXPECT_EQ(common::formatHostPort(*parseAdminAddress("[::1]:15001")), "[::1]:15001");
  EXPECT_FALSE(parseAdminAddress("127.0.0.1").ok());
  EXPECT_FALSE(parseAdminAddress("ferryd:15000").ok());
}

}  // namespace
// The admin commands' tables (ferryd's JSON shapes: proxy/server/server_admin.cc).
TEST(FerryctlAdminRenderTest, TablesAlignColumnsAndUnitsReadForPeople) {
  EXPECT_EQ(table({{"A", "BB"}, {"ccc", "d"}}), "A    BB\nccc  d\n");
  EXPECT_EQ(formatAge(5), "5s");
  EXPECT_EQ(formatAge(65), "1m05s");
  EXPECT_EQ(formatAge(3 * 3600 + 120), "3h02m");
  EXPECT_EQ(formatAge(2 * 86400 + 3600), "2d01h");
  EXPECT_EQ(formatBytes(512), "512 B");
  EXPECT_EQ(formatBytes(1536), "1.5 KiB");
  EXPECT_EQ(formatBytes(3u << 20), "3.0 MiB");
}

TEST(FerryctlAdminRenderTest, AnswersReadAsTablesAndBadAnswersAreErrors) {
  auto status = renderStatus(R"({"ready":false,"reason":"draining","version":"0.1.0","node":"n1","uptime_seconds":61,)"
                             R"("workers":2,"connections_active":3,"log_level":"info","datapath":"peer-egress",)"
                             R"("pid":4242,"handover":{"state":"serving","taken":0,"given":0,"failed":0}})");
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status,
            "ferryd 0.1.0 on node n1: not ready (draining)\n"
            "pid:          4242\n"
            "uptime:       1m01s\n"
            "workers:      2\n"
            "connections:  3 active\n"
            "datapath:     peer-egress\n"
            "log level:    info\n");
  // After an upgrade, while the previous generation still carries connections.
  auto upgraded = renderStatus(R"({"ready":true,"version":"0.2.0","node":"n1","uptime_seconds":5,"workers":2,)"
                               R"("connections_active":1,"log_level":"info","datapath":"peer-egress","pid":5000,)"
                               R"("handover":{"state":"serving","taken":1,"given":0,"failed":0,)"
                               R"("previous":{"pid":4242,"connections_active":200,"deadline_seconds":14395}}})");
  ASSERT_TRUE(upgraded.ok()) << upgraded.status();
  EXPECT_NE(upgraded->find("previous generation:  pid 4242, 200 connections active, reset after 3h59m\n"),
            std::string::npos)
      << *upgraded;
  // In Kubernetes both generations may be pid 1 of their containers: the pod names them.
  auto in_pods = renderStatus(R"({"ready":true,"version":"0.2.0","node":"n1","uptime_seconds":5,"workers":2,)"
                              R"("connections_active":1,"log_level":"info","datapath":"peer-egress","pid":1,)"
                              R"("handover":{"state":"serving","taken":1,"given":0,"failed":0,"previous":)"
                              R"({"pid":1,"pod":"ferry-7xk2p","connections_active":3,"deadline_seconds":60}}})");
  ASSERT_TRUE(in_pods.ok()) << in_pods.status();
  EXPECT_NE(in_pods->find("previous generation:  pod ferry-7xk2p, pid 1, 3 connections active, reset after 1m00s\n"),
            std::string::npos)
      << *in_pods;
  auto connections = renderConnections(
      R"({"total":3,"shown":1,"omitted":2,"connections":[{"direction":"outbound","source":"10.0.0.1:4000",)"
      R"("destination":"10.0.0.2:80","peer_identity":"","age_ms":2500,"sent_bytes":10,"received_bytes":2048}]})");
  ASSERT_TRUE(connections.ok()) << connections.status();
  EXPECT_EQ(*connections,
            "DIRECTION  SOURCE         DESTINATION  PEER  AGE  SENT  RECEIVED\n"
            "outbound   10.0.0.1:4000  10.0.0.2:80  -     2s   10 B  2.0 KiB\n"
            "3 connections open, 2 not shown (--limit)\n");
  EXPECT_EQ(*renderLogLevel(R"({"level":"debug","previous":"info"})"), "log level: debug (was info)\n");
  EXPECT_FALSE(renderStatus("{}").ok());
  EXPECT_FALSE(renderWorkloads("[]").ok());
  EXPECT_FALSE(renderCerts("not json").ok());
  EXPECT_FALSE(renderConfig(R"({"runtime":{}})").ok());
  EXPECT_FALSE(renderLogLevel("{}").ok());
}

}  // namespace ferry::ferryctl
