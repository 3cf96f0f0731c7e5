#include "proxy/workloads/kubernetes_source.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "proxy/common/log.h"
#include "proxy/common/net.h"
#include "proxy/common/strings.h"
#include "proxy/telemetry/metrics.h"

namespace ferry::workloads {
namespace {

// A pod's label value as one of the words enrolled() looks for, or as "another value": every
// pod then points at one of five strings instead of holding its own copy.
const std::string* labelKeyword(const std::string& value) {
  static const std::string kKeywords[] = {"enabled", "disabled", "ambient", "none"};
  static const std::string kOther = "(another value)";
  for (const auto& k : kKeywords) {
    if (value == k) return &k;
  }
  return &kOther;
}

}  // namespace

absl::Status podUnfit(const k8s::Pod& pod) {
  // Host-network pods have the node's IP: capturing it would capture the node.
  if (pod.host_network) return absl::FailedPreconditionError("host network");
  if (pod.deleting) return absl::FailedPreconditionError("terminating");
  if (pod.phase == "Succeeded" || pod.phase == "Failed") {
    return absl::FailedPreconditionError(absl::StrCat("phase ", pod.phase));
  }
  if (pod.node_name.empty()) return absl::FailedPreconditionError("not scheduled");
  return absl::OkStatus();
}

TelemetryMetaPtr podTelemetry(const k8s::Pod& pod) {
  OwnerRef controller{pod.controller_kind, pod.controller_name};
  return internTelemetry(telemetryOf(
      ownerWorkloadName(pod.name, pod.generated_name, pod.controller_kind.empty() ? nullptr : &controller,
                        k8s::findLabel(pod.labels, "pod-template-hash")),
      pod.labels));
}

absl::StatusOr<Workload> podWorkload(const k8s::Pod& pod) {
  if (auto st = podUnfit(pod); !st.ok()) return st;
  if (pod.pod_ips.empty()) return absl::FailedPreconditionError("no IP yet");
  Workload w;
  w.name = pod.name;
  w.namespace_name = intern(pod.namespace_name);
  w.service_account = intern(pod.service_account.empty() ? "default" : pod.service_account);
  w.node = intern(pod.node_name);
  for (const auto& text : pod.pod_ips) {
    auto ip = common::parseIp(text);
    if (!ip.ok()) return absl::InvalidArgumentError(absl::StrCat("pod IP '", text, "': ", ip.status().message()));
    w.ips.push_back(common::canonicalIp(*ip));
  }
  w.hbone = true;  // its node's ferryd takes HBONE on <ip>:15008 for it
  w.telemetry = podTelemetry(pod);
  return w;
}

KubernetesSource::KubernetesSource(std::unique_ptr<k8s::ApiClient> client, KubernetesSourceOptions options,
                                   std::string describe)
    : client_(std::move(client)), options_(options), describe_(std::move(describe)) {}

KubernetesSource::~KubernetesSource() { stop(); }

absl::Status KubernetesSource::start(Store& store) {
  store_ = &store;
  local_node_ = store.current()->localNode();
  // The Services that list a pod that changed are recomputed (and only those).
  store.subscribe([this](const Registry&, const Delta& delta) {
    for (const auto& change : delta.changes) {
      for (const auto* w : {change.before.get(), change.after.get()}) {
        if (w == nullptr) continue;
        for (const auto& ip : w->ips) endpointChanged(ip);
      }
    }
  });
  if (!client_) return absl::OkStatus();
  client_->pods(static_cast<k8s::Handler<k8s::Pod>&>(*this));
  client_->namespaces(static_cast<k8s::Handler<k8s::Namespace>&>(*this));
  client_->services(static_cast<k8s::Handler<k8s::Service>&>(*this));
  client_->endpointSlices(static_cast<k8s::Handler<k8s::EndpointSlice>&>(*this));
  if (!options_.daemonset_name.empty()) {
    client_->daemonSet(options_.daemonset_namespace, options_.daemonset_name,
                       static_cast<k8s::Handler<k8s::DaemonSet>&>(*this));
  }
  if (options_.add_informers) options_.add_informers(*client_);
  client_->start();
  FERRY_LOG(kInfo, "workloads: following %s (enrolment: %s=enabled%s)", describe_, kFerryLabel,
            options_.istio_ambient ? ", istio.io/dataplane-mode=ambient" : "");
  return absl::OkStatus();
}

void KubernetesSource::stop() {
  if (client_) client_->stop();
}

absl::Status KubernetesSource::health() const {
  if (!pods_listed_ || !namespaces_listed_) {
    return absl::UnavailableError("waiting for the first list of pods and namespaces from the API server");
  }
  if (!client_) return absl::OkStatus();
  if (auto waiting = client_->unsynced(); !waiting.empty()) {
    // Further informers (add_informers) that cannot list yet, a missing RBAC grant say.
    const k8s::Informer& first = *waiting.front();
    return absl::UnavailableError(absl::StrCat("waiting for the first list of ", common::toAbsl(first.resource()),
                                               " from the API server",
                                               first.lastError().empty() ? "" : absl::StrCat(" (", first.lastError(), ")")));
  }
  auto age = client_->stateAge();
  if (age > options_.max_state_age) {
    return absl::UnavailableError(absl::StrCat("the state from the API server is ",
                                               std::chrono::duration_cast<std::chrono::seconds>(age).count(),
                                               " s old (kubernetes.max_state_age ",
                                               std::chrono::duration_cast<std::chrono::seconds>(options_.max_state_age).count(),
                                               " s); the last good state keeps serving"));
  }
  return absl::OkStatus();
}

KubernetesSource::PodState KubernetesSource::stateOf(const k8s::Pod& pod) const {
  PodState s;
  s.namespace_name = intern(pod.namespace_name);
  if (const auto* v = k8s::findLabel(pod.labels, kFerryLabel)) s.ferry_label = labelKeyword(*v);
  if (const auto* v = k8s::findLabel(pod.labels, kIstioLabel)) s.istio_label = labelKeyword(*v);
  // A pod of this node may be enrolled through ferry-cni before the API server has its IP:
  // keep what its workload needs, and its uid to tell it from an earlier pod of its name.
  if (!local_node_.empty() && pod.node_name == local_node_) {
    s.uid = pod.uid;
    s.service_account = intern(pod.service_account.empty() ? "default" : pod.service_account);
    s.node = intern(pod.node_name);
    s.awaiting_ip = podUnfit(pod).ok() && pod.pod_ips.empty();
    // What policy selectors match: enforced on this node only (docs/policy.md).
    s.labels = LabelSet(pod.labels);
  }
  auto w = podWorkload(pod);
  if (!w.ok()) {
    s.not_workload = w.status();
    if (s.awaiting_ip) s.telemetry = podTelemetry(pod);  // ferry-cni may supply the IP
    return s;
  }
  s.service_account = w->service_account;
  s.node = w->node;
  s.ips = std::move(w->ips);
  s.telemetry = std::move(w->telemetry);
  return s;
}

Workload KubernetesSource::workloadOf(const std::string& key, const PodState& pod) {
  // The same workload podWorkload() made from the pod.
  Workload w;
  w.name = key.substr(key.find('/') + 1);
  w.namespace_name = pod.namespace_name;
  w.service_account = pod.service_account;
  w.node = pod.node;
  w.ips = pod.ips;
  w.hbone = true;
  w.labels = pod.labels;
  w.telemetry = pod.telemetry;
  return w;
}

KubernetesSource::NamespaceState KubernetesSource::stateOf(const k8s::Namespace& ns) {
  NamespaceState s;
  if (const auto* v = k8s::findLabel(ns.labels, kFerryLabel)) s.ferry_label = *v, s.has_ferry = true;
  if (const auto* v = k8s::findLabel(ns.labels, kIstioLabel)) s.istio_label = *v, s.has_istio = true;
  return s;
}

bool KubernetesSource::inMesh(const PodState& p) const {
  EnrolmentLabels labels{p.ferry_label, p.istio_label};
  if (auto ns = namespaces_.find(p.namespace_name.str()); ns != namespaces_.end()) {
    labels.namespace_ferry = ns->second.has_ferry ? &ns->second.ferry_label : nullptr;
    labels.namespace_istio = ns->second.has_istio ? &ns->second.istio_label : nullptr;
  }
  return enrolled(labels, options_.istio_ambient);
}

const CniSandbox* KubernetesSource::sandboxOf(const std::string& key, const PodState& p) const {
  auto it = sandboxes_.find(key);
  if (it == sandboxes_.end()) return nullptr;
  // A sandbox of an earlier pod of the same name (its DEL never reached ferryd) is not this pod's.
  if (!it->second.pod_uid.empty() && !p.uid.empty() && it->second.pod_uid != p.uid) return nullptr;
  return &it->second;
}

Update KubernetesSource::updateFor(const std::string& key) const {
  Update u{key, std::nullopt};
  auto it = pods_.find(key);
  if (it == pods_.end()) return u;
  const PodState& p = it->second;
  const CniSandbox* sandbox = sandboxOf(key, p);
  // Its sandbox was deleted (ferry-cni DEL) and no new one was added: the API server's IP is
  // stale, and may already be another pod's.
  if (sandbox == nullptr) {
    auto deleted = deleted_sandboxes_.find(key);
    if (deleted != deleted_sandboxes_.end() && deleted->second == p.uid) return u;
  }
  if (!p.not_workload.ok() && !(p.awaiting_ip && sandbox != nullptr)) return u;
  if (!inMesh(p)) return u;
  Workload w = workloadOf(key, p);
  // For a pod of this node the CNI's word is the newer: the API server learns the IP from
  // the kubelet after ADD returned, and keeps an old one while a sandbox is recreated.
  if (sandbox != nullptr) {
    w.ips = sandbox->ips;
    w.host_interface = sandbox->device;
  }
  u.workload = std::move(w);
  return u;
}

CniDecision KubernetesSource::cniDecide(const Store&, const std::string& key, const std::string& pod_uid) const {
  if (!pods_listed_ || !namespaces_listed_) {
    return {CniDecision::kNotYet, "ferryd is waiting for its first list of pods and namespaces from the API server"};
  }
  auto it = pods_.find(key);
  if (it == pods_.end()) {
    return {CniDecision::kNotYet, absl::StrCat("the API server's copy of pod ", key, " has not reached ferryd yet")};
  }
  const PodState& p = it->second;
  if (!pod_uid.empty() && !p.uid.empty() && p.uid != pod_uid) {
    return {CniDecision::kNotYet,
            absl::StrCat("ferryd still sees an earlier pod named ", key, " (uid ", p.uid, ", the sandbox is for ", pod_uid, ")")};
  }
  if (!p.node.empty() && !(p.node == local_node_)) {
    return {CniDecision::kNotYet, absl::StrCat("ferryd sees pod ", key, " on node ", p.node.str(), ", not this one")};
  }
  if (!p.not_workload.ok() && !p.awaiting_ip) {
    return {CniDecision::kNotYet, absl::StrCat("ferryd's copy of pod ", key, " is ", p.not_workload.message())};
  }
  if (!inMesh(p)) return {CniDecision::kNotEnrolled, "its labels and its namespace's keep it out of the mesh"};
  return {CniDecision::kEnrolled, ""};
}

CniDecision KubernetesSource::cniAdd(Store& store, const CniSandbox& sandbox) {
  CniDecision d = cniDecide(store, sandbox.key, sandbox.pod_uid);
  if (d.kind != CniDecision::kEnrolled) return d;
  // An address still held by another pod in the registry (the API server has not seen it
  // go): publishing would be refused, and logged, on every attempt.
  auto registry = store.current();
  for (const auto& ip : sandbox.ips) {
    const Workload* w = registry->findByIp(ip);
    if (w != nullptr && w->displayName() != sandbox.key) {
      return {CniDecision::kNotYet, absl::StrCat(ip.to_string(), " is still held by ", w->displayName(),
                                                 " in ferryd's registry (the API server has not seen that pod go)")};
    }
  }
  sandboxes_[sandbox.key] = sandbox;
  deleted_sandboxes_.erase(sandbox.key);
  publish({updateFor(sandbox.key)});
  registry = store.current();
  for (const auto& ip : sandbox.ips) {
    const Workload* w = registry->findByIp(ip);
    if (w == nullptr || w->displayName() != sandbox.key) {
      return {CniDecision::kRefused, absl::StrCat("the registry refused ", sandbox.key, " at ", ip.to_string())};
    }
  }
  return {CniDecision::kEnrolled, ""};
}

void KubernetesSource::cniDel(Store&, const std::string& key, const std::string& container_id) {
  if (auto it = sandboxes_.find(key); it != sandboxes_.end()) {
    if (it->second.container_id != container_id) return;  // an older sandbox's DEL
    sandboxes_.erase(it);
  }
  // Only a pod of this node that ferryd knows (by its uid) can have had its sandbox here: a
  // DEL that arrives after the pod's object went must not hide a new pod of the name.
  auto it = pods_.find(key);
  if (it == pods_.end() || it->second.uid.empty()) return;
  deleted_sandboxes_[key] = it->second.uid;
  publish({updateFor(key)});
}

void KubernetesSource::account(const Store::Result& result) {
  updates_ += result.changed;
  for (const auto& why : result.rejected) {
    // "<key>: ..." (registry.cc): remember the key to retry it.
    refused_.insert(why.substr(0, why.find(':')));
    ++refusals_;
    ++failures_;
    FERRY_LOG(kWarn, "workloads: %s", why);
  }
}

void KubernetesSource::publish(std::vector<Update> updates) {
  if (store_ == nullptr || !pods_listed_ || !namespaces_listed_ || updates.empty()) return;
  bool removes = false;
  for (const auto& u : updates) {
    removes = removes || !u.workload;
    refused_.erase(u.key);
  }
  // A pod refused earlier because another held its IP may fit now that something left.
  if (removes) {
    for (const auto& key : refused_) updates.push_back(updateFor(key));
    refused_.clear();
  }
  account(store_->apply(std::move(updates)));
  // A pod that joined or left the mesh may be a Service's endpoint (the store's delta
  // marked those Services).
  flushServices();
}

void KubernetesSource::publishAll() {
  std::vector<Workload> all;
  all.reserve(pods_.size());
  for (const auto& [key, _] : pods_) {
    Update u = updateFor(key);
    if (u.workload) all.push_back(*std::move(u.workload));
  }
  refused_.clear();
  account(store_->replaceAll(std::move(all)));
  FERRY_LOG(kInfo, "workloads: %d pods and %d namespaces listed; %d workloads enrolled", pods_.size(),
            namespaces_.size(), store_->current()->size());
  for (const auto& [key, _] : services_) dirty_services_.insert(key);
  flushServices();
}

void KubernetesSource::replace(std::vector<k8s::Pod> pods) {
  pods_.clear();
  pods_.reserve(pods.size());
  for (const auto& pod : pods) pods_[absl::StrCat(pod.namespace_name, "/", pod.name)] = stateOf(pod);
  // Sandboxes and deletions of pods that no longer exist (their DEL never came).
  for (auto it = sandboxes_.begin(); it != sandboxes_.end();) {
    auto here = it++;
    if (!pods_.contains(here->first)) sandboxes_.erase(here);
  }
  for (auto it = deleted_sandboxes_.begin(); it != deleted_sandboxes_.end();) {
    auto here = it++;
    if (!pods_.contains(here->first)) deleted_sandboxes_.erase(here);
  }
  pods_listed_ = true;
  if (namespaces_listed_) publishAll();
}

void KubernetesSource::apply(k8s::EventType type, k8s::Pod pod) {
  std::string key = absl::StrCat(pod.namespace_name, "/", pod.name);
  if (type == k8s::EventType::kDeleted) {
    pods_.erase(key);
    sandboxes_.erase(key);
    deleted_sandboxes_.erase(key);
  } else {
    PodState s = stateOf(pod);
    if (!s.not_workload.ok()) ++not_workloads_;
    pods_[key] = std::move(s);
  }
  publish({updateFor(key)});
}

void KubernetesSource::replace(std::vector<k8s::Namespace> namespaces) {
  namespaces_.clear();
  for (const auto& ns : namespaces) namespaces_[ns.name] = stateOf(ns);
  namespaces_listed_ = true;
  if (pods_listed_) publishAll();
}

void KubernetesSource::apply(k8s::EventType type, k8s::Namespace ns) {
  NamespaceState before;
  bool existed = false;
  if (auto it = namespaces_.find(ns.name); it != namespaces_.end()) before = it->second, existed = true;
  NamespaceState after = type == k8s::EventType::kDeleted ? NamespaceState{} : stateOf(ns);
  if (type == k8s::EventType::kDeleted) {
    namespaces_.erase(ns.name);
  } else {
    namespaces_[ns.name] = after;
  }
  if (existed && before == after) return;  // a change of other labels or fields: nothing to do
  // Only this namespace's pods can change (O(pods) once per label change, not per pod event).
  std::vector<Update> updates;
  for (const auto& [key, p] : pods_) {
    if (p.namespace_name == ns.name) updates.push_back(updateFor(key));
  }
  publish(std::move(updates));
}

std::string KubernetesSource::serviceKeyOf(const k8s::EndpointSlice& slice) {
  // Only IPv4 slices of a Service count (ferry captures IPv4 ClusterIPs).
  if (slice.address_type != "IPv4" || slice.service_name.empty()) return "";
  return absl::StrCat(slice.namespace_name, "/", slice.service_name);
}

void KubernetesSource::replace(std::vector<k8s::Service> services) {
  for (const auto& [key, _] : services_) dirty_services_.insert(key);
  services_.clear();
  for (auto& s : services) {
    std::string key = absl::StrCat(s.namespace_name, "/", s.name);
    dirty_services_.insert(key);
    services_[std::move(key)] = std::move(s);
  }
  flushServices();
}

void KubernetesSource::apply(k8s::EventType type, k8s::Service service) {
  std::string key = absl::StrCat(service.namespace_name, "/", service.name);
  dirty_services_.insert(key);
  if (type == k8s::EventType::kDeleted) {
    services_.erase(key);
  } else {
    services_[std::move(key)] = std::move(service);
  }
  flushServices();
}

std::string KubernetesSource::clusterIpOf(std::string_view namespace_name, std::string_view name) const {
  std::string key(namespace_name);
  key.append("/").append(name);
  auto it = services_.find(key);
  if (it == services_.end() || it->second.cluster_ips.empty()) return "";
  return it->second.cluster_ips.front();
}

void KubernetesSource::replace(std::vector<k8s::EndpointSlice> slices) {
  for (const auto& [service, _] : slices_of_) dirty_services_.insert(service);
  slices_.clear();
  slices_of_.clear();
  for (auto& slice : slices) {
    std::string key = absl::StrCat(slice.namespace_name, "/", slice.name);
    if (std::string service = serviceKeyOf(slice); !service.empty()) {
      slices_of_[service].insert(key);
      dirty_services_.insert(std::move(service));
    }
    slices_[std::move(key)] = std::move(slice);
  }
  flushServices();
}

void KubernetesSource::apply(k8s::EventType type, k8s::EndpointSlice slice) {
  std::string key = absl::StrCat(slice.namespace_name, "/", slice.name);
  // The slice may have belonged to another Service before (its label changed): both count.
  if (auto it = slices_.find(key); it != slices_.end()) {
    if (std::string before = serviceKeyOf(it->second); !before.empty()) {
      if (auto of = slices_of_.find(before); of != slices_of_.end() && of->second.erase(key) > 0 && of->second.empty()) {
        slices_of_.erase(of);
      }
      dirty_services_.insert(std::move(before));
    }
  }
  if (type == k8s::EventType::kDeleted) {
    slices_.erase(key);
  } else {
    if (std::string service = serviceKeyOf(slice); !service.empty()) {
      slices_of_[service].insert(key);
      dirty_services_.insert(std::move(service));
    }
    slices_[std::move(key)] = std::move(slice);
  }
  flushServices();
}

void KubernetesSource::endpointChanged(const IpAddress& ip) {
  if (auto it = services_by_endpoint_.find(ip); it != services_by_endpoint_.end()) {
    dirty_services_.insert(it->second.begin(), it->second.end());
  }
}

void KubernetesSource::flushServices() {
  // Before both first lists, no endpoint can be judged: the dirty set waits for publishAll.
  if (store_ == nullptr || !pods_listed_ || !namespaces_listed_ || dirty_services_.empty()) return;
  auto registry = store_->current();
  auto table = store_->services();
  std::vector<ServiceUpdate> updates;
  for (const auto& key : dirty_services_) recomputeService(key, *registry, *table, updates);
  dirty_services_.clear();
  // Removals first: a ClusterIP:port one Service gives up may be another's in this batch.
  std::stable_partition(updates.begin(), updates.end(), [](const ServiceUpdate& u) { return !u.backends; });
  if (!updates.empty()) store_->applyServices(std::move(updates));
}

void KubernetesSource::recomputeService(const std::string& key, const Registry& registry, const ServiceTable& table,
                                        std::vector<ServiceUpdate>& updates) {
  PublishedService before;
  if (auto it = published_.find(key); it != published_.end()) {
    before = std::move(it->second);
    published_.erase(it);
  }
  for (const auto& ip : before.endpoint_ips) {
    if (auto it = services_by_endpoint_.find(ip); it != services_by_endpoint_.end()) {
      it->second.erase(key);
      if (it->second.empty()) services_by_endpoint_.erase(it);
    }
  }
  PublishedService after;
  auto service = services_.find(key);
  auto slices = slices_of_.find(key);
  if (service != services_.end() && slices != slices_of_.end()) {
    // Each slice with its ready endpoints' IPs, and of those the mesh workloads'.
    struct SliceEndpoints {
      const k8s::EndpointSlice* slice;
      std::vector<IpAddress> mesh;
    };
    std::vector<SliceEndpoints> ready;
    for (const auto& slice_key : slices->second) {
      SliceEndpoints& s = ready.emplace_back(SliceEndpoints{&slices_.at(slice_key), {}});
      for (const auto& ep : s.slice->endpoints) {
        if (!ep.ready || ep.addresses.empty()) continue;
        auto ip = common::parseIp(ep.addresses.front());
        if (!ip.ok()) continue;
        // Every ready endpoint's IP is remembered, mesh or not: a pod that joins the mesh
        // later makes this Service's backends change.
        after.endpoint_ips.push_back(common::canonicalIp(*ip));
        const Workload* w = registry.findByIp(*ip);
        if (w != nullptr && w->hbone) s.mesh.push_back(after.endpoint_ips.back());  // else kube-proxy's business
      }
    }
    std::sort(after.endpoint_ips.begin(), after.endpoint_ips.end());
    after.endpoint_ips.erase(std::unique(after.endpoint_ips.begin(), after.endpoint_ips.end()), after.endpoint_ips.end());
    for (const auto& port : service->second.ports) {
      if (!port.protocol.empty() && port.protocol != "TCP") continue;
      ServiceBackends backends{intern(key), {}};
      for (const auto& [slice, mesh] : ready) {
        // The slice's port of the same name carries the resolved target port (a named
        // targetPort may be a different number on each pod).
        int32_t target = 0;
        for (const auto& p : slice->ports) {
          if (p.name == port.name && (p.protocol.empty() || p.protocol == "TCP")) target = p.port;
        }
        if (target <= 0 || target > 65535) continue;
        for (const auto& ip : mesh) backends.endpoints.emplace_back(ip, static_cast<uint16_t>(target));
      }
      if (backends.endpoints.empty()) continue;
      std::sort(backends.endpoints.begin(), backends.endpoints.end());
      for (const auto& vip_text : service->second.cluster_ips) {
        auto vip = common::parseIp(vip_text);
        if (!vip.ok() || !vip->is_v4()) continue;
        ServicePort sp{common::canonicalIp(*vip), static_cast<uint16_t>(port.port)};
        after.ports.push_back(sp);
        updates.push_back({sp, backends});
      }
    }
  }
  for (const auto& port : before.ports) {
    if (std::find(after.ports.begin(), after.ports.end(), port) != after.ports.end()) continue;
    // Another Service may hold the port now (a ClusterIP reused after a deletion): only
    // this Service's entry goes.
    const ServiceBackends* current = table.find(port);
    if (current != nullptr && current->name == key) updates.push_back({port, std::nullopt});
  }
  for (const auto& ip : after.endpoint_ips) services_by_endpoint_[ip].insert(key);
  if (!after.ports.empty() || !after.endpoint_ips.empty()) published_[key] = std::move(after);
}

void KubernetesSource::setUninstalling(bool uninstalling, const char* why) {
  if (uninstalling == uninstalling_) return;
  uninstalling_ = uninstalling;
  FERRY_LOG(kInfo, "workloads: DaemonSet %s/%s %s: %s", options_.daemonset_namespace, options_.daemonset_name, why,
            uninstalling ? "a stop now removes every program and pin (uninstall)"
                         : "a stop keeps the pins for the next ferryd again");
}

void KubernetesSource::replace(std::vector<k8s::DaemonSet> daemonsets) {
  const k8s::DaemonSet* mine = nullptr;
  for (const auto& ds : daemonsets) {
    if (ds.namespace_name == options_.daemonset_namespace && ds.name == options_.daemonset_name) mine = &ds;
  }
  if (mine != nullptr) {
    seen(*mine);
  } else if (daemonset_seen_) {
    // Gone between two lists (the watch broke meanwhile): deleted.
    setUninstalling(true, "is gone");
  }
  // Never seen at all (ferryd started after its DaemonSet was deleted, or runs outside
  // one): not an uninstall ferryd observed; a stop keeps the pins.
}

void KubernetesSource::apply(k8s::EventType type, k8s::DaemonSet daemonset) {
  if (daemonset.namespace_name != options_.daemonset_namespace || daemonset.name != options_.daemonset_name) return;
  if (type == k8s::EventType::kDeleted) {
    setUninstalling(true, "was deleted");
    return;
  }
  seen(daemonset);
}

void KubernetesSource::seen(const k8s::DaemonSet& mine) {
  daemonset_seen_ = true;
  setUninstalling(mine.deleting, mine.deleting ? "is being deleted" : "is back");
}

void KubernetesSource::collect(telemetry::Exposition& out) const {
  if (client_) client_->collect(out);
  out.counter("ferry_kubernetes_workload_updates_total", "Workloads added, changed or removed from API events",
              static_cast<double>(updates_.load()));
  out.counter("ferry_kubernetes_workload_refusals_total",
              "Pod updates refused: an IP another workload holds (retried once something leaves)",
              static_cast<double>(refusals_.load()));
  out.counter("ferry_kubernetes_pods_not_workloads_total",
              "Pod events of pods that cannot be workloads yet (no IP, host network, terminating, finished)",
              static_cast<double>(not_workloads_.load()));
}

}  // namespace ferry::workloads
