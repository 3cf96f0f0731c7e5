#pragma once
// Authorization of one connection by the policies in force (docs/policy.md).
#include "proxy/policy/store.h"
#include "proxy/session/context.h"
#include "proxy/session/record.h"

namespace ferry::session {

// Judges a connection to `destination` (a local workload) against `policies` (the snapshot
// in force): counts the decision, logs AUDIT matches, fills record.policy, and
// record.subject when allowed.
policy::Decision authorize(Worker& worker, Direction direction, const policy::PolicySet& policies,
                           const workloads::Workload& destination, policy::Request request, ConnectionRecord& record);

}  // namespace ferry::session
