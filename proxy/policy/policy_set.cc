#include "proxy/policy/policy_set.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ferry::policy {
namespace {

template <class T, class Value, class Match>
bool matcherMatches(const Matcher<T>& m, const Value& value, Match match) {
  if (!m.values.empty() && std::none_of(m.values.begin(), m.values.end(), [&](const T& v) { return match(v, value); })) {
    return false;
  }
  return std::none_of(m.not_values.begin(), m.not_values.end(), [&](const T& v) { return match(v, value); });
}

bool stringMatches(const Matcher<StringMatch>& m, std::string_view value) {
  return matcherMatches(m, value, [](const StringMatch& s, std::string_view v) { return s.matches(v); });
}
bool ipMatches(const Matcher<IpBlock>& m, const common::IpAddress& ip) {
  return matcherMatches(m, ip, [](const IpBlock& b, const common::IpAddress& a) { return b.contains(a); });
}
bool portMatches(const Matcher<uint16_t>& m, uint16_t port) {
  return matcherMatches(m, port, [](uint16_t p, uint16_t v) { return p == v; });
}

bool sourceMatches(const Source& s, const Request& r) {
  if (!stringMatches(s.principals, r.principal) || !stringMatches(s.namespaces, r.sourceNamespace()) ||
      !stringMatches(s.trust_domains, r.trustDomain()) || !ipMatches(s.ip_blocks, r.source_ip)) {
    return false;
  }
  if (s.service_accounts.empty()) return true;
  std::string sa = r.serviceAccount();
  return matcherMatches(s.service_accounts, sa, [](const std::string& want, const std::string& have) {
    return !have.empty() && want == have;
  });
}

bool conditionMatches(const Condition& c, const Request& r) {
  switch (c.attribute) {
    case Attribute::kSourceIp:
      return ipMatches(c.ips, r.source_ip);
    case Attribute::kDestinationIp:
      return ipMatches(c.ips, r.destination_ip);
    case Attribute::kDestinationPort:
      return portMatches(c.ports, r.destination_port);
    case Attribute::kSourceNamespace:
      return stringMatches(c.strings, r.sourceNamespace());
    case Attribute::kSourcePrincipal:
      return stringMatches(c.strings, r.principal);
    case Attribute::kL7:
      return true;  // ignored: ruleMatches already refused an ALLOW rule that has one
  }
  return false;
}

// The oldest (creationTimestamp, RFC 3339 sorts as text; files have none and come after),
// then by name: Istio's rule for two PeerAuthentications of one scope.
bool older(const PeerAuthenticationPtr& a, const PeerAuthenticationPtr& b) {
  const auto& ta = a->meta.creation_timestamp;
  const auto& tb = b->meta.creation_timestamp;
  if (ta.empty() != tb.empty()) return !ta.empty();
  if (ta != tb) return ta < tb;
  return a->meta.name < b->meta.name;
}

bool byKey(const AuthorizationPtr& a, const AuthorizationPtr& b) {
  if (a->meta.namespace_name != b->meta.namespace_name) return a->meta.namespace_name < b->meta.namespace_name;
  return a->meta.name < b->meta.name;
}

std::string labelKey(const Labels& selector) { return absl::StrCat(selector.front().first, "=", selector.front().second); }

// The label index of one namespace, for either kind: a policy without a selector applies
// to the whole namespace; one with a selector is filed under its first label.
template <class Ptr>
using LabelIndex = absl::flat_hash_map<std::string, std::vector<Ptr>>;
template <class Ptr>
void file(const Ptr& p, std::vector<Ptr>& whole, LabelIndex<Ptr>& by_label) {
  if (p->selector) {
    by_label[labelKey(*p->selector)].push_back(p);
  } else {
    whole.push_back(p);
  }
}
// The selector policies of `index` that pick a workload with `labels`: only those filed
// under one of its own labels are looked at.
template <class Ptr, class Visit>
void forEachSelecting(const LabelIndex<Ptr>& index, const workloads::LabelSet& labels, Visit visit) {
  if (index.empty()) return;
  for (const auto& [key, value] : labels.get()) {
    auto it = index.find(absl::StrCat(key, "=", value));
    if (it == index.end()) continue;
    for (const auto& p : it->second) {
      if (selects(p->selector, labels)) visit(p);
    }
  }
}

std::string policyName(const AuthorizationPolicy& p) {
  return absl::StrCat(actionName(p.action), " policy ", p.meta.key());
}

}  // namespace

bool selects(const std::optional<Labels>& selector, const workloads::LabelSet& labels) {
  if (!selector) return true;
  for (const auto& [key, value] : *selector) {
    const std::string* have = labels.find(key);
    if (have == nullptr || *have != value) return false;
  }
  return true;
}

bool ruleMatches(const Rule& rule, Action action, const Request& request) {
  // ztunnel: an ALLOW rule that needs L7 to be judged never matches (fail closed); a DENY
  // or AUDIT rule is judged on its L4 parts alone (the L7 ones count as matched).
  if (!rule.l7_fields.empty() && action == Action::kAllow) return false;
  if (!rule.from.empty() &&
      std::none_of(rule.from.begin(), rule.from.end(), [&](const Source& s) { return sourceMatches(s, request); })) {
    return false;
  }
  if (!rule.to.empty() && std::none_of(rule.to.begin(), rule.to.end(), [&](const Operation& o) {
        return portMatches(o.ports, request.destination_port);
      })) {
    return false;
  }
  return std::all_of(rule.when.begin(), rule.when.end(), [&](const Condition& c) { return conditionMatches(c, request); });
}

std::shared_ptr<const PolicySet::Bucket> PolicySet::Bucket::build(const std::vector<AuthorizationPtr>& authorizations,
                                                                  const std::vector<PeerAuthenticationPtr>& peers) {
  auto b = std::make_shared<Bucket>();
  for (const auto& p : authorizations) file(p, b->whole, b->by_label);
  for (const auto& p : peers) file(p, b->peer_whole, b->peer_by_label);
  std::sort(b->peer_whole.begin(), b->peer_whole.end(), older);
  for (auto& [_, list] : b->peer_by_label) std::sort(list.begin(), list.end(), older);
  b->authorization_count = authorizations.size();
  b->peer_authentication_count = peers.size();
  return b;
}

PolicySet::PolicySet(std::string root_namespace) : root_namespace_(std::move(root_namespace)) {}

const PolicySet::Bucket* PolicySet::bucket(const std::string& namespace_name) const {
  auto it = buckets_.find(namespace_name);
  return it == buckets_.end() ? nullptr : it->second.get();
}

template <class Visit>
void PolicySet::forEachApplicable(const workloads::Workload& destination, Visit visit) const {
  auto scan = [&](const Bucket* b) {
    if (b == nullptr) return;
    for (const auto& p : b->whole) visit(p);
    forEachSelecting(b->by_label, destination.labels, visit);
  };
  // The root namespace's policies apply mesh-wide (with a selector: to the workloads of
  // every namespace that carry its labels).
  scan(bucket(root_namespace_));
  if (destination.namespace_name.str() != root_namespace_) scan(bucket(destination.namespace_name.str()));
}

std::vector<AuthorizationPtr> PolicySet::applicable(const workloads::Workload& destination) const {
  std::vector<AuthorizationPtr> out;
  forEachApplicable(destination, [&](const AuthorizationPtr& p) { out.push_back(p); });
  std::stable_sort(out.begin(), out.end(), [](const AuthorizationPtr& a, const AuthorizationPtr& b) {
    if (a->action != b->action) {
      auto order = [](Action x) { return x == Action::kDeny ? 0 : x == Action::kAllow ? 1 : 2; };
      return order(a->action) < order(b->action);
    }
    return byKey(a, b);
  });
  return out;
}

Decision PolicySet::authorize(const workloads::Workload& destination, const Request& request) const {
  Decision d;
  AuthorizationPtr deny;
  int deny_rule = -1;
  AuthorizationPtr allow;
  int allow_rule = -1;
  size_t allow_policies = 0;
  auto firstMatch = [&](const AuthorizationPolicy& p) {
    for (size_t i = 0; i < p.rules.size(); ++i) {
      if (ruleMatches(p.rules[i], p.action, request)) return static_cast<int>(i);
    }
    return -1;
  };
  forEachApplicable(destination, [&](const AuthorizationPtr& p) {
    // A dry-run policy is judged and logged, never enforced.
    if (p->dry_run) {
      if (firstMatch(*p) >= 0) d.audited.push_back(p);
      return;
    }
    switch (p->action) {
      case Action::kDeny:
        // The first by name when several match: the reason must not depend on index order.
        if (deny && !byKey(p, deny)) return;
        if (int i = firstMatch(*p); i >= 0) deny = p, deny_rule = i;
        return;
      case Action::kAllow:
        ++allow_policies;
        if (allow && !byKey(p, allow)) return;
        if (int i = firstMatch(*p); i >= 0) allow = p, allow_rule = i;
        return;
      case Action::kAudit:
        if (firstMatch(*p) >= 0) d.audited.push_back(p);
        return;
    }
  });
  if (deny) {
    d.allowed = false;
    d.reason = absl::StrCat("denied by ", policyName(*deny), " rule ", deny_rule);
    d.policy = std::move(deny);
    d.rule = deny_rule;
  } else if (allow) {
    d.reason = absl::StrCat("allowed by ", policyName(*allow), " rule ", allow_rule);
    d.policy = std::move(allow);
    d.rule = allow_rule;
  } else if (allow_policies > 0) {
    d.allowed = false;
    d.reason = absl::StrCat("denied: no rule of the ", allow_policies, " ALLOW ",
                            allow_policies == 1 ? "policy" : "policies", " for ", destination.displayName(), " matched");
  } else {
    d.reason = "allowed: no ALLOW policy applies";
  }
  std::sort(d.audited.begin(), d.audited.end(), byKey);
  return d;
}

PeerAuthenticationPtr PolicySet::workloadPeer(const Bucket* b, const workloads::Workload& destination) const {
  if (b == nullptr) return nullptr;
  PeerAuthenticationPtr best;
  forEachSelecting(b->peer_by_label, destination.labels, [&](const PeerAuthenticationPtr& p) {
    if (!best || older(p, best)) best = p;
  });
  return best;
}

MtlsDecision PolicySet::mtls(const workloads::Workload& destination, uint16_t port, MtlsMode fallback) const {
  MtlsDecision out;
  const Bucket* own = bucket(destination.namespace_name.str());
  const Bucket* root = bucket(root_namespace_);
  // Workload level: the port first, then its mode.
  if (auto p = workloadPeer(own, destination)) {
    auto it = std::lower_bound(p->port_level.begin(), p->port_level.end(), std::pair{port, MtlsMode::kUnset});
    if (port != 0 && it != p->port_level.end() && it->first == port && it->second != MtlsMode::kUnset) {
      out.mode = it->second;
      out.policy = p;
      out.port_level = true;
      return out;
    }
    if (p->mode != MtlsMode::kUnset) {
      out.mode = p->mode;
      out.policy = p;
      return out;
    }
  }
  for (const Bucket* b : {own, root}) {
    if (b == nullptr || b->peer_whole.empty()) continue;
    const auto& p = b->peer_whole.front();  // the oldest
    if (p->mode != MtlsMode::kUnset) {
      out.mode = p->mode;
      out.policy = p;
      return out;
    }
  }
  out.mode = fallback == MtlsMode::kUnset ? MtlsMode::kPermissive : fallback;
  return out;
}

bool PolicySet::capturesPlaintext(const workloads::Workload& destination, MtlsMode fallback) const {
  bool any_policy = false;
  forEachApplicable(destination, [&](const AuthorizationPtr&) { any_policy = true; });
  if (any_policy) return true;
  if (mtls(destination, 0, fallback).mode == MtlsMode::kStrict) return true;
  if (auto p = workloadPeer(bucket(destination.namespace_name.str()), destination)) {
    for (const auto& [port, mode] : p->port_level) {
      if (mode == MtlsMode::kStrict) return true;
    }
  }
  return false;
}

Explanation PolicySet::explain(const workloads::Workload& destination, const Request& request,
                               MtlsMode fallback) const {
  Explanation e;
  e.decision = authorize(destination, request);
  e.mtls = mtls(destination, request.destination_port, fallback);
  e.plaintext_refused = request.principal.empty() && e.mtls.mode == MtlsMode::kStrict;
  for (const auto& p : applicable(destination)) {
    Explanation::Step step;
    step.policy = p;
    std::vector<std::string> notes;
    for (size_t i = 0; i < p->rules.size(); ++i) {
      const Rule& rule = p->rules[i];
      if (!rule.l7_fields.empty()) {
        notes.push_back(absl::StrCat("rule ", i, " uses L7 fields (", absl::StrJoin(rule.l7_fields, ", "), "): ",
                                     p->action == Action::kAllow ? "never matches at L4" : "judged on its L4 fields"));
      }
      if (step.rule < 0 && ruleMatches(rule, p->action, request)) step.rule = static_cast<int>(i);
    }
    step.matched = step.rule >= 0;
    if (p->rules.empty()) notes.insert(notes.begin(), "no rules: matches nothing");
    notes.insert(notes.begin(), step.matched ? absl::StrCat("rule ", step.rule, " matched") : std::string("no rule matched"));
    step.detail = absl::StrJoin(notes, "; ");
    e.steps.push_back(std::move(step));
  }
  return e;
}

void PolicySet::forEach(const std::function<void(const Object&)>& visit) const {
  std::vector<std::string> names;
  names.reserve(buckets_.size());
  for (const auto& [ns, _] : buckets_) names.push_back(ns);
  std::sort(names.begin(), names.end());
  for (const auto& ns : names) {
    const Bucket& b = *buckets_.at(ns);
    std::vector<AuthorizationPtr> authz = b.whole;
    for (const auto& [_, list] : b.by_label) authz.insert(authz.end(), list.begin(), list.end());
    std::sort(authz.begin(), authz.end(), byKey);
    for (const auto& p : authz) visit(Object(p));
    std::vector<PeerAuthenticationPtr> peers = b.peer_whole;
    for (const auto& [_, list] : b.peer_by_label) peers.insert(peers.end(), list.begin(), list.end());
    std::sort(peers.begin(), peers.end(), [](const auto& a, const auto& c) { return a->meta.name < c->meta.name; });
    for (const auto& p : peers) visit(Object(p));
  }
}

}  // namespace ferry::policy
