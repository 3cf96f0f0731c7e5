#pragma once
// ferryd's workloads at run time (docs/architecture.md, "Inside ferryd's process"): the
// registry and the source that fills it (the workloads file, or the API server), the tc
// datapath that follows it (the proxy netns, the programs, each pod's enrolment), and
// ferry-cni's side of it (the endpoint the plugin calls, the chain in the node's CNI
// configuration, the plugin's credentials). Its metrics and what /datapath says of it.
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <boost/asio/io_context.hpp>

#include "absl/status/status.h"
#include "proxy/common/log.h"
#include "proxy/config/config.h"
#include "proxy/datapath/datapath.h"
#include "proxy/datapath/netns.h"
#include "proxy/datapath/proxy_netns.h"
#include "proxy/server/handover.h"
#include "proxy/telemetry/metrics.h"
#include "proxy/workloads/registry.h"
#include "proxy/workloads/source.h"

namespace ferry::workloads {
class KubernetesSource;
}

namespace ferry::server {

class CniCredentials;
class CniEndpoint;
class CniInstaller;
class PodEnrolment;
class PolicyRuntime;

class WorkloadRuntime {
 public:
  // `config`: the server's config in force (control thread).
  WorkloadRuntime(const config::Config& config, boost::asio::io_context& control);
  // Leaves the node as it found it unless leaveNode said otherwise: a proxy netns of
  // ferryd's own goes with its veth pair.
  ~WorkloadRuntime();

  workloads::Store& store() { return store_; }

  // Makes the source workload_source names and brings its first state. With
  // policy.kubernetes, the cluster's policies come over the same API connection
  // (`on_policies_synced` once both kinds have delivered a first state).
  absl::Status startSource(PolicyRuntime& policy, std::function<void()> on_policies_synced);
  // ferryd --check-config: a kubeconfig the config names, and what ferry-cni needs of it,
  // as start reads them, without asking the API server (OK for the workloads file, and
  // in-cluster credentials, which only exist in the pod).
  static absl::Status checkApiServer(const config::Config& config);
  // The source's state can be trusted (listed, fresh); not OK says why.
  absl::Status health() const;
  std::string describeSource() const;
  // ferry-ca's Service address from the API server followed (empty: none, the name resolves).
  std::function<std::string(std::string_view, std::string_view)> serviceIpLookup() const;
  // Every workloads_poll and at SIGHUP: the source, the datapath's retries and attachments,
  // the CNI chain. True when the source published something.
  bool poll();
  // Changes the source and the registry refused since start.
  uint64_t failures() const;

  // datapath.enabled: the proxy netns (made, named, or handed over), the programs, and
  // their first sync once the source has listed. `plaintext_capture`: whether plaintext to
  // a workload goes through ferryd (a STRICT port, or policies apply).
  absl::Status startDatapath(const handover::TakenSockets& taken, bool taking_over,
                             std::function<bool(const workloads::Workload&)> plaintext_capture);
  datapath::Datapath* datapath() { return datapath_.get(); }
  const datapath::NetnsFd* proxyNetns() const { return proxy_netns_ ? &*proxy_netns_ : nullptr; }
  // The first full sync, once the source has listed (earlier it would unsteer every pod a
  // previous ferryd left).
  absl::Status syncDatapathOnceSourceListed();
  // Registry and Service changes reach the datapath (subscribe before anyone else).
  void follow();
  // Policies changed: which pods' plaintext is captured follows.
  void refreshModes();

  // cni.enabled: ferry-cni's endpoint; `taking_over`: bound by serveCni once this ferryd
  // serves (the running one answers the plugin meanwhile).
  absl::Status startCniEndpoint(bool taking_over);
  absl::Status serveCni();
  // cni.install: ferry-cni in the node's CNI chain, and its credentials.
  absl::Status installCni();

  // A drain (SIGTERM): new HBONE tunnels are held for the next ferryd, the plugin finds no
  // socket; at an uninstall every program and pin goes and the chain is taken out.
  void beginDrain();
  // Handed over to a successor: the plugin's socket and token are its own now.
  void retire();
  // An offer to a successor failed: the datapath and the plugin's socket are this one's again.
  void resumeAfterFailedHandover();
  void setHandedOver(bool handed_over);
  // Handed over, or a takeover that failed: the node's datapath is the other ferryd's.
  void leaveNode() { leave_node_ = true; }
  // The proxy netns ferryd made and its claim on the node's interface, for a successor.
  absl::Status offer(const handover::OfferSocket& add) const;

  // Metrics: the API client's, the registry's counts, the datapath's and ferry-cni's.
  void collectSource(telemetry::Exposition& out) const;
  void collectRegistry(telemetry::Exposition& out) const;
  void collectNode(telemetry::Exposition& out) const;

 private:
  absl::Status makeSource(PolicyRuntime& policy, std::function<void()> on_policies_synced);
  absl::StatusOr<datapath::NetnsFd> createProxyNetns(const handover::TakenSockets& taken);
  void logServiceChanges(const workloads::ServiceTable& services, const std::vector<workloads::ServiceChange>& changes);

  const config::Config& config_;
  boost::asio::io_context& control_;
  workloads::Store store_;
  std::unique_ptr<workloads::Source> source_;
  workloads::KubernetesSource* k8s_source_ = nullptr;  // source_, when it is the Kubernetes one
  // With datapath.proxy_netns auto: held for ferryd's life (proxy/datapath/proxy_netns.h).
  std::optional<datapath::HostInterfaceClaim> proxy_claim_;
  std::optional<datapath::NetnsFd> proxy_netns_;
  std::unique_ptr<datapath::Datapath> datapath_;
  bool synced_ = false;
  bool sync_waiting_logged_ = false;
  // The source's first whole state was in and the datapath released what an earlier ferryd
  // left for pods no longer enrolled (Datapath::releaseStale).
  bool stale_released_ = false;
  bool leave_node_ = false;
  // The Service capture line: what changed since the last one written.
  common::LogLimiter service_log_{5, std::chrono::seconds(1)};
  size_t service_log_added_ = 0, service_log_removed_ = 0;
  std::unique_ptr<PodEnrolment> cni_enrolment_;
  std::unique_ptr<CniEndpoint> cni_endpoint_;  // cni.enabled (proxy/server/cni_endpoint.h)
  std::unique_ptr<CniInstaller> cni_installer_;  // cni.install (docs/install.md, "The CNI chain")
  std::unique_ptr<CniCredentials> cni_credentials_;  // cni.service_account
};

}  // namespace ferry::server
