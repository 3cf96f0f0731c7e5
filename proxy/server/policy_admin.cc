#include "proxy/server/policy_admin.h"

#include <charconv>
#include <map>

#include <boost/json.hpp>

#include "absl/strings/str_cat.h"
#include "proxy/common/net.h"
#include "proxy/common/strings.h"
#include "proxy/server/admin_json.h"
#include "proxy/session/context.h"

namespace ferry::server {
namespace {

namespace json = boost::json;

HttpResponse badRequest(std::string why) { return jsonError(400, std::move(why)); }

const workloads::Workload* findByKey(const workloads::Registry& registry, const std::string& key) {
  const workloads::Workload* found = nullptr;
  registry.forEach([&](const workloads::Workload& w) {
    if (found == nullptr && w.displayName() == key) found = &w;
  });
  return found;
}

json::object labelsJson(const policy::Labels& labels) {
  json::object out;
  for (const auto& [k, v] : labels) out[k] = v;
  return out;
}

json::object objectJson(const policy::Object& object) {
  json::object o;
  if (const auto* a = std::get_if<policy::AuthorizationPtr>(&object)) {
    const auto& p = **a;
    o["kind"] = "AuthorizationPolicy";
    o["name"] = p.meta.key();
    o["origin"] = p.meta.origin;
    o["action"] = policy::actionName(p.action);
    if (p.dry_run) o["dry_run"] = true;
    o["selector"] = p.selector ? json::value(labelsJson(*p.selector)) : json::value(nullptr);
    o["rules"] = p.rules.size();
    json::array l7;
    // Each is a field path ("spec.rules[0].to[0].operation.methods") or a `when` key.
    for (const auto& rule : p.rules) {
      for (const auto& f : rule.l7_fields) l7.push_back(json::value(f));
    }
    if (!l7.empty()) o["l7_fields"] = std::move(l7);
  } else {
    const auto& p = *std::get<policy::PeerAuthenticationPtr>(object);
    o["kind"] = "PeerAuthentication";
    o["name"] = p.meta.key();
    o["origin"] = p.meta.origin;
    o["mode"] = policy::mtlsModeName(p.mode);
    o["selector"] = p.selector ? json::value(labelsJson(*p.selector)) : json::value(nullptr);
    json::object ports;
    for (const auto& [port, mode] : p.port_level) ports[std::to_string(port)] = policy::mtlsModeName(mode);
    if (!ports.empty()) o["port_level_mtls"] = std::move(ports);
  }
  return o;
}

json::object destinationJson(const workloads::Workload& destination, const common::IpAddress& ip, uint32_t port) {
  return json::object{{"workload", destination.displayName()}, {"ip", ip.to_string()}, {"port", port}};
}

// The policies an explanation went through, in order, each with whether it matched and why.
json::array stepsJson(const std::vector<policy::Explanation::Step>& explained) {
  json::array steps;
  for (const auto& step : explained) {
    json::object s;
    s["name"] = step.policy->meta.key();
    s["action"] = policy::actionName(step.policy->action);
    if (step.policy->dry_run) s["dry_run"] = true;
    s["matched"] = step.matched;
    s["rule"] = step.rule;
    s["detail"] = step.detail;
    steps.push_back(std::move(s));
  }
  return steps;
}

// The answer about a connection from the node itself, when the datapath exempts the node:
// rule 3b of pod_ingress (docs/datapath.md) lets it through, and ferryd never sees it.
HttpResponse nodeExemptAnswer(json::object destination) {
  return jsonResponse(
      200, json::object{
               {"source", json::object{{"ip", nullptr}, {"workload", nullptr}, {"principal", nullptr}, {"node", true}}},
               {"destination", std::move(destination)},
               {"mtls", json::object{{"mode", "not applied"}, {"policy", nullptr}, {"port_level", false}}},
               {"policies", json::array{}},
               {"judged", false},
               {"verdict", "allow"},
               {"reason", "allowed: a socket of the node itself (the kubelet's probes) reaches the pod without "
                          "ferryd, whatever its mTLS mode and policies (datapath.exempt_node; docs/security.md, "
                          "\"Probes\")"},
               {"policy", nullptr},
               {"rule", -1},
           });
}

}  // namespace

boost::json::object policiesJson(const policy::Store& store) {
  auto set = store.current();
  json::array objects;
  set->forEach([&](const policy::Object& o) { objects.push_back(objectJson(o)); });
  json::array refused;
  for (const auto& r : store.refusals()) {
    refused.push_back(json::object{{"origin", r.origin},
                                   {"kind", r.kind},
                                   {"name", r.key},
                                   {"reason", r.reason},
                                   {"kept_previous", r.kept_previous}});
  }
  return json::object{{"root_namespace", set->rootNamespace()},
                      {"generation", set->generation()},
                      {"policies", std::move(objects)},
                      {"refused", std::move(refused)}};
}

HttpResponse policyDump(const policy::Store& store) { return jsonResponse(200, policiesJson(store)); }

HttpResponse policyCheck(const std::string& query, const workloads::Registry& registry,
                         const policy::PolicySet& policies, std::string_view trust_domain, bool node_exempt) {
  auto params = parseQuery(query);
  for (const char* required : {"from", "to", "port"}) {
    if (params[required].empty()) return badRequest(absl::StrCat("missing parameter '", required, "'"));
  }
  uint32_t port = 0;
  const std::string& port_text = params["port"];
  auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || end != port_text.data() + port_text.size() || port == 0 || port > 65535) {
    return badRequest(absl::StrCat("port: '", port_text, "' is not a port (1 to 65535)"));
  }
  const auto* destination = findByKey(registry, params["to"]);
  if (destination == nullptr) return badRequest(absl::StrCat("to: no workload ", params["to"], " (expected namespace/name)"));
  if (!registry.isLocal(*destination)) {
    return badRequest(absl::StrCat("to: ", params["to"], " runs on node ", destination->node.str(),
                                   ": its policies are enforced by that node's ferryd; ask it"));
  }
  if (destination->ips.empty()) return badRequest(absl::StrCat("to: ", params["to"], " has no IP"));

  policy::Request request;
  request.destination_ip = destination->ips.front();
  request.destination_port = static_cast<uint16_t>(port);
  json::object source;
  const std::string& from = params["from"];
  if (from == "node") {
    if (!node_exempt) {
      return badRequest(
          "from: node: datapath.exempt_node is off (or the datapath is), so the node's connections are judged as "
          "any plaintext client's: ask with the node's address as the pod sees it");
    }
    return nodeExemptAnswer(destinationJson(*destination, request.destination_ip, port));
  }
  const workloads::Workload* client = nullptr;
  if (auto ip = common::parseIp(from); ip.ok()) {
    request.source_ip = common::canonicalIp(*ip);
    client = registry.findByIp(request.source_ip);
  } else {
    client = findByKey(registry, from);
    if (client == nullptr) return badRequest(absl::StrCat("from: '", from, "' is neither an IP nor a workload (namespace/name)"));
    if (client->ips.empty()) return badRequest(absl::StrCat("from: ", from, " has no IP"));
    request.source_ip = client->ips.front();
  }
  bool plaintext = params["plaintext"] == "true" || client == nullptr;
  if (!plaintext) request.principal = policy::principalOf(client->spiffeId(trust_domain));
  source["ip"] = request.source_ip.to_string();
  source["workload"] = client != nullptr ? json::value(client->displayName()) : json::value(nullptr);
  source["principal"] = plaintext ? json::value(nullptr) : json::value(request.principal);

  auto e = policies.explain(*destination, request, session::fallbackMode(*destination));
  json::object mtls{{"mode", policy::mtlsModeName(e.mtls.mode)},
                    {"policy", e.mtls.policy ? json::value(e.mtls.policy->meta.key()) : json::value(nullptr)},
                    {"port_level", e.mtls.port_level}};
  bool allowed = e.decision.allowed && !e.plaintext_refused;
  std::string reason = e.plaintext_refused
                           ? absl::StrCat("denied: plaintext to port ", port, ", whose mTLS mode is STRICT")
                           : e.decision.reason;
  return jsonResponse(200, json::object{
                               {"source", std::move(source)},
                               {"destination", destinationJson(*destination, request.destination_ip, port)},
                               {"mtls", std::move(mtls)},
                               {"policies", stepsJson(e.steps)},
                               {"verdict", allowed ? "allow" : "deny"},
                               {"reason", reason},
                               {"policy", e.decision.policy ? json::value(e.decision.policy->meta.key()) : json::value(nullptr)},
                               {"rule", e.decision.rule},
                           });
}

}  // namespace ferry::server
