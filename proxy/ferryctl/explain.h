#pragma once
// `ferryctl explain` (docs/troubleshooting.md, "Start here"): what happens to a connection
// from one pod to a destination, read from the /explain answers of the source's node and the
// destination's (proxy/server/explain_admin.h), in order, with the cause and the fix when
// something fails. Pure: the answers in, the story out (unit-tested on ferryd's own JSON).
#include <optional>
#include <string>
#include <vector>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>

namespace ferry::ferryctl {

// The two ends as the operator named them and as they were resolved.
struct ExplainEnds {
  std::string from;          // "shop/frontend" (or the IP)
  std::string from_ip;
  std::string to;            // "shop/cart:8080", "Service shop/cart:80" or "10.0.0.7:8080"
  std::string to_address;    // IP:PORT asked
  bool to_is_service = false;  // the operator named a Service (captured or not)
};

// One node's answer to /explain, or why none came.
struct NodeAnswer {
  std::string node;          // the node asked ("" when asked through --admin)
  bool reached = false;
  std::string error;         // not reached: why
  boost::json::object view;  // /explain's answer
};

struct ExplainStep {
  std::string step;   // source, service, destination, mtls, policy, recent
  std::string state;  // ok, FAIL, info
  std::string detail;
};

struct Explanation {
  std::vector<ExplainStep> steps;
  std::string cause;  // empty: nothing wrong found
  std::string fix;
  boost::json::array closed;  // both nodes' recent closes between the two, the newest first
  int exit_code = 0;          // 0 nothing wrong, 1 a cause found, 4 a ferryd not reached
};

// For a destination Service that ferryd captures (the source node's view has "service"): the
// endpoint to follow, "ip:port", and its node: the endpoint of the newest closed connection
// between the two, else the first. nullopt when the view has no Service or no endpoint.
struct Endpoint {
  std::string address;
  std::string node;
  std::string workload;
};
std::optional<Endpoint> pickEndpoint(const boost::json::object& source_view);

// `destination` is absent when the destination is not a mesh workload, or when the source's
// node is asked alone (--admin) and the destination runs elsewhere.
Explanation explainConnection(const ExplainEnds& ends, const NodeAnswer& source,
                              const std::optional<NodeAnswer>& destination);
std::string renderExplanation(const ExplainEnds& ends, const Explanation& e);
boost::json::object explanationJson(const ExplainEnds& ends, const Explanation& e, const NodeAnswer& source,
                                    const std::optional<NodeAnswer>& destination);

// What a close reason says happened and what to do: {cause, fix}; empty for "ok".
std::pair<std::string, std::string> closeReasonCause(const std::string& reason);

}  // namespace ferry::ferryctl
