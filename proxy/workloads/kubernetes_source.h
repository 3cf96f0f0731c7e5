#pragma once
// `workload_source: kubernetes`: the workloads are the cluster's enrolled pods, followed
// through the API server (proxy/k8s informers on Pods and Namespaces; docs/kubernetes.md).
//
// Enrolment (docs/install.md): the labels decide as enrolment.h says (an Istio ambient user
// can move over without relabelling). Only pods that can carry
// traffic are workloads: scheduled, with an IP, not host-network (their IP is the node's),
// not terminating and not finished.
//
// Every enrolled pod of the cluster is a capture destination (hbone); those of this node
// are steered, on the device the datapath finds from the node's routes (no device names in
// the API). Each watch event becomes one registry update; a namespace's label change
// re-evaluates that namespace's pods only.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "proxy/k8s/client.h"
#include "proxy/workloads/enrolment.h"
#include "proxy/workloads/source.h"

namespace ferry::telemetry {
class Exposition;
}  // namespace ferry::telemetry

namespace ferry::workloads {

struct KubernetesSourceOptions {
  bool istio_ambient = false;
  // Readiness fails once the state is older than this (the last good state keeps serving).
  std::chrono::milliseconds max_state_age{300'000};
  // ferryd's own DaemonSet (kubernetes.daemonset); empty: not followed.
  std::string daemonset_namespace, daemonset_name;
  // Further informers on the same client (one connection setup, one readiness): called by
  // start() after the workloads' own, before the client starts (the server attaches the
  // policy informers here: proxy/policy/kubernetes.h).
  std::function<void(k8s::ApiClient&)> add_informers;
};

// Why a pod cannot carry traffic whatever its IPs ("host network", "terminating", ...).
absl::Status podUnfit(const k8s::Pod& pod);
// The workload an enrolled pod is, or why it is none (podUnfit's reasons, "no IP yet").
absl::StatusOr<Workload> podWorkload(const k8s::Pod& pod);

// The client's handler of pods and namespaces (public: tests drive it with the events a
// client delivers, without a server).
class KubernetesSource : public Source,
                         public k8s::Handler<k8s::Pod>,
                         public k8s::Handler<k8s::Namespace>,
                         public k8s::Handler<k8s::Service>,
                         public k8s::Handler<k8s::EndpointSlice>,
                         public k8s::Handler<k8s::DaemonSet> {
 public:
  // `client` null: start() only binds the store (tests).
  KubernetesSource(std::unique_ptr<k8s::ApiClient> client, KubernetesSourceOptions options, std::string describe);
  ~KubernetesSource() override;

  // Starts the informers (on the client's io_context, ferryd's control thread) and returns:
  // the registry fills when the first lists arrive, and readiness waits for them.
  absl::Status start(Store& store) override;
  // Events are applied as they arrive; nothing to poll.
  bool poll(Store&) override { return false; }
  uint64_t failures() const override { return failures_.load(std::memory_order_relaxed); }
  absl::Status health() const override;
  std::string describe() const override { return describe_; }

  // The client's informer metrics and this source's own, stated at scrape time.
  void collect(telemetry::Exposition& out) const;
  void stop();

  void replace(std::vector<k8s::Pod> pods) override;
  void apply(k8s::EventType type, k8s::Pod pod) override;
  void replace(std::vector<k8s::Namespace> namespaces) override;
  void apply(k8s::EventType type, k8s::Namespace ns) override;
  // Services and their EndpointSlices: the ClusterIPs ferry captures (Store::services).
  void replace(std::vector<k8s::Service> services) override;
  void apply(k8s::EventType type, k8s::Service service) override;
  void replace(std::vector<k8s::EndpointSlice> slices) override;
  void apply(k8s::EventType type, k8s::EndpointSlice slice) override;
  // The first ClusterIP of Service `namespace_name`/`name` as the API server last said, ""
  // when it is unknown or headless (ferry-ca's address without cluster DNS). Control thread.
  std::string clusterIpOf(std::string_view namespace_name, std::string_view name) const;
  // ferryd's own DaemonSet: seen deleted (or being deleted) means the mesh is being
  // uninstalled from this node; seen again (a new DaemonSet of the name adopted the pod)
  // means it is not.
  void replace(std::vector<k8s::DaemonSet> daemonsets) override;
  void apply(k8s::EventType type, k8s::DaemonSet daemonset) override;
  // ferry-cni (Source): a local pod's sandbox supplies its IPs and device before the API
  // server has them; the labels decide as for every pod.
  CniDecision cniDecide(const Store& store, const std::string& key, const std::string& pod_uid) const override;
  CniDecision cniAdd(Store& store, const CniSandbox& sandbox) override;
  void cniDel(Store& store, const std::string& key, const std::string& container_id) override;
  // The API server connection (null in tests): further requests with ferryd's credentials.
  k8s::ApiClient* client() { return client_.get(); }
  // Control thread: whether a stop now is an uninstall (docs/install.md, Uninstall).
  bool uninstalling() const { return uninstalling_; }

 private:
  // Services: each event marks the Services it can change (by name, or through the index of
  // endpoint IPs when a pod changed); flushServices recomputes just those from services_,
  // slices_ and the current registry (an endpoint counts when it is an enrolled pod) and
  // applies the difference to the store's table.
  struct PublishedService {
    std::vector<ServicePort> ports;       // in the store's table for this Service
    std::vector<IpAddress> endpoint_ips;  // every ready endpoint, mesh or not (sorted)
  };
  static std::string serviceKeyOf(const k8s::EndpointSlice& slice);  // "" when it does not count
  void endpointChanged(const IpAddress& ip);
  void flushServices();
  void recomputeService(const std::string& key, const Registry& registry, const ServiceTable& table,
                        std::vector<ServiceUpdate>& updates);
  // What is kept of each pod of the cluster, ~90 bytes (150,000 pods: docs/benchmarks/
  // registry.md): the enrolment labels as the keyword they equal (labelKeyword), and the
  // workload the pod is when enrolled, without what the key or every pod already says (its
  // name, hbone) -- workloadOf() puts it together.
  struct PodState {
    InternedString namespace_name;
    const std::string* ferry_label = nullptr;  // labelKeyword(value); null when absent
    const std::string* istio_label = nullptr;
    absl::Status not_workload;                 // why it cannot be a workload (OK: it can)
    InternedString service_account, node;
    IpList ips;
    // Pods of this node only (~100): the uid, whether only an IP is missing (a sandbox
    // reported by ferry-cni can supply it), and the labels policy selectors match.
    std::string uid;
    bool awaiting_ip = false;
    LabelSet labels;
    TelemetryMetaPtr telemetry;  // every pod that can be a workload
  };
  static Workload workloadOf(const std::string& key, const PodState& pod);
  struct NamespaceState {
    std::string ferry_label, istio_label;
    bool has_ferry = false, has_istio = false;
    friend bool operator==(const NamespaceState&, const NamespaceState&) = default;
  };

  PodState stateOf(const k8s::Pod& pod) const;
  bool inMesh(const PodState& pod) const;
  // The sandbox ferry-cni reported for this pod (null: none, or one of an earlier pod).
  const CniSandbox* sandboxOf(const std::string& key, const PodState& pod) const;
  static NamespaceState stateOf(const k8s::Namespace& ns);
  // The update that makes the registry agree with pods_[key] (a removal when not enrolled).
  Update updateFor(const std::string& key) const;
  // Publishes a batch; refused updates (an IP another pod holds) are retried after the next
  // batch that removes something.
  void publish(std::vector<Update> updates);
  // Counts a batch's changes and remembers (and logs) its refused updates.
  void account(const Store::Result& result);
  // Both first lists arrived: the whole state, once.
  void publishAll();

  std::unique_ptr<k8s::ApiClient> client_;
  KubernetesSourceOptions options_;
  std::string describe_;
  Store* store_ = nullptr;
  std::string local_node_;
  bool pods_listed_ = false, namespaces_listed_ = false;
  bool daemonset_seen_ = false, uninstalling_ = false;
  void setUninstalling(bool uninstalling, const char* why);
  void seen(const k8s::DaemonSet& mine);  // present in a list or an event
  absl::flat_hash_map<std::string, PodState> pods_;              // by "<namespace>/<name>"
  absl::flat_hash_map<std::string, NamespaceState> namespaces_;
  absl::flat_hash_set<std::string> refused_;                     // keys whose update was refused
  absl::flat_hash_map<std::string, CniSandbox> sandboxes_;       // by pod key: ferry-cni ADDs
  // Pods of this node whose sandbox DEL came last, with their uid: out of the mesh until an
  // ADD, though the API server still shows their (old) IP.
  absl::flat_hash_map<std::string, std::string> deleted_sandboxes_;
  absl::flat_hash_map<std::string, k8s::Service> services_;      // by "<namespace>/<name>"
  absl::flat_hash_map<std::string, k8s::EndpointSlice> slices_;  // by "<namespace>/<name>"
  absl::flat_hash_map<std::string, absl::flat_hash_set<std::string>> slices_of_;  // Service -> its slices
  absl::flat_hash_map<std::string, PublishedService> published_;                 // by Service
  absl::flat_hash_map<IpAddress, absl::flat_hash_set<std::string>> services_by_endpoint_;
  absl::flat_hash_set<std::string> dirty_services_;
  // Written by the control thread, read by /metrics from a worker.
  std::atomic<uint64_t> failures_{0}, updates_{0}, refusals_{0}, not_workloads_{0};
};

}  // namespace ferry::workloads
