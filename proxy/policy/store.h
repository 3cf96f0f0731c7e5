#pragma once
// Where the policies in force live (docs/policy.md). Sources -- policy files, the API
// server's watches -- hand the Store decoded objects by origin; the Store refuses what is
// broken (naming the object, field and reason) while everything else keeps applying, and
// publishes a new PolicySet snapshot per change, rebuilding the index of only the
// namespaces that changed. Readers (workers) take current() per connection.
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "proxy/policy/decode.h"
#include "proxy/policy/policy_set.h"

namespace ferry::policy {

// One object the Store does not apply (what is shown by ferryctl, /config_dump, the log).
struct Refusal {
  std::string origin;  // "file /etc/ferry/policies.yaml", "kubernetes"
  std::string kind;    // "" when unreadable
  std::string key;     // "<namespace>/<name>", "" when unreadable
  std::string reason;  // names the field
  bool kept_previous = false;  // an earlier valid version of the object still applies
};

class Store {
 public:
  explicit Store(std::string root_namespace);

  // Any thread.
  std::shared_ptr<const PolicySet> current() const {
    std::lock_guard lock(mu_);
    return current_;
  }
  std::vector<Refusal> refusals() const;
  uint64_t refusedTotal() const { return refused_total_.load(std::memory_order_relaxed); }
  uint64_t changesTotal() const { return changes_total_.load(std::memory_order_relaxed); }

  // Control thread only, from here on. Each call publishes at most once, and calls the
  // listeners when something changed.
  struct Result {
    size_t changed = 0;                 // objects added, changed or removed (not those sent again as they were)
    std::vector<std::string> refused;   // one line per refused object
  };
  // Everything `origin` holds (of `kind` only, when given: one API list) becomes `objects`:
  // what the origin held and no longer lists goes. A refused object whose earlier version
  // came from the same origin keeps that version.
  Result replace(const std::string& origin, std::vector<Decoded> objects, std::optional<Kind> kind = std::nullopt);
  // One object added or changed (an API watch event).
  Result upsert(const std::string& origin, Decoded object);
  // One object gone.
  Result remove(const std::string& origin, Kind kind, const std::string& key);

  // A reload's new policy.root_namespace: published at once (the listeners are called).
  // A PeerAuthentication with a selector in the new root namespace is refused, as it would
  // be on arrival; one refused for the old root namespace applies when its source sends it
  // again (policy files are re-read by the reload; the API server's at its next relist).
  void setRootNamespace(std::string root_namespace);

  using Listener = std::function<void(const PolicySet& after)>;
  void subscribe(Listener listener) { listeners_.push_back(std::move(listener)); }

 private:
  struct Entry {
    std::string origin;
    Object object;
  };
  using ObjectKey = std::pair<Kind, std::string>;  // kind, "<namespace>/<name>"

  // Takes one decoded object from `origin` into objects_; false when refused (recorded in
  // refusals_). `seen`: the keys this call's batch holds (also a refused one that keeps its
  // previous version), a set: a batch of n objects looks each up, so a list made replace()
  // O(n^2) (235 ms for 10,000 policies, docs/benchmarks/policy.md); `changed`: the
  // namespaces whose bucket must be rebuilt.
  bool admit(const std::string& origin, Decoded& decoded, std::set<std::string>& changed, Result& result,
             std::set<ObjectKey>& seen);
  void refuse(const std::string& origin, const Decoded& decoded, std::string reason, bool kept, Result& result);
  void clearRefusal(const std::string& origin, const std::string& kind, const std::string& key);
  // Publishes objects_ as a new snapshot: the changed namespaces' buckets are rebuilt, the
  // others shared with the previous one.
  void publish(const std::set<std::string>& changed_namespaces);

  std::string root_namespace_;
  mutable std::mutex mu_;  // current_ and refusals_ (read by admin pages from other threads)
  std::shared_ptr<const PolicySet> current_;
  std::map<ObjectKey, Entry> objects_;
  std::map<std::pair<std::string, std::string>, Refusal> refusals_;  // (origin, kind/key or #index)
  std::vector<Listener> listeners_;
  uint64_t generation_ = 0;
  std::atomic<uint64_t> refused_total_{0};
  std::atomic<uint64_t> changes_total_{0};
};

}  // namespace ferry::policy
