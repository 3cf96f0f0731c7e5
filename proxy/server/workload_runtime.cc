#include "proxy/server/workload_runtime.h"

#include <arpa/inet.h>

#include <cstdlib>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "proxy/config/kubeconfig.h"
#include "proxy/k8s/client.h"
#include "proxy/rtnetlink/rtnetlink.h"
#include "proxy/server/cni_credentials.h"
#include "proxy/server/cni_endpoint.h"
#include "proxy/server/cni_enrolment.h"
#include "proxy/server/cni_install.h"
#include "proxy/server/policy_runtime.h"
#include "proxy/workloads/file_source.h"
#include "proxy/workloads/kubernetes_source.h"

namespace ferry::server {

WorkloadRuntime::WorkloadRuntime(const config::Config& config, boost::asio::io_context& control)
    : config_(config), control_(control), store_(config.node) {}

WorkloadRuntime::~WorkloadRuntime() {
  // A proxy netns of ferryd's own outlives the process while closing sockets still hold it
  // (a FIN_WAIT orphan: up to tcp_fin_timeout), and with it its veth pair: the next ferryd
  // would find the name taken. Deleting the node's side takes the pair at once.
  // Handed over, or taken over and failed to start: the other ferryd uses that netns, that
  // pair and that datapath.
  if (leave_node_ && datapath_) datapath_->setHandedOver(true);
  if (config_.datapath.proxy_netns_auto && proxy_netns_ && !leave_node_) {
    datapath_.reset();  // its programs on the device first
    if (auto st = rtnetlink::deleteLink(config_.datapath.host_proxy_interface); !st.ok()) {
      FERRY_LOG(kWarn, "datapath: removing %s: %s", config_.datapath.host_proxy_interface, st.message());
    }
  }
}

absl::Status WorkloadRuntime::startSource(PolicyRuntime& policy, std::function<void()> on_policies_synced) {
  if (auto st = makeSource(policy, std::move(on_policies_synced)); !st.ok()) return st;
  if (auto st = source_->start(store_); !st.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("workloads: ", st.message()));
  }
  return absl::OkStatus();
}

namespace {

// The API server ferryd follows, and what ferry-cni's fallback needs to reach it.
struct ApiServer {
  k8s::ClusterAccess access;
  std::string where;      // for messages: "the in-cluster API server", "the API server of FILE"
  std::string plugin_ca;  // cni.install with cni.service_account: the CA ferry-cni verifies it by
};

absl::StatusOr<ApiServer> resolveApiServer(const config::Config& config) {
  const auto& kc = config.kubernetes;
  ApiServer api;
  if (kc.kubeconfig.empty()) {
    auto in_cluster = k8s::inClusterAccess([](const char* name) { return std::getenv(name); });
    if (!in_cluster.ok()) {
      return absl::FailedPreconditionError(absl::StrCat("kubernetes: in-cluster credentials: ", in_cluster.status().message(),
                                                        " (outside a cluster, set kubernetes.kubeconfig)"));
    }
    api.access = *std::move(in_cluster);
    api.where = "the in-cluster API server";
  } else {
    auto file = config::loadKubeconfig(kc.kubeconfig);
    if (!file.ok()) return absl::FailedPreconditionError(absl::StrCat("kubernetes.kubeconfig: ", file.status().message()));
    api.access = k8s::accessFrom(*file);
    api.where = absl::StrCat("the API server of ", kc.kubeconfig);
  }
  // ferry-cni's fallback reaches the same API server, from the node (ferryd's netns).
  if (config.cni.install && !config.cni.service_account.empty()) {
    auto ca = pluginApiServerCa(api.access.ca_pem, api.access.ca_file, api.where);
    if (!ca.ok()) return ca.status();
    api.plugin_ca = *std::move(ca);
  }
  return api;
}

}  // namespace

absl::Status WorkloadRuntime::checkApiServer(const config::Config& config) {
  if (config.workload_source != config::WorkloadSourceKind::kKubernetes || config.kubernetes.kubeconfig.empty()) {
    return absl::OkStatus();
  }
  return resolveApiServer(config).status();
}

absl::Status WorkloadRuntime::makeSource(PolicyRuntime& policy, std::function<void()> on_policies_synced) {
  if (config_.workload_source == config::WorkloadSourceKind::kFile) {
    source_ = std::make_unique<workloads::FileSource>(config_.workloads_file);
    return absl::OkStatus();
  }
  auto api = resolveApiServer(config_);
  if (!api.ok()) return api.status();
  const auto& kc = config_.kubernetes;
  std::string describe = absl::StrCat("kubernetes ", api->access.server);
  const std::string plugin_server = api->access.server;
  auto client = k8s::ApiClient::create(control_, std::move(api->access), k8s::Options{});
  if (!client.ok()) return absl::FailedPreconditionError(absl::StrCat("kubernetes: ", client.status().message()));
  workloads::KubernetesSourceOptions options{kc.istio_ambient, kc.max_state_age, kc.daemonset_namespace,
                                             kc.daemonset_name, /*add_informers=*/{}};
  if (config_.policy.kubernetes) {
    // The cluster's AuthorizationPolicies and PeerAuthentications, on the same connection;
    // inbound connections are refused until both kinds have delivered a first state.
    options.add_informers = policy.followCluster(std::move(on_policies_synced));
  }
  auto source = std::make_unique<workloads::KubernetesSource>(*std::move(client), options, describe);
  k8s_source_ = source.get();
  if (!api->plugin_ca.empty()) {
    cni_credentials_ = std::make_unique<CniCredentials>(
        control_, *source->client(), plugin_server, api->plugin_ca, config_.cni.service_account, config_.cni.token_lifetime,
        CniInstaller::kubeconfigPathIn(config_.cni.conf_dir));
  }
  source_ = std::move(source);
  FERRY_LOG(kInfo, "workloads: from %s (%s)", api->where, describe);
  return absl::OkStatus();
}

absl::Status WorkloadRuntime::health() const { return source_->health(); }

std::string WorkloadRuntime::describeSource() const { return source_->describe(); }

std::function<std::string(std::string_view, std::string_view)> WorkloadRuntime::serviceIpLookup() const {
  if (k8s_source_ == nullptr) return {};
  return [k8s = k8s_source_](std::string_view ns, std::string_view name) { return k8s->clusterIpOf(ns, name); };
}

bool WorkloadRuntime::poll() {
  bool published = source_->poll(store_);
  if (datapath_) {
    datapath_->retryFailed(*store_.current());
    datapath_->checkAttachments();
    if (!stale_released_ && source_->health().ok()) {
      stale_released_ = true;
      datapath_->releaseStale(*store_.current());
    }
  }
  if (cni_installer_) cni_installer_->check();
  return published;
}

uint64_t WorkloadRuntime::failures() const { return source_->failures() + store_.rejected(); }

absl::Status WorkloadRuntime::startDatapath(const handover::TakenSockets& taken, bool taking_over,
                                            std::function<bool(const workloads::Workload&)> plaintext_capture) {
  auto ns = config_.datapath.proxy_netns_auto ? createProxyNetns(taken) : datapath::NetnsFd::open(config_.datapath.proxy_netns);
  if (!ns.ok()) return absl::FailedPreconditionError(absl::StrCat("datapath.proxy_netns: ", ns.status().message()));
  proxy_netns_.emplace(std::move(*ns));
  auto dp = datapath::Datapath::create(config_, *proxy_netns_, taking_over);
  if (!dp.ok()) return absl::Status(dp.status().code(), absl::StrCat("datapath: ", dp.status().message()));
  datapath_ = std::move(*dp);
  datapath_->setPlaintextCapture(std::move(plaintext_capture));
  return syncDatapathOnceSourceListed();
}

absl::StatusOr<datapath::NetnsFd> WorkloadRuntime::createProxyNetns(const handover::TakenSockets& taken) {
  const auto& d = config_.datapath;
  datapath::ProxyNetnsSpec spec;
  spec.host_interface = d.host_proxy_interface;
  spec.proxy_interface = d.proxy_interface;
  inet_pton(AF_INET, d.proxy_address.c_str(), &spec.proxy_address);  // validated by config
  spec.mark = d.mark;
  // Inside ferryd's own netns: nothing else has tables or rules there to collide with.
  spec.table = 100;
  spec.rule_priority = 1000;
  // Handed over: the running ferryd's netns, plumbed already, and its claim.
  auto netns = taken(handover::Role::kProxyNetns, nullptr);
  auto claim = taken(handover::Role::kHostInterfaceClaim, nullptr);
  if (!netns.empty() && !claim.empty()) {
    proxy_claim_.emplace(datapath::HostInterfaceClaim::adopt(claim[0].release(), spec.host_interface));
    FERRY_LOG(kInfo, "datapath: the proxy netns of the previous ferryd: %s %s/32 <-> %s (node side)",
              d.proxy_interface, d.proxy_address, d.host_proxy_interface);
    return datapath::NetnsFd::adopt(netns[0].release(), "(handed over)");
  }
  if (!proxy_claim_) {
    auto claim = datapath::HostInterfaceClaim::take(spec.host_interface);
    if (!claim.ok()) return claim.status();
    proxy_claim_.emplace(std::move(*claim));
  }
  auto ns = datapath::createProxyNetns(spec, *proxy_claim_);
  if (ns.ok()) {
    FERRY_LOG(kInfo, "datapath: created the proxy netns: %s %s/32 <-> %s (node side)", d.proxy_interface,
              d.proxy_address, d.host_proxy_interface);
  }
  return ns;
}

absl::Status WorkloadRuntime::syncDatapathOnceSourceListed() {
  if (!datapath_ || synced_) return absl::OkStatus();
  // The first sync removes what no workload wants from maps a previous ferryd pinned: with a
  // source that has not listed yet, that would be every pod (Kubernetes), and its traffic
  // would pass uncaptured until the list came. Until then the pinned state stays as it is.
  if (!source_->health().ok()) {
    if (!sync_waiting_logged_) {
      FERRY_LOG(kInfo, "datapath: the pinned state stays as it is until the workload source has listed");
      sync_waiting_logged_ = true;
    }
    return absl::OkStatus();
  }
  synced_ = true;
  return datapath_->sync(*store_.current());
}

void WorkloadRuntime::follow() {
  store_.subscribe([this](const workloads::Registry& after, const workloads::Delta& delta) {
    if (datapath_) datapath_->apply(after, delta);
  });
  store_.subscribeServices(
      [this](const workloads::ServiceTable& services, const std::vector<workloads::ServiceChange>& changes) {
        if (datapath_) datapath_->applyServices(changes);
        logServiceChanges(services, changes);
      });
}

void WorkloadRuntime::logServiceChanges(const workloads::ServiceTable& services,
                                        const std::vector<workloads::ServiceChange>& changes) {
  size_t added = 0, removed = 0;
  for (const auto& c : changes) added += !c.before && c.after, removed += c.before && !c.after;
  // A line when the captured set changes, not when only backends do; Service churn
  // (hundreds a second in a big cluster) is summed into one line a second.
  service_log_added_ += added;
  service_log_removed_ += removed;
  if (added + removed > 0 && service_log_.allow()) {
    FERRY_LOG(kInfo, "workloads: %d Service ports with mesh endpoints are captured (+%d -%d)", services.size(),
              service_log_added_, service_log_removed_);
    service_log_added_ = service_log_removed_ = 0;
  }
}

void WorkloadRuntime::refreshModes() {
  if (datapath_) datapath_->refreshModes(*store_.current());
}

absl::Status WorkloadRuntime::startCniEndpoint(bool taking_over) {
  if (!config_.cni.enabled) return absl::OkStatus();
  // The parser refuses cni.enabled without the datapath; a Config built in code may not.
  if (!datapath_) return absl::FailedPreconditionError("cni.enabled needs the tc datapath (datapath.enabled: true)");
  cni_enrolment_ = std::make_unique<PodEnrolment>(store_, *source_, *datapath_);
  cni_endpoint_ = std::make_unique<CniEndpoint>(control_, config_.cni, *cni_enrolment_);
  cni_endpoint_->restore(&PodEnrolment::sandboxExists);
  // Taking over: the running ferryd answers the plugin until this one is ready (serveCni).
  return taking_over ? absl::OkStatus() : cni_endpoint_->start();
}

absl::Status WorkloadRuntime::serveCni() { return cni_endpoint_ ? cni_endpoint_->start() : absl::OkStatus(); }

absl::Status WorkloadRuntime::installCni() {
  if (!config_.cni.install) return absl::OkStatus();
  cni_installer_ = std::make_unique<CniInstaller>(
      config_.cni, std::vector<std::string>{config_.kubernetes.daemonset_namespace}, config_.kubernetes.istio_ambient);
  if (auto st = cni_installer_->install(); !st.ok()) return st;
  if (cni_credentials_) cni_credentials_->start();
  return absl::OkStatus();
}

void WorkloadRuntime::beginDrain() {
  // A planned stop: peers' new tunnels are held (dropped SYNs) for the next ferryd, not
  // refused as if this node had no ferryd (bpf/to_proxy.bpf.c).
  if (datapath_) datapath_->setHbonePaused(true);
  // ferry-cni finds no socket and answers at once by its failure policy, rather than
  // enrolling pods with a ferryd on its way out.
  if (cni_endpoint_) cni_endpoint_->stop();
  const bool uninstalling = k8s_source_ != nullptr && k8s_source_->uninstalling();
  if (datapath_ && uninstalling) {
    // No next ferryd is coming: leave the node as it was before ferry (docs/install.md).
    FERRY_LOG(kInfo, "uninstall: ferryd's DaemonSet was deleted; every program and pin goes at exit");
    datapath_->removeEverythingAtExit();
  }
  if (cni_credentials_) cni_credentials_->stop();
  if (cni_installer_ && uninstalling) {
    // Before the drain: pods created from now on must not wait for a ferryd that is going.
    cni_installer_->uninstall();
  }
}

void WorkloadRuntime::retire() {
  if (cni_endpoint_) cni_endpoint_->stop(/*unlink=*/false);
  if (cni_credentials_) cni_credentials_->stop();  // the successor keeps ferry-cni's token
}

void WorkloadRuntime::resumeAfterFailedHandover() {
  // The successor may have bound the plugin's socket path before it failed.
  if (cni_endpoint_) {
    cni_endpoint_->stop(/*unlink=*/false);
    if (auto st = cni_endpoint_->start(); !st.ok()) FERRY_LOG(kWarn, "cni: after the failed handover: %s", st.message());
  }
  if (datapath_) {
    datapath_->setHandedOver(false);
    // Pod changes meanwhile were not applied (Service changes of that window are not
    // replayed: docs/operations.md).
    if (auto st = datapath_->sync(*store_.current()); !st.ok()) {
      FERRY_LOG(kWarn, "datapath: after the failed handover: %s", st.message());
    }
  }
}

void WorkloadRuntime::setHandedOver(bool handed_over) {
  if (datapath_) datapath_->setHandedOver(handed_over);
}

absl::Status WorkloadRuntime::offer(const handover::OfferSocket& add) const {
  if (!config_.datapath.proxy_netns_auto || !proxy_netns_ || !proxy_claim_) return absl::OkStatus();
  if (auto st = add(handover::Role::kProxyNetns, config_.datapath.proxy_interface, proxy_netns_->fd()); !st.ok()) {
    return st;
  }
  return add(handover::Role::kHostInterfaceClaim, proxy_claim_->hostInterface(), proxy_claim_->fd());
}

void WorkloadRuntime::collectSource(telemetry::Exposition& out) const {
  if (k8s_source_ != nullptr) k8s_source_->collect(out);
}

void WorkloadRuntime::collectRegistry(telemetry::Exposition& out) const {
  auto reg = store_.current();
  out.gauge("ferry_workloads", "Workloads known, and those on this node")
      .add(static_cast<double>(reg->size()), {{"scope", "all"}})
      .add(static_cast<double>(reg->localCount()), {{"scope", "local"}});
}

void WorkloadRuntime::collectNode(telemetry::Exposition& out) const {
  if (datapath_) datapath_->collect(out);
  if (cni_endpoint_) cni_endpoint_->collect(out);
  if (cni_installer_) cni_installer_->collect(out);
  if (cni_credentials_) cni_credentials_->collect(out);
}

}  // namespace ferry::server
