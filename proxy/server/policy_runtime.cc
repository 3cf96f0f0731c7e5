#include "proxy/server/policy_runtime.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "proxy/common/log.h"

namespace ferry::server {

PolicyRuntime::PolicyRuntime(const config::Policy& config)
    : store_(config.root_namespace), files_(config.files) {}

absl::Status PolicyRuntime::start(std::function<void(const policy::PolicySet&)> on_change) {
  if (auto st = files_.start(store_); !st.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("policy.files: ", st.message()));
  }
  auto set = store_.current();
  FERRY_LOG(kInfo, "policy: %u AuthorizationPolicies and %u PeerAuthentications in force (root namespace %s)",
            static_cast<unsigned>(set->authorizationCount()), static_cast<unsigned>(set->peerAuthenticationCount()),
            set->rootNamespace());
  if (on_change) store_.subscribe(std::move(on_change));
  return absl::OkStatus();
}

std::function<void(k8s::ApiClient&)> PolicyRuntime::followCluster(std::function<void()> on_synced) {
  cluster_ = std::make_unique<policy::KubernetesPolicies>(store_);
  cluster_->onSynced(std::move(on_synced));
  return [cluster = cluster_.get()](k8s::ApiClient& client) { cluster->attach(client); };
}

void PolicyRuntime::applyFiles(const std::string& root_namespace) {
  if (root_namespace != store_.current()->rootNamespace()) store_.setRootNamespace(root_namespace);
  files_.apply(store_);
}

void PolicyRuntime::collect(telemetry::Exposition& out) const {
  auto set = store_.current();
  out.gauge("ferry_policies", "Policy objects in force, by kind")
      .add(static_cast<double>(set->authorizationCount()), {{"kind", "AuthorizationPolicy"}})
      .add(static_cast<double>(set->peerAuthenticationCount()), {{"kind", "PeerAuthentication"}});
  out.gauge("ferry_policy_generation", "Policy snapshots published since start", static_cast<double>(set->generation()));
  out.gauge("ferry_policy_refused_objects", "Policy objects refused now (bad field, duplicate name; see /policies)",
            static_cast<double>(store_.refusals().size()));
  out.counter("ferry_policy_refused_total", "Policy objects (and whole files) refused since start",
              static_cast<double>(store_.refusedTotal() + files_.failures()));
}

}  // namespace ferry::server
