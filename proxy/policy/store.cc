#include "proxy/policy/store.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proxy/common/log.h"

namespace ferry::policy {
namespace {

Kind kindOf(const Object& object) {
  return std::holds_alternative<AuthorizationPtr>(object) ? Kind::kAuthorizationPolicy : Kind::kPeerAuthentication;
}

const ObjectMeta& metaOf(const Object& object) {
  if (const auto* a = std::get_if<AuthorizationPtr>(&object)) return (*a)->meta;
  return std::get<PeerAuthenticationPtr>(object)->meta;
}

// Same kind and content: re-reading it changes nothing.
bool sameObject(const Object& a, const Object& b) {
  if (a.index() != b.index()) return false;
  if (const auto* x = std::get_if<AuthorizationPtr>(&a)) return **x == *std::get<AuthorizationPtr>(b);
  return *std::get<PeerAuthenticationPtr>(a) == *std::get<PeerAuthenticationPtr>(b);
}

// Why a PeerAuthentication with a selector in the root namespace is refused.
std::string rootSelectorReason(const std::string& root_namespace) {
  return absl::StrCat("spec.selector: a PeerAuthentication in the root namespace (", root_namespace,
                      ") applies mesh-wide and cannot select workloads (Istio ignores it)");
}

std::string namespaceOf(const std::string& key) { return key.substr(0, key.find('/')); }

// Said once per policy version: what L4 makes of its L7 fields.
void noteL7(const AuthorizationPolicy& p) {
  for (size_t i = 0; i < p.rules.size(); ++i) {
    const Rule& rule = p.rules[i];
    if (rule.l7_fields.empty()) continue;
    FERRY_LOG(kWarn, "policy: AuthorizationPolicy %s (%s) rule %u uses fields only L7 can judge (%s): %s",
              p.meta.key(), actionName(p.action), static_cast<unsigned>(i), absl::StrJoin(rule.l7_fields, ", "),
              p.action == Action::kAllow ? "at L4 the rule never matches (fail closed)"
                                         : "it is judged on its L4 fields alone (fail closed)");
  }
}

}  // namespace

Store::Store(std::string root_namespace)
    : root_namespace_(std::move(root_namespace)), current_(std::make_shared<const PolicySet>(root_namespace_)) {}

std::vector<Refusal> Store::refusals() const {
  std::lock_guard lock(mu_);
  std::vector<Refusal> out;
  out.reserve(refusals_.size());
  for (const auto& [_, r] : refusals_) out.push_back(r);
  return out;
}

void Store::refuse(const std::string& origin, const Decoded& decoded, std::string reason, bool kept, Result& result) {
  Refusal r{origin, decoded.kind, decoded.key, std::move(reason), kept};
  FERRY_LOG(kWarn, "policy: refused %s from %s%s", r.reason, origin,
            kept ? " (its previous version keeps applying)" : "");
  result.refused.push_back(r.reason);
  refused_total_.fetch_add(1, std::memory_order_relaxed);
  std::string slot = decoded.key.empty() ? absl::StrCat("#", refusals_.size(), ":", r.reason)
                                         : absl::StrCat(decoded.kind, "/", decoded.key);
  std::lock_guard lock(mu_);
  refusals_[{origin, slot}] = std::move(r);
}

void Store::clearRefusal(const std::string& origin, const std::string& kind, const std::string& key) {
  std::lock_guard lock(mu_);
  refusals_.erase({origin, absl::StrCat(kind, "/", key)});
}

bool Store::admit(const std::string& origin, Decoded& decoded, std::set<std::string>& changed, Result& result,
                  std::set<ObjectKey>& seen) {
  if (!decoded.object.ok()) {
    bool kept = false;
    if (!decoded.key.empty() && !decoded.kind.empty()) {
      Kind kind = decoded.kind == "AuthorizationPolicy" ? Kind::kAuthorizationPolicy : Kind::kPeerAuthentication;
      auto it = objects_.find({kind, decoded.key});
      kept = it != objects_.end() && it->second.origin == origin;
      if (kept) seen.insert({kind, decoded.key});
    }
    refuse(origin, decoded, std::string(decoded.object.status().message()), kept, result);
    return false;
  }
  const Object& object = *decoded.object;
  const ObjectMeta& meta = metaOf(object);
  ObjectKey key{kindOf(object), meta.key()};
  auto named = [&](const std::string& why) { return absl::StrCat(kindName(key.first), " ", key.second, ": ", why); };
  if (seen.count(key) != 0) {
    refuse(origin, decoded, named(absl::StrCat("defined more than once in ", origin, " (the first one applies)")),
           false, result);
    return false;
  }
  auto it = objects_.find(key);
  if (it != objects_.end() && it->second.origin != origin) {
    refuse(origin, decoded, named(absl::StrCat("already defined by ", it->second.origin)), false, result);
    return false;
  }
  if (const auto* pa = std::get_if<PeerAuthenticationPtr>(&object);
      pa != nullptr && (*pa)->selector && meta.namespace_name == root_namespace_) {
    refuse(origin, decoded, named(rootSelectorReason(root_namespace_)), it != objects_.end(), result);
    if (it != objects_.end()) seen.insert(key);
    return false;
  }
  seen.insert(key);
  clearRefusal(origin, decoded.kind, decoded.key);
  // A file's new version lists every object again, an API relist or resync re-sends them:
  // the unchanged ones must not re-index their namespace nor publish a snapshot.
  if (it != objects_.end() && sameObject(it->second.object, object)) return true;
  if (const auto* a = std::get_if<AuthorizationPtr>(&object); a != nullptr && (*a)->hasL7()) noteL7(**a);
  objects_[key] = Entry{origin, object};
  changed.insert(meta.namespace_name);
  ++result.changed;
  return true;
}

Store::Result Store::replace(const std::string& origin, std::vector<Decoded> objects, std::optional<Kind> kind) {
  Result result;
  {
    // This origin's refusals are made anew from what it says now.
    std::lock_guard lock(mu_);
    for (auto it = refusals_.begin(); it != refusals_.end();) {
      bool of_kind = !kind || it->second.kind.empty() || it->second.kind == kindName(*kind);
      it = it->first.first == origin && of_kind ? refusals_.erase(it) : std::next(it);
    }
  }
  std::set<std::string> changed;
  std::set<ObjectKey> seen;
  for (auto& decoded : objects) admit(origin, decoded, changed, result, seen);
  for (auto it = objects_.begin(); it != objects_.end();) {
    bool mine = it->second.origin == origin && (!kind || it->first.first == *kind);
    if (mine && seen.count(it->first) == 0) {
      changed.insert(namespaceOf(it->first.second));
      ++result.changed;
      it = objects_.erase(it);
    } else {
      ++it;
    }
  }
  if (!changed.empty()) publish(changed);
  return result;
}

Store::Result Store::upsert(const std::string& origin, Decoded object) {
  Result result;
  std::set<std::string> changed;
  std::set<ObjectKey> seen;
  admit(origin, object, changed, result, seen);
  if (!changed.empty()) publish(changed);
  return result;
}

Store::Result Store::remove(const std::string& origin, Kind kind, const std::string& key) {
  Result result;
  clearRefusal(origin, kindName(kind), key);
  auto it = objects_.find({kind, key});
  if (it == objects_.end() || it->second.origin != origin) return result;
  objects_.erase(it);
  ++result.changed;
  publish({namespaceOf(key)});
  return result;
}

void Store::setRootNamespace(std::string root_namespace) {
  root_namespace_ = std::move(root_namespace);
  std::set<std::string> changed;
  for (auto it = objects_.begin(); it != objects_.end();) {
    const auto* pa = std::get_if<PeerAuthenticationPtr>(&it->second.object);
    if (pa == nullptr || !(*pa)->selector || (*pa)->meta.namespace_name != root_namespace_) {
      ++it;
      continue;
    }
    Decoded decoded{kindName(it->first.first), it->first.second, it->second.object};
    Result ignored;
    refuse(it->second.origin, decoded,
           absl::StrCat(decoded.kind, " ", decoded.key, ": ", rootSelectorReason(root_namespace_)), false, ignored);
    changed.insert(root_namespace_);
    it = objects_.erase(it);
  }
  // Every snapshot names its root namespace: one is published even when no bucket changed.
  publish(changed);
}

void Store::publish(const std::set<std::string>& changed_namespaces) {
  auto next = std::make_shared<PolicySet>(root_namespace_);
  auto previous = current();
  next->buckets_ = previous->buckets_;  // shares every namespace that did not change
  next->authorization_count_ = previous->authorization_count_;
  next->peer_authentication_count_ = previous->peer_authentication_count_;
  for (const auto& ns : changed_namespaces) {
    if (auto it = next->buckets_.find(ns); it != next->buckets_.end()) {
      next->authorization_count_ -= it->second->authorization_count;
      next->peer_authentication_count_ -= it->second->peer_authentication_count;
      next->buckets_.erase(it);
    }
    std::vector<AuthorizationPtr> authorizations;
    std::vector<PeerAuthenticationPtr> peers;
    std::string prefix = ns + "/";
    for (Kind kind : {Kind::kAuthorizationPolicy, Kind::kPeerAuthentication}) {
      for (auto it = objects_.lower_bound({kind, prefix});
           it != objects_.end() && it->first.first == kind && it->first.second.compare(0, prefix.size(), prefix) == 0;
           ++it) {
        if (const auto* a = std::get_if<AuthorizationPtr>(&it->second.object)) authorizations.push_back(*a);
        if (const auto* p = std::get_if<PeerAuthenticationPtr>(&it->second.object)) peers.push_back(*p);
      }
    }
    if (authorizations.empty() && peers.empty()) continue;
    auto bucket = PolicySet::Bucket::build(authorizations, peers);
    next->authorization_count_ += bucket->authorization_count;
    next->peer_authentication_count_ += bucket->peer_authentication_count;
    next->buckets_[ns] = std::move(bucket);
  }
  next->generation_ = ++generation_;
  std::shared_ptr<const PolicySet> published = std::move(next);
  {
    std::lock_guard lock(mu_);
    current_ = published;
  }
  changes_total_.fetch_add(1, std::memory_order_relaxed);
  for (const auto& listener : listeners_) listener(*published);
}

}  // namespace ferry::policy
