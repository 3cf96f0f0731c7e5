// What the Istio metrics call a workload: Istio's workload-name rule over owner references,
// the canonical service and revision defaults, and one shared object per distinct value.
#include "proxy/workloads/workload.h"

#include <gtest/gtest.h>

#include "proxy/config/workloads_file.h"
#include "proxy/workloads/file_source.h"
#include "proxy/workloads/kubernetes_source.h"

namespace ferry::workloads {
namespace {

struct OwnerCase {
  const char* what;
  const char* pod;
  bool generated;
  const char* kind;  // nullptr: no controller
  const char* owner;
  const char* hash;  // pod-template-hash label; nullptr: absent
  const char* want;
};

TEST(WorkloadName, FollowsIstiosOwnerReferenceRule) {
  const OwnerCase cases[] = {
      {"deployment's replicaset", "web-7d4b9c8f6-x2x9k", true, "ReplicaSet", "web-7d4b9c8f6", "7d4b9c8f6", "web"},
      {"replicaset without the hash label", "rs-abcde", true, "ReplicaSet", "rs", nullptr, "rs"},
      {"replicaset whose name lacks the hash", "rs-abcde", true, "ReplicaSet", "rs", "ffff", "rs"},
      {"statefulset", "db-0", true, "StatefulSet", "db", nullptr, "db"},
      {"daemonset", "agent-x7k2p", true, "DaemonSet", "agent", nullptr, "agent"},
      {"cronjob's job", "backup-28391040-abcde", true, "Job", "backup-28391040", nullptr, "backup"},
      {"job of its own", "migrate-abcde", true, "Job", "migrate", nullptr, "migrate"},
      {"job with a short number", "run-1234567-x", true, "Job", "run-1234567", nullptr, "run-1234567"},
      {"job with an 11-digit number", "run-12345678901-x", true, "Job", "run-12345678901", nullptr,
       "run-12345678901"},
      {"no controller", "web-abcde", true, nullptr, nullptr, nullptr, "web-abcde"},
      {"a name not generated", "solo", false, "ReplicaSet", "other-123", "123", "solo"},
  };
  for (const auto& c : cases) {
    OwnerRef owner{c.kind ? c.kind : "", c.owner ? c.owner : ""};
    std::string hash = c.hash ? c.hash : "";
    EXPECT_EQ(ownerWorkloadName(c.pod, c.generated, c.kind ? &owner : nullptr, c.hash ? &hash : nullptr), c.want)
        << c.what;
  }
}

TEST(CanonicalLabels, TakeIstiosLabelsInOrderThenDefaults) {
  using Labels = std::vector<std::pair<std::string, std::string>>;
  auto of = [](Labels labels) {
    std::sort(labels.begin(), labels.end());
    return telemetryOf("wl", labels);
  };
  EXPECT_EQ(of({}), (TelemetryMeta{"wl", "wl", "latest"}));
  EXPECT_EQ(of({{"app", "shop"}, {"version", "v2"}}), (TelemetryMeta{"wl", "shop", "v2"}));
  EXPECT_EQ(of({{"app", "shop"}, {"app.kubernetes.io/name", "store"}, {"app.kubernetes.io/version", "1.2"},
                {"version", "v2"}}),
            (TelemetryMeta{"wl", "store", "1.2"}));
  EXPECT_EQ(of({{"app", "shop"}, {"service.istio.io/canonical-name", "cart"},
                {"service.istio.io/canonical-revision", "canary"}, {"app.kubernetes.io/name", "store"}}),
            (TelemetryMeta{"wl", "cart", "canary"}));
}

TEST(TelemetryMeta, EqualValuesShareOneObjectWhichGoesWithItsLastHolder) {
  auto a = internTelemetry({"fy-web", "fy-web", "v1"});
  auto b = internTelemetry({"fy-web", "fy-web", "v1"});
  EXPECT_EQ(a.get(), b.get());
  EXPECT_NE(a.get(), internTelemetry({"fy-web", "fy-web", "v2"}).get());
  a.reset();
  b.reset();
  auto c = internTelemetry({"fy-web", "fy-web", "v1"});  // made again, not a dangling one
  EXPECT_EQ(c->canonical_revision, "v1");
}

// A workloads file entry of namespace shop on node n1, with `extra` lines.
std::string entry(const std::string& name, const std::string& ip, const std::string& extra = "") {
  return "  - name: " + name + "\n    namespace: shop\n    service_account: web\n    node: n1\n    ips: [" + ip +
         "]\n" + extra;
}

TEST(TelemetryMeta, FileEntriesUseWorkloadNameAndLabels) {
  auto parsed = config::parseWorkloads(
      "workloads:\n" +
          entry("web-1", "10.77.1.11", "    workload_name: web\n    labels: {app: storefront, version: v3}\n") +
          entry("solo", "10.77.1.12"),
      "workloads.yaml");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  auto web = workloadFromEntry(std::move((*parsed)[0]));
  auto solo = workloadFromEntry(std::move((*parsed)[1]));
  EXPECT_EQ(*web.telemetry, (TelemetryMeta{"web", "storefront", "v3"}));
  EXPECT_EQ(*solo.telemetry, (TelemetryMeta{"solo", "solo", "latest"}));
}

TEST(TelemetryMeta, FileRefusesAWorkloadNameThatIsNoObjectName) {
  auto parsed =
      config::parseWorkloads("workloads:\n" + entry("web-1", "10.77.1.11", "    workload_name: Web_1\n"), "workloads.yaml");
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.status().message().find("workload_name"), std::string::npos) << parsed.status();
}

TEST(TelemetryMeta, KubernetesPodsNameTheirDeployment) {
  k8s::Pod pod;
  pod.namespace_name = "shop";
  pod.name = "web-7d4b9c8f6-x2x9k";
  pod.generated_name = true;
  pod.controller_kind = "ReplicaSet";
  pod.controller_name = "web-7d4b9c8f6";
  pod.labels = {{"app", "storefront"}, {"pod-template-hash", "7d4b9c8f6"}};
  pod.node_name = "n1";
  pod.phase = "Running";
  pod.pod_ips = {"10.77.1.11"};
  auto w = podWorkload(pod);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(*w->telemetry, (TelemetryMeta{"web", "storefront", "latest"}));
  EXPECT_TRUE(w->labels.empty()) << "labels are kept for this node's pods only, by the source";
}

}  // namespace
}  // namespace ferry::workloads
