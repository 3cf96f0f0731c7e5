#include "proxy/server/admin_pages.h"

#include <openssl/bn.h>
#include <openssl/x509.h>

#include <algorithm>
#include <utility>
#include <vector>

#include <boost/json.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proxy/common/log.h"
#include "proxy/datapath/datapath.h"
#include "proxy/identity/openssl_util.h"
#include "proxy/identity/svid.h"
#include "proxy/server/admin_json.h"
#include "proxy/server/identity_runtime.h"

namespace ferry::server {
namespace json = boost::json;

namespace {

constexpr char kText[] = "text/plain; charset=utf-8";

std::string serialHex(X509* cert) {
  BIGNUM* bn = ASN1_INTEGER_to_BN(X509_get0_serialNumber(cert), nullptr);
  char* hex = bn != nullptr ? BN_bn2hex(bn) : nullptr;
  std::string out = hex != nullptr ? hex : "";
  OPENSSL_free(hex);
  BN_free(bn);
  return out;
}

// A certificate's public facts (never its key).
json::object certJson(X509* cert) {
  json::array uris;
  for (const auto& uri : identity::uriSans(cert)) uris.emplace_back(uri);
  return json::object{
      {"subject", identity::nameToString(X509_get_subject_name(cert))},
      {"issuer", identity::nameToString(X509_get_issuer_name(cert))},
      {"serial", serialHex(cert)},
      {"not_before", identity::formatTime(identity::asn1TimeToTimePoint(X509_get0_notBefore(cert)))},
      {"not_after", identity::formatTime(identity::asn1TimeToTimePoint(X509_get0_notAfter(cert)))},
      {"uri_sans", std::move(uris)},
  };
}

std::string ipsText(const workloads::Workload& w, const char* separator) {
  std::vector<std::string> ips;
  for (const auto& ip : w.ips) ips.push_back(ip.to_string());
  return absl::StrJoin(ips, separator);
}

// ?format=json (true) or ?format=text (the default); anything else: the 400 to answer.
absl::StatusOr<bool> wantsJson(const std::string& query) {
  auto params = parseQuery(query);
  auto it = params.find("format");
  if (it == params.end() || it->second == "text") return false;
  if (it->second == "json") return true;
  return absl::InvalidArgumentError(absl::StrCat("format: '", it->second, "' is not served (text or json)"));
}

}  // namespace

json::object workloadsJson(const workloads::Registry& reg, std::string_view trust_domain) {
  std::vector<std::pair<std::string, json::object>> rows;
  rows.reserve(reg.size());
  reg.forEach([&](const workloads::Workload& w) {
    json::array ips;
    for (const auto& ip : w.ips) ips.emplace_back(ip.to_string());
    rows.emplace_back(w.displayName(), json::object{{"namespace", w.namespace_name.str()},
                                                    {"name", w.name},
                                                    {"service_account", w.service_account.str()},
                                                    {"node", w.node.str()},
                                                    {"ips", std::move(ips)},
                                                    {"identity", w.spiffeId(trust_domain)},
                                                    {"hbone", w.hbone},
                                                    {"local", reg.isLocal(w)}});
    if (w.telemetry) {  // the Istio metrics' names for it (docs/operations.md)
      rows.back().second["workload"] = w.telemetry->workload;
      rows.back().second["app"] = w.telemetry->canonical_service;
      rows.back().second["version"] = w.telemetry->canonical_revision;
    }
  });
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  json::array list;
  for (auto& [key, row] : rows) list.emplace_back(std::move(row));
  return json::object{{"count", reg.size()}, {"local", reg.localCount()}, {"workloads", std::move(list)}};
}

HttpResponse workloadsPage(const workloads::Registry& reg, std::string_view trust_domain, const std::string& query) {
  auto json_form = wantsJson(query);
  if (!json_form.ok()) return jsonError(400, std::string(json_form.status().message()));
  if (*json_form) return jsonResponse(200, workloadsJson(reg, trust_domain));
  std::vector<std::string> lines;
  lines.reserve(reg.size());
  reg.forEach([&](const workloads::Workload& w) {
    lines.push_back(absl::StrCat(w.displayName(), " node=", w.node.str(), " ips=", ipsText(w, ","),
                                 " identity=", w.spiffeId(trust_domain), " hbone=", w.hbone ? "true" : "false",
                                 reg.isLocal(w) ? " local" : "", "\n"));
  });
  std::sort(lines.begin(), lines.end());  // the registry keeps no order
  return HttpResponse{200, kText, absl::StrJoin(lines, "")};
}

json::object certsJson(IdentityRuntime& identity, const config::Config& config, const absl::Status& ready) {
  json::object out{{"source", config::identitySourceName(config.identity.source)},
                   {"trust_domain", config.trust_domain},
                   {"ready", ready.ok()}};
  if (!ready.ok()) out["reason"] = std::string(ready.message());
  json::array roots;
  if (auto bundle = identity.certs().bundle(); bundle.ok()) {
    for (const auto& root : (*bundle)->roots) roots.emplace_back(certJson(root.get()));
  } else {
    out["bundle_error"] = std::string(bundle.status().message());
  }
  out["roots"] = std::move(roots);
  IdentityErrors errors;
  auto held = identity.held(&errors);
  if (auto generation = identity.facts().ca_generation) out["ca_generation"] = *generation;
  std::sort(errors.begin(), errors.end());
  std::sort(held.begin(), held.end(), [](const auto& a, const auto& b) { return a->id.str() < b->id.str(); });
  json::array certs;
  for (const auto& svid : held) {
    json::object c = certJson(svid->leaf.get());
    c["identity"] = svid->id.str();
    c["chain"] = svid->intermediates.size();
    // Which CA signed it (after a CA rotation: the old intermediate or the new one).
    if (!svid->intermediates.empty()) c["issuer_serial"] = serialHex(svid->intermediates.front().get());
    certs.emplace_back(std::move(c));
  }
  for (auto& [id, why] : errors) certs.emplace_back(json::object{{"identity", id}, {"error", why}});
  out["certificates"] = std::move(certs);
  return out;
}

HttpResponse certsPage(IdentityRuntime& identity, const config::Config& config, const absl::Status& ready,
                       const std::string& query) {
  auto json_form = wantsJson(query);
  if (!json_form.ok()) return jsonError(400, std::string(json_form.status().message()));
  if (*json_form) return jsonResponse(200, certsJson(identity, config, ready));
  std::string body = absl::StrCat("source: ", config::identitySourceName(config.identity.source), "\n");
  absl::StrAppend(&body, "ready: ", ready.ok() ? "true" : absl::StrCat("false (", ready.message(), ")"), "\n");
  if (auto bundle = identity.certs().bundle(); bundle.ok()) {
    for (const auto& root : (*bundle)->roots) {
      absl::StrAppend(&body, "root: ", identity::nameToString(X509_get_subject_name(root.get())), " until ",
                      identity::formatTime(identity::asn1TimeToTimePoint(X509_get0_notAfter(root.get()))), "\n");
    }
  }
  IdentityFacts facts = identity.facts();
  if (facts.ca_generation) absl::StrAppend(&body, "ca_generation: ", *facts.ca_generation, "\n");
  if (!facts.ferry_ca.empty()) absl::StrAppend(&body, "ferry_ca: ", facts.ferry_ca, "\n");
  if (facts.cached) absl::StrAppend(&body, "certificates_cached: ", *facts.cached, "\n");
  return HttpResponse{200, kText, body};
}

json::object datapathJson(const datapath::Datapath* datapath) {
  if (datapath == nullptr) return json::object{{"enabled", false}};
  const auto& f = datapath->features();
  return json::object{{"enabled", true},
                      {"injection", datapath::injectionName(datapath->injection().mode)},
                      {"injection_reason", datapath->injection().why},
                      {"kernel", datapath::describe(f)},
                      {"features",
                       {{"tcx", f.tcx},
                        {"redirect_peer", f.redirect_peer},
                        {"egress_flag", f.egress_flag},
                        {"netkit", f.netkit},
                        {"ktls", f.ktls}}},
                      {"probe_errors", f.errors},
                      {"enrolled_pods", datapath->enrolledPods()}};
}

HttpResponse datapathPage(const datapath::Datapath* datapath, const std::string& query) {
  auto json_form = wantsJson(query);
  if (!json_form.ok()) return jsonError(400, std::string(json_form.status().message()));
  if (*json_form) return jsonResponse(200, datapathJson(datapath));
  if (datapath == nullptr) return HttpResponse{200, kText, "datapath: disabled\n"};
  std::string body = absl::StrCat("kernel: ", datapath::describe(datapath->features()),
                                  "\ninjection: ", datapath::injectionName(datapath->injection().mode), " (",
                                  datapath->injection().why, ")\nenrolled_pods: ", datapath->enrolledPods(), "\n");
  return HttpResponse{200, kText, body};
}

HttpResponse loggingPage(const HttpRequest& request) {
  std::string now(common::logLevelName(common::logLevel()));
  if (request.method == HttpMethod::kGet) return jsonResponse(200, json::object{{"level", now}});
  auto params = parseQuery(request.query);
  auto it = params.find("level");
  if (it == params.end() || it->second.empty()) {
    return jsonError(400, "POST /logging needs ?level=trace|debug|info|warn|error|off");
  }
  auto level = common::parseLogLevel(it->second);
  if (!level.ok()) return jsonError(400, absl::StrCat("level: ", level.status().message()));
  common::setLogLevel(*level);
  // Whatever the new level: an operator's change is always in the log.
  common::logLine(common::LogLevel::kInfo,
                  absl::StrCat("admin: log level ", it->second, " (was ", now, "), set through POST /logging"));
  return jsonResponse(200, json::object{{"level", it->second}, {"previous", now}});
}

}  // namespace ferry::server
