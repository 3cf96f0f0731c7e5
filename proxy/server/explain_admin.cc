#include "proxy/server/explain_admin.h"

#include <boost/json/parse.hpp>

#include "absl/strings/str_cat.h"
#include "proxy/server/admin_json.h"
#include "proxy/server/policy_admin.h"

namespace ferry::server {

namespace json = boost::json;

absl::StatusOr<ExplainQuery> parseExplainQuery(const std::string& query) {
  auto params = parseQuery(query);
  ExplainQuery out;
  auto from = common::parseIp(params["from"]);
  if (!from.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("from: '", params["from"], "' is not an IP address"));
  }
  out.from = common::canonicalIp(*from);
  auto to = common::parseHostPort(params["to"]);
  if (!to.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("to: '", params["to"], "' is not IP:PORT (", to.status().message(), ")"));
  }
  out.to = {common::canonicalIp(to->ip), to->port};
  return out;
}

namespace {

// A workload as this node sees it: who it is, where it runs, whether it is captured here and
// the certificate held for it here.
json::object party(const common::IpAddress& ip, const ExplainFacts& facts) {
  json::object out{{"ip", ip.to_string()}};
  const workloads::Workload* w = facts.registry.findByIp(ip);
  out["known"] = w != nullptr;
  if (w == nullptr) return out;
  bool local = facts.registry.isLocal(*w);
  std::string identity = w->spiffeId(facts.trust_domain);
  out["workload"] = w->displayName();
  out["service_account"] = w->service_account.str();
  out["node"] = w->node.str();
  out["local"] = local;
  out["identity"] = identity;
  if (!local) return out;
  if (facts.capture) out["capture"] = facts.capture(ip);
  if (auto it = facts.certificates.find(identity); it != facts.certificates.end()) {
    out["certificate"] = it->second;
  } else {
    out["certificate"] = json::object{{"error", "no certificate held for it yet"}};
  }
  return out;
}

}  // namespace

json::object explainView(const ExplainQuery& query, const ExplainFacts& facts) {
  json::object out = facts.node;
  out["from"] = query.from.to_string();
  out["to"] = common::formatHostPort(query.to);
  out["source"] = party(query.from, facts);
  const workloads::ServiceBackends* service = facts.services.find({query.to.ip, query.to.port});
  if (service != nullptr) {
    json::array endpoints;
    for (const auto& [ip, port] : service->endpoints) {
      json::object e{{"ip", ip.to_string()}, {"port", port}};
      if (const auto* w = facts.registry.findByIp(ip)) {
        e["workload"] = w->displayName();
        e["node"] = w->node.str();
      }
      endpoints.emplace_back(std::move(e));
    }
    out["service"] = json::object{{"name", service->name.str()}, {"endpoints", std::move(endpoints)}};
    out["destination"] = nullptr;
    return out;
  }
  out["service"] = nullptr;
  json::object destination = party(query.to.ip, facts);
  destination["port"] = query.to.port;
  const workloads::Workload* target = facts.registry.findByIp(query.to.ip);
  const workloads::Workload* client = facts.registry.findByIp(query.from);
  out["destination"] = std::move(destination);
  if (target != nullptr && facts.registry.isLocal(*target)) {
    // As the destination's ferryd judges it: with the client's identity when the client is a
    // mesh workload (it comes over HBONE), in plaintext otherwise.
    std::string check = absl::StrCat("from=", query.from.to_string(), "&to=", target->displayName(),
                                     "&port=", query.to.port, client == nullptr ? "&plaintext=true" : "");
    HttpResponse verdict = policyCheck(check, facts.registry, facts.policies, facts.trust_domain, facts.node_exempt);
    boost::system::error_code ec;
    json::value parsed = json::parse(verdict.body, ec);
    if (!ec && parsed.is_object()) out["policy"] = std::move(parsed.get_object());
  }
  return out;
}

bool concerns(const session::ClosedConnection& closed, const ExplainQuery& query,
              const workloads::ServiceBackends* backends) {
  auto src = common::parseHostPort(closed.src, true);
  auto dst = common::parseHostPort(closed.dst, true);
  if (!src.ok() || !dst.ok()) return false;
  if (common::canonicalIp(src->ip) != query.from) return false;
  common::IpAddress to = common::canonicalIp(dst->ip);
  if (to == query.to.ip && dst->port == query.to.port) return true;
  if (backends == nullptr) return false;
  for (const auto& [ip, port] : backends->endpoints) {
    if (to == ip && dst->port == port) return true;
  }
  return false;
}

json::object closedJson(const session::ClosedConnection& c) {
  json::object out{
      {"direction", session::directionLabel(c.direction)},
      {"reason", session::closeReasonLabel(c.reason)},
      {"source", c.src},
      {"destination", c.dst},
      {"time_unix_ms", std::chrono::duration_cast<std::chrono::milliseconds>(c.time.time_since_epoch()).count()},
      {"duration_ms", c.duration.count()},
      {"sent_bytes", c.sent},
      {"received_bytes", c.received},
  };
  if (!c.source_principal.empty()) out["source_principal"] = c.source_principal;
  if (!c.destination_principal.empty()) out["destination_principal"] = c.destination_principal;
  if (!c.detail.empty()) out["detail"] = c.detail;
  if (!c.policy.empty()) out["policy"] = c.policy;
  return out;
}

}  // namespace ferry::server
