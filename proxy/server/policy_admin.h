#pragma once
// The admin pages of authorization (docs/policy.md, "Checking a policy"): what is in force
// and refused (/policies), and how one request would be judged (/policy/check, which
// `ferryctl policy check` asks). JSON, for tools; ferryctl renders it for people.
#include <string>
#include <string_view>

#include <boost/json/object.hpp>

#include "proxy/policy/store.h"
#include "proxy/server/http_server.h"
#include "proxy/workloads/registry.h"

namespace ferry::server {

// What /policies answers (and /config_dump's "policies").
boost::json::object policiesJson(const policy::Store& store);
HttpResponse policyDump(const policy::Store& store);
// Query: from=<namespace/name | IP | node>, to=<namespace/name>, port=<1-65535>. A `from`
// workload calls with its identity (mTLS); an IP no workload owns calls in plaintext, as does
// any source with plaintext=true. `node` is a socket of the node itself (the kubelet's
// probes): with `node_exempt` (datapath.exempt_node, the datapath on) it reaches the pod
// without ferryd and no policy judges it (docs/security.md, "Probes"); without, 400 says to
// ask with the node's address. `to` must be a workload of this node (its policies are
// enforced here). 400 names the parameter that is wrong.
HttpResponse policyCheck(const std::string& query, const workloads::Registry& registry,
                         const policy::PolicySet& policies, std::string_view trust_domain, bool node_exempt);

}  // namespace ferry::server
