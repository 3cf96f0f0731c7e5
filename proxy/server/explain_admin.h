#pragma once
// /explain (docs/troubleshooting.md, "Start here"): what this node's ferryd knows of a
// connection from one address to another, for `ferryctl explain`, which asks the source's
// node and the destination's and reads the two answers as one story. JSON, for tools.
#include <functional>
#include <map>
#include <string>
#include <string_view>

#include <boost/json/object.hpp>

#include "absl/status/statusor.h"
#include "proxy/common/net.h"
#include "proxy/policy/store.h"
#include "proxy/session/recent_closes.h"
#include "proxy/workloads/registry.h"

namespace ferry::server {

struct ExplainQuery {
  common::IpAddress from;  // canonical
  common::HostPort to;     // canonical IP
};
// from=<IP>&to=<IP:PORT>; an error names the parameter that is wrong.
absl::StatusOr<ExplainQuery> parseExplainQuery(const std::string& query);

// What the server hands in: read-only views of its state.
struct ExplainFacts {
  const workloads::Registry& registry;
  const workloads::ServiceTable& services;
  const policy::PolicySet& policies;
  std::string_view trust_domain;
  bool node_exempt = false;
  // This node: {"node", "ready", "reason"?, "datapath"}.
  boost::json::object node;
  // The SVID held here for an identity (spiffe://...): {"not_after", "expires_in_seconds"}
  // or {"error"}; absent: none held.
  std::map<std::string, boost::json::object> certificates;
  // Whether the datapath captures a local pod's address: {"captured", "device"?, "error"?};
  // empty when the datapath is off.
  std::function<boost::json::object(const common::IpAddress&)> capture;
};

// The view without "closed" (the server adds the recent closes the workers hold).
boost::json::object explainView(const ExplainQuery& query, const ExplainFacts& facts);
// Whether a closed connection went from the query's source to its destination, or to one of
// the destination Service's endpoints (`backends`, may be null), in either leg's direction.
bool concerns(const session::ClosedConnection& closed, const ExplainQuery& query,
              const workloads::ServiceBackends* backends);
// One closed connection, as /connections?state=closed and /explain list them.
boost::json::object closedJson(const session::ClosedConnection& closed);

}  // namespace ferry::server
