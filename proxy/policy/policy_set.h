#pragma once
// The policies in force, as one immutable snapshot (docs/policy.md): workers judge every
// inbound connection against it; the control thread publishes a new one per change
// (store.h). The policies are indexed by scope -- per namespace, and within one by a label
// of their selector -- so that a decision reads only the policies that can apply to the
// destination workload (root namespace + its own namespace, selector policies found through
// the workload's labels), never every policy loaded.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "proxy/policy/policy.h"
#include "proxy/workloads/workload.h"

namespace ferry::policy {

// How a connection was judged.
struct Decision {
  bool allowed = true;
  // The policy that decided (a DENY that matched, the ALLOW that matched); null when no
  // policy matched (allowed: no ALLOW policy applies; denied: ALLOW policies apply, none matched).
  AuthorizationPtr policy;
  int rule = -1;  // index in policy->rules
  // One line for the access log and the 401: "denied by DENY policy shop/no-debug rule 0".
  std::string reason;
  // AUDIT policies that matched (logged, never decide).
  std::vector<AuthorizationPtr> audited;
};

// The effective mTLS mode for one workload port, and which PeerAuthentication set it.
struct MtlsDecision {
  MtlsMode mode = MtlsMode::kPermissive;  // never kUnset
  PeerAuthenticationPtr policy;           // null: the workload's own default
  bool port_level = false;                // from portLevelMtls
};

// ferryctl policy check: every policy that applies and what it made of the request.
struct Explanation {
  struct Step {
    AuthorizationPtr policy;
    bool matched = false;
    int rule = -1;        // the rule that matched
    std::string detail;   // why it matched or not ("no rule matched", "rule 1: L7 fields ignored")
  };
  std::vector<Step> steps;  // DENY, then ALLOW, then AUDIT; each by namespace and name
  Decision decision;
  MtlsDecision mtls;
  bool plaintext_refused = false;  // the request has no principal and mTLS is STRICT
};

class PolicySet {
 public:
  explicit PolicySet(std::string root_namespace);

  // Whether `request` may reach `destination` (a workload of this node): DENY first, then
  // ALLOW if any applies, else allowed (Istio's order; docs/policy.md).
  Decision authorize(const workloads::Workload& destination, const Request& request) const;
  // The mode for plaintext to `destination`:`port`: the workload's PeerAuthentication
  // (port level, then its mode), its namespace's, the root namespace's, else `fallback`
  // (the workloads file's tls_mode). UNSET inherits from the next level up.
  MtlsDecision mtls(const workloads::Workload& destination, uint16_t port, MtlsMode fallback) const;
  // Plaintext to this workload must pass through ferryd (15006): some port is STRICT, or an
  // authorization policy applies (a PERMISSIVE workload's plaintext is authorized too).
  bool capturesPlaintext(const workloads::Workload& destination, MtlsMode fallback) const;
  Explanation explain(const workloads::Workload& destination, const Request& request, MtlsMode fallback) const;

  // Every AuthorizationPolicy that applies to `destination`, in evaluation order.
  std::vector<AuthorizationPtr> applicable(const workloads::Workload& destination) const;

  const std::string& rootNamespace() const { return root_namespace_; }
  size_t authorizationCount() const { return authorization_count_; }
  size_t peerAuthenticationCount() const { return peer_authentication_count_; }
  uint64_t generation() const { return generation_; }
  // Every object, by namespace then name (admin pages; O(n)).
  void forEach(const std::function<void(const Object&)>& visit) const;

  // The policies of one namespace, indexed (built by the Store; immutable once shared).
  struct Bucket {
    std::vector<AuthorizationPtr> whole;  // no selector
    // Selector policies under one of their matchLabels ("key=value"): the first in order,
    // any would do (a policy applies only when all of its labels match).
    absl::flat_hash_map<std::string, std::vector<AuthorizationPtr>> by_label;
    std::vector<PeerAuthenticationPtr> peer_whole;
    absl::flat_hash_map<std::string, std::vector<PeerAuthenticationPtr>> peer_by_label;
    size_t authorization_count = 0, peer_authentication_count = 0;
    static std::shared_ptr<const Bucket> build(const std::vector<AuthorizationPtr>& authorizations,
                                               const std::vector<PeerAuthenticationPtr>& peers);
  };
  // One namespace's index (null: it has no policy). A snapshot shares the index of every
  // namespace that did not change with the one before (tests check it by address).
  const Bucket* namespaceBucket(const std::string& namespace_name) const { return bucket(namespace_name); }

 private:
  friend class Store;
  template <class Visit>
  void forEachApplicable(const workloads::Workload& destination, Visit visit) const;
  const Bucket* bucket(const std::string& namespace_name) const;
  // The PeerAuthentication of one scope (oldest wins, then name): workload, namespace.
  PeerAuthenticationPtr workloadPeer(const Bucket* bucket, const workloads::Workload& destination) const;

  std::string root_namespace_;
  absl::flat_hash_map<std::string, std::shared_ptr<const Bucket>> buckets_;
  size_t authorization_count_ = 0, peer_authentication_count_ = 0;
  uint64_t generation_ = 0;
};

// Whether one rule matches (L7 fields per `action`), and why not when it does not.
bool ruleMatches(const Rule& rule, Action action, const Request& request);
// Whether the policy's selector picks the workload (no selector: yes).
bool selects(const std::optional<Labels>& selector, const workloads::LabelSet& labels);

}  // namespace ferry::policy
