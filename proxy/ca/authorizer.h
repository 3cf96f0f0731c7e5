#pragma once
// Node authorization (docs/ferry-ca.md "Node authorization"): a node daemon gets a
// certificate only for the identity of a pod that runs on its own node. The TokenReview (who
// is calling, from which pod) comes from the API server; where pods run comes from ferry-ca's
// watch of all pods (PodIndex). Both are inputs here, so the rules are tested without a
// cluster.
#include <cstddef>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "proxy/identity/spiffe_id.h"
#include "proxy/k8s/client.h"
#include "proxy/k8s/objects.h"

namespace ferry::ca {

// What the API server said about the caller's bearer token (authentication.k8s.io/v1).
struct TokenReview {
  bool authenticated = false;
  std::string error;                   // status.error, when not authenticated
  std::string username;                // status.user.username
  std::string uid;                     // status.user.uid
  std::vector<std::string> audiences;  // status.audiences
  // status.user.extra["authentication.kubernetes.io/pod-name"] and ["...pod-uid"]: a bound,
  // projected token carries them; a legacy Secret token does not.
  std::string pod_name, pod_uid;
};

// One pod as authorization needs it.
struct PodRecord {
  std::string uid;
  std::string node;             // spec.nodeName; empty until scheduled
  std::string service_account;
  bool finished = false;        // phase Succeeded or Failed: its containers will not run again
};

// Every pod of the cluster, fed by a pods informer (k8s::ApiClient::pods). Handler calls
// come from the informer's thread, queries from any thread.
class PodIndex : public k8s::Handler<k8s::Pod> {
 public:
  void replace(std::vector<k8s::Pod> pods) override;
  void apply(k8s::EventType type, k8s::Pod pod) override;

  // True once the first replace() arrived (the informer listed all pods).
  bool synced() const;
  std::optional<PodRecord> find(std::string_view namespace_name, std::string_view name) const;
  // How many unfinished pods of `namespace_name` running `service_account` are scheduled
  // on `node`.
  size_t podsOnNode(std::string_view node, std::string_view namespace_name,
                    std::string_view service_account) const;
  size_t size() const;

 private:
  struct NodeKey {
    std::string node, namespace_name, service_account;
    friend bool operator==(const NodeKey&, const NodeKey&) = default;
    template <typename H>
    friend H AbslHashValue(H h, const NodeKey& k) {
      return H::combine(std::move(h), k.node, k.namespace_name, k.service_account);
    }
  };
  // Adds (+1) or removes (-1) `pod`'s share of on_node_. Callers hold mu_.
  void count(const std::string& namespace_name, const PodRecord& pod, int delta);
  void put(k8s::Pod pod);  // callers hold mu_
  void erase(const std::string& namespace_name, const std::string& name);  // callers hold mu_

  mutable std::mutex mu_;
  bool synced_ = false;
  // "<namespace>/<name>" -> the pod.
  absl::flat_hash_map<std::string, PodRecord> pods_;
  // Scheduled, unfinished pods per (node, namespace, service account); no zero entries.
  absl::flat_hash_map<NodeKey, size_t> on_node_;
};

struct AuthorizerSettings {
  std::string trust_domain;
  std::string agent_namespace;        // where ferryd runs
  std::string agent_service_account;  // ferryd's service account
  std::string audience = "ferry-ca";  // protocol.h kDefaultAudience
};

struct Decision {
  bool allowed = false;
  int http_status = 0;     // 200 when allowed
  std::string code;        // "signed" when allowed, else a code of docs/ferry-ca.md's table
  std::string message;     // a sentence naming the pod, node or identity involved
  std::string caller_pod;  // "<namespace>/<name>" once known from the token
  std::string node;        // the caller's node once its pod was found
};

// The rules of docs/ferry-ca.md "Node authorization", in its order: 503 not_ready while
// `pods` has not synced; 401 unauthenticated, wrong_audience; 403 not_node_agent,
// unbound_token, caller_pod_unknown, wrong_trust_domain, no_pod_on_node.
Decision authorize(const TokenReview& review, const identity::SpiffeId& wanted, const PodIndex& pods,
                   const AuthorizerSettings& settings);

}  // namespace ferry::ca
