// Authorization end to end on the loopback lab (docs/policy.md): n2 enforces the policies of
// its workloads on inbound HBONE and inbound plaintext, from a watched policy file; n1's
// clients c1 (sa client) and c2 (sa other) call s1 (app: server) and s2 (app: strict).
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include <gtest/gtest.h>

#include "tests/integration/loopback_lab.h"
#include "tests/integration/policy_fixtures.h"

namespace ferry::testing {
namespace {

using session::CloseReason;
using session::Direction;

constexpr uint16_t kAppPort = 18080;
constexpr uint16_t kOtherPort = 18081;

class PolicyTest : public LoopbackNodesTest {
 protected:
  std::string policyFile() const { return files_.dir() + "/policies.yaml"; }
  void startNodes(const std::string& policies) {
    writeFile(policyFile(), policies);
    LoopbackNodesTest::startNodes("", "workloads_poll: 50ms\npolicy:\n  files: [" + policyFile() + "]\n");
  }
  // Rewrites the policy file and waits until n2 has published the new snapshot.
  void setPolicies(const std::string& policies) {
    double before = n2_->metric("ferry_policy_generation");
    writeFile(policyFile(), policies);
    ASSERT_TRUE(waitFor([&] { return n2_->metric("ferry_policy_generation") > before; }));
  }
  // A round trip on `fd` (closed afterwards); false when the connection failed or ended.
  static bool roundTrip(int fd) {
    if (fd < 0) return false;
    setRecvTimeout(fd, std::chrono::seconds(10));
    char back[4];
    bool ok = sendAll(fd, "ping", 4) && recvExact(fd, back, 4);
    ::close(fd);
    return ok;
  }
  // Through the mesh from `src` (an n1 pod) to `dst`:`port`.
  static bool echoes(const std::string& src, const std::string& dst, uint16_t port = kAppPort) {
    return roundTrip(connectOutbound(src, dst, port));
  }
  // Plaintext from `src` captured on n2's 15006 to `dst`:`port`.
  static bool plaintextEchoes(const std::string& src, const std::string& dst, uint16_t port = kAppPort) {
    return roundTrip(connectCaptured(src, "127.0.2.1", 15006, dst, port));
  }
  double decisions(const char* direction, const char* action, const char* result) {
    return n2_->metric(std::string("ferry_policy_decisions_total{direction=\"") + direction + "\",action=\"" + action +
                       "\",result=\"" + result + "\"}");
  }
};

TEST_F(PolicyTest, AnAllowForOnePrincipalLetsItInAndShutsAnotherOut) {
  startNodes(kAllowClient);
  AppServer app("127.0.2.10", kAppPort, AppServer::echo);
  EXPECT_TRUE(echoes("127.0.1.10", "127.0.2.10")) << "client is allowed";
  EXPECT_FALSE(echoes("127.0.1.11", "127.0.2.10")) << "other is not";
  EXPECT_EQ(app.accepted(), 1u) << "the denied call never reached the workload";
  EXPECT_TRUE(waitFor([&] { return n2_->closed(Direction::kInbound, CloseReason::kPolicyDenied) == 1; }));
  EXPECT_EQ(decisions("inbound", "ALLOW", "allow"), 1);
  EXPECT_EQ(decisions("inbound", "none", "deny"), 1);
  // The policy selects app: server only: s2 (app: strict) takes anyone.
  AppServer strict_app("127.0.2.11", kAppPort, AppServer::echo);
  EXPECT_TRUE(echoes("127.0.1.11", "127.0.2.11"));
}

TEST_F(PolicyTest, DenyWinsOverAllow) {
  startNodes(std::string(kAllowClient) + R"(---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: no-client-on-other-port, namespace: default}
spec:
  action: DENY
  rules:
  - from: [{source: {principals: ["*/sa/client"]}}]
    to: [{operation: {ports: ["18081"]}}]
)");
  AppServer app("127.0.2.10", kAppPort, AppServer::echo);
  AppServer other("127.0.2.10", kOtherPort, AppServer::echo);
  EXPECT_TRUE(echoes("127.0.1.10", "127.0.2.10", kAppPort));
  EXPECT_FALSE(echoes("127.0.1.10", "127.0.2.10", kOtherPort)) << "the DENY matches although the ALLOW does too";
  EXPECT_EQ(other.accepted(), 0u);
  EXPECT_TRUE(waitFor([&] { return decisions("inbound", "DENY", "deny") == 1; }));
}

TEST_F(PolicyTest, StrictRefusesPlaintextWhilePermissiveForwardsIt) {
  startNodes(std::string(kMeshStrict) + R"(---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: server-open, namespace: default}
spec:
  selector: {matchLabels: {app: server}}
  mtls: {mode: STRICT}
  portLevelMtls: {"18080": {mode: PERMISSIVE}}
)");
  AppServer app("127.0.2.10", kAppPort, AppServer::echo);
  AppServer other("127.0.2.10", kOtherPort, AppServer::echo);
  // 127.0.3.10 is no workload: an unenrolled client.
  EXPECT_TRUE(plaintextEchoes("127.0.3.10", "127.0.2.10", kAppPort)) << "port 18080 is PERMISSIVE";
  EXPECT_FALSE(plaintextEchoes("127.0.3.10", "127.0.2.10", kOtherPort)) << "the rest of s1 is STRICT";
  EXPECT_EQ(other.accepted(), 0u);
  EXPECT_TRUE(waitFor([&] { return n2_->closed(Direction::kPlaintext, CloseReason::kStrictPlaintext) == 1; }));
  EXPECT_TRUE(echoes("127.0.1.10", "127.0.2.10", kOtherPort)) << "mTLS is welcome on a STRICT port";
}

TEST_F(PolicyTest, PermissivePlaintextIsJudgedWithoutAPeerIdentity) {
  startNodes(kAllowClient);
  AppServer app("127.0.2.10", kAppPort, AppServer::echo);
  EXPECT_FALSE(plaintextEchoes("127.0.3.10", "127.0.2.10")) << "plaintext has no principal to match";
  EXPECT_TRUE(waitFor([&] { return n2_->closed(Direction::kPlaintext, CloseReason::kPolicyDenied) == 1; }));
  EXPECT_EQ(app.accepted(), 0u);
  setPolicies(std::string(kAllowClient) + R"(---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: allow-lab-net, namespace: default}
spec:
  selector: {matchLabels: {app: server}}
  rules:
  - from: [{source: {ipBlocks: [127.0.3.0/24]}}]
)");
  EXPECT_TRUE(plaintextEchoes("127.0.3.10", "127.0.2.10")) << "allowed by its source address";
  EXPECT_EQ(decisions("inbound_plaintext", "ALLOW", "allow"), 1);
}

TEST_F(PolicyTest, TighteningAPolicyClosesOpenConnectionsItNowDenies) {
  startNodes("");
  AppServer app("127.0.2.10", kAppPort, AppServer::echo);
  int mesh = connectOutbound("127.0.1.10", "127.0.2.10", kAppPort);
  int plain = connectCaptured("127.0.3.10", "127.0.2.1", 15006, "127.0.2.10", kAppPort);
  ASSERT_GE(mesh, 0);
  ASSERT_GE(plain, 0);
  char back[4];
  for (int fd : {mesh, plain}) {
    setRecvTimeout(fd, std::chrono::seconds(10));
    ASSERT_TRUE(sendAll(fd, "ping", 4));
    ASSERT_TRUE(recvExact(fd, back, 4));
  }
  // Only `other` may call s1 now: both open connections (client's, and the plaintext one)
  // are denied and must be closed, without a byte more from either side.
  setPolicies(kAllowOtherOnly);
  EXPECT_TRUE(waitFor([&] { return n2_->closed(Direction::kInbound, CloseReason::kPolicyRevoked) == 1; }));
  EXPECT_TRUE(waitFor([&] { return n2_->closed(Direction::kPlaintext, CloseReason::kPolicyRevoked) == 1; }));
  for (int fd : {mesh, plain}) {
    char byte;
    ssize_t n = ::recv(fd, &byte, 1, 0);
    EXPECT_LE(n, 0) << "the application sees its connection end";
    ::close(fd);
  }
  EXPECT_TRUE(echoes("127.0.1.11", "127.0.2.10")) << "other still gets in";
}

TEST_F(PolicyTest, ABrokenObjectIsRefusedAndThePreviousPoliciesKeepApplying) {
  startNodes(kAllowClient);
  EXPECT_EQ(n2_->metric("ferry_policies{kind=\"AuthorizationPolicy\"}"), 1);
  // The same object made invalid, next to a new invalid one: nothing changes in force (no
  // new snapshot), both are refused.
  writeFile(policyFile(), std::string(kAllowClientBroken) + R"(---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: new-one, namespace: default}
spec: {action: MAYBE}
)");
  EXPECT_TRUE(waitFor([&] { return n2_->metric("ferry_policy_refused_objects") == 2; }));
  EXPECT_EQ(n2_->metric("ferry_policy_generation"), 1) << "the start-up snapshot is still the one in force";
  std::string body;
  ASSERT_EQ(httpGet("127.0.2.1", 15000, "/policies", &body), 200);
  EXPECT_NE(body.find("ipBlocks[0]: '10.0.0.0/33' is not an IP address or CIDR block"), std::string::npos) << body;
  EXPECT_NE(body.find("unknown action 'MAYBE'"), std::string::npos) << body;
  AppServer app("127.0.2.10", kAppPort, AppServer::echo);
  EXPECT_TRUE(echoes("127.0.1.10", "127.0.2.10")) << "the previous allow-client still applies";
  EXPECT_FALSE(echoes("127.0.1.11", "127.0.2.10"));
}

TEST_F(PolicyTest, PolicyCheckSaysWhichPolicyDecidedAndWhy) {
  startNodes(kAllowClient);
  std::string body;
  ASSERT_EQ(httpGet("127.0.2.1", 15000, "/policy/check?from=default/c2&to=default/s1&port=18080", &body), 200);
  EXPECT_NE(body.find("\"verdict\":\"deny\""), std::string::npos) << body;
  EXPECT_NE(body.find("\"principal\":\"cluster.local/ns/default/sa/other\""), std::string::npos) << body;
  EXPECT_NE(body.find("\"name\":\"default/allow-client\""), std::string::npos) << body;
  ASSERT_EQ(httpGet("127.0.2.1", 15000, "/policy/check?from=127.0.1.10&to=default/s1&port=18080", &body), 200);
  EXPECT_NE(body.find("\"verdict\":\"allow\""), std::string::npos) << body;
  EXPECT_NE(body.find("allowed by ALLOW policy default/allow-client rule 0"), std::string::npos) << body;
  EXPECT_EQ(httpGet("127.0.2.1", 15000, "/policy/check?from=default/c1&to=default/c1&port=80", &body), 400);
  EXPECT_NE(body.find("runs on node n1"), std::string::npos) << body;
}

}  // namespace
}  // namespace ferry::testing
