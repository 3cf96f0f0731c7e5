#include "proxy/ca/authorizer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "proxy/common/strings.h"

namespace ferry::ca {
namespace {

using common::toAbsl;

// The phases after which a pod's containers never run again (its identity is no longer in
// use on that node): Kubernetes' PodSucceeded and PodFailed.
bool isFinished(std::string_view phase) { return phase == "Succeeded" || phase == "Failed"; }

std::string podKey(std::string_view namespace_name, std::string_view name) {
  return absl::StrCat(toAbsl(namespace_name), "/", toAbsl(name));
}

Decision refuse(int http_status, std::string_view code, std::string message) {
  return Decision{.allowed = false, .http_status = http_status, .code = std::string(code), .message = std::move(message), .caller_pod = {}, .node = {}};
}

// HTTP statuses of docs/ferry-ca.md's table.
constexpr int kOk = 200;
constexpr int kUnauthorized = 401;
constexpr int kForbidden = 403;
constexpr int kUnavailable = 503;

}  // namespace

void PodIndex::count(const std::string& namespace_name, const PodRecord& pod, int delta) {
  if (pod.node.empty() || pod.finished) return;
  NodeKey key{pod.node, namespace_name, pod.service_account};
  if (delta > 0) {
    ++on_node_[key];
    return;
  }
  auto it = on_node_.find(key);
  if (it != on_node_.end() && --it->second == 0) on_node_.erase(it);
}

void PodIndex::put(k8s::Pod pod) {
  std::string key = podKey(pod.namespace_name, pod.name);
  // A mirror pod is what a kubelet wrote about a static pod of its own node, naming no service
  // account (it decodes as "default"): counting it would let a compromised node obtain
  // <namespace>/default by writing one (docs/security.md). A mirror pod that replaced a real
  // one of the same name takes that one's place: it is dropped.
  if (pod.mirror) {
    erase(pod.namespace_name, pod.name);
    return;
  }
  PodRecord record{std::move(pod.uid), std::move(pod.node_name), std::move(pod.service_account), isFinished(pod.phase)};
  auto [it, inserted] = pods_.try_emplace(std::move(key));
  if (!inserted) count(pod.namespace_name, it->second, -1);
  it->second = std::move(record);
  count(pod.namespace_name, it->second, +1);
}

void PodIndex::erase(const std::string& namespace_name, const std::string& name) {
  auto it = pods_.find(podKey(namespace_name, name));
  if (it == pods_.end()) return;
  count(namespace_name, it->second, -1);
  pods_.erase(it);
}

void PodIndex::replace(std::vector<k8s::Pod> pods) {
  std::lock_guard<std::mutex> lock(mu_);
  pods_.clear();
  on_node_.clear();
  for (k8s::Pod& pod : pods) put(std::move(pod));
  synced_ = true;
}

void PodIndex::apply(k8s::EventType type, k8s::Pod pod) {
  std::lock_guard<std::mutex> lock(mu_);
  if (type == k8s::EventType::kDeleted) {
    erase(pod.namespace_name, pod.name);
  } else {
    put(std::move(pod));
  }
}

bool PodIndex::synced() const {
  std::lock_guard<std::mutex> lock(mu_);
  return synced_;
}

std::optional<PodRecord> PodIndex::find(std::string_view namespace_name, std::string_view name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pods_.find(podKey(namespace_name, name));
  if (it == pods_.end()) return std::nullopt;
  return it->second;
}

size_t PodIndex::podsOnNode(std::string_view node, std::string_view namespace_name,
                            std::string_view service_account) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = on_node_.find(NodeKey{std::string(node), std::string(namespace_name), std::string(service_account)});
  return it == on_node_.end() ? 0 : it->second;
}

size_t PodIndex::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pods_.size();
}

Decision authorize(const TokenReview& review, const identity::SpiffeId& wanted, const PodIndex& pods,
                   const AuthorizerSettings& settings) {
  if (!pods.synced()) {
    return refuse(kUnavailable, "not_ready", "ferry-ca has not listed the cluster's pods yet; retry shortly");
  }
  // 1. The API server vouches for the token, for our audience.
  if (!review.authenticated) {
    return refuse(kUnauthorized, "unauthenticated",
                  review.error.empty() ? "the TokenReview did not authenticate the bearer token"
                                       : absl::StrCat("the TokenReview did not authenticate the bearer token: ",
                                                      review.error));
  }
  // An authenticated review without audiences means "valid for the API server" (the
  // TokenReview API's rule), which is not us.
  if (std::find(review.audiences.begin(), review.audiences.end(), settings.audience) == review.audiences.end()) {
    return refuse(kUnauthorized, "wrong_audience",
                  absl::StrCat("the token of ", review.username, " is not minted for audience \"", settings.audience,
                               "\"; mount a projected token with that audience"));
  }
  // 2. Only the node agent asks for certificates.
  std::string agent = absl::StrCat("system:serviceaccount:", settings.agent_namespace, ":",
                                   settings.agent_service_account);
  if (review.username != agent) {
    return refuse(kForbidden, "not_node_agent",
                  absl::StrCat(review.username, " is not the node agent's service account ", agent));
  }
  // 3. The token names its pod, and that pod (ours, alive) names the node.
  if (review.pod_name.empty() || review.pod_uid.empty()) {
    return refuse(kForbidden, "unbound_token",
                  absl::StrCat("the token of ", review.username,
                               " is not bound to a pod (a legacy Secret token?); use a projected token"));
  }
  std::string caller_pod = podKey(settings.agent_namespace, review.pod_name);
  auto caller_unknown = [&](std::string why) {
    Decision d = refuse(kForbidden, "caller_pod_unknown", absl::StrCat("the caller's pod ", caller_pod, " ", why));
    d.caller_pod = caller_pod;
    return d;
  };
  std::optional<PodRecord> pod = pods.find(settings.agent_namespace, review.pod_name);
  if (!pod) return caller_unknown("is not known (yet)");
  if (pod->uid != review.pod_uid) {
    return caller_unknown(absl::StrCat("has UID ", pod->uid, ", not the token's ", review.pod_uid,
                                       " (the pod was replaced)"));
  }
  if (pod->service_account != settings.agent_service_account) {
    return caller_unknown(absl::StrCat("runs service account ", pod->service_account, ", not ",
                                       settings.agent_service_account));
  }
  if (pod->finished) return caller_unknown("has finished");
  if (pod->node.empty()) return caller_unknown("is not scheduled on a node");
  auto refuseOnNode = [&](std::string_view code, std::string message) {
    Decision d = refuse(kForbidden, code, std::move(message));
    d.caller_pod = caller_pod;
    d.node = pod->node;
    return d;
  };
  // 4. The identity is of our trust domain and runs on the caller's node.
  if (wanted.trustDomain() != settings.trust_domain) {
    return refuseOnNode("wrong_trust_domain", absl::StrCat(wanted.str(), " is not of trust domain ",
                                                           settings.trust_domain));
  }
  auto workload = identity::workloadName(wanted);
  if (!workload.ok()) return refuseOnNode("no_pod_on_node", std::string(workload.status().message()));
  if (pods.podsOnNode(pod->node, workload->namespace_name, workload->service_account) == 0) {
    return refuseOnNode("no_pod_on_node",
                        absl::StrCat("node ", pod->node, " runs no unfinished pod of namespace ",
                                     workload->namespace_name, " with service account ",
                                     workload->service_account, ", so it gets no certificate for ", wanted.str()));
  }
  Decision d;
  d.allowed = true;
  d.http_status = kOk;
  d.code = "signed";
  d.message = absl::StrCat("node ", pod->node, " runs a pod of ", workload->namespace_name, "/",
                           workload->service_account);
  d.caller_pod = caller_pod;
  d.node = pod->node;
  return d;
}

}  // namespace ferry::ca
