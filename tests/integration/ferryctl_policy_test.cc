// `ferryctl policy check` and `ferryctl policy list` (docs/operations.md, "ferryctl"): the
// built ferryctl binary asks n2's admin endpoint (127.0.2.1:15000) of the loopback lab, whose
// ferryd enforces a policy file; the text it prints, the JSON it passes through, and its exit
// status (0 allow, 3 deny, 1 an error answer, 2 usage, 4 ferryd not running).

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/integration/loopback_lab.h"
#include "tests/integration/policy_fixtures.h"

namespace ferry::testing {
namespace {

constexpr char kN2Admin[] = "127.0.2.1:15000";

using Outcome = ProgramRun;

class FerryctlPolicyTest : public ::testing::Test {
 protected:
  std::string policyFile() const { return files_.dir() + "/policies.yaml"; }
  void startN2(const std::string& policies) {
    writeFile(policyFile(), policies);
    n2_ = std::make_unique<Node>(files_, "n2", "workloads_poll: 50ms\npolicy:\n  files: [" + policyFile() + "]\n");
    ASSERT_TRUE(n2_->ok());
  }
  // The built binary, run to its end.
  Outcome ferryctl(std::vector<std::string> args) {
    args.insert(args.begin(), FERRYCTL_BINARY);
    return runProgram(files_.dir(), args);
  }
  Outcome check(std::vector<std::string> args) {
    args.insert(args.begin(), {"policy", "check", "--admin", kN2Admin});
    return ferryctl(args);
  }

  LabFiles files_;
  std::unique_ptr<Node> n2_;
};

TEST_F(FerryctlPolicyTest, CheckPrintsTheVerdictAndWhyAndExitsThreeOnDeny) {
  startN2(kAllowClient);
  Outcome deny = check({"--from", "default/c2", "--to", "default/s1:18080"});
  EXPECT_EQ(deny.exit, 3) << deny.err;
  EXPECT_EQ(deny.out,
            "verdict: deny (denied: no rule of the 1 ALLOW policy for default/s1 matched)\n"
            "source: default/c2 127.0.1.11 principal cluster.local/ns/default/sa/other\n"
            "destination: default/s1 127.0.2.10 port 18080\n"
            "mtls: PERMISSIVE (the workload's default)\n"
            "policies:\n"
            "  ALLOW default/allow-client: no rule matched\n");
  EXPECT_EQ(deny.err, "");

  Outcome allow = check({"--from", "127.0.1.10", "--to", "default/s1:18080"});
  EXPECT_EQ(allow.exit, 0) << allow.err;
  EXPECT_EQ(allow.out,
            "verdict: allow (allowed by ALLOW policy default/allow-client rule 0)\n"
            "source: default/c1 127.0.1.10 principal cluster.local/ns/default/sa/client\n"
            "destination: default/s1 127.0.2.10 port 18080\n"
            "mtls: PERMISSIVE (the workload's default)\n"
            "policies:\n"
            "  ALLOW default/allow-client: rule 0 matched\n");

  // The allowed principal's workload, calling without its identity.
  Outcome plaintext = check({"--from", "default/c1", "--to", "default/s1:18080", "--plaintext"});
  EXPECT_EQ(plaintext.exit, 3);
  EXPECT_NE(plaintext.out.find("source: default/c1 127.0.1.10 plaintext (no peer identity)\n"), std::string::npos)
      << plaintext.out;
  // s2 (app: strict) has no policy.
  Outcome unguarded = check({"--from", "default/c2", "--to=default/s2:80"});
  EXPECT_EQ(unguarded.exit, 0);
  EXPECT_NE(unguarded.out.find("verdict: allow (allowed: no ALLOW policy applies)\n"), std::string::npos) << unguarded.out;
  EXPECT_NE(unguarded.out.find("policies: none apply\n"), std::string::npos) << unguarded.out;
}

TEST_F(FerryctlPolicyTest, JsonOutputIsFerrydsAnswerAsItIsWithTheSameExitStatus) {
  startN2(kAllowClient);
  std::string body;
  ASSERT_EQ(httpGet("127.0.2.1", 15000, "/policy/check?from=default%2Fc2&to=default%2Fs1&port=18080", &body), 200);
  Outcome deny = check({"--from", "default/c2", "--to", "default/s1:18080", "-o", "json"});
  EXPECT_EQ(deny.exit, 3);
  EXPECT_EQ(deny.out, body);
  EXPECT_NE(deny.out.find("\"verdict\":\"deny\""), std::string::npos) << deny.out;

  Outcome allow = check({"--from", "default/c1", "--to", "default/s1:18080", "--output=json"});
  EXPECT_EQ(allow.exit, 0);
  EXPECT_NE(allow.out.find("\"verdict\":\"allow\""), std::string::npos) << allow.out;
  EXPECT_NE(allow.out.find("\"policy\":\"default/allow-client\",\"rule\":0"), std::string::npos) << allow.out;
}

TEST_F(FerryctlPolicyTest, BadTargetsAndAnUnreachableFerrydAreErrorsThatSayWhy) {
  startN2(kAllowClient);
  // Usage (2): ferryd is not asked.
  Outcome no_port = check({"--from", "default/c1", "--to", "default/s1"});
  EXPECT_EQ(no_port.exit, 2);
  EXPECT_NE(no_port.err.find("--to 'default/s1': no port (expected <namespace>/<workload>:<port>)"), std::string::npos)
      << no_port.err;
  EXPECT_EQ(no_port.out, "");
  Outcome bad_port = check({"--from", "default/c1", "--to", "default/s1:99999"});
  EXPECT_EQ(bad_port.exit, 2);
  EXPECT_NE(bad_port.err.find("'99999' is not a port (1 to 65535)"), std::string::npos) << bad_port.err;
  EXPECT_EQ(check({"--to", "default/s1:80"}).exit, 2) << "--from is required";
  EXPECT_EQ(check({"--from", "default/c1", "--to", "default/s1:80", "-o", "yaml"}).exit, 2);

  // ferryd's 400 (1), its message printed.
  Outcome unknown = check({"--from", "default/c1", "--to", "default/nope:18080"});
  EXPECT_EQ(unknown.exit, 1);
  EXPECT_NE(unknown.err.find("to: no workload default/nope (expected namespace/name)"), std::string::npos)
      << unknown.err;
  EXPECT_EQ(unknown.out, "");
  Outcome remote = check({"--from", "default/s1", "--to", "default/c1:80"});
  EXPECT_EQ(remote.exit, 1);
  EXPECT_NE(remote.err.find("runs on node n1"), std::string::npos) << remote.err;
  Outcome stranger = check({"--from", "no/such", "--to", "default/s1:80"});
  EXPECT_EQ(stranger.exit, 1);
  EXPECT_NE(stranger.err.find("from: 'no/such' is neither an IP nor a workload"), std::string::npos) << stranger.err;

  // Nothing listens on 127.0.4.1 (node n3 runs no ferryd).
  Outcome down = ferryctl({"policy", "check", "--admin", "127.0.4.1:15000", "--from", "default/c1", "--to",
                       "default/s1:18080"});
  EXPECT_EQ(down.exit, 4);
  EXPECT_NE(down.err.find("ferryd is not running at 127.0.4.1:15000 (connection refused)"), std::string::npos)
      << down.err;
  EXPECT_EQ(ferryctl({"policy", "list", "--admin", "127.0.4.1:15000"}).exit, 4);
  EXPECT_EQ(ferryctl({"policy", "list", "--admin", "somewhere"}).exit, 2);
}

TEST_F(FerryctlPolicyTest, ListShowsWhatIsInForceAndWhyAnObjectWasRefused) {
  startN2(std::string(kAllowClient) + "---\n" + kMeshStrict);
  // allow-client made invalid: refused, its previous version keeps applying.
  writeFile(policyFile(), std::string(kMeshStrict) + "---\n" + kAllowClientBroken);
  ASSERT_TRUE(waitFor([&] { return n2_->metric("ferry_policy_refused_objects") == 1; }));
  Outcome list = ferryctl({"policy", "list", "--admin", kN2Admin});
  EXPECT_EQ(list.exit, 0) << list.err;
  std::string origin = "file " + policyFile();
  EXPECT_NE(list.out.find("in force: 1 AuthorizationPolicy, 1 PeerAuthentication (root namespace istio-system, "),
            std::string::npos)
      << list.out;
  EXPECT_NE(list.out.find("  AuthorizationPolicy default/allow-client: ALLOW, selects app=server, 1 rule [" + origin +
                          "]\n"),
            std::string::npos)
      << list.out;
  EXPECT_NE(list.out.find("  PeerAuthentication istio-system/mesh: STRICT, mesh-wide [" + origin + "]\n"),
            std::string::npos)
      << list.out;
  EXPECT_NE(list.out.find("refused: 1\n"), std::string::npos) << list.out;
  EXPECT_NE(list.out.find("ipBlocks[0]: '10.0.0.0/33' is not an IP address or CIDR block [" + origin +
                          "]; its previous version keeps applying\n"),
            std::string::npos)
      << list.out;

  std::string body;
  ASSERT_EQ(httpGet("127.0.2.1", 15000, "/policies", &body), 200);
  Outcome json = ferryctl({"policy", "list", "--admin", kN2Admin, "-o", "json"});
  EXPECT_EQ(json.exit, 0);
  EXPECT_EQ(json.out, body);

  // The mesh is STRICT: plaintext is refused before any authorization policy.
  Outcome plaintext = check({"--from", "127.0.3.10", "--to", "default/s1:18080"});
  EXPECT_EQ(plaintext.exit, 3);
  EXPECT_NE(plaintext.out.find("verdict: deny (denied: plaintext to port 18080, whose mTLS mode is STRICT)\n"
                               "source: 127.0.3.10 (no workload) plaintext (no peer identity)\n"),
            std::string::npos)
      << plaintext.out;
  EXPECT_NE(plaintext.out.find("mtls: STRICT (PeerAuthentication istio-system/mesh)\n"), std::string::npos)
      << plaintext.out;
}

}  // namespace
}  // namespace ferry::testing
