#include "proxy/workloads/registry.h"

#include <algorithm>
#include <functional>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace ferry::workloads {
namespace {

using Shard = absl::flat_hash_map<IpAddress, WorkloadPtr>;

const std::shared_ptr<const Shard>& emptyShard() {
  static auto* shard = new std::shared_ptr<const Shard>(std::make_shared<const Shard>());
  return *shard;
}

}  // namespace

size_t Registry::shardOf(const IpAddress& ip) {
  // std::hash of an address may be weak in its low bits; mix before taking them.
  uint64_t h = std::hash<IpAddress>{}(ip);
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  return static_cast<size_t>(h % kShards);
}

std::shared_ptr<const Registry> Registry::empty(std::string_view local_node) {
  auto registry = std::make_shared<Registry>();
  registry->local_node_ = intern(local_node);
  registry->shards_.fill(emptyShard());
  registry->local_ = std::make_shared<const std::vector<WorkloadPtr>>();
  return registry;
}

const WorkloadPtr* Registry::slot(const IpAddress& ip) const {
  IpAddress key = common::canonicalIp(ip);
  const Shard& shard = *shards_[shardOf(key)];
  auto it = shard.find(key);
  return it == shard.end() ? nullptr : &it->second;
}

const Workload* Registry::findByIp(const IpAddress& ip) const {
  const auto* w = slot(ip);
  return w == nullptr ? nullptr : w->get();
}

const Workload* Registry::findLocalByIp(const IpAddress& ip) const {
  const Workload* w = findByIp(ip);
  return w != nullptr && isLocal(*w) ? w : nullptr;
}

WorkloadPtr Registry::sharedByIp(const IpAddress& ip) const {
  const auto* w = slot(ip);
  return w == nullptr ? nullptr : *w;
}

WorkloadPtr Registry::sharedLocalByIp(const IpAddress& ip) const {
  const auto* w = slot(ip);
  return w != nullptr && isLocal(**w) ? *w : nullptr;
}

void Registry::forEach(const std::function<void(const Workload&)>& visit) const {
  for (const auto& shard : shards_) {
    for (const auto& [ip, w] : *shard) {
      if (w->ips.front() == ip) visit(*w);  // once, under its first IP
    }
  }
}

Store::Store(std::string_view local_node) : local_node_(intern(local_node)), current_(Registry::empty(local_node)) {}

Registry::Shard& Store::writable(ShardCopies& copies, size_t shard) {
  if (!copies[shard]) copies[shard] = std::make_shared<Registry::Shard>(*current_->shards_[shard]);
  return *copies[shard];
}

const WorkloadPtr* Store::ownerOf(const ShardCopies& copies, const IpAddress& ip) const {
  size_t s = Registry::shardOf(ip);
  const Registry::Shard& shard = copies[s] ? *copies[s] : *current_->shards_[s];
  auto it = shard.find(ip);
  return it == shard.end() ? nullptr : &it->second;
}

std::vector<Store::Pending> Store::changesOf(std::vector<Update>& updates) const {
  // The last update of a key wins (a source may batch a pod's add and its removal).
  std::vector<Pending> pending;
  absl::flat_hash_map<std::string_view, size_t> slot;
  for (Update& update : updates) {
    auto [it, fresh] = slot.try_emplace(update.key, pending.size());
    if (fresh) {
      pending.push_back(Pending{&update, nullptr});
    } else {
      pending[it->second].update = &update;
    }
  }
  std::erase_if(pending, [&](Pending& p) {
    auto it = by_key_.find(p.update->key);
    if (it != by_key_.end()) p.before = it->second;
    if (p.update->workload) return p.before && *p.before == *p.update->workload;
    return !p.before;
  });
  return pending;
}

std::string Store::conflictOf(const std::string& key, const Workload& w, const ShardCopies& copies) const {
  // A workload without an address could never be found; a source must not send one.
  std::string conflict = w.ips.empty() ? absl::StrCat(key, ": has no IP address") : "";
  for (const auto& ip : w.ips) {
    if (const WorkloadPtr* owner = ownerOf(copies, ip)) {
      conflict = absl::StrCat(key, ": ", ip.to_string(), " is already used by ", (*owner)->displayName());
      break;
    }
  }
  return conflict;
}

bool Store::updateLocal(const std::string& key, const WorkloadPtr& before, const WorkloadPtr& after) {
  bool was_local = before && before->node == local_node_;
  bool is_local = after && after->node == local_node_;
  if (!was_local && !is_local) return false;
  if (is_local) {
    local_by_key_[key] = after;
  } else {
    local_by_key_.erase(key);
  }
  return true;
}

Store::Result Store::apply(std::vector<Update> updates) {
  Result result;
  Delta delta;
  ShardCopies copies;
  bool local_changed = false;
  std::vector<Pending> pending = changesOf(updates);
  // Every workload that changes leaves the index first, so that IPs can move between
  // workloads of one batch (two pods swapping addresses, an IP reused by a new pod).
  for (const Pending& p : pending) {
    if (!p.before) continue;
    for (const auto& ip : p.before->ips) {
      Registry::Shard& shard = writable(copies, Registry::shardOf(ip));
      if (auto it = shard.find(ip); it != shard.end() && it->second == p.before) shard.erase(it);
    }
  }
  for (Pending& p : pending) {
    const std::string& key = p.update->key;
    WorkloadPtr after;
    if (p.update->workload) {
      if (std::string conflict = conflictOf(key, *p.update->workload, copies); !conflict.empty()) {
        // Refused: the workload stays as it was, on those of its IPs nobody took meanwhile.
        result.rejected.push_back(std::move(conflict));
        rejected_.fetch_add(1, std::memory_order_relaxed);
        if (p.before) {
          for (const auto& ip : p.before->ips) {
            if (ownerOf(copies, ip) == nullptr) writable(copies, Registry::shardOf(ip))[ip] = p.before;
          }
        }
        continue;
      }
      after = std::make_shared<const Workload>(*std::move(p.update->workload));
      for (const auto& ip : after->ips) writable(copies, Registry::shardOf(ip))[ip] = after;
      by_key_[key] = after;
    } else {
      by_key_.erase(key);
    }
    if (updateLocal(key, p.before, after)) local_changed = true;
    delta.changes.push_back(Change{std::move(p.before), std::move(after)});
  }
  result.changed = delta.changes.size();
  if (delta.empty()) return result;
  publish(copies, local_changed, delta);
  return result;
}

void Store::publish(ShardCopies& copies, bool local_changed, const Delta& delta) {
  auto next = std::make_shared<Registry>(*current_);
  for (size_t s = 0; s < Registry::kShards; ++s) {
    if (copies[s]) next->shards_[s] = std::move(copies[s]);
  }
  next->size_ = by_key_.size();
  if (local_changed) {
    auto local = std::make_shared<std::vector<WorkloadPtr>>();
    local->reserve(local_by_key_.size());
    for (const auto& [key, w] : local_by_key_) local->push_back(w);
    next->local_ = std::move(local);
  }
  {
    // A mutex, not std::atomic<std::shared_ptr>: libstdc++ 12 implements that with a lock
    // bit ThreadSanitizer cannot see, so every reader was reported as a race (make
    // test-tsan); the critical section is one reference-count increment either way.
    std::lock_guard lock(current_mu_);
    current_ = next;
  }
  generation_.fetch_add(1, std::memory_order_relaxed);
  for (const auto& listener : listeners_) listener(*next, delta);
}

Store::Result Store::replaceAll(std::vector<Workload> all) {
  std::vector<Update> updates;
  absl::flat_hash_set<std::string> keep;
  keep.reserve(all.size());
  for (const Workload& w : all) keep.insert(w.displayName());
  for (const auto& [key, w] : by_key_) {
    if (!keep.contains(key)) updates.push_back(Update{key, std::nullopt});
  }
  for (Workload& w : all) {
    std::string key = w.displayName();
    if (auto it = by_key_.find(key); it != by_key_.end() && *it->second == w) continue;
    updates.push_back(Update{std::move(key), std::move(w)});
  }
  return apply(std::move(updates));
}

ServiceTable::ServiceTable() {
  static const auto* empty = new std::shared_ptr<const Shard>(std::make_shared<const Shard>());
  static const auto* no_endpoints = new std::shared_ptr<const EndpointShard>(std::make_shared<const EndpointShard>());
  shards_.fill(*empty);
  endpoint_shards_.fill(*no_endpoints);
}

const std::vector<InternedString>& ServiceTable::servicesOf(const ServicePort& endpoint) const {
  static const std::vector<InternedString> kNone;
  const EndpointShard& shard = *endpoint_shards_[shardOf(endpoint)];
  auto it = shard.find(endpoint);
  return it == shard.end() ? kNone : it->second;
}

size_t ServiceTable::shardOf(const ServicePort& port) {
  return Registry::shardOf(port.first) % kShards;  // a ClusterIP's ports share a shard
}

const ServiceBackends* ServiceTable::find(const ServicePort& port) const {
  const Shard& shard = *shards_[shardOf(port)];
  auto it = shard.find(port);
  return it == shard.end() ? nullptr : &it->second;
}

void Store::applyServices(std::vector<ServiceUpdate> updates) {
  auto before = services();
  auto next = std::make_shared<ServiceTable>(*before);  // shares every shard
  std::array<std::shared_ptr<ServiceTable::Shard>, ServiceTable::kShards> copies;
  std::array<std::shared_ptr<ServiceTable::EndpointShard>, ServiceTable::kShards> endpoint_copies;
  // The reverse index follows: a shard of it is copied once per batch, on first touch.
  auto endpoints = [&](const ServicePort& endpoint) -> std::vector<InternedString>& {
    size_t s = ServiceTable::shardOf(endpoint);
    if (!endpoint_copies[s]) {
      endpoint_copies[s] = std::make_shared<ServiceTable::EndpointShard>(*next->endpoint_shards_[s]);
      next->endpoint_shards_[s] = endpoint_copies[s];
    }
    return (*endpoint_copies[s])[endpoint];
  };
  std::vector<ServiceChange> changes;
  for (auto& u : updates) {
    size_t s = ServiceTable::shardOf(u.port);
    auto found = next->shards_[s]->find(u.port);
    const ServiceBackends* was = found != next->shards_[s]->end() ? &found->second : nullptr;
    if (u.backends ? (was != nullptr && *was == *u.backends) : was == nullptr) continue;  // no change
    if (!copies[s]) {
      copies[s] = std::make_shared<ServiceTable::Shard>(*next->shards_[s]);
      next->shards_[s] = copies[s];
      auto again = copies[s]->find(u.port);
      was = again != copies[s]->end() ? &again->second : nullptr;
    }
    if (was != nullptr) {
      for (const auto& endpoint : was->endpoints) {
        auto& names = endpoints(endpoint);
        if (auto it = std::find(names.begin(), names.end(), was->name); it != names.end()) names.erase(it);
        if (names.empty()) endpoint_copies[ServiceTable::shardOf(endpoint)]->erase(endpoint);
      }
    }
    if (u.backends) {
      for (const auto& endpoint : u.backends->endpoints) endpoints(endpoint).push_back(u.backends->name);
    }
    changes.push_back({u.port, was != nullptr, u.backends.has_value()});
    if (u.backends) {
      (*copies[s])[u.port] = *std::move(u.backends);
    } else {
      copies[s]->erase(u.port);
    }
    next->size_ += (u.backends ? 1 : 0) - (was != nullptr ? 1 : 0);
  }
  if (changes.empty()) return;
  {
    std::lock_guard lock(current_mu_);
    services_ = next;
  }
  for (const auto& listener : service_listeners_) listener(*next, changes);
}

}  // namespace ferry::workloads
