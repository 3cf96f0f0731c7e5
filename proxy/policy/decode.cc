#include "proxy/policy/decode.h"

#include <algorithm>
#include <charconv>
#include <initializer_list>
#include <utility>

#include "absl/strings/str_cat.h"
#include "proxy/common/status_macros.h"
#include "proxy/common/strings.h"
#include "proxy/config/workloads_file.h"
#include "proxy/config/yaml_reader.h"

namespace ferry::policy {
namespace {

using config::YamlField;
using config::YamlMap;
using config::YamlReader;

// Both versions Istio serves carry the same schema; v1alpha1 and others are refused.
constexpr const char* kVersions[] = {"security.istio.io/v1", "security.istio.io/v1beta1"};

// Keys of `when` that L4 cannot judge. Istio's ambient conversion counts
// source.serviceAccount, source.trustDomain and connection.sni among them too.
bool isL7ConditionKey(std::string_view key) {
  for (std::string_view prefix : {"request.headers[", "request.auth.claims[", "experimental.envoy.filters."}) {
    if (key.size() > prefix.size() + 1 && key.substr(0, prefix.size()) == prefix && key.back() == ']') return true;
  }
  for (std::string_view exact : {"request.auth.principal", "request.auth.audiences", "request.auth.presenter",
                                 "remote.ip", "connection.sni", "source.serviceAccount", "source.trustDomain"}) {
    if (key == exact) return true;
  }
  return false;
}

// Keys Istio's validation refuses with a reason of its own.
const char* retiredConditionKey(std::string_view key) {
  if (key == "destination.namespace") return "replaced by the policy's own namespace (metadata.namespace)";
  if (key.substr(0, 19) == "destination.labels[") return "replaced by the workload selector (spec.selector)";
  if (key == "destination.name" || key == "destination.user") return "only supported in v1alpha1";
  return nullptr;
}

class Decoder {
 public:
  Decoder(const YamlReader& reader, std::string_view origin) : r_(reader), origin_(origin) {}

  // `lenient_top`: keys outside spec other than the known ones are ignored (API objects).
  Decoded decode(const YamlField& doc, bool lenient_top) {
    Decoded out;
    out.object = absl::InternalError("not decoded");
    written_kind_.clear();
    auto status = decodeInto(doc, lenient_top, out);
    if (!status.ok()) {
      std::string who = written_kind_.empty() ? std::string("object") : written_kind_;
      if (!out.key.empty()) absl::StrAppend(&who, " ", out.key);
      out.object = absl::InvalidArgumentError(absl::StrCat(who, ": ", status.message()));
    }
    return out;
  }

 private:
  absl::Status decodeInto(const YamlField& doc, bool lenient_top, Decoded& out) {
    // Kind and name first, so that every later error names the object (even one of the
    // wrong kind, or with an unknown top-level key).
    FERRY_ASSIGN_OR_RETURN(auto top, r_.anyMap(doc));
    FERRY_ASSIGN_OR_RETURN(auto kind_field, r_.require(top, "kind"));
    FERRY_ASSIGN_OR_RETURN(auto kind, r_.string(kind_field));
    written_kind_ = kind;
    FERRY_ASSIGN_OR_RETURN(auto meta_field, r_.require(top, "metadata"));
    FERRY_ASSIGN_OR_RETURN(auto meta_map, r_.anyMap(meta_field));
    ObjectMeta meta;
    meta.origin = std::string(origin_);
    FERRY_ASSIGN_OR_RETURN(auto name_field, r_.require(meta_map, "name"));
    FERRY_ASSIGN_OR_RETURN(auto name, r_.string(name_field));
    if (!config::isObjectName(name)) return r_.error(name_field, absl::StrCat("'", name, "' is not a valid object name"));
    meta.name = name;
    meta.namespace_name = "default";
    if (auto ns_field = meta_map.find("namespace")) {
      FERRY_ASSIGN_OR_RETURN(auto ns, r_.string(*ns_field));
      if (!config::isObjectName(ns)) return r_.error(*ns_field, absl::StrCat("'", ns, "' is not a valid namespace"));
      meta.namespace_name = ns;
    }
    out.key = meta.key();
    if (kind != "AuthorizationPolicy" && kind != "PeerAuthentication") {
      // out.kind stays empty: the Store must not take this for a policy's new version.
      return r_.error(kind_field, absl::StrCat("'", kind, "' is not a policy kind (expected AuthorizationPolicy or PeerAuthentication)"));
    }
    out.kind = kind;
    if (!lenient_top) FERRY_RETURN_IF_ERROR(r_.map(doc, {"apiVersion", "kind", "metadata", "spec", "status"}).status());
    if (auto created = meta_map.find("creationTimestamp")) {
      FERRY_ASSIGN_OR_RETURN(auto text, r_.string(*created));
      meta.creation_timestamp = text;
    }
    bool dry_run = false;
    if (auto annotations = meta_map.find("annotations"); annotations && annotations->node->kind != config::Value::Kind::kNull) {
      FERRY_ASSIGN_OR_RETURN(auto entries, r_.anyMap(*annotations));
      if (auto f = entries.find("istio.io/dry-run")) {
        FERRY_ASSIGN_OR_RETURN(auto value, r_.boolean(*f));
        dry_run = value;
      }
    }
    policy_namespace_ = meta.namespace_name;
    FERRY_ASSIGN_OR_RETURN(auto version_field, r_.require(top, "apiVersion"));
    FERRY_ASSIGN_OR_RETURN(auto version, r_.string(version_field));
    if (std::find(std::begin(kVersions), std::end(kVersions), version) == std::end(kVersions)) {
      return r_.error(version_field,
                      absl::StrCat("apiVersion '", version, "' is not served (expected ", kVersions[0], " or ",
                                   kVersions[1], ")"));
    }
    // A missing spec is an empty one (Istio: an empty ALLOW policy denies everything).
    auto empty = std::make_shared<config::Value>();
    empty->kind = config::Value::Kind::kMap;
    YamlField spec{"spec", std::move(empty), top.line()};
    if (auto field = top.find("spec"); field && field->node->kind != config::Value::Kind::kNull) spec = *field;
    if (kind == "AuthorizationPolicy") {
      auto policy = std::make_shared<AuthorizationPolicy>();
      policy->meta = std::move(meta);
      policy->dry_run = dry_run;
      FERRY_RETURN_IF_ERROR(authorization(spec, *policy));
      out.object = Object(AuthorizationPtr(std::move(policy)));
    } else {
      auto policy = std::make_shared<PeerAuthentication>();
      policy->meta = std::move(meta);
      FERRY_RETURN_IF_ERROR(peerAuthentication(spec, *policy));
      out.object = Object(PeerAuthenticationPtr(std::move(policy)));
    }
    return absl::OkStatus();
  }

  absl::Status selector(const YamlMap& spec, std::optional<Labels>& out) {
    auto field = spec.find("selector");
    if (!field || field->node->kind == config::Value::Kind::kNull) return absl::OkStatus();
    FERRY_ASSIGN_OR_RETURN(auto map, r_.map(*field, {"matchLabels"}));
    Labels labels;
    if (auto ml = map.find("matchLabels"); ml && ml->node->kind != config::Value::Kind::kNull) {
      FERRY_ASSIGN_OR_RETURN(auto entries, r_.anyMap(*ml));
      for (const auto& [key, value] : entries.fields()) {
        if (key.empty()) return r_.error(value, "a label key must not be empty");
        FERRY_ASSIGN_OR_RETURN(auto text, r_.string(value));
        // Istio: selectors are exact; a '*' could never match a pod's label.
        if (key.find('*') != std::string::npos || text.find('*') != std::string::npos) {
          return r_.error(value, "a selector label has no wildcard: '*' is not allowed in its key or value");
        }
        labels.emplace_back(key, text);
      }
    }
    std::sort(labels.begin(), labels.end());
    // An empty selector selects every workload of the namespace, like no selector.
    if (!labels.empty()) out = std::move(labels);
    return absl::OkStatus();
  }

  absl::Status authorization(const YamlField& spec_field, AuthorizationPolicy& p) {
    FERRY_ASSIGN_OR_RETURN(auto spec, r_.map(spec_field, {"selector", "targetRef", "targetRefs", "rules", "action", "provider"}));
    for (std::string_view key : {"targetRef", "targetRefs"}) {
      if (auto f = spec.find(key)) {
        return r_.error(*f, "targets a Gateway or Service (a waypoint's policy); ferry enforces workload policies only");
      }
    }
    FERRY_RETURN_IF_ERROR(selector(spec, p.selector));
    if (auto f = spec.find("action")) {
      FERRY_ASSIGN_OR_RETURN(auto action, r_.string(*f));
      if (action == "ALLOW") {
        p.action = Action::kAllow;
      } else if (action == "DENY") {
        p.action = Action::kDeny;
      } else if (action == "AUDIT") {
        p.action = Action::kAudit;
      } else if (action == "CUSTOM") {
        return r_.error(*f, "action CUSTOM delegates to an external authorizer, which ferry does not support");
      } else {
        return r_.error(*f, absl::StrCat("unknown action '", action, "' (expected ALLOW, DENY or AUDIT)"));
      }
    }
    if (auto f = spec.find("provider")) return r_.error(*f, "provider is only for action CUSTOM");
    auto rules_field = spec.find("rules");
    bool no_rules = !rules_field || rules_field->node->kind == config::Value::Kind::kNull ||
                    (rules_field->node->kind == config::Value::Kind::kSequence && rules_field->node->items.empty());
    if (p.action == Action::kDeny && no_rules) {
      // Istio's validation: a DENY without rules would match nothing. `rules: []` holds no
      // rule either.
      return r_.error(rules_field ? *rules_field : spec_field,
                      "a DENY policy without rules is meaningless (add an empty rule {} to deny everything)");
    }
    if (p.dry_run && p.action == Action::kAudit) return r_.error(spec_field, "istio.io/dry-run is not for AUDIT policies");
    if (auto f = rules_field; !no_rules) {
      FERRY_ASSIGN_OR_RETURN(auto items, r_.sequence(*f));
      for (const auto& item : items) {
        Rule rule;
        FERRY_RETURN_IF_ERROR(this->rule(item, rule));
        p.rules.push_back(std::move(rule));
      }
    }
    return absl::OkStatus();
  }

  absl::Status rule(const YamlField& field, Rule& rule) {
    // Istio refuses a null rule ("`rule` must not be nil"); reading it as `{}` would make it
    // match everything.
    if (field.node->kind == config::Value::Kind::kNull) {
      return r_.error(field, "a rule must not be empty (write {} for a rule that matches everything)");
    }
    FERRY_ASSIGN_OR_RETURN(auto map, r_.map(field, {"from", "to", "when"}));
    if (auto f = map.find("from"); f && f->node->kind != config::Value::Kind::kNull) {
      FERRY_ASSIGN_OR_RETURN(auto items, r_.sequence(*f));
      if (items.empty()) return r_.error(*f, "an empty list matches nothing: leave `from` out to match any source");
      for (const auto& item : items) {
        FERRY_ASSIGN_OR_RETURN(auto entry, r_.map(item, {"source"}));
        FERRY_ASSIGN_OR_RETURN(auto src_field, r_.require(entry, "source"));
        Source source;
        FERRY_RETURN_IF_ERROR(this->source(src_field, source));
        for (auto& l7 : source.l7_fields) rule.l7_fields.push_back(l7);
        rule.from.push_back(std::move(source));
      }
    }
    if (auto f = map.find("to"); f && f->node->kind != config::Value::Kind::kNull) {
      FERRY_ASSIGN_OR_RETURN(auto items, r_.sequence(*f));
      if (items.empty()) return r_.error(*f, "an empty list matches nothing: leave `to` out to match any operation");
      for (const auto& item : items) {
        FERRY_ASSIGN_OR_RETURN(auto entry, r_.map(item, {"operation"}));
        FERRY_ASSIGN_OR_RETURN(auto op_field, r_.require(entry, "operation"));
        Operation op;
        FERRY_RETURN_IF_ERROR(operation(op_field, op));
        for (auto& l7 : op.l7_fields) rule.l7_fields.push_back(l7);
        rule.to.push_back(std::move(op));
      }
    }
    if (auto f = map.find("when"); f && f->node->kind != config::Value::Kind::kNull) {
      FERRY_ASSIGN_OR_RETURN(auto items, r_.sequence(*f));
      for (const auto& item : items) {
        Condition c;
        FERRY_RETURN_IF_ERROR(condition(item, c));
        if (c.attribute == Attribute::kL7) rule.l7_fields.push_back(absl::StrCat(item.path, " ", c.key));
        rule.when.push_back(std::move(c));
      }
    }
    return absl::OkStatus();
  }

  absl::Status source(const YamlField& field, Source& s) {
    FERRY_ASSIGN_OR_RETURN(auto map, r_.map(field, {"principals", "notPrincipals", "requestPrincipals",
                                                    "notRequestPrincipals", "namespaces", "notNamespaces",
                                                    "serviceAccounts", "notServiceAccounts", "trustDomains",
                                                    "notTrustDomains", "ipBlocks", "notIpBlocks", "remoteIpBlocks",
                                                    "notRemoteIpBlocks"}));
    for (const auto& [key, value] : map.fields()) {
      if (key == "principals" || key == "notPrincipals") {
        auto& out = key == "principals" ? s.principals.values : s.principals.not_values;
        FERRY_RETURN_IF_ERROR(strings(value, out));
        if (auto st = principalForm(value); !st.ok()) return st;
      } else if (key == "namespaces" || key == "notNamespaces") {
        FERRY_RETURN_IF_ERROR(strings(value, key == "namespaces" ? s.namespaces.values : s.namespaces.not_values));
      } else if (key == "serviceAccounts" || key == "notServiceAccounts") {
        FERRY_RETURN_IF_ERROR(
            serviceAccountList(value, key == "serviceAccounts" ? s.service_accounts.values : s.service_accounts.not_values));
      } else if (key == "trustDomains" || key == "notTrustDomains") {
        FERRY_RETURN_IF_ERROR(strings(value, key == "trustDomains" ? s.trust_domains.values : s.trust_domains.not_values));
        FERRY_RETURN_IF_ERROR(trustDomainForm(value));
      } else if (key == "ipBlocks" || key == "notIpBlocks") {
        FERRY_RETURN_IF_ERROR(ips(value, key == "ipBlocks" ? s.ip_blocks.values : s.ip_blocks.not_values));
      } else {
        // requestPrincipals (JWT), remoteIpBlocks (X-Forwarded-For): L7 only. Still checked.
        size_t count = 0;
        if (key.find("IpBlocks") != std::string::npos) {
          std::vector<IpBlock> blocks;
          FERRY_RETURN_IF_ERROR(ips(value, blocks));
          count = blocks.size();
        } else {
          std::vector<StringMatch> ignored;
          FERRY_RETURN_IF_ERROR(strings(value, ignored));
          count = ignored.size();
        }
        if (count > 0) s.l7_fields.push_back(value.path);
      }
    }
    // As Istio: an empty list sets nothing, and a source that sets nothing is refused (it
    // would match every connection).
    if (s.principals.empty() && s.namespaces.empty() && s.service_accounts.empty() && s.trust_domains.empty() &&
        s.ip_blocks.empty() && s.l7_fields.empty()) {
      return r_.error(field, "a source must set at least one field (an empty list sets nothing)");
    }
    if ((!s.principals.empty() || !s.namespaces.empty()) && !s.service_accounts.empty()) {
      return r_.error(field, "serviceAccounts cannot be combined with principals or namespaces");
    }
    return absl::OkStatus();
  }

  // Principals are written as Istio writes them: "<trust domain>/ns/<namespace>/sa/<name>".
  absl::Status principalForm(const YamlField& list) {
    FERRY_ASSIGN_OR_RETURN(auto items, r_.sequence(list));
    for (const auto& item : items) {
      if (item.node->scalar.rfind("spiffe://", 0) == 0) {
        return r_.error(item, "principals are written without spiffe:// (e.g. cluster.local/ns/shop/sa/frontend)");
      }
    }
    return absl::OkStatus();
  }

  // Istio: a trust domain is one name, never a path.
  absl::Status trustDomainForm(const YamlField& list) {
    FERRY_ASSIGN_OR_RETURN(auto items, r_.sequence(list));
    for (const auto& item : items) {
      if (item.node->scalar.find('/') != std::string::npos) {
        return r_.error(item, "a trust domain has no '/' (e.g. cluster.local)");
      }
    }
    return absl::OkStatus();
  }

  absl::Status serviceAccountList(const YamlField& field, std::vector<std::string>& out) {
    FERRY_ASSIGN_OR_RETURN(auto items, r_.sequence(field));
    for (const auto& item : items) {
      FERRY_ASSIGN_OR_RETURN(auto text, r_.string(item));
      auto slash = text.find('/');
      std::string ns = slash == std::string::npos ? policy_namespace_ : text.substr(0, slash);
      std::string name = slash == std::string::npos ? text : text.substr(slash + 1);
      if (text.find('*') != std::string::npos || !config::isObjectName(ns) || !config::isObjectName(name)) {
        return r_.error(item, absl::StrCat("'", text, "' is not a service account (<namespace>/<name> or <name>, no '*')"));
      }
      out.push_back(absl::StrCat(ns, "/", name));
    }
    return absl::OkStatus();
  }

  absl::Status operation(const YamlField& field, Operation& op) {
    FERRY_ASSIGN_OR_RETURN(auto map, r_.map(field, {"hosts", "notHosts", "ports", "notPorts", "methods", "notMethods", "paths",
                                  "notPaths"}));
    for (const auto& [key, value] : map.fields()) {
      if (key == "ports" || key == "notPorts") {
        FERRY_RETURN_IF_ERROR(ports(value, key == "ports" ? op.ports.values : op.ports.not_values));
      } else {
        FERRY_ASSIGN_OR_RETURN(auto items, r_.sequence(value));
        for (const auto& item : items) {
          FERRY_ASSIGN_OR_RETURN(auto text, r_.string(item));
          if (text.empty()) return r_.error(item, "empty value");
        }
        if (!items.empty()) op.l7_fields.push_back(value.path);
      }
    }
    if (op.ports.empty() && op.l7_fields.empty()) {
      return r_.error(field, "an operation must set at least one field (an empty list sets nothing)");
    }
    return absl::OkStatus();
  }

  absl::Status condition(const YamlField& field, Condition& c) {
    FERRY_ASSIGN_OR_RETURN(auto map, r_.map(field, {"key", "values", "notValues"}));
    FERRY_ASSIGN_OR_RETURN(auto key_field, r_.require(map, "key"));
    FERRY_ASSIGN_OR_RETURN(auto key, r_.string(key_field));
    c.key = key;
    if (key == "source.ip") {
      c.attribute = Attribute::kSourceIp;
    } else if (key == "source.namespace") {
      c.attribute = Attribute::kSourceNamespace;
    } else if (key == "source.principal") {
      c.attribute = Attribute::kSourcePrincipal;
    } else if (key == "destination.ip") {
      c.attribute = Attribute::kDestinationIp;
    } else if (key == "destination.port") {
      c.attribute = Attribute::kDestinationPort;
    } else if (isL7ConditionKey(key)) {
      c.attribute = Attribute::kL7;
    } else if (const char* why = retiredConditionKey(key)) {
      return r_.error(key_field, absl::StrCat("condition key '", key, "' is ", why));
    } else {
      return r_.error(key_field, absl::StrCat("unknown condition key '", key, "'"));
    }
    auto values = map.find("values");
    auto not_values = map.find("notValues");
    // Istio: at least one value. Without any, the condition would hold for every connection.
    size_t count = 0;
    for (auto [f, negated] : {std::pair{values, false}, std::pair{not_values, true}}) {
      if (!f) continue;
      FERRY_ASSIGN_OR_RETURN(auto items, r_.sequence(*f));
      count += items.size();
      switch (c.attribute) {
        case Attribute::kSourceIp:
        case Attribute::kDestinationIp:
          FERRY_RETURN_IF_ERROR(ips(*f, negated ? c.ips.not_values : c.ips.values));
          break;
        case Attribute::kDestinationPort:
          FERRY_RETURN_IF_ERROR(ports(*f, negated ? c.ports.not_values : c.ports.values));
          break;
        case Attribute::kSourceNamespace:
          FERRY_RETURN_IF_ERROR(strings(*f, negated ? c.strings.not_values : c.strings.values));
          break;
        case Attribute::kSourcePrincipal:
          FERRY_RETURN_IF_ERROR(strings(*f, negated ? c.strings.not_values : c.strings.values));
          FERRY_RETURN_IF_ERROR(principalForm(*f));  // as source.principals
          break;
        case Attribute::kL7:
          for (const auto& item : items) {
            FERRY_ASSIGN_OR_RETURN(auto text, r_.string(item));
            if (text.empty()) return r_.error(item, "empty value");
          }
          break;
      }
    }
    if (count == 0) return r_.error(field, "a condition needs values or notValues");
    return absl::OkStatus();
  }

  // A list whose every value `parse` turns into a T, or the first value's error at its line.
  template <class T, class Parse>
  absl::Status parsedList(const YamlField& field, std::vector<T>& out, Parse parse) {
    FERRY_ASSIGN_OR_RETURN(auto items, r_.sequence(field));
    for (const auto& item : items) {
      FERRY_ASSIGN_OR_RETURN(auto text, r_.string(item));
      auto value = parse(text);
      if (!value.ok()) return r_.error(item, value.status().message());
      out.push_back(*std::move(value));
    }
    return absl::OkStatus();
  }
  absl::Status strings(const YamlField& field, std::vector<StringMatch>& out) {
    return parsedList(field, out, parseStringMatch);
  }
  absl::Status ips(const YamlField& field, std::vector<IpBlock>& out) { return parsedList(field, out, parseIpBlock); }

  absl::Status ports(const YamlField& field, std::vector<uint16_t>& out) {
    FERRY_ASSIGN_OR_RETURN(auto items, r_.sequence(field));
    for (const auto& item : items) {
      // Istio writes ports as strings ("8080"); YAML also lets them be numbers.
      auto port = r_.integer(item, 0, 65535);
      if (!port.ok()) return port.status();
      out.push_back(static_cast<uint16_t>(*port));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<MtlsMode> mode(const YamlField& field) {
    FERRY_ASSIGN_OR_RETURN(auto map, r_.map(field, {"mode"}));
    auto f = map.find("mode");
    if (!f) return MtlsMode::kUnset;
    FERRY_ASSIGN_OR_RETURN(auto text, r_.string(*f));
    if (text == "UNSET") return MtlsMode::kUnset;
    if (text == "DISABLE") return MtlsMode::kDisable;
    if (text == "PERMISSIVE") return MtlsMode::kPermissive;
    if (text == "STRICT") return MtlsMode::kStrict;
    return r_.error(*f, absl::StrCat("unknown mTLS mode '", text, "' (expected UNSET, DISABLE, PERMISSIVE or STRICT)"));
  }

  absl::Status peerAuthentication(const YamlField& spec_field, PeerAuthentication& p) {
    FERRY_ASSIGN_OR_RETURN(auto spec, r_.map(spec_field, {"selector", "mtls", "portLevelMtls"}));
    FERRY_RETURN_IF_ERROR(selector(spec, p.selector));
    if (auto f = spec.find("mtls"); f && f->node->kind != config::Value::Kind::kNull) {
      FERRY_ASSIGN_OR_RETURN(auto m, mode(*f));
      p.mode = m;
    }
    if (auto f = spec.find("portLevelMtls"); f && f->node->kind != config::Value::Kind::kNull) {
      // Istio: a port is a workload's port, which only a workload selector pins down.
      if (!p.selector) return r_.error(*f, "portLevelMtls needs a workload selector (spec.selector.matchLabels)");
      FERRY_ASSIGN_OR_RETURN(auto entries, r_.anyMap(*f));
      if (entries.fields().empty()) return r_.error(*f, "portLevelMtls needs at least one port");
      for (const auto& [key, value] : entries.fields()) {
        uint32_t port = 0;
        auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), port);
        if (ec != std::errc() || end != key.data() + key.size() || port == 0 || port > 65535) {
          return r_.error(value, absl::StrCat("'", key, "' is not a port (1 to 65535)"));
        }
        FERRY_ASSIGN_OR_RETURN(auto m, mode(value));
        p.port_level.emplace_back(static_cast<uint16_t>(port), m);
      }
      std::sort(p.port_level.begin(), p.port_level.end());
    }
    return absl::OkStatus();
  }

  const YamlReader& r_;
  std::string_view origin_;
  std::string written_kind_;      // the document's kind as written, for messages
  std::string policy_namespace_;  // for bare serviceAccounts values
};

}  // namespace

absl::StatusOr<StringMatch> parseStringMatch(std::string_view text) {
  if (text.empty()) return absl::InvalidArgumentError("empty value");
  StringMatch m;
  if (text == "*") {
    m.kind = StringMatch::Kind::kPresence;
    return m;
  }
  size_t stars = std::count(text.begin(), text.end(), '*');
  if (stars == 0) {
    m.kind = StringMatch::Kind::kExact;
    m.text = std::string(text);
    return m;
  }
  if (stars == 1 && text.back() == '*') {
    m.kind = StringMatch::Kind::kPrefix;
    m.text = std::string(text.substr(0, text.size() - 1));
    return m;
  }
  if (stars == 1 && text.front() == '*') {
    m.kind = StringMatch::Kind::kSuffix;
    m.text = std::string(text.substr(1));
    return m;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "'", common::toAbsl(text), "': a '*' may only stand alone, or be the first or last character"));
}

absl::StatusOr<IpBlock> parseIpBlock(std::string_view text) {
  auto slash = text.find('/');
  auto bad = [&] {
    return absl::InvalidArgumentError(absl::StrCat("'", common::toAbsl(text), "' is not an IP address or CIDR block"));
  };
  auto ip = common::parseIp(text.substr(0, slash));
  if (!ip.ok()) return bad();
  IpBlock block;
  auto canonical = common::canonicalIp(*ip);
  int max = canonical.is_v4() ? 32 : 128;
  int len = max;
  if (slash != std::string_view::npos) {
    auto digits = text.substr(slash + 1);
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), len);
    if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() || len < 0 || len > max) return bad();
  }
  block.prefix_len = static_cast<uint8_t>(len);
  block.network = IpBlock::masked(canonical, block.prefix_len);
  return block;
}

absl::StatusOr<std::vector<Decoded>> decodeYamlFile(std::string_view text, std::string_view source_name,
                                                    std::string_view origin) {
  YamlReader reader(source_name);
  auto docs = reader.parseDocuments(text);
  if (!docs.ok()) return docs.status();
  std::vector<Decoded> out;
  Decoder decoder(reader, origin);
  for (const auto& doc : *docs) out.push_back(decoder.decode(doc, false));
  return out;
}

Decoded decodeJsonObject(std::string_view json, std::string_view source_name, std::string_view origin) {
  YamlReader reader(source_name);
  auto doc = reader.parseJsonDocument(json);
  if (!doc.ok()) return Decoded{"", "", doc.status()};
  return Decoder(reader, origin).decode(*doc, true);
}

}  // namespace ferry::policy
