#include "proxy/ferryctl/explain.h"

#include <algorithm>
#include <functional>

#include <boost/json/value.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "proxy/common/net.h"
#include "proxy/ferryctl/admin_render.h"
#include "proxy/ferryctl/json_read.h"

namespace ferry::ferryctl {

namespace json = boost::json;

namespace {

constexpr size_t kClosedShown = 10;

std::string onNode(const std::string& node) { return node.empty() ? "this node" : absl::StrCat("node ", node); }

std::string certificateText(const json::object& party) {
  const auto& cert = member(party, "certificate");
  if (std::string error = text(cert, "error"); !error.empty()) return absl::StrCat("no certificate (", error, ")");
  int64_t left = integer(cert, "expires_in_seconds", 0);
  return absl::StrCat("certificate valid until ", text(cert, "not_after", "?"),
                      left > 0 ? absl::StrCat(" (", formatAge(left), " left)") : " (EXPIRED)");
}

bool hasCertificateProblem(const json::object& party) {
  const auto& cert = member(party, "certificate");
  return !text(cert, "error").empty() || integer(cert, "expires_in_seconds", 1) <= 0;
}

// A mesh workload this node runs: captured, identity, certificate. Adds its step; returns
// false when something there fails.
bool describeLocal(const std::string& step, const json::object& party, const std::string& node, Explanation& e,
                   const std::function<void(ExplainStep, std::string, std::string)>& fail) {
  std::string who = absl::StrCat(text(party, "workload"), " on ", onNode(node));
  const json::value* capture = party.if_contains("capture");
  if (capture != nullptr && capture->is_object() && !flag(capture->get_object(), "captured")) {
    std::string why = text(capture->get_object(), "error", "its device has not been seen yet");
    fail({step, "FAIL", absl::StrCat(who, ": NOT captured (", why, ")")},
         absl::StrCat(text(party, "workload"), " is in the mesh but the datapath of ", onNode(node),
                      " does not capture it: ", why),
         absl::StrCat("ferryctl --node ", node, " workloads; kubectl -n ferry-system logs on that node's ferryd pod "
                      "(grep enrol); docs/troubleshooting.md, \"A pod will not start\""));
    return false;
  }
  std::string captured = capture != nullptr && capture->is_object()
                             ? absl::StrCat("captured on ", text(capture->get_object(), "device", "?"))
                             : "datapath off";
  if (hasCertificateProblem(party)) {
    fail({step, "FAIL", absl::StrCat(who, ": ", captured, ", identity ", text(party, "identity"), ", ",
                                     certificateText(party))},
         absl::StrCat("ferryd on ", onNode(node), " holds no valid certificate for ", text(party, "identity"), ": ",
                      certificateText(party)),
         absl::StrCat("ferryctl --node ", node, " certs; check the identity source (ferry-ca: kubectl -n ferry-system "
                      "logs deploy/ferry-ca); docs/troubleshooting.md, \"no_certificate\""));
    return false;
  }
  e.steps.push_back({step, "ok",
                     absl::StrCat(who, ": ", captured, ", identity ", text(party, "identity"), ", ",
                                  certificateText(party))});
  return true;
}

}  // namespace

std::pair<std::string, std::string> closeReasonCause(const std::string& reason) {
  struct Row {
    const char* reason;
    const char* cause;
    const char* fix;
  };
  static constexpr Row kRows[] = {
      {"idle_timeout", "the connection carried no bytes for timeouts.idle and was closed",
       "raise timeouts.idle, or have the application send keepalives"},
      {"connect_timeout", "connecting to the next hop timed out: the destination pod is down, a NetworkPolicy drops "
                          "the traffic, or the destination node's :15008 is unreachable",
       "check the destination pod is Ready and listening on the port; ferryctl connections --closed on its node"},
      {"connect_failed", "the next hop refused: nothing listens on the destination port, or the destination node's "
                         "ferryd is down",
       "check the port the application listens on; ferryctl --node <destination node> status"},
      {"downstream_reset", "the client application reset the connection", "look at the client application"},
      {"upstream_reset", "the destination application reset the connection", "look at the destination application"},
      {"peer_reset", "the HBONE peer (the other node's ferryd) reset the stream", "ferryctl connections --closed on the other node"},
      {"tunnel_refused", "the destination node's ferryd answered CONNECT with an error (401: a policy or identity "
                         "refusal; 503: no such workload there or its application refused)",
       "read the destination node's close records: its reason names the refusal"},
      {"handshake_failed", "the mTLS handshake failed: the nodes trust different roots, a certificate expired, or the "
                           "peer's identity is not the destination's",
       "ferryctl certs on both nodes (roots and expiry)"},
      {"no_certificate", "the source node's ferryd holds no certificate for the source's identity",
       "ferryctl certs on the source's node; check the identity source (ferry-ca)"},
      {"unknown_source", "the source is not a local workload of its node's ferryd (not enrolled there, or its "
                         "registry has not caught up)",
       "ferryctl workloads on the source's node; check the pod's ferry.io/dataplane label"},
      {"bad_request", "the destination's ferryd rejected the CONNECT request (400/503): its detail says why",
       "read the record's detail"},
      {"denied", "the client's identity does not own its source IP (401): a spoofing attempt or a stale registry",
       "ferryctl workloads on both nodes: the source IP must belong to the client's workload"},
      {"policy_denied", "an authorization policy denied the connection",
       "ferryctl --node <destination node> policy check --from <source> --to <destination>:<port> names the policy"},
      {"policy_revoked", "a policy change denied the open connection, which was closed",
       "ferryctl policy list on the destination's node"},
      {"strict_plaintext", "plaintext to a port whose mTLS mode is STRICT was refused: the client is not in the mesh",
       "enrol the client (label its namespace or pod ferry.io/dataplane=enabled) or make the port PERMISSIVE"},
      {"bad_proxy_header", "a PROXY protocol header was missing or invalid", "check the client's PROXY protocol settings"},
      {"self_target", "the destination is ferryd itself (one of its listeners or addresses)",
       "connect to the application's address, not ferryd's ports"},
      {"shutdown", "ferryd was shutting down (an upgrade's drain deadline, or a stop)",
       "ferryctl status: handover state; docs/operations.md, upgrades"},
      {"internal", "an internal error in ferryd", "the ferryd log around the record's time"},
  };
  for (const auto& row : kRows) {
    if (reason == row.reason) return {row.cause, row.fix};
  }
  if (reason == "ok" || reason.empty()) return {};
  return {absl::StrCat("the connection closed with reason ", reason), "docs/troubleshooting.md, close reasons"};
}

std::optional<Endpoint> pickEndpoint(const json::object& view) {
  const json::value* service = view.if_contains("service");
  if (service == nullptr || !service->is_object()) return std::nullopt;
  const auto& endpoints = list(service->get_object(), "endpoints");
  auto endpointAt = [](const json::object& e) {
    std::string ip = text(e, "ip");
    uint16_t port = static_cast<uint16_t>(integer(e, "port"));
    auto parsed = common::parseIp(ip);
    return Endpoint{parsed.ok() ? common::formatHostPort(*parsed, port) : absl::StrCat(ip, ":", port), text(e, "node"),
                    text(e, "workload")};
  };
  for (const auto& c : list(view, "closed")) {  // the newest first
    if (!c.is_object()) continue;
    std::string dst = text(c.get_object(), "destination");
    for (const auto& e : endpoints) {
      if (e.is_object() && endpointAt(e.get_object()).address == dst) return endpointAt(e.get_object());
    }
  }
  for (const auto& e : endpoints) {
    if (e.is_object()) return endpointAt(e.get_object());
  }
  return std::nullopt;
}

namespace {

// explainConnection's steps, in order, over both nodes' answers: each adds its lines to the
// explanation, and the first failure found is the cause.
class Explainer {
 public:
  Explainer(const ExplainEnds& ends, const NodeAnswer& source, const std::optional<NodeAnswer>& destination)
      : ends(ends), source(source), destination(destination) {}

  Explanation run() {
    explainSource();       // 1. in the mesh and captured, with a certificate
    explainService();      // 2. a Service: which endpoint
    explainDestination();  // 3. the destination, 4. its mTLS mode and policies
    explainRecent();       // 5. what happened to the last connections between them, on both nodes
    return std::move(e);
  }

 private:
  void fail(ExplainStep step, std::string cause, std::string fix, int exit_code = 1) {
    e.steps.push_back(std::move(step));
    if (e.cause.empty()) {
      e.cause = std::move(cause);
      e.fix = std::move(fix);
      e.exit_code = exit_code;
    }
  }
  std::function<void(ExplainStep, std::string, std::string)> failHere() {
    return [this](ExplainStep step, std::string cause, std::string fix) {
      fail(std::move(step), std::move(cause), std::move(fix));
    };
  }
  void unreachable(const std::string& step, const NodeAnswer& n, const char* whose) {
    fail({step, "FAIL", absl::StrCat("ferryd on ", onNode(n.node), ": not reachable (", n.error, ")")},
         absl::StrCat("ferryd on ", whose, " node (", onNode(n.node), ") is not running or not reachable: ", n.error,
                      ". While it is down its enrolled pods' connections are refused (fail closed)"),
         absl::StrCat("kubectl -n ferry-system get pods -o wide --field-selector spec.nodeName=", n.node,
                      "; kubectl -n ferry-system describe daemonset; docs/troubleshooting.md, \"ferryd is not ready\""),
         4);
  }
  void notReady(const std::string& step, const NodeAnswer& n) {
    if (flag(n.view, "ready")) return;
    fail({step, "FAIL", absl::StrCat("ferryd on ", onNode(n.node), " is not ready: ", text(n.view, "reason"))},
         absl::StrCat("ferryd on ", onNode(n.node), " is not ready: ", text(n.view, "reason")),
         absl::StrCat("ferryctl --node ", n.node, " status; docs/troubleshooting.md, \"ferryd is not ready\""));
  }

  void explainSource() {
    if (!source.reached) {
      bool both = destination && !destination->reached && destination->node == source.node;
      unreachable("source", source, both ? "the source's and the destination's" : "the source's");
    } else {
      notReady("source", source);
      const auto& s = member(source.view, "source");
      if (!flag(s, "known")) {
        e.steps.push_back({"source", "info",
                           absl::StrCat(ends.from_ip, " is not a mesh workload (its pod or namespace is not enrolled): "
                                                      "ferry does not capture its connections, they leave as plain TCP")});
      } else if (!flag(s, "local")) {
        e.steps.push_back({"source", "info", absl::StrCat(text(s, "workload"), " runs on node ", text(s, "node"),
                                                          ", not on ", onNode(source.node))});
        source_in_mesh = true;
      } else {
        source_in_mesh = true;
        describeLocal("source", s, source.node, e, failHere());
      }
    }
  }

  void explainService() {
    if (source.reached) {
      const json::value* service = source.view.if_contains("service");
      if (service != nullptr && service->is_object()) {
        std::vector<std::string> names;
        for (const auto& ep : list(service->get_object(), "endpoints")) {
          if (!ep.is_object()) continue;
          const auto& o = ep.get_object();
          names.push_back(absl::StrCat(text(o, "workload", "?"), " ", text(o, "ip"), ":", integer(o, "port")));
        }
        auto picked = pickEndpoint(source.view);
        e.steps.push_back({"service", "ok",
                           absl::StrCat(text(service->get_object(), "name"), " ", ends.to_address, " is captured; ",
                                        names.size(), " mesh endpoint(s): ", absl::StrJoin(names, ", "),
                                        picked ? absl::StrCat("; following ", picked->address, " on node ", picked->node)
                                               : "")});
      } else if (ends.to_is_service) {
        e.steps.push_back({"service", "info",
                           absl::StrCat(ends.to, " (", ends.to_address, ") is not captured: it has no ready endpoint "
                                        "that is a mesh pod, so kube-proxy routes it as plain TCP")});
      }
    }
  }

  void explainDestination() {
    if (!destination) {
      if (source.reached) {
        const auto& d = member(source.view, "destination");
        if (!d.empty() && !flag(d, "known")) {
          e.steps.push_back({"destination", "info",
                             absl::StrCat(ends.to_address, " is not a mesh workload: ferry passes the connection "
                                                           "through as plain TCP")});
        } else if (flag(d, "known") && !flag(d, "local")) {
          e.steps.push_back({"destination", "info",
                             absl::StrCat(text(d, "workload"), " runs on node ", text(d, "node"),
                                          ": ask with --from NAMESPACE/POD and a kubeconfig to hear that node too")});
        }
      }
    } else if (!destination->reached) {
      unreachable("destination", *destination, "the destination's");
    } else {
      // The source's node unheard: whether the source is a mesh workload, as the destination's knows.
      if (!source.reached) source_in_mesh = flag(member(destination->view, "source"), "known");
      if (destination->node != source.node) notReady("destination", *destination);
      const auto& d = member(destination->view, "destination");
      if (!flag(d, "known")) {
        e.steps.push_back({"destination", "info", absl::StrCat(text(d, "ip"), " is not a mesh workload")});
      } else {
        describeLocal("destination", d, destination->node, e, failHere());
      }
      explainMtlsAndPolicy(d);
    }
  }

  void explainMtlsAndPolicy(const json::object& d) {
    const auto& p = member(destination->view, "policy");
    if (p.empty()) return;
    const auto& mtls = member(p, "mtls");
    std::string mode = text(mtls, "mode", "?");
    std::string decided_by = text(mtls, "policy");
    decided_by = decided_by.empty() ? "no PeerAuthentication: the workload's default"
                                    : absl::StrCat("PeerAuthentication ", decided_by,
                                                   flag(mtls, "port_level") ? " (port level)" : "");
    bool plaintext = !source_in_mesh;
    bool strict_refusal = plaintext && mode == "STRICT";
    std::string mtls_line = absl::StrCat(mode, " (", decided_by, "); the source comes ",
                                         plaintext ? "in plaintext" : "over mTLS");
    if (strict_refusal) {
      fail({"mtls", "FAIL", mtls_line},
           absl::StrCat("plaintext refused: ", ends.from, " is not in the mesh and port ",
                        integer(member(p, "destination"), "port"), " of ", text(d, "workload"), " is STRICT (",
                        decided_by, ")"),
           "enrol the source (kubectl label namespace or pod ferry.io/dataplane=enabled), or make that port "
           "PERMISSIVE with a PeerAuthentication");
    } else {
      e.steps.push_back({"mtls", "ok", mtls_line});
    }
    std::string verdict = text(p, "verdict");
    std::string reason = text(p, "reason");
    if (verdict == "allow") {
      e.steps.push_back({"policy", "ok", reason});
    } else if (!strict_refusal) {
      std::string policy = text(p, "policy");
      std::string to_change = absl::StrCat("policy ", policy);
      if (policy.empty()) {  // no ALLOW policy matched: the ones that apply are what to change
        std::vector<std::string> allows;
        for (const auto& step : list(p, "policies")) {
          if (step.is_object() && text(step.get_object(), "action") == "ALLOW") allows.push_back(text(step.get_object(), "name"));
        }
        to_change = allows.empty() ? "the destination's ALLOW policies"
                                   : absl::StrCat("the ALLOW ", allows.size() == 1 ? "policy " : "policies ",
                                                  absl::StrJoin(allows, ", "));
      }
      fail({"policy", "FAIL", reason},
           absl::StrCat("an authorization policy denies it: ", reason),
           absl::StrCat("ferryctl --node ", destination->node, " policy check --from ", ends.from_ip, " --to ",
                        text(d, "workload"), ":", integer(member(p, "destination"), "port"),
                        " shows each policy's match; change ", to_change, " or the caller's service account"));
    }
  }

  void explainRecent() {
    std::vector<json::object> closed;
    auto take = [&closed](const NodeAnswer& n) {
      if (!n.reached) return;
      for (const auto& c : list(n.view, "closed")) {
        if (c.is_object()) closed.push_back(c.get_object());
      }
    };
    take(source);
    if (destination && destination->node != source.node) take(*destination);
    if (destination && destination->node == source.node &&
        text(destination->view, "to") != text(source.view, "to")) {
      take(*destination);  // the same node asked about a Service's endpoint: its inbound legs
    }
    std::stable_sort(closed.begin(), closed.end(), [](const auto& a, const auto& b) {
      return integer(a, "time_unix_ms") > integer(b, "time_unix_ms");
    });
    // One node asked twice (a Service and its endpoint there) lists the same records twice.
    auto same = [](const json::object& a, const json::object& b) {
      return integer(a, "time_unix_ms") == integer(b, "time_unix_ms") && text(a, "direction") == text(b, "direction") &&
             text(a, "source") == text(b, "source") && text(a, "destination") == text(b, "destination") &&
             text(a, "reason") == text(b, "reason");
    };
    std::vector<json::object> unique;
    for (auto& c : closed) {
      if (std::none_of(unique.begin(), unique.end(), [&](const json::object& u) { return same(u, c); })) {
        unique.push_back(std::move(c));
      }
    }
    closed = std::move(unique);
    if (closed.size() > kClosedShown) closed.resize(kClosedShown);
    for (auto& c : closed) e.closed.emplace_back(c);
    if (closed.empty()) {
      e.steps.push_back({"recent", "info", "no connection between them closed recently on either node"});
    } else {
      size_t failed = std::count_if(closed.begin(), closed.end(), [](const auto& c) { return text(c, "reason") != "ok"; });
      const auto& newest = closed.front();
      std::string reason = text(newest, "reason");
      std::string line = absl::StrCat(closed.size(), " closed recently (", failed, " failed); the newest: ",
                                      text(newest, "direction"), " ", reason,
                                      text(newest, "detail").empty() ? "" : absl::StrCat(" (", text(newest, "detail"), ")"));
      if (reason == "ok") {
        e.steps.push_back({"recent", "ok", line});
      } else {
        auto [cause, fix] = closeReasonCause(reason);
        fail({"recent", "FAIL", line}, absl::StrCat("the last connection closed with ", reason, ": ", cause), fix);
      }
    }
  }

  const ExplainEnds& ends;
  const NodeAnswer& source;
  const std::optional<NodeAnswer>& destination;
  Explanation e;
  bool source_in_mesh = false;
};

}  // namespace

Explanation explainConnection(const ExplainEnds& ends, const NodeAnswer& source,
                              const std::optional<NodeAnswer>& destination) {
  return Explainer(ends, source, destination).run();
}

std::string renderExplanation(const ExplainEnds& ends, const Explanation& e) {
  std::string out = absl::StrCat(ends.from, " (", ends.from_ip, ") -> ", ends.to,
                                 ends.to == ends.to_address ? "" : absl::StrCat(" (", ends.to_address, ")"), "\n");
  std::vector<std::vector<std::string>> rows = {{"STEP", "STATE", "WHAT"}};
  for (const auto& s : e.steps) rows.push_back({s.step, s.state, s.detail});
  absl::StrAppend(&out, table(rows));
  if (!e.closed.empty()) absl::StrAppend(&out, "\nrecent connections between them (times UTC):\n", closedRows(e.closed));
  if (e.cause.empty()) {
    absl::StrAppend(&out, "\nno problem found: ferry carries such a connection\n");
  } else {
    absl::StrAppend(&out, "\ncause: ", e.cause, "\nfix:   ", e.fix, "\n");
  }
  return out;
}

json::object explanationJson(const ExplainEnds& ends, const Explanation& e, const NodeAnswer& source,
                             const std::optional<NodeAnswer>& destination) {
  json::array steps;
  for (const auto& s : e.steps) steps.emplace_back(json::object{{"step", s.step}, {"state", s.state}, {"detail", s.detail}});
  auto node = [](const NodeAnswer& n) {
    json::object o{{"node", n.node}, {"reached", n.reached}};
    if (n.reached) o["view"] = n.view;
    else o["error"] = n.error;
    return o;
  };
  json::object out{{"from", ends.from},
                    {"from_ip", ends.from_ip},
                    {"to", ends.to},
                    {"to_address", ends.to_address},
                    {"steps", std::move(steps)},
                    {"cause", e.cause.empty() ? json::value(nullptr) : json::value(e.cause)},
                    {"fix", e.fix.empty() ? json::value(nullptr) : json::value(e.fix)},
                    {"closed", e.closed},
                    {"source_node", node(source)}};
  out["destination_node"] = destination ? json::value(node(*destination)) : json::value(nullptr);
  return out;
}

}  // namespace ferry::ferryctl
