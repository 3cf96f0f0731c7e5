// The Kubernetes workload source: the events an informer delivers (proxy/k8s) turned into
// registry updates by the enrolment labels. Driven here without a server: the client's
// decoding and list/watch semantics have their own replay tier (tests/k8s/replay).
#include "proxy/workloads/kubernetes_source.h"
#include "proxy/telemetry/metrics.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "tests/k8s/replay/replay_server.h"

namespace ferry::workloads {
namespace {

using k8s::EventType;

k8s::Pod pod(const std::string& ns, const std::string& name, const std::string& ip, k8s::Labels labels = {},
             const std::string& node = "node-1") {
  k8s::Pod p;
  p.namespace_name = ns;
  p.name = name;
  p.uid = ns + "-" + name;
  p.node_name = node;
  p.service_account = "sa-" + name;
  if (!ip.empty()) p.pod_ips = {ip};
  p.labels = std::move(labels);
  p.phase = "Running";
  return p;
}

k8s::Namespace ns(const std::string& name, k8s::Labels labels = {}) { return k8s::Namespace{name, std::move(labels)}; }

const k8s::Labels kEnabled = {{"ferry.io/dataplane", "enabled"}};
const k8s::Labels kDisabled = {{"ferry.io/dataplane", "disabled"}};

class KubernetesSourceTest : public testing::Test {
 protected:
  explicit KubernetesSourceTest(bool istio_ambient = false)
      : source_(nullptr, options(istio_ambient), "test") {
    store_.subscribe([this](const Registry&, const Delta& d) { deltas_.push_back(d.changes.size()); });
    EXPECT_TRUE(source_.start(store_).ok());
  }
  static KubernetesSourceOptions options(bool istio_ambient) {
    KubernetesSourceOptions o;
    o.istio_ambient = istio_ambient;
    o.max_state_age = std::chrono::minutes(5);
    return o;
  }
  // "<ns>/<name>@<ip>" of every workload, sorted.
  std::vector<std::string> workloads() const {
    std::vector<std::string> out;
    store_.current()->forEach([&](const Workload& w) {
      out.push_back(w.displayName() + "@" + (w.ips.empty() ? "" : w.ips[0].to_string()));
    });
    std::sort(out.begin(), out.end());
    return out;
  }
  const Workload* at(const std::string& ip) const {
    auto addr = common::parseIp(ip);
    return addr.ok() ? store_.current()->findByIp(*addr) : nullptr;
  }

  Store store_{"node-1"};
  KubernetesSource source_;
  std::vector<size_t> deltas_;  // size of each published delta
};

TEST_F(KubernetesSourceTest, NothingIsPublishedUntilBothFirstListsArriveThenTheEnrolledPodsAreWorkloads) {
  source_.replace(std::vector<k8s::Pod>{pod("shop", "web-0", "10.244.0.5"), pod("shop", "db-0", "10.244.0.6", kDisabled),
                                        pod("batch", "job-0", "10.244.0.7"),
                                        pod("batch", "opt-in", "10.244.0.8", kEnabled)});
  EXPECT_TRUE(workloads().empty()) << "namespaces not listed yet: no labels to decide with";
  EXPECT_FALSE(source_.health().ok());
  source_.replace(std::vector<k8s::Namespace>{ns("shop", kEnabled), ns("batch")});
  EXPECT_EQ(workloads(), (std::vector<std::string>{"batch/opt-in@10.244.0.8", "shop/web-0@10.244.0.5"}));
  EXPECT_TRUE(source_.health().ok()) << source_.health();
  const Workload* web = at("10.244.0.5");
  ASSERT_NE(web, nullptr);
  EXPECT_EQ(web->service_account.str(), "sa-web-0");
  EXPECT_EQ(web->node.str(), "node-1");
  EXPECT_TRUE(web->hbone) << "an enrolled pod is a capture destination";
  EXPECT_TRUE(web->host_interface.empty()) << "the datapath finds the device from the node's routes";
}

TEST_F(KubernetesSourceTest, PodsThatCannotCarryTrafficAreNotWorkloadsUntilTheyCan) {
  source_.replace(std::vector<k8s::Namespace>{ns("shop", kEnabled)});
  auto host = pod("shop", "host", "192.168.1.10");
  host.host_network = true;
  auto done = pod("shop", "done", "10.244.0.9");
  done.phase = "Succeeded";
  source_.replace(std::vector<k8s::Pod>{host, done, pod("shop", "new", "")});
  EXPECT_TRUE(workloads().empty());
  // The kubelet reports the IP: one MODIFIED event, one workload.
  source_.apply(EventType::kModified, pod("shop", "new", "10.244.0.10"));
  EXPECT_EQ(workloads(), (std::vector<std::string>{"shop/new@10.244.0.10"}));
  // Terminating: out of the mesh at once, before the DELETED event.
  auto leaving = pod("shop", "new", "10.244.0.10");
  leaving.deleting = true;
  source_.apply(EventType::kModified, leaving);
  EXPECT_TRUE(workloads().empty());
}

// A pod keeps its labels as the keyword they equal (or "another value"): any other value
// is present but decides nothing, as enrolled() says.
TEST_F(KubernetesSourceTest, LabelValuesOtherThanTheKeywordsLeaveTheDecisionToTheNamespace) {
  source_.replace(std::vector<k8s::Namespace>{ns("in", kEnabled), ns("out")});
  const k8s::Labels kMaybe = {{"ferry.io/dataplane", "maybe"}};
  source_.replace(std::vector<k8s::Pod>{pod("in", "p", "10.244.3.1", kMaybe), pod("out", "q", "10.244.3.2", kMaybe)});
  EXPECT_EQ(workloads(), (std::vector<std::string>{"in/p@10.244.3.1"}));
  source_.apply(EventType::kModified, pod("in", "p", "10.244.3.1", kDisabled));
  source_.apply(EventType::kModified, pod("out", "q", "10.244.3.2", kEnabled));
  EXPECT_EQ(workloads(), (std::vector<std::string>{"out/q@10.244.3.2"}));
}

// The workload put together from what is kept of a pod is the one its first event made:
// an event that changes nothing ferry reads (a status condition, another label) publishes
// nothing.
TEST_F(KubernetesSourceTest, APodEventThatChangesNothingFerryReadsPublishesNoDelta) {
  source_.replace(std::vector<k8s::Namespace>{ns("shop", kEnabled)});
  source_.replace(std::vector<k8s::Pod>{pod("shop", "web-0", "10.244.0.5", {}, "node-2")});
  ASSERT_EQ(workloads(), (std::vector<std::string>{"shop/web-0@10.244.0.5"}));
  size_t published = deltas_.size();
  source_.apply(EventType::kModified, pod("shop", "web-0", "10.244.0.5", {{"tier", "front"}}, "node-2"));
  EXPECT_EQ(deltas_.size(), published) << "another node's pod: its labels are not kept";
  source_.apply(EventType::kModified, pod("shop", "web-0", "10.244.0.9", {{"tier", "front"}}, "node-2"));
  EXPECT_EQ(deltas_.size(), published + 1);
  // Its app label names it in the Istio metrics (TelemetryMeta), on every node.
  source_.apply(EventType::kModified, pod("shop", "web-0", "10.244.0.9", {{"app", "web"}, {"tier", "front"}}, "node-2"));
  EXPECT_EQ(deltas_.size(), published + 2);
  EXPECT_EQ(workloads(), (std::vector<std::string>{"shop/web-0@10.244.0.9"}));
}

TEST_F(KubernetesSourceTest, ALocalPodsLabelsAreKeptAndTheirChangeIsPublished) {
  source_.replace(std::vector<k8s::Namespace>{ns("shop", kEnabled)});
  source_.replace(std::vector<k8s::Pod>{pod("shop", "web-0", "10.244.0.5", {{"app", "web"}})});
  const Workload* web = at("10.244.0.5");
  ASSERT_NE(web, nullptr);
  ASSERT_NE(web->labels.find("app"), nullptr) << "policy selectors match a local pod's labels";
  EXPECT_EQ(*web->labels.find("app"), "web");
  size_t published = deltas_.size();
  source_.apply(EventType::kModified, pod("shop", "web-0", "10.244.0.5", {{"app", "web"}}));
  EXPECT_EQ(deltas_.size(), published) << "the same labels: no change";
  source_.apply(EventType::kModified, pod("shop", "web-0", "10.244.0.5", {{"app", "web"}, {"tier", "front"}}));
  EXPECT_EQ(deltas_.size(), published + 1);
  ASSERT_NE(at("10.244.0.5")->labels.find("tier"), nullptr);
}

TEST_F(KubernetesSourceTest, ANamespaceLabelChangeTouchesOnlyThatNamespacesPods) {
  source_.replace(std::vector<k8s::Namespace>{ns("a", kEnabled), ns("b", kEnabled)});
  source_.replace(std::vector<k8s::Pod>{pod("a", "p1", "10.244.1.1"), pod("a", "p2", "10.244.1.2"),
                                        pod("b", "p1", "10.244.2.1")});
  ASSERT_EQ(workloads().size(), 3u);
  deltas_.clear();
  source_.apply(EventType::kModified, ns("a"));  // label removed
  EXPECT_EQ(workloads(), (std::vector<std::string>{"b/p1@10.244.2.1"}));
  EXPECT_EQ(deltas_, (std::vector<size_t>{2})) << "one batch, the two pods of namespace a";
  deltas_.clear();
  source_.apply(EventType::kModified, ns("b", {{"ferry.io/dataplane", "enabled"}, {"team", "x"}}));
  EXPECT_TRUE(deltas_.empty()) << "another label changed: nothing to publish";
  // A pod's own opt-out wins over its namespace; removing it brings the pod back.
  source_.apply(EventType::kModified, pod("b", "p1", "10.244.2.1", kDisabled));
  EXPECT_TRUE(workloads().empty());
  source_.apply(EventType::kModified, pod("b", "p1", "10.244.2.1"));
  EXPECT_EQ(workloads(), (std::vector<std::string>{"b/p1@10.244.2.1"}));
}

TEST_F(KubernetesSourceTest, TwoPodsClaimingOneIpKeepTheFirstAndTheSecondGetsItWhenTheFirstLeaves) {
  source_.replace(std::vector<k8s::Namespace>{ns("a", kEnabled)});
  source_.replace(std::vector<k8s::Pod>{pod("a", "old", "10.244.1.1")});
  source_.apply(EventType::kAdded, pod("a", "new", "10.244.1.1"));
  EXPECT_EQ(workloads(), (std::vector<std::string>{"a/old@10.244.1.1"}));
  EXPECT_EQ(source_.failures(), 1u);
  EXPECT_NE(telemetry::textOf(source_).find("ferry_kubernetes_workload_refusals_total 1"), std::string::npos);
  // The IP is reused after the old pod is deleted: the refused pod is applied then.
  source_.apply(EventType::kDeleted, pod("a", "old", "10.244.1.1"));
  EXPECT_EQ(workloads(), (std::vector<std::string>{"a/new@10.244.1.1"}));
}

TEST_F(KubernetesSourceTest, ARelistReplacesTheStateWithTheSmallestChange) {
  source_.replace(std::vector<k8s::Namespace>{ns("a", kEnabled)});
  source_.replace(std::vector<k8s::Pod>{pod("a", "p1", "10.244.1.1"), pod("a", "p2", "10.244.1.2")});
  deltas_.clear();
  // After a 410 the client lists again: p2 went away meanwhile, p3 came.
  source_.replace(std::vector<k8s::Pod>{pod("a", "p1", "10.244.1.1"), pod("a", "p3", "10.244.1.3")});
  EXPECT_EQ(workloads(), (std::vector<std::string>{"a/p1@10.244.1.1", "a/p3@10.244.1.3"}));
  EXPECT_EQ(deltas_, (std::vector<size_t>{2})) << "p2 removed and p3 added; p1 untouched";
}

k8s::Service service(const std::string& ns, const std::string& name, const std::string& vip, int32_t port,
                     const std::string& port_name) {
  k8s::Service s;
  s.namespace_name = ns;
  s.name = name;
  s.cluster_ips = {vip};
  s.ports = {k8s::ServicePort{port_name, port, 0, "http-port", "TCP"}};
  return s;
}

k8s::EndpointSlice slice(const std::string& ns, const std::string& service, const std::string& port_name, int32_t port,
                         std::vector<std::string> ips, bool ready = true) {
  k8s::EndpointSlice s;
  s.namespace_name = ns;
  s.name = service + "-" + std::to_string(ips.size()) + (ready ? "r" : "n");  // distinct per slice here
  s.service_name = service;
  s.address_type = "IPv4";
  for (auto& ip : ips) s.endpoints.push_back(k8s::Endpoint{{ip}, ready, "node-1", ""});
  s.ports = {k8s::EndpointPort{port_name, port, "TCP"}};
  return s;
}

std::vector<std::string> backends(const Store& store, const std::string& vip, uint16_t port) {
  std::vector<std::string> out;
  auto services = store.services();
  const ServiceBackends* found = services->find({*common::parseIp(vip), port});
  if (found == nullptr) return out;
  for (const auto& [ip, p] : found->endpoints) out.push_back(ip.to_string() + ":" + std::to_string(p));
  return out;
}

TEST_F(KubernetesSourceTest, AServiceWithMeshEndpointsMapsItsClusterIpToThemAtTheResolvedTargetPort) {
  source_.replace(std::vector<k8s::Namespace>{ns("a", kEnabled), ns("plain")});
  source_.replace(std::vector<k8s::Pod>{pod("a", "e1", "10.244.1.1"), pod("a", "e2", "10.244.1.2"),
                                        pod("plain", "p1", "10.244.9.1")});
  source_.replace(std::vector<k8s::Service>{service("a", "echo", "10.96.0.10", 80, "http"),
                                            service("plain", "web", "10.96.0.20", 80, "http")});
  // The named target port resolves to 8080 in the slice; one endpoint is not ready.
  source_.replace(std::vector<k8s::EndpointSlice>{
      slice("a", "echo", "http", 8080, {"10.244.1.1", "10.244.1.2"}),
      slice("a", "echo", "http", 8080, {"10.244.1.3"}, /*ready=*/false),
      slice("plain", "web", "http", 8080, {"10.244.9.1"})});
  EXPECT_EQ(backends(store_, "10.96.0.10", 80), (std::vector<std::string>{"10.244.1.1:8080", "10.244.1.2:8080"}));
  EXPECT_TRUE(backends(store_, "10.96.0.20", 80).empty()) << "no mesh endpoint: left to kube-proxy";
  EXPECT_TRUE(backends(store_, "10.96.0.10", 8080).empty()) << "only the Service's own port";
  // A pod that leaves the mesh leaves its Services' backends.
  source_.apply(EventType::kModified, pod("a", "e2", "10.244.1.2", kDisabled));
  EXPECT_EQ(backends(store_, "10.96.0.10", 80), (std::vector<std::string>{"10.244.1.1:8080"}));
  // The Service goes: its ClusterIP is no longer captured.
  source_.apply(EventType::kDeleted, service("a", "echo", "10.96.0.10", 80, "http"));
  EXPECT_TRUE(store_.services()->empty());
}

TEST_F(KubernetesSourceTest, APodsChangeTouchesOnlyTheServicesThatListIt) {
  // Each published change of the table, as "<ip>:<port> before>after".
  std::vector<std::string> changes;
  store_.subscribeServices([&](const ServiceTable&, const std::vector<ServiceChange>& batch) {
    for (const auto& c : batch) {
      changes.push_back(c.port.first.to_string() + ":" + std::to_string(c.port.second) + " " + std::to_string(c.before) +
                        ">" + std::to_string(c.after));
    }
  });
  source_.replace(std::vector<k8s::Namespace>{ns("a", kEnabled)});
  source_.replace(std::vector<k8s::Pod>{pod("a", "e1", "10.244.1.1"), pod("a", "e2", "10.244.1.2")});
  source_.replace(std::vector<k8s::Service>{service("a", "one", "10.96.0.1", 80, "http"),
                                            service("a", "two", "10.96.0.2", 80, "http")});
  source_.replace(std::vector<k8s::EndpointSlice>{slice("a", "one", "http", 8080, {"10.244.1.1"}),
                                                  slice("a", "two", "http", 8080, {"10.244.1.2", "10.244.1.3"})});
  EXPECT_EQ(store_.services()->size(), 2u);
  changes.clear();
  // 10.244.1.3 (an endpoint of "two" only) joins the mesh: "two" gains a backend, "one" is
  // not touched (its entry is the same object in the new snapshot).
  auto before = store_.services();
  source_.apply(EventType::kAdded, pod("a", "e3", "10.244.1.3"));
  EXPECT_EQ(backends(store_, "10.96.0.2", 80), (std::vector<std::string>{"10.244.1.2:8080", "10.244.1.3:8080"}));
  EXPECT_EQ(changes, (std::vector<std::string>{"10.96.0.2:80 1>1"})) << "only two's port, changed in place";
  changes.clear();
  EXPECT_EQ(store_.services()->find({*common::parseIp("10.96.0.1"), 80}), before->find({*common::parseIp("10.96.0.1"), 80}))
      << "the untouched Service's entry is shared, not copied";
  // A pod of no Service changes nothing in the table.
  auto unchanged = store_.services();
  source_.apply(EventType::kAdded, pod("a", "lonely", "10.244.1.9"));
  EXPECT_EQ(store_.services(), unchanged);
  // e1 leaves: "one" has no mesh endpoint left and stops being captured; "two" stays.
  source_.apply(EventType::kDeleted, pod("a", "e1", "10.244.1.1"));
  EXPECT_EQ(changes, (std::vector<std::string>{"10.96.0.1:80 1>0"}));
  EXPECT_TRUE(backends(store_, "10.96.0.1", 80).empty());
  EXPECT_EQ(store_.services()->size(), 1u);
}

TEST_F(KubernetesSourceTest, ASliceThatMovesToAnotherServiceMovesItsEndpoints) {
  source_.replace(std::vector<k8s::Namespace>{ns("a", kEnabled)});
  source_.replace(std::vector<k8s::Pod>{pod("a", "e1", "10.244.1.1")});
  source_.replace(std::vector<k8s::Service>{service("a", "one", "10.96.0.1", 80, "http"),
                                            service("a", "two", "10.96.0.2", 80, "http")});
  auto s = slice("a", "one", "http", 8080, {"10.244.1.1"});
  source_.apply(EventType::kAdded, s);
  EXPECT_EQ(backends(store_, "10.96.0.1", 80), (std::vector<std::string>{"10.244.1.1:8080"}));
  s.service_name = "two";  // the slice's kubernetes.io/service-name label changed
  source_.apply(EventType::kModified, s);
  EXPECT_TRUE(backends(store_, "10.96.0.1", 80).empty());
  EXPECT_EQ(backends(store_, "10.96.0.2", 80), (std::vector<std::string>{"10.244.1.1:8080"}));
  source_.apply(EventType::kDeleted, s);
  EXPECT_TRUE(store_.services()->empty());
}

TEST_F(KubernetesSourceTest, AClusterIpTakenOverByAnotherServiceStaysCaptured) {
  source_.replace(std::vector<k8s::Namespace>{ns("a", kEnabled)});
  source_.replace(std::vector<k8s::Pod>{pod("a", "e1", "10.244.1.1"), pod("a", "e2", "10.244.1.2")});
  source_.replace(std::vector<k8s::Service>{service("a", "old", "10.96.0.1", 80, "http")});
  source_.replace(std::vector<k8s::EndpointSlice>{slice("a", "old", "http", 8080, {"10.244.1.1"}),
                                                  slice("a", "new", "http", 9090, {"10.244.1.2"})});
  // The API server reuses a ClusterIP once its Service is gone; a watch may deliver the new
  // Service first. The old one's deletion must not take the new one's entry with it.
  source_.apply(EventType::kAdded, service("a", "new", "10.96.0.1", 80, "http"));
  source_.apply(EventType::kDeleted, service("a", "old", "10.96.0.1", 80, "http"));
  EXPECT_EQ(backends(store_, "10.96.0.1", 80), (std::vector<std::string>{"10.244.1.2:9090"}));
}

// ferry-cni (docs/install.md, "The CNI chain"): a sandbox of this node's pod, reported on ADD.
CniSandbox sandbox(const std::string& key, const std::string& ip, const std::string& container = "c1",
                   const std::string& uid = "") {
  return CniSandbox{key, container, uid, IpList{*common::parseIp(ip)}, "veth" + container};
}

TEST_F(KubernetesSourceTest, ACniAddEnrolsAPodTheApiServerHasNoIpForYetWithTheSandboxsAddressAndDevice) {
  source_.replace(std::vector<k8s::Namespace>{ns("shop", kEnabled), ns("batch")});
  source_.replace(std::vector<k8s::Pod>{pod("shop", "web-0", ""), pod("batch", "job-0", "")});
  EXPECT_TRUE(workloads().empty()) << "no IP in the API server yet";
  CniDecision d = source_.cniAdd(store_, sandbox("shop/web-0", "10.244.0.9", "c1", "shop-web-0"));
  EXPECT_EQ(d.kind, CniDecision::kEnrolled) << d.reason;
  const Workload* web = at("10.244.0.9");
  ASSERT_NE(web, nullptr);
  EXPECT_EQ(web->host_interface, "vethc1") << "the device comes from the CNI, not from a route lookup";
  EXPECT_EQ(web->service_account.str(), "sa-web-0");
  // Labels decide for CNI pods as for every pod.
  d = source_.cniAdd(store_, sandbox("batch/job-0", "10.244.0.10", "c2"));
  EXPECT_EQ(d.kind, CniDecision::kNotEnrolled);
  EXPECT_EQ(at("10.244.0.10"), nullptr);
  // The API server then reports the same IP: nothing changes.
  size_t before = deltas_.size();
  source_.apply(EventType::kModified, pod("shop", "web-0", "10.244.0.9"));
  EXPECT_EQ(deltas_.size(), before);
  EXPECT_EQ(at("10.244.0.9")->host_interface, "vethc1");
}

TEST_F(KubernetesSourceTest, ACniAddBeforeThePodsObjectArrivesIsAnsweredNotYetUntilItDoes) {
  EXPECT_EQ(source_.cniAdd(store_, sandbox("shop/web-0", "10.244.0.9")).kind, CniDecision::kNotYet)
      << "no first list yet";
  source_.replace(std::vector<k8s::Namespace>{ns("shop", kEnabled)});
  source_.replace(std::vector<k8s::Pod>{});
  CniDecision d = source_.cniAdd(store_, sandbox("shop/web-0", "10.244.0.9"));
  EXPECT_EQ(d.kind, CniDecision::kNotYet);
  EXPECT_NE(d.reason.find("has not reached ferryd"), std::string::npos) << d.reason;
  // The watch event brings it; the endpoint's next attempt enrols it.
  source_.apply(EventType::kAdded, pod("shop", "web-0", ""));
  EXPECT_EQ(source_.cniDecide(store_, "shop/web-0", "").kind, CniDecision::kEnrolled);
  EXPECT_EQ(at("10.244.0.9"), nullptr) << "deciding changes nothing";
  EXPECT_EQ(source_.cniAdd(store_, sandbox("shop/web-0", "10.244.0.9")).kind, CniDecision::kEnrolled);
  ASSERT_NE(at("10.244.0.9"), nullptr);
}

TEST_F(KubernetesSourceTest, APodOutsideTheMeshIsDecidedWithoutLookingAtItsSandbox) {
  source_.replace(std::vector<k8s::Namespace>{ns("batch")});
  source_.replace(std::vector<k8s::Pod>{pod("batch", "job-0", "")});
  CniDecision d = source_.cniDecide(store_, "batch/job-0", "batch-job-0");
  EXPECT_EQ(d.kind, CniDecision::kNotEnrolled);
  EXPECT_NE(d.reason.find("out of the mesh"), std::string::npos) << d.reason;
}

TEST_F(KubernetesSourceTest, ADelAfterThePodsObjectWentDoesNotHideANewPodOfTheNameOnAnotherNode) {
  source_.replace(std::vector<k8s::Namespace>{ns("shop", kEnabled)});
  source_.replace(std::vector<k8s::Pod>{pod("shop", "web-0", "")});
  ASSERT_EQ(source_.cniAdd(store_, sandbox("shop/web-0", "10.244.0.9", "c1")).kind, CniDecision::kEnrolled);
  // Force-deleted: the object goes before the kubelet tears the sandbox down.
  source_.apply(EventType::kDeleted, pod("shop", "web-0", "10.244.0.9"));
  source_.cniDel(store_, "shop/web-0", "c1");
  // The StatefulSet's new web-0 runs on another node.
  k8s::Pod moved = pod("shop", "web-0", "10.244.1.7", {}, "node-2");
  moved.uid = "new";
  source_.apply(EventType::kAdded, moved);
  ASSERT_NE(at("10.244.1.7"), nullptr) << "a capture destination, as every enrolled pod of the cluster";
  // And a DEL for a pod of another node is never this node's to apply.
  source_.cniDel(store_, "shop/web-0", "c9");
  EXPECT_NE(at("10.244.1.7"), nullptr);
}

TEST_F(KubernetesSourceTest, AnEarlierPodOfTheSameNameIsNotTakenForTheNewOne) {
  source_.replace(std::vector<k8s::Namespace>{ns("shop", kEnabled)});
  k8s::Pod old = pod("shop", "db-0", "10.244.0.5");
  old.deleting = true;
  source_.replace(std::vector<k8s::Pod>{old});
  // The StatefulSet's new db-0 (another uid) gets its sandbox before ferryd sees the old one go.
  CniDecision d = source_.cniAdd(store_, sandbox("shop/db-0", "10.244.0.6", "c2", "new-uid"));
  EXPECT_EQ(d.kind, CniDecision::kNotYet);
  EXPECT_NE(d.reason.find("earlier pod"), std::string::npos) << d.reason;
  source_.apply(EventType::kDeleted, old);
  k8s::Pod fresh = pod("shop", "db-0", "");
  fresh.uid = "new-uid";
  source_.apply(EventType::kAdded, fresh);
  EXPECT_EQ(source_.cniAdd(store_, sandbox("shop/db-0", "10.244.0.6", "c2", "new-uid")).kind, CniDecision::kEnrolled);
}

TEST_F(KubernetesSourceTest, ACniDelReleasesThePodAtOnceAndTheApiServersStaleIpDoesNotBringItBack) {
  source_.replace(std::vector<k8s::Namespace>{ns("shop", kEnabled)});
  source_.replace(std::vector<k8s::Pod>{pod("shop", "web-0", "")});
  ASSERT_EQ(source_.cniAdd(store_, sandbox("shop/web-0", "10.244.0.9", "c1")).kind, CniDecision::kEnrolled);
  source_.apply(EventType::kModified, pod("shop", "web-0", "10.244.0.9"));
  // A DEL of an older sandbox changes nothing.
  source_.cniDel(store_, "shop/web-0", "c0");
  EXPECT_NE(at("10.244.0.9"), nullptr);
  source_.cniDel(store_, "shop/web-0", "c1");
  EXPECT_EQ(at("10.244.0.9"), nullptr) << "released with its sandbox";
  source_.apply(EventType::kModified, pod("shop", "web-0", "10.244.0.9", {{"other", "label"}}));
  EXPECT_EQ(at("10.244.0.9"), nullptr) << "the API server's IP is the deleted sandbox's";
  // The sandbox is recreated (DEL then ADD of the same pod name): a new address and device.
  ASSERT_EQ(source_.cniAdd(store_, sandbox("shop/web-0", "10.244.0.12", "c3")).kind, CniDecision::kEnrolled);
  EXPECT_EQ(at("10.244.0.9"), nullptr) << "the CNI's word is newer than the API server's";
  ASSERT_NE(at("10.244.0.12"), nullptr);
  EXPECT_EQ(at("10.244.0.12")->host_interface, "vethc3");
}

TEST(KubernetesSourceUninstall, OnlyASeenDeletionOfItsOwnDaemonSetIsAnUninstall) {
  KubernetesSourceOptions options;
  options.daemonset_namespace = "ferry-system";
  options.daemonset_name = "ferry";
  KubernetesSource source(nullptr, options, "test");
  const k8s::DaemonSet mine{"ferry-system", "ferry", false}, other{"ferry-system", "other", false};
  // Never seen (ferryd started after the deletion, or outside a DaemonSet): a restart.
  source.replace(std::vector<k8s::DaemonSet>{});
  EXPECT_FALSE(source.uninstalling());
  source.replace(std::vector<k8s::DaemonSet>{mine});
  EXPECT_FALSE(source.uninstalling());
  source.apply(EventType::kDeleted, other);
  EXPECT_FALSE(source.uninstalling()) << "another DaemonSet's deletion";
  source.apply(EventType::kDeleted, mine);
  EXPECT_TRUE(source.uninstalling());
  // --cascade=orphan, then a new DaemonSet of the name adopts the pod: a restart again.
  source.apply(EventType::kAdded, mine);
  EXPECT_FALSE(source.uninstalling());
  // A foreground deletion: the object stays, with a deletionTimestamp.
  source.apply(EventType::kModified, k8s::DaemonSet{"ferry-system", "ferry", true});
  EXPECT_TRUE(source.uninstalling());
  source.apply(EventType::kModified, mine);
  // Deleted while the watch was broken: the re-list no longer has it.
  source.replace(std::vector<k8s::DaemonSet>{});
  EXPECT_TRUE(source.uninstalling());
}

TEST(Enrolment, LabelsDecideAsDocumented) {
  const std::string enabled = "enabled", disabled = "disabled", ambient = "ambient", none = "none";
  EXPECT_FALSE(enrolled({}, false));
  EXPECT_TRUE(enrolled({.namespace_ferry = &enabled}, false));
  EXPECT_TRUE(enrolled({.pod_ferry = &enabled}, false));
  EXPECT_FALSE(enrolled({.pod_ferry = &disabled, .namespace_ferry = &enabled}, false));
  // Istio's labels count only when asked to.
  EXPECT_FALSE(enrolled({.namespace_istio = &ambient}, false));
  EXPECT_TRUE(enrolled({.namespace_istio = &ambient}, true));
  EXPECT_TRUE(enrolled({.pod_istio = &ambient}, true));
  EXPECT_FALSE(enrolled({.pod_istio = &none, .namespace_istio = &ambient}, true));
  EXPECT_FALSE(enrolled({.pod_istio = &none, .namespace_ferry = &enabled}, true));
  EXPECT_TRUE(enrolled({.pod_istio = &none, .namespace_ferry = &enabled}, false));
}

// add_informers puts further informers on the source's own client before it starts (the
// server's policy informers), and readiness waits for them too, naming the one that cannot
// list: here the API server refuses it (the recorded 401 of tests/k8s/replay) while the
// workloads' own four resources list and watch from their recordings.
TEST(KubernetesSourceClientTest, AddedInformersShareTheClientAndReadinessNamesOneThatCannotList) {
  auto load = [](const std::string& name) {
    auto c = k8s::replay::loadCase(name);
    EXPECT_FALSE(c.empty()) << name << " missing under " << k8s::replay::fixtureDir();
    return c;
  };
  auto pods = load("pods-list-watch"), namespaces = load("namespaces-list-quiet-watch"),
       services = load("services-list-watch"), slices = load("endpointslices-v1beta1"), refused = load("unauthorized");
  ASSERT_FALSE(pods.empty() || namespaces.empty() || services.empty() || slices.empty() || refused.empty());
  boost::asio::io_context io;
  k8s::replay::ReplayServer server(io);
  server.respond(k8s::replay::ReplayServer::byPath({
      {"/api/v1/pods", pods},
      {"/api/v1/namespaces", namespaces},
      {"/api/v1/services", services},
      {"/apis/discovery.k8s.io/v1/endpointslices", {slices[0]}},
      {"/apis/discovery.k8s.io/v1beta1/endpointslices", {slices[1], slices[2]}},
      {"/apis/example.com/v1/gadgets", refused},
  }));
  k8s::ClusterAccess access;
  access.server = server.url();
  access.ca_pem = server.caPem();
  auto client = k8s::ApiClient::create(io, access, k8s::Options{});
  ASSERT_TRUE(client.ok()) << client.status();
  k8s::ApiClient* client_seen = nullptr;
  struct Gadgets : k8s::Handler<k8s::CustomObject> {
    void replace(std::vector<k8s::CustomObject>) override {}
    void apply(k8s::EventType, k8s::CustomObject) override {}
  } gadgets;
  KubernetesSourceOptions options;
  options.add_informers = [&](k8s::ApiClient& c) {
    client_seen = &c;
    c.customObjects("gadgets", {"/apis/example.com/v1/gadgets"}, gadgets, /*optional=*/false);
  };
  k8s::ApiClient* own = client->get();
  KubernetesSource source(*std::move(client), options, "test");
  Store store{"node-1"};
  ASSERT_TRUE(source.start(store).ok());
  EXPECT_EQ(client_seen, own);
  // Run until what is asserted has happened (or 20 s pass): a request the server has counted
  // may not have been answered and applied yet, and under TSan that gap is wide.
  const std::string refused_reason = "waiting for the first list of gadgets from the API server (unauthorized: ";
  auto settled = [&] {
    return store.current()->size() > 0 && source.health().message().find(refused_reason) != absl::string_view::npos;
  };
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!settled() && std::chrono::steady_clock::now() < deadline) io.run_for(std::chrono::milliseconds(5));
  EXPECT_GT(store.current()->size(), 0u) << "the workloads arrived";
  absl::Status health = source.health();
  EXPECT_FALSE(health.ok());
  EXPECT_NE(health.message().find(refused_reason), std::string::npos) << health;
  server.respond(nullptr);
  source.stop();
  io.run_for(std::chrono::milliseconds(20));
}

}  // namespace
}  // namespace ferry::workloads
