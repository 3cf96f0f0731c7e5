#include "proxy/session/authorize.h"

#include "absl/strings/str_cat.h"
#include "proxy/common/log.h"

namespace ferry::session {

policy::MtlsMode fallbackMode(const workloads::Workload& w) {
  return w.tls_mode == workloads::TlsMode::kStrict ? policy::MtlsMode::kStrict : policy::MtlsMode::kPermissive;
}

policy::Decision authorize(Worker& worker, Direction direction, const policy::PolicySet& policies,
                           const workloads::Workload& destination, policy::Request request, ConnectionRecord& record) {
  auto& shared = worker.shared();
  policy::Decision decision;
  if (shared.policies_loaded.load(std::memory_order_acquire)) {
    decision = policies.authorize(destination, request);
  } else {
    decision.allowed = false;  // fail closed: what the policies say is not known yet
    decision.reason = "denied: the policies are not loaded from the API server yet";
  }
  using PolicyAction = Stats::PolicyAction;
  PolicyAction action = PolicyAction::kNone;
  if (decision.policy) action = decision.policy->action == policy::Action::kDeny ? PolicyAction::kDeny : PolicyAction::kAllow;
  shared.stats.recordDecision(direction, action, decision.allowed);
  for (const auto& audited : decision.audited) {
    shared.stats.policy_audit_matches.fetch_add(1, std::memory_order_relaxed);
    FERRY_LOG(kInfo, "policy: %s%s policy %s matched %s -> %s (peer %s); the connection is %s",
              audited->dry_run ? "dry-run " : "", policy::actionName(audited->action), audited->meta.key(),
              record.src, record.dst, request.principal.empty() ? "plaintext" : request.principal,
              decision.allowed ? "allowed" : "denied");
  }
  // Named when a policy decided, or denied; "no ALLOW policy applies" is every line's
  // default and would only lengthen it.
  if (decision.policy || !decision.allowed) record.policy = decision.reason;
  record.policy_verdict = decision.allowed ? PolicyVerdict::kAllowed : PolicyVerdict::kDenied;
  if (decision.allowed) record.subject = std::move(request);
  return decision;
}

}  // namespace ferry::session
