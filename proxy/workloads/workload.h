#pragma once
// One workload (a pod) as ferryd keeps it, sized for 150,000 of them per node: namespace,
// service account and node are interned (a few thousand distinct values in a cluster), the
// usual single IP is stored inline, an interface name fits std::string's inline buffer.
// Immutable once published: a change is a new Workload (registry.h).
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "proxy/common/net.h"

namespace ferry::workloads {

using common::IpAddress;
// For captured plaintext arriving on 15006 (docs/policy.md, "PeerAuthentication: mTLS modes").
enum class TlsMode { kPermissive, kStrict };

// A string kept once for the life of the process, compared by address. Interning is
// thread-safe; the pool never shrinks, which is fine for names drawn from a small set
// (namespaces, service accounts, nodes), never for pod names or IPs.
class InternedString {
 public:
  InternedString();
  const std::string& str() const { return *text_; }
  bool empty() const { return text_->empty(); }
  friend bool operator==(InternedString a, InternedString b) { return a.text_ == b.text_; }
  friend bool operator==(InternedString a, std::string_view b) { return *a.text_ == b; }

 private:
  friend InternedString intern(std::string_view text);
  explicit InternedString(const std::string* text) : text_(text) {}
  const std::string* text_;
};
InternedString intern(std::string_view text);

// A pod's labels, sorted by key, shared (not copied) between the snapshots that hold the
// workload. Compared by content: a label change is a workload change.
class LabelSet {
 public:
  using Labels = std::vector<std::pair<std::string, std::string>>;
  LabelSet() = default;
  explicit LabelSet(Labels labels);  // sorts; duplicate keys keep the last value
  const Labels& get() const;
  bool empty() const { return get().empty(); }
  // Value of `key`, or nullptr.
  const std::string* find(std::string_view key) const;
  friend bool operator==(const LabelSet& a, const LabelSet& b) {
    return a.labels_ == b.labels_ || a.get() == b.get();
  }

 private:
  std::shared_ptr<const Labels> labels_;
};

// What Istio's metrics say about a workload (docs/operations.md, "Istio TCP metrics"). One object
// per distinct value, shared by every pod that has it (a Deployment's 500 replicas hold one
// pointer each), kept for remote workloads too: the destination reporter labels the source.
struct TelemetryMeta {
  std::string workload;            // the owning controller's name (ownerWorkloadName)
  std::string canonical_service;   // also the `app` label value, as ztunnel reports it
  std::string canonical_revision;  // also the `version` label value
  friend bool operator==(const TelemetryMeta&, const TelemetryMeta&) = default;
};
using TelemetryMetaPtr = std::shared_ptr<const TelemetryMeta>;
// The one shared object equal to `meta` (thread-safe; an object no workload holds any more
// is freed).
TelemetryMetaPtr internTelemetry(TelemetryMeta meta);

// A Kubernetes owner reference that is the pod's controller.
struct OwnerRef {
  std::string kind;
  std::string name;
};
// Istio's workload name of a pod (istio/istio pkg/kube GetDeployMetaFromPod): for a pod
// with a generated name and a controller, a ReplicaSet `<deployment>-<pod-template-hash>`
// names its Deployment, a Job `<cronjob>-<8 to 10 digits>` its CronJob, any other controller
// (StatefulSet, DaemonSet, Job, ReplicaSet without the hash) itself; else the pod's name.
std::string ownerWorkloadName(std::string_view pod_name, bool generated_name, const OwnerRef* controller,
                              const std::string* pod_template_hash);
// Istio's canonical service and revision (pkg/model CanonicalService): the label
// service.istio.io/canonical-name, else app.kubernetes.io/name, else app, else the workload
// name; service.istio.io/canonical-revision, else app.kubernetes.io/version, else version,
// else "latest". `labels` sorted by key.
TelemetryMeta telemetryOf(std::string workload, const std::vector<std::pair<std::string, std::string>>& labels);

// Most pods have one IP, dual-stack ones two.
using IpList = absl::InlinedVector<IpAddress, 1>;

// spiffe://<trust_domain>/ns/<namespace>/sa/<service_account>: the identity of a workload
// of that namespace and service account.
std::string spiffeIdOf(std::string_view trust_domain, std::string_view namespace_name,
                       std::string_view service_account);

struct Workload {
  std::string name;
  InternedString namespace_name;
  InternedString service_account;
  InternedString node;
  IpList ips;                 // canonical (common::canonicalIp)
  std::string host_interface;  // host-side device of a local pod (datapath attach point)
  bool hbone = false;          // accepts HBONE on <ip>:15008
  // The mode for plaintext when no PeerAuthentication decides (the workloads file's
  // `tls_mode`; docs/policy.md).
  TlsMode tls_mode = TlsMode::kPermissive;
  // Kept for this node's workloads only: their policies are enforced here (docs/policy.md).
  LabelSet labels;
  // Every workload's (interned): the Istio metrics' workload, app and version labels.
  TelemetryMetaPtr telemetry;


  // spiffe://<trust_domain>/ns/<namespace>/sa/<service_account>
  std::string spiffeId(std::string_view trust_domain) const;
  // "<namespace>/<name>": the workload's key in the registry, and its name in logs.
  std::string displayName() const;
  friend bool operator==(const Workload&, const Workload&) = default;
};

}  // namespace ferry::workloads
