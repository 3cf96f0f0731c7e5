// proxy/k8s decoding, object by object. The wire behaviour (framing, list/watch, errors) is
// tested against recorded API server bytes in tests/k8s/replay/.
#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>

#include "gtest/gtest.h"
#include "proxy/k8s/client.h"
#include "proxy/k8s/decode.h"
#include "proxy/k8s/http_stream.h"

namespace ferry::k8s::internal {
namespace {
namespace json = boost::json;

json::value J(const char* text) { return json::parse(text); }

TEST(K8sDecode, PodKeepsOnlyTheFieldsFerryUses) {
  auto pod = decodePod(J(R"({"kind":"Pod","metadata":{"name":"a","namespace":"ns","uid":"u1",
      "labels":{"z":"1","app":"x"},"deletionTimestamp":"2026-01-01T00:00:00Z","managedFields":[{"a":{"b":{}}}]},
      "spec":{"nodeName":"n1","serviceAccountName":"sa","hostNetwork":true,"containers":[]},
      "status":{"phase":"Running","podIP":"10.0.0.1","podIPs":[{"ip":"10.0.0.1"},{"ip":"fd00::1"}]}})"));
  ASSERT_TRUE(pod.ok()) << pod.status();
  EXPECT_EQ(pod->namespace_name, "ns");
  EXPECT_EQ(pod->uid, "u1");
  EXPECT_EQ(pod->node_name, "n1");
  EXPECT_EQ(pod->service_account, "sa");
  EXPECT_TRUE(pod->host_network);
  EXPECT_TRUE(pod->deleting);
  EXPECT_EQ(pod->phase, "Running");
  EXPECT_EQ(pod->pod_ips, (std::vector<std::string>{"10.0.0.1", "fd00::1"}));
  ASSERT_EQ(pod->labels.size(), 2u);
  EXPECT_EQ(pod->labels[0].first, "app") << "sorted for lookup";
  ASSERT_NE(findLabel(pod->labels, "z"), nullptr);
  EXPECT_EQ(findLabel(pod->labels, "missing"), nullptr);
}

TEST(K8sDecode, PodKeepsItsControllerForTheWorkloadName) {
  auto pod = decodePod(J(R"({"metadata":{"name":"web-7d4b9c8f6-x2x9k","namespace":"ns","generateName":"web-7d4b9c8f6-",
    "ownerReferences":[{"kind":"Node","name":"n1"},
                       {"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-7d4b9c8f6","controller":true}]},
    "spec":{},"status":{}})"));
  ASSERT_TRUE(pod.ok()) << pod.status();
  EXPECT_TRUE(pod->generated_name);
  EXPECT_EQ(pod->controller_kind, "ReplicaSet");
  EXPECT_EQ(pod->controller_name, "web-7d4b9c8f6");
  auto plain = decodePod(J(R"({"metadata":{"name":"solo","namespace":"ns"},"spec":{},"status":{}})"));
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->generated_name);
  EXPECT_TRUE(plain->controller_kind.empty());
}

TEST(K8sDecode, PodSaysWhetherItIsTheMirrorOfAStaticPod) {
  // What a kubelet writes for a static pod: the config.mirror annotation, no service account.
  auto mirror = decodePod(J(R"({"metadata":{"name":"web-fy-node","namespace":"ns","annotations":{
      "kubernetes.io/config.hash":"5d1c","kubernetes.io/config.mirror":"5d1c","kubernetes.io/config.source":"file"}},
      "spec":{"nodeName":"fy-node"},"status":{"phase":"Running"}})"));
  ASSERT_TRUE(mirror.ok()) << mirror.status();
  EXPECT_TRUE(mirror->mirror);
  auto plain = decodePod(J(R"({"metadata":{"name":"a","namespace":"ns","annotations":{"x":"y"}},"spec":{}})"));
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_FALSE(plain->mirror);
}

TEST(K8sDecode, DaemonSetSaysWhetherItIsBeingDeleted) {
  auto live = decodeDaemonSet(J(R"({"kind":"DaemonSet","metadata":{"name":"ferry","namespace":"ferry-system"},
      "spec":{"template":{}},"status":{"numberReady":3}})"));
  ASSERT_TRUE(live.ok()) << live.status();
  EXPECT_EQ(live->namespace_name, "ferry-system");
  EXPECT_EQ(live->name, "ferry");
  EXPECT_FALSE(live->deleting);
  auto going = decodeDaemonSet(J(R"({"metadata":{"name":"ferry","namespace":"ferry-system",
      "deletionTimestamp":"2026-12-01T00:00:00Z","finalizers":["foregroundDeletion"]}})"));
  ASSERT_TRUE(going.ok()) << going.status();
  EXPECT_TRUE(going->deleting);
  EXPECT_FALSE(decodeDaemonSet(J(R"({"metadata":{"name":"ferry"}})")).ok()) << "no namespace";
}

TEST(K8sDecode, PodWithoutAnIpOrServiceAccountDecodes) {
  auto pod = decodePod(J(R"({"metadata":{"name":"a","namespace":"ns"},"spec":{},"status":{"phase":"Pending"}})"));
  ASSERT_TRUE(pod.ok());
  EXPECT_TRUE(pod->pod_ips.empty());
  EXPECT_EQ(pod->service_account, "default");
  EXPECT_FALSE(pod->deleting);
  auto old = decodePod(J(R"({"metadata":{"name":"a","namespace":"ns"},"status":{"podIP":"10.1.2.3"}})"));
  ASSERT_TRUE(old.ok());
  EXPECT_EQ(old->pod_ips, (std::vector<std::string>{"10.1.2.3"})) << "podIP when podIPs is absent";
}

TEST(K8sDecode, MalformedPodsAreRefusedWhole) {
  for (const char* bad : {
           R"([])",
           R"({"metadata":{"namespace":"ns"}})",
           R"({"metadata":{"name":"a"}})",
           R"({"metadata":{"name":"a","namespace":"ns","labels":{"x":1}}})",
           R"({"metadata":{"name":"a","namespace":"ns"},"status":{"podIPs":"10.0.0.1"}})",
           R"({"metadata":{"name":"a","namespace":"ns"},"status":{"podIPs":[{"ip":"10.0.0.999"}]}})",
           R"({"metadata":{"name":"a","namespace":"ns"},"spec":{"hostNetwork":"yes"}})",
           R"({"metadata":{"name":7,"namespace":"ns"}})",
       }) {
    EXPECT_FALSE(decodePod(J(bad)).ok()) << bad;
  }
}

TEST(K8sDecode, ServicePortsKeepNumericAndNamedTargets) {
  auto svc = decodeService(J(R"({"metadata":{"name":"s","namespace":"ns"},"spec":{"clusterIP":"10.96.0.10",
      "clusterIPs":["10.96.0.10","fd00::a"],"ports":[{"name":"http","port":80,"targetPort":"web"},
      {"port":53,"protocol":"UDP","targetPort":5353},{"port":9000}]}})"));
  ASSERT_TRUE(svc.ok()) << svc.status();
  EXPECT_EQ(svc->cluster_ips.size(), 2u);
  ASSERT_EQ(svc->ports.size(), 3u);
  EXPECT_EQ(svc->ports[0].target_port_name, "web");
  EXPECT_EQ(svc->ports[0].protocol, "TCP");
  EXPECT_EQ(svc->ports[1].target_port, 5353);
  EXPECT_EQ(svc->ports[1].protocol, "UDP");
  EXPECT_EQ(svc->ports[2].target_port, 9000) << "absent targetPort is the port";
  auto headless = decodeService(J(R"({"metadata":{"name":"h","namespace":"ns"},"spec":{"clusterIP":"None"}})"));
  ASSERT_TRUE(headless.ok());
  EXPECT_TRUE(headless->cluster_ips.empty());
  EXPECT_FALSE(decodeService(J(R"({"metadata":{"name":"s","namespace":"ns"},"spec":{"ports":[{"port":70000}]}})")).ok());
}

TEST(K8sDecode, EndpointSliceV1AndV1beta1NameTheNode) {
  auto v1 = decodeEndpointSlice(J(R"({"metadata":{"name":"e","namespace":"ns",
      "labels":{"kubernetes.io/service-name":"s"}},"addressType":"IPv4",
      "endpoints":[{"addresses":["10.0.0.1"],"conditions":{"ready":false},"nodeName":"n1",
      "targetRef":{"kind":"Pod","name":"p1"}},{"addresses":["10.0.0.2"]}],
      "ports":[{"name":"http","port":8080,"protocol":"TCP"}]})"));
  ASSERT_TRUE(v1.ok()) << v1.status();
  EXPECT_EQ(v1->service_name, "s");
  ASSERT_EQ(v1->endpoints.size(), 2u);
  EXPECT_FALSE(v1->endpoints[0].ready);
  EXPECT_TRUE(v1->endpoints[1].ready) << "absent ready means ready";
  EXPECT_EQ(v1->endpoints[0].node_name, "n1");
  EXPECT_EQ(v1->endpoints[0].pod_name, "p1");
  EXPECT_EQ(v1->ports[0].port, 8080);
  auto beta = decodeEndpointSlice(J(R"({"metadata":{"name":"e","namespace":"ns"},"addressType":"IPv4",
      "endpoints":[{"addresses":["10.0.0.1"],"topology":{"kubernetes.io/hostname":"n2"}}]})"));
  ASSERT_TRUE(beta.ok());
  EXPECT_EQ(beta->endpoints[0].node_name, "n2");
  EXPECT_FALSE(decodeEndpointSlice(J(R"({"metadata":{"name":"e","namespace":"ns"},"addressType":"IPv4",
      "endpoints":[{"addresses":["not-an-ip"]}]})")).ok());
}

TEST(K8sDecode, CustomObjectKeepsTheWholeObjectAndNeedsANamespaceAndName) {
  const char* text = R"({"apiVersion":"security.istio.io/v1","kind":"AuthorizationPolicy",)"
                     R"("metadata":{"name":"deny","namespace":"shop","resourceVersion":"7"},)"
                     R"("spec":{"action":"DENY","fyFuture":[1,{"x":null}]}})";
  auto obj = decodeCustomObject(J(text));
  ASSERT_TRUE(obj.ok()) << obj.status();
  EXPECT_EQ(obj->namespace_name, "shop");
  EXPECT_EQ(obj->name, "deny");
  EXPECT_EQ(json::parse(obj->json), J(text)) << "every field, as sent";
  auto cluster_scoped = decodeCustomObject(J(R"({"kind":"AuthorizationPolicy","metadata":{"name":"x"}})"));
  ASSERT_FALSE(cluster_scoped.ok());
  EXPECT_EQ(cluster_scoped.status().message(), "AuthorizationPolicy: metadata.name/namespace missing");
  EXPECT_FALSE(decodeCustomObject(J(R"({"metadata":{"name":1,"namespace":"a"}})")).ok());
  EXPECT_FALSE(decodeCustomObject(J("[]")).ok());
}

TEST(K8sDecode, StatusAndResourceVersion) {
  auto st = decodeStatus(J(R"({"kind":"Status","code":410,"reason":"Expired","message":"too old"})"));
  EXPECT_EQ(st.code, 410);
  EXPECT_EQ(st.reason, "Expired");
  EXPECT_EQ(resourceVersionOf(J(R"({"metadata":{"resourceVersion":"42"}})")), "42");
  EXPECT_EQ(resourceVersionOf(J(R"({"metadata":{}})")), "");
}

TEST(K8sServerUrl, ParsesHostPortAndRefusesWhatFerryCannotUse) {
  auto a = parseServerUrl("https://10.96.0.1:443");
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(a->host_is_ip);
  auto b = parseServerUrl("https://api.example.com/");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->port, "443");
  EXPECT_FALSE(b->host_is_ip);
  auto c = parseServerUrl("https://[fd00::1]:6443");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->host, "fd00::1");
  EXPECT_TRUE(c->host_is_ip);
  EXPECT_FALSE(parseServerUrl("http://10.0.0.1").ok());
  EXPECT_FALSE(parseServerUrl("https://10.0.0.1:99999").ok());
  EXPECT_FALSE(parseServerUrl("https://x/prefix").ok());
}

TEST(K8sInCluster, ReadsTheServiceEnvironment) {
  auto env = [](const char* name) -> const char* {
    std::string n(name);
    if (n == "KUBERNETES_SERVICE_HOST") return "fd00::1";
    if (n == "KUBERNETES_SERVICE_PORT") return "443";
    return nullptr;
  };
  auto a = inClusterAccess(env, "/sa");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->server, "https://[fd00::1]:443");
  EXPECT_EQ(a->token_file, "/sa/token");
  EXPECT_EQ(a->ca_file, "/sa/ca.crt");
  EXPECT_FALSE(inClusterAccess([](const char*) -> const char* { return nullptr; }).ok());
}

// The answer of a Kubernetes 1.20 API server to a TokenReview of a bound, projected
// service-account token (the pod's name and UID in user.extra).
constexpr const char* kTokenReviewAnswer = R"({
  "kind": "TokenReview",
  "apiVersion": "authentication.k8s.io/v1",
  "metadata": {"creationTimestamp": null, "managedFields": [{"manager": "ferry-ca", "operation": "Update",
    "apiVersion": "authentication.k8s.io/v1", "time": "2026-12-02T05:00:00Z", "fieldsType": "FieldsV1",
    "fieldsV1": {"f:spec": {"f:audiences": {}, "f:token": {}}}}]},
  "spec": {"token": "eyJhbGciOiJSUzI1NiJ9.x.y", "audiences": ["ferry-ca"]},
  "status": {
    "authenticated": true,
    "user": {
      "username": "system:serviceaccount:ferry-system:ferryd",
      "uid": "5b8a3c1e-0a4f-4c55-9a0e-6f3c2f1d7a10",
      "groups": ["system:serviceaccounts", "system:serviceaccounts:ferry-system", "system:authenticated"],
      "extra": {
        "authentication.kubernetes.io/pod-name": ["ferryd-abcde"],
        "authentication.kubernetes.io/pod-uid": ["0c2b9a43-7e0c-4d6f-8b8e-2f0d3a9e1b55"]
      }
    },
    "audiences": ["ferry-ca"]
  }
})";

TEST(K8sDecode, TokenReviewOfABoundTokenNamesItsUserPodAndAudiences) {
  auto review = decodeTokenReview(J(kTokenReviewAnswer));
  ASSERT_TRUE(review.ok()) << review.status();
  EXPECT_TRUE(review->authenticated);
  EXPECT_EQ(review->username, "system:serviceaccount:ferry-system:ferryd");
  EXPECT_EQ(review->uid, "5b8a3c1e-0a4f-4c55-9a0e-6f3c2f1d7a10");
  EXPECT_EQ(review->pod_names, std::vector<std::string>{"ferryd-abcde"});
  EXPECT_EQ(review->pod_uids, std::vector<std::string>{"0c2b9a43-7e0c-4d6f-8b8e-2f0d3a9e1b55"});
  EXPECT_EQ(review->audiences, std::vector<std::string>{"ferry-ca"});
  EXPECT_TRUE(review->error.empty());
}

TEST(K8sDecode, TokenReviewThatDidNotAuthenticateCarriesTheReason) {
  // What 1.20 answers for a token minted for another audience: no user, no audiences.
  auto review = decodeTokenReview(J(R"({"kind": "TokenReview", "apiVersion": "authentication.k8s.io/v1",
      "metadata": {"creationTimestamp": null}, "spec": {"token": "t", "audiences": ["ferry-ca"]},
      "status": {"user": {}, "error": "[invalid bearer token, token audiences [\"https://kubernetes.default.svc\"] is invalid for the target audiences [\"ferry-ca\"]]"}})"));
  ASSERT_TRUE(review.ok()) << review.status();
  EXPECT_FALSE(review->authenticated);
  EXPECT_TRUE(review->username.empty());
  EXPECT_TRUE(review->pod_names.empty());
  EXPECT_TRUE(review->audiences.empty());
  EXPECT_NE(review->error.find("invalid for the target audiences"), std::string::npos);
}

TEST(K8sDecode, MalformedTokenReviewsAreRefused) {
  EXPECT_FALSE(decodeTokenReview(J(R"([])")).ok());
  EXPECT_FALSE(decodeTokenReview(J(R"({"kind": "Status", "status": "Failure"})")).ok());
  EXPECT_FALSE(decodeTokenReview(J(R"({"kind": "TokenReview", "status": {"authenticated": "yes"}})")).ok());
  auto bad_extra = decodeTokenReview(J(R"({"kind": "TokenReview", "status": {"authenticated": true,
      "user": {"username": "u", "extra": {"authentication.kubernetes.io/pod-name": "ferryd-abcde"}}}})"));
  ASSERT_FALSE(bad_extra.ok());
  EXPECT_NE(bad_extra.status().message().find("pod-name"), std::string::npos) << bad_extra.status();
}

}  // namespace
}  // namespace ferry::k8s::internal
