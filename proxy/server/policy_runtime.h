#pragma once
// ferryd's authorization policies and PeerAuthentications at run time (docs/policy.md):
// the store the workers judge by, the policy files that feed it (policy.files, watched and
// reloaded) and, with the Kubernetes source, the cluster's objects; its metrics. What a
// policy change does to the datapath and to open connections is the server's to wire
// (onChange).
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "proxy/config/config.h"
#include "proxy/policy/files.h"
#include "proxy/policy/kubernetes.h"
#include "proxy/policy/store.h"
#include "proxy/telemetry/metrics.h"

namespace ferry::k8s {
class ApiClient;
}

namespace ferry::server {

class PolicyRuntime {
 public:
  explicit PolicyRuntime(const config::Policy& config);

  policy::Store& store() { return store_; }
  const policy::Store& store() const { return store_; }
  // Reads policy.files whole (a file that does not load is a start-up error), then calls
  // `on_change` with each new policy set.
  absl::Status start(std::function<void(const policy::PolicySet&)> on_change);
  // policy.kubernetes: the cluster's AuthorizationPolicies and PeerAuthentications on the
  // API client's connection (the returned function registers the informers on it);
  // `on_synced` once both kinds have delivered a first state.
  std::function<void(k8s::ApiClient&)> followCluster(std::function<void()> on_synced);
  // False until every source of policies has delivered its first state: until then inbound
  // connections are refused (fail closed).
  bool loaded() const { return cluster_ == nullptr || cluster_->synced(); }
  // The policy files changed on disk: read again (every workloads_poll).
  void poll() { files_.poll(store_); }
  // A reload's new list, in two steps: read it (an error refuses the config version; nothing
  // changed), then apply it with the root namespace in force.
  absl::Status loadFiles(const std::vector<std::string>& paths) { return files_.load(paths); }
  void applyFiles(const std::string& root_namespace);
  void collect(telemetry::Exposition& out) const;

 private:
  policy::Store store_;
  policy::PolicyFiles files_;
  std::unique_ptr<policy::KubernetesPolicies> cluster_;
};

}  // namespace ferry::server
