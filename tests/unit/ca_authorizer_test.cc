// authorize() and PodIndex: docs/ferry-ca.md "Node authorization", one case per rule, with
// the TokenReview and the pods as plain values (no API server).
#include <atomic>
#include <functional>
#include <thread>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proxy/ca/authorizer.h"

namespace ferry::ca {
namespace {

using ::testing::HasSubstr;

constexpr char kAgentNs[] = "ferry-system";
constexpr char kAgentSa[] = "ferryd";
constexpr char kAgentPod[] = "ferryd-abcde";
constexpr char kAgentUid[] = "uid-ferryd-abcde";
constexpr char kNode[] = "fy-node";
constexpr char kOtherNode[] = "fy-node-2";

k8s::Pod pod(std::string ns, std::string name, std::string sa, std::string node, std::string phase = "Running",
             std::string uid = "") {
  k8s::Pod p;
  p.namespace_name = std::move(ns);
  p.uid = uid.empty() ? "uid-" + name : std::move(uid);
  p.name = std::move(name);
  p.service_account = std::move(sa);
  p.node_name = std::move(node);
  p.phase = std::move(phase);
  return p;
}

k8s::Pod agentPod(std::string node = kNode, std::string phase = "Running") {
  return pod(kAgentNs, kAgentPod, kAgentSa, std::move(node), std::move(phase), kAgentUid);
}

identity::SpiffeId cartId() { return identity::SpiffeId::forWorkload("cluster.local", "shop", "cart"); }

// A bound, projected token of the node agent on kNode, minted for ferry-ca.
TokenReview agentReview() {
  TokenReview r;
  r.authenticated = true;
  r.username = "system:serviceaccount:ferry-system:ferryd";
  r.uid = "sa-uid";
  r.audiences = {"ferry-ca"};
  r.pod_name = kAgentPod;
  r.pod_uid = kAgentUid;
  return r;
}

AuthorizerSettings settings() {
  AuthorizerSettings s;
  s.trust_domain = "cluster.local";
  s.agent_namespace = kAgentNs;
  s.agent_service_account = kAgentSa;
  return s;
}

class CaAuthorizerTest : public ::testing::Test {
 protected:
  void SetUp() override { index_.replace({agentPod(), pod("shop", "cart-1", "cart", kNode)}); }

  Decision decide(const TokenReview& review = agentReview(), const identity::SpiffeId& wanted = cartId()) {
    return authorize(review, wanted, index_, settings());
  }

  void expectRefused(const Decision& d, int status, const std::string& code) {
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.http_status, status);
    EXPECT_EQ(d.code, code) << d.message;
    EXPECT_FALSE(d.message.empty());
  }

  PodIndex index_;
};

// ---------------------------------------------------------------- the identity's pod

TEST_F(CaAuthorizerTest, AllowsIdentityOfAPodOnTheCallersNode) {
  Decision d = decide();
  EXPECT_TRUE(d.allowed) << d.message;
  EXPECT_EQ(d.http_status, 200);
  EXPECT_EQ(d.code, "signed");
  EXPECT_EQ(d.caller_pod, "ferry-system/ferryd-abcde");
  EXPECT_EQ(d.node, kNode);
}

TEST_F(CaAuthorizerTest, RefusesIdentityWhosePodRunsOnAnotherNode) {
  index_.replace({agentPod(), pod("shop", "cart-1", "cart", kOtherNode)});
  Decision d = decide();
  expectRefused(d, 403, "no_pod_on_node");
  EXPECT_THAT(d.message, HasSubstr("node fy-node runs no unfinished pod of namespace shop with service account cart"));
  EXPECT_EQ(d.node, kNode);
  EXPECT_EQ(d.caller_pod, "ferry-system/ferryd-abcde");
}

TEST_F(CaAuthorizerTest, RefusesIdentityWhosePodOnTheNodeHasSucceededOrFailed) {
  for (const char* phase : {"Succeeded", "Failed"}) {
    index_.replace({agentPod(), pod("shop", "cart-1", "cart", kNode, phase)});
    expectRefused(decide(), 403, "no_pod_on_node");
  }
}

TEST_F(CaAuthorizerTest, AllowsPendingPodOnceScheduledOnTheNode) {
  index_.replace({agentPod(), pod("shop", "cart-1", "cart", kNode, "Pending")});
  EXPECT_TRUE(decide().allowed) << "a scheduled Pending pod starts its containers soon and needs its certificate";
}

TEST_F(CaAuthorizerTest, RefusesIdentityOfAnotherServiceAccountOrNamespaceOnTheNode) {
  expectRefused(decide(agentReview(), identity::SpiffeId::forWorkload("cluster.local", "shop", "pay")), 403,
                "no_pod_on_node");
  expectRefused(decide(agentReview(), identity::SpiffeId::forWorkload("cluster.local", "bank", "cart")), 403,
                "no_pod_on_node");
}

TEST_F(CaAuthorizerTest, RefusesIdentityOfAnotherTrustDomain) {
  Decision d = decide(agentReview(), identity::SpiffeId::forWorkload("evil.example", "shop", "cart"));
  expectRefused(d, 403, "wrong_trust_domain");
  EXPECT_THAT(d.message, HasSubstr("spiffe://evil.example/ns/shop/sa/cart is not of trust domain cluster.local"));
}

// ---------------------------------------------------------------- the caller

// One change to the node agent's good token, and the refusal it must get.
struct TokenCase {
  const char* behaviour;  // the test's name
  std::function<void(TokenReview&)> change;
  int status;
  const char* code;
  const char* says;  // part of the message
};

class CaAuthorizerTokenTest : public CaAuthorizerTest, public ::testing::WithParamInterface<TokenCase> {};

TEST_P(CaAuthorizerTokenTest, RefusesTheCaller) {
  TokenReview r = agentReview();
  GetParam().change(r);
  Decision d = decide(r);
  expectRefused(d, GetParam().status, GetParam().code);
  EXPECT_THAT(d.message, HasSubstr(GetParam().says));
}

INSTANTIATE_TEST_SUITE_P(
    Tokens, CaAuthorizerTokenTest,
    ::testing::Values(
        TokenCase{"TokenTheApiServerDidNotAuthenticate",
                  [](TokenReview& r) { r = TokenReview{}; r.error = "token has expired"; }, 401,
                  "unauthenticated", "token has expired"},
        TokenCase{"TokenMintedForAnotherAudience",
                  [](TokenReview& r) { r.audiences = {"https://kubernetes.default.svc"}; }, 401, "wrong_audience",
                  "not minted for audience \"ferry-ca\""},
        // An authenticated review without audiences: valid for the API server only.
        TokenCase{"TokenMintedForTheApiServer", [](TokenReview& r) { r.audiences.clear(); }, 401,
                  "wrong_audience", "not minted for audience"},
        TokenCase{"CallerOfAnotherServiceAccount",
                  [](TokenReview& r) { r.username = "system:serviceaccount:shop:cart"; }, 403, "not_node_agent",
                  "system:serviceaccount:shop:cart is not the node agent's"},
        TokenCase{"TokenNotBoundToAPod", [](TokenReview& r) { r.pod_name.clear(); r.pod_uid.clear(); }, 403,
                  "unbound_token", "not bound to a pod"},
        TokenCase{"CallerWhosePodIsUnknown", [](TokenReview& r) { r.pod_name = "ferryd-zzzzz"; }, 403,
                  "caller_pod_unknown", "ferry-system/ferryd-zzzzz is not known"},
        TokenCase{"CallerWhosePodHasAnotherUid", [](TokenReview& r) { r.pod_uid = "uid-of-a-deleted-pod"; }, 403,
                  "caller_pod_unknown", "has UID uid-ferryd-abcde, not the token's uid-of-a-deleted-pod"}),
    [](const ::testing::TestParamInfo<TokenCase>& info) { return std::string(info.param.behaviour); });

TEST_F(CaAuthorizerTest, NamesTheCallersPodEvenWhenItIsUnknown) {
  TokenReview r = agentReview();
  r.pod_name = "ferryd-zzzzz";
  EXPECT_EQ(decide(r).caller_pod, "ferry-system/ferryd-zzzzz");
}

TEST_F(CaAuthorizerTest, RefusesCallerWhosePodHasFinished) {
  index_.replace({agentPod(kNode, "Failed"), pod("shop", "cart-1", "cart", kNode)});
  Decision d = decide();
  expectRefused(d, 403, "caller_pod_unknown");
  EXPECT_THAT(d.message, HasSubstr("has finished"));
}

TEST_F(CaAuthorizerTest, RefusesCallerWhosePodRunsAnotherServiceAccount) {
  index_.replace({pod(kAgentNs, kAgentPod, "default", kNode, "Running", kAgentUid), pod("shop", "cart-1", "cart", kNode)});
  expectRefused(decide(), 403, "caller_pod_unknown");
}

TEST_F(CaAuthorizerTest, RefusesEveryoneUntilThePodsAreListed) {
  PodIndex empty;
  Decision d = authorize(agentReview(), cartId(), empty, settings());
  expectRefused(d, 503, "not_ready");
}

TEST_F(CaAuthorizerTest, AppliesTheRulesInTheDocumentedOrder) {
  // Everything wrong at once: the first rule answers.
  TokenReview r = agentReview();
  r.audiences.clear();
  r.username = "system:serviceaccount:shop:cart";
  expectRefused(decide(r, identity::SpiffeId::forWorkload("evil.example", "x", "y")), 401, "wrong_audience");
  r = agentReview();
  r.pod_name.clear();
  expectRefused(decide(r, identity::SpiffeId::forWorkload("evil.example", "x", "y")), 403, "unbound_token");
  r = agentReview();
  r.pod_uid = "other";
  expectRefused(decide(r, identity::SpiffeId::forWorkload("evil.example", "x", "y")), 403, "caller_pod_unknown");
}

// ---------------------------------------------------------------- PodIndex

TEST(CaPodIndexTest, IsNotSyncedBeforeTheFirstList) {
  PodIndex index;
  EXPECT_FALSE(index.synced());
  index.apply(k8s::EventType::kAdded, pod("shop", "cart-1", "cart", kNode));
  EXPECT_FALSE(index.synced()) << "an event before the list is not the whole picture";
  index.replace({});
  EXPECT_TRUE(index.synced());
  EXPECT_EQ(index.size(), 0u);
}

TEST(CaPodIndexTest, CountsAPendingPodOnlyOnceItIsScheduledAndUntilItFinishes) {
  PodIndex index;
  index.replace({pod("shop", "cart-1", "cart", "", "Pending")});
  EXPECT_EQ(index.podsOnNode(kNode, "shop", "cart"), 0u);
  ASSERT_TRUE(index.find("shop", "cart-1").has_value());
  EXPECT_EQ(index.find("shop", "cart-1")->node, "");

  index.apply(k8s::EventType::kModified, pod("shop", "cart-1", "cart", kNode, "Pending"));
  EXPECT_EQ(index.podsOnNode(kNode, "shop", "cart"), 1u);
  index.apply(k8s::EventType::kModified, pod("shop", "cart-1", "cart", kNode, "Running"));
  EXPECT_EQ(index.podsOnNode(kNode, "shop", "cart"), 1u) << "a second event for the same pod counts it once";
  index.apply(k8s::EventType::kAdded, pod("shop", "cart-2", "cart", kNode));
  EXPECT_EQ(index.podsOnNode(kNode, "shop", "cart"), 2u);
  index.apply(k8s::EventType::kModified, pod("shop", "cart-1", "cart", kNode, "Succeeded"));
  EXPECT_EQ(index.podsOnNode(kNode, "shop", "cart"), 1u);
  EXPECT_TRUE(index.find("shop", "cart-1")->finished);
}

TEST(CaPodIndexTest, MirrorPodsOfStaticPodsNeverCount) {
  // A kubelet may create mirror pods bound to its own node; they name no service account.
  k8s::Pod mirror = pod("shop", "web-fy-node", "default", kNode);
  mirror.mirror = true;
  PodIndex index;
  index.replace({mirror});
  EXPECT_EQ(index.podsOnNode(kNode, "shop", "default"), 0u);
  EXPECT_FALSE(index.find("shop", "web-fy-node").has_value());
  index.apply(k8s::EventType::kAdded, pod("shop", "web-2", "default", kNode));
  mirror.name = "web-2";
  index.apply(k8s::EventType::kModified, mirror);
  EXPECT_EQ(index.podsOnNode(kNode, "shop", "default"), 0u) << "a mirror that replaced a pod of that name";
}

TEST_F(CaAuthorizerTest, RefusesTheDefaultIdentityOfAStaticPodsNamespace) {
  k8s::Pod mirror = pod("kube-system", "etcd-fy-node", "default", kNode);
  mirror.mirror = true;
  index_.apply(k8s::EventType::kAdded, mirror);
  expectRefused(decide(agentReview(), identity::SpiffeId::forWorkload("cluster.local", "kube-system", "default")), 403,
                "no_pod_on_node");
}

TEST(CaPodIndexTest, DeletedPodLeavesIndexAndCount) {
  PodIndex index;
  index.replace({pod("shop", "cart-1", "cart", kNode)});
  index.apply(k8s::EventType::kDeleted, pod("shop", "cart-1", "cart", kNode));
  EXPECT_FALSE(index.find("shop", "cart-1").has_value());
  EXPECT_EQ(index.podsOnNode(kNode, "shop", "cart"), 0u);
  index.apply(k8s::EventType::kDeleted, pod("shop", "never-seen", "cart", kNode));  // harmless
  EXPECT_EQ(index.size(), 0u);
}

TEST(CaPodIndexTest, ReplaceDropsPodsThatVanishedAndTheirCounts) {
  PodIndex index;
  index.replace({pod("shop", "cart-1", "cart", kNode), pod("shop", "pay-1", "pay", kOtherNode)});
  index.replace({pod("shop", "pay-1", "pay", kOtherNode)});
  EXPECT_FALSE(index.find("shop", "cart-1").has_value());
  EXPECT_EQ(index.podsOnNode(kNode, "shop", "cart"), 0u);
  EXPECT_EQ(index.podsOnNode(kOtherNode, "shop", "pay"), 1u);
  EXPECT_EQ(index.size(), 1u);
}

TEST(CaPodIndexTest, PodRecreatedUnderTheSameNameReplacesTheOldRecord) {
  PodIndex index;
  index.replace({pod("shop", "cart-0", "cart", kNode, "Running", "uid-old")});
  index.apply(k8s::EventType::kAdded, pod("shop", "cart-0", "cart", kOtherNode, "Running", "uid-new"));
  EXPECT_EQ(index.find("shop", "cart-0")->uid, "uid-new");
  EXPECT_EQ(index.podsOnNode(kNode, "shop", "cart"), 0u);
  EXPECT_EQ(index.podsOnNode(kOtherNode, "shop", "cart"), 1u);
}

TEST(CaPodIndexTest, AnswersQueriesFromAnotherThreadWhileTheInformerUpdatesIt) {
  PodIndex index;
  index.replace({});
  std::atomic<bool> done{false};
  std::thread reader([&] {
    while (!done.load()) {
      size_t n = index.podsOnNode(kNode, "shop", "cart");
      EXPECT_LE(n, 1u);
      (void)index.find("shop", "cart-1");
      (void)index.synced();
    }
  });
  for (int i = 0; i < 2000; ++i) {
    index.apply(k8s::EventType::kAdded, pod("shop", "cart-1", "cart", kNode));
    index.apply(k8s::EventType::kDeleted, pod("shop", "cart-1", "cart", kNode));
  }
  done = true;
  reader.join();
  EXPECT_EQ(index.size(), 0u);
  EXPECT_EQ(index.podsOnNode(kNode, "shop", "cart"), 0u);
}

}  // namespace
}  // namespace ferry::ca
