#pragma once
// The workload registry: who is on which IP, with which identity, on which node.
//
// Readers (the workers, on every connection) take the current Registry, an immutable
// snapshot, from Store::current(): one reference-count increment under a mutex nobody holds
// for longer than that. The writer (the control thread) changes the registry by key
// ("<namespace>/<name>"): a batch of changes copies only the shards its IPs fall in (1/256 of
// the index each) and publishes a new snapshot sharing everything else, so one pod's change
// costs the same in a registry of 100 workloads as in one of 150,000. Subscribers get the
// batch as a Delta (before/after of each workload that changed) and apply just that (the
// datapath enrols one pod, adds one capture IP).
#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "proxy/workloads/workload.h"

namespace ferry::workloads {

using WorkloadPtr = std::shared_ptr<const Workload>;

class Registry {
 public:
  // Shards of the IP index: a change copies one (about 600 entries at 150,000 workloads).
  static constexpr size_t kShards = 256;

  static std::shared_ptr<const Registry> empty(std::string_view local_node);

  // nullptr when unknown. An IPv4-mapped IPv6 address (::ffff:a.b.c.d, as dual-stack
  // sockets report IPv4 peers) finds the workload of a.b.c.d. The pointer lives as long as
  // this snapshot.
  const Workload* findByIp(const IpAddress& ip) const;
  // Only workloads whose node is the local node.
  const Workload* findLocalByIp(const IpAddress& ip) const;
  // The same, shared: for what outlives the snapshot (a connection's record holds the
  // workloads on both sides until it is written). One reference-count increment.
  WorkloadPtr sharedByIp(const IpAddress& ip) const;
  WorkloadPtr sharedLocalByIp(const IpAddress& ip) const;
  bool isLocal(const Workload& w) const { return w.node == local_node_; }

  size_t size() const { return size_; }
  size_t localCount() const { return local_->size(); }
  const std::string& localNode() const { return local_node_.str(); }
  // The workloads of this node, by key.
  const std::vector<WorkloadPtr>& local() const { return *local_; }
  // Every workload once, in no particular order (admin pages; O(n)).
  void forEach(const std::function<void(const Workload&)>& visit) const;

 private:
  friend class Store;
  friend class ServiceTable;  // shards by the same hash
  using Shard = absl::flat_hash_map<IpAddress, WorkloadPtr>;
  static size_t shardOf(const IpAddress& canonical_ip);
  // The index entry for `ip`, or nullptr.
  const WorkloadPtr* slot(const IpAddress& ip) const;

  InternedString local_node_;
  std::array<std::shared_ptr<const Shard>, kShards> shards_;
  std::shared_ptr<const std::vector<WorkloadPtr>> local_;
  size_t size_ = 0;
};

// One workload that changed: added (before null), removed (after null) or replaced.
struct Change {
  WorkloadPtr before;
  WorkloadPtr after;
};
struct Delta {
  std::vector<Change> changes;
  bool empty() const { return changes.empty(); }
};

// One requested change: `workload` set = add or replace the workload with this key (its
// displayName()); unset = remove it.
struct Update {
  std::string key;
  std::optional<Workload> workload;
};

// Services whose ClusterIP is captured (workload_source kubernetes; docs/kubernetes.md):
// ClusterIP:port -> the ready endpoints that are mesh workloads, as pod ip:target port
// (named target ports already resolved through the EndpointSlices). A Service without such
// endpoints is absent: kube-proxy routes it as before.
struct ServiceBackends {
  InternedString name;  // "<namespace>/<name>", for logs and the Istio metrics' destination_service
  std::vector<std::pair<IpAddress, uint16_t>> endpoints;
  friend bool operator==(const ServiceBackends&, const ServiceBackends&) = default;
};
using ServicePort = std::pair<IpAddress, uint16_t>;  // ClusterIP (canonical), port

// An immutable snapshot of the captured Service ports, sharded like the registry so that
// one Service's change copies 1/64 of it (about 160 ports at 10,000 Services).
class ServiceTable {
 public:
  static constexpr size_t kShards = 64;
  ServiceTable();
  // nullptr when the port is not captured. The pointer lives as long as this snapshot.
  const ServiceBackends* find(const ServicePort& port) const;
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // The Services ("<namespace>/<name>") that list `endpoint` (pod ip, target port) among
  // their backends, once per port that does (a Service may reach one endpoint port through
  // several of its own); empty when none. What an inbound connection's claim to have called a
  // Service is checked against: a bounded set, never a name taken on trust (the Istio
  // metrics' destination_service at the destination reporter). Lives as long as this snapshot.
  const std::vector<InternedString>& servicesOf(const ServicePort& endpoint) const;

 private:
  friend class Store;
  using Shard = absl::flat_hash_map<ServicePort, ServiceBackends>;
  using EndpointShard = absl::flat_hash_map<ServicePort, std::vector<InternedString>>;
  static size_t shardOf(const ServicePort& port);
  std::array<std::shared_ptr<const Shard>, kShards> shards_;
  // The reverse index, endpoint -> Services, sharded by the endpoint's IP as the registry is.
  std::array<std::shared_ptr<const EndpointShard>, kShards> endpoint_shards_;
  size_t size_ = 0;
};

// One requested change of the table: `backends` set = add or replace, unset = remove.
struct ServiceUpdate {
  ServicePort port;
  std::optional<ServiceBackends> backends;
};
// One port that changed, and whether it is captured before and after (the datapath needs
// only those two bits: a ClusterIP is in the capture map while any of its ports is).
struct ServiceChange {
  ServicePort port;
  bool before = false, after = false;
};

class Store {
 public:
  explicit Store(std::string_view local_node);

  // Any thread.
  std::shared_ptr<const Registry> current() const {
    std::lock_guard lock(current_mu_);
    return current_;
  }
  uint64_t generation() const { return generation_.load(std::memory_order_relaxed); }
  // Updates refused (an IP another workload holds) since start.
  uint64_t rejected() const { return rejected_.load(std::memory_order_relaxed); }
  // Any thread: the Services whose ClusterIPs are captured (never null).
  std::shared_ptr<const ServiceTable> services() const {
    std::lock_guard lock(current_mu_);
    return services_;
  }
  // Control thread: applies the updates (copying only the shards they touch), publishes a
  // new table when something changed and tells subscribers what did.
  using ServiceListener = std::function<void(const ServiceTable& after, const std::vector<ServiceChange>& changes)>;
  void subscribeServices(ServiceListener listener) { service_listeners_.push_back(std::move(listener)); }
  void applyServices(std::vector<ServiceUpdate> updates);

  // Control thread only, from here on.
  using Listener = std::function<void(const Registry& after, const Delta& delta)>;
  void subscribe(Listener listener) { listeners_.push_back(std::move(listener)); }

  struct Result {
    size_t changed = 0;                 // workloads added, replaced or removed
    std::vector<std::string> rejected;  // why, one line per refused update
  };
  // Applies the updates in order and publishes once (nothing when nothing changed: an
  // update equal to what is there is no change). An update that would take an IP another
  // workload holds, or has no IP, is refused (the workload stays as it was), counted and
  // reported; the rest of the batch applies.
  Result apply(std::vector<Update> updates);
  // Makes the registry exactly `all` (a full state: the file, a Kubernetes list), as the
  // smallest batch of updates that gets there.
  Result replaceAll(std::vector<Workload> all);

 private:
  // The shards a batch changes, copied from the snapshot on first touch (null: untouched).
  using ShardCopies = std::array<std::shared_ptr<Registry::Shard>, Registry::kShards>;
  // A change of the batch being applied: the last update of its key, and what it replaces.
  struct Pending {
    Update* update;
    WorkloadPtr before;
  };

  // A shard being changed by the current batch: copied from the snapshot on first touch.
  Registry::Shard& writable(ShardCopies& copies, size_t shard);
  // The workload holding `ip` as the batch has it so far; null when none does.
  const WorkloadPtr* ownerOf(const ShardCopies& copies, const IpAddress& ip) const;
  // The updates that change something, the last of each key, in the order of their keys'
  // first updates.
  std::vector<Pending> changesOf(std::vector<Update>& updates) const;
  // Why the workload of update `key` cannot be indexed (no IP, or one another workload
  // holds); empty when it can.
  std::string conflictOf(const std::string& key, const Workload& w, const ShardCopies& copies) const;
  // Keeps local_by_key_ for a change of `key`; whether the local workloads changed.
  bool updateLocal(const std::string& key, const WorkloadPtr& before, const WorkloadPtr& after);
  // Makes the batch's shards the current registry and tells the listeners.
  void publish(ShardCopies& copies, bool local_changed, const Delta& delta);

  InternedString local_node_;
  mutable std::mutex current_mu_;  // not std::atomic<shared_ptr>: see registry.cc
  std::shared_ptr<const Registry> current_;
  absl::flat_hash_map<std::string, WorkloadPtr> by_key_;
  std::map<std::string, WorkloadPtr> local_by_key_;
  std::vector<Listener> listeners_;
  std::shared_ptr<const ServiceTable> services_ = std::make_shared<const ServiceTable>();
  std::vector<ServiceListener> service_listeners_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<uint64_t> rejected_{0};
};

}  // namespace ferry::workloads
