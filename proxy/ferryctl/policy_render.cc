#include "proxy/ferryctl/policy_render.h"

#include <charconv>
#include <vector>

#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proxy/common/strings.h"
#include "proxy/ferryctl/json_read.h"

namespace ferry::ferryctl {
namespace {

namespace json = boost::json;

json::value parse(absl::string_view text, boost::system::error_code& ec) {
  return json::parse(json::string_view(text.data(), text.size()), ec);
}

// "app=server,tier=web"
std::string labels(const json::object& selector) {
  std::vector<std::string> parts;
  for (const auto& [key, value] : selector) {
    parts.push_back(absl::StrCat(std::string(key), "=", value.is_string() ? std::string(value.get_string()) : "?"));
  }
  return absl::StrJoin(parts, ",");
}

// One object in force, on one line.
std::string objectLine(const json::object& o, const std::string& root_namespace) {
  std::string kind = text(o, "kind", "?");
  std::string name = text(o, "name", "?");
  std::vector<std::string> facts;
  if (kind == "AuthorizationPolicy") {
    facts.push_back(absl::StrCat(text(o, "action", "?"), flag(o, "dry_run") ? " (dry run: logged, not enforced)" : ""));
  } else {
    facts.push_back(text(o, "mode", "?"));
  }
  const json::value* selector = o.if_contains("selector");
  if (selector != nullptr && selector->is_object() && !selector->get_object().empty()) {
    facts.push_back(absl::StrCat("selects ", labels(selector->get_object())));
  } else {
    facts.push_back(name.substr(0, name.find('/')) == root_namespace ? "mesh-wide" : "whole namespace");
  }
  if (kind == "AuthorizationPolicy") {
    facts.push_back(absl::StrCat(number(o, "rules"), number(o, "rules") == "1" ? " rule" : " rules"));
    std::vector<std::string> l7;
    for (const auto& f : list(o, "l7_fields")) l7.push_back(f.is_string() ? std::string(f.get_string()) : "?");
    if (!l7.empty()) facts.push_back(absl::StrCat("L7 fields ", absl::StrJoin(l7, ", ")));
  }
  for (const auto& [port, mode] : member(o, "port_level_mtls")) {
    facts.push_back(absl::StrCat("port ", std::string(port), " ", mode.is_string() ? std::string(mode.get_string()) : "?"));
  }
  return absl::StrCat("  ", kind, " ", name, ": ", absl::StrJoin(facts, ", "), " [", text(o, "origin", "?"), "]\n");
}

}  // namespace

absl::StatusOr<CheckTarget> parseCheckTarget(absl::string_view text) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("--to '", text, "': ", why, " (expected <namespace>/<workload>:<port>)"));
  };
  size_t colon = text.rfind(':');
  if (colon == absl::string_view::npos) return bad("no port");
  CheckTarget out;
  out.workload = std::string(text.substr(0, colon));
  absl::string_view port = text.substr(colon + 1);
  size_t slash = out.workload.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == out.workload.size()) {
    return bad("the workload is not <namespace>/<name>");
  }
  unsigned value = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || value == 0 || value > 65535) {
    return bad(absl::StrCat("'", port, "' is not a port (1 to 65535)"));
  }
  out.port = static_cast<uint16_t>(value);
  return out;
}

std::string checkRequestTarget(absl::string_view from, const CheckTarget& to, bool plaintext) {
  return absl::StrCat("/policy/check?from=", common::percentEncode(common::toStd(from)), "&to=", common::percentEncode(to.workload),
                      "&port=", to.port, plaintext ? "&plaintext=true" : "");
}

absl::StatusOr<CheckVerdict> renderCheck(absl::string_view body) {
  auto parsed = parseObject(body, "/policy/check");
  if (!parsed.ok()) return parsed.status();
  const json::object& o = *parsed;
  std::string verdict = text(o, "verdict");
  if (verdict != "allow" && verdict != "deny") {
    return absl::DataLossError(absl::StrCat("ferryd's answer to /policy/check has no verdict: ", body.substr(0, 200)));
  }
  CheckVerdict out;
  out.allowed = verdict == "allow";
  std::string& t = out.text;
  absl::StrAppend(&t, "verdict: ", verdict, " (", text(o, "reason"), ")\n");

  const json::object& source = member(o, "source");
  std::string workload = text(source, "workload");
  std::string principal = text(source, "principal");
  if (flag(source, "node")) {
    absl::StrAppend(&t, "source: the node itself (the kubelet's probes), plaintext\n");
  } else {
    absl::StrAppend(&t, "source: ", workload.empty() ? "" : workload + " ", text(source, "ip", "?"),
                    workload.empty() ? " (no workload)" : "",
                    principal.empty() ? " plaintext (no peer identity)" : absl::StrCat(" principal ", principal), "\n");
  }
  const json::object& destination = member(o, "destination");
  absl::StrAppend(&t, "destination: ", text(destination, "workload", "?"), " ", text(destination, "ip", "?"),
                  " port ", number(destination, "port"), "\n");

  if (const auto* judged = o.if_contains("judged"); judged != nullptr && judged->is_bool() && !judged->as_bool()) {
    absl::StrAppend(&t, "mtls, policies: not applied (the connection does not pass through ferryd)\n");
    return out;
  }
  const json::object& mtls = member(o, "mtls");
  std::string decided_by = text(mtls, "policy");
  absl::StrAppend(&t, "mtls: ", text(mtls, "mode", "?"), " (",
                  decided_by.empty() ? "the workload's default"
                                     : absl::StrCat("PeerAuthentication ", decided_by,
                                                    flag(mtls, "port_level") ? ", port level" : ""),
                  ")\n");

  const json::array& steps = list(o, "policies");
  if (steps.empty()) {
    absl::StrAppend(&t, "policies: none apply\n");
  } else {
    absl::StrAppend(&t, "policies:\n");
    for (const auto& step : steps) {
      if (!step.is_object()) continue;
      const json::object& s = step.get_object();
      absl::StrAppend(&t, "  ", text(s, "action", "?"), " ", text(s, "name", "?"),
                      flag(s, "dry_run") ? " (dry run)" : "", ": ", text(s, "detail"), "\n");
    }
  }
  return out;
}

absl::StatusOr<std::string> renderList(absl::string_view body) {
  auto parsed = parseObject(body, "/policies");
  if (!parsed.ok()) return parsed.status();
  const json::object& o = *parsed;
  std::string root = text(o, "root_namespace", "?");
  const json::array& objects = list(o, "policies");
  size_t authorizations = 0;
  for (const auto& v : objects) authorizations += v.is_object() && text(v.get_object(), "kind") == "AuthorizationPolicy";
  std::string t = absl::StrCat("in force: ", plural(authorizations, "AuthorizationPolicy", "AuthorizationPolicies"),
                               ", ", plural(objects.size() - authorizations, "PeerAuthentication", "PeerAuthentications"),
                               " (root namespace ", root, ", generation ", number(o, "generation"), ")\n");
  for (const auto& v : objects) {
    if (v.is_object()) absl::StrAppend(&t, objectLine(v.get_object(), root));
  }
  const json::array& refused = list(o, "refused");
  absl::StrAppend(&t, "refused: ", refused.size(), "\n");
  for (const auto& v : refused) {
    if (!v.is_object()) continue;
    const json::object& r = v.get_object();
    absl::StrAppend(&t, "  ", text(r, "reason", "?"), " [", text(r, "origin", "?"), "]",
                    flag(r, "kept_previous") ? "; its previous version keeps applying" : "", "\n");
  }
  return t;
}

std::string errorMessage(int status, absl::string_view body) {
  boost::system::error_code ec;
  json::value v = parse(body, ec);
  if (!ec && v.is_object()) {
    std::string error = text(v.get_object(), "error");
    if (!error.empty()) return error;
  }
  absl::string_view first = body.substr(0, body.find('\n'));
  return absl::StrCat("HTTP ", status, first.empty() ? "" : ": ", absl::StripAsciiWhitespace(first));
}

}  // namespace ferry::ferryctl
