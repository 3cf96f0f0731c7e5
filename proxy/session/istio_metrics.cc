#include "proxy/session/istio_metrics.h"

#include <array>

#include "absl/strings/str_cat.h"
#include "proxy/telemetry/metrics.h"

namespace ferry::session {
namespace {

constexpr std::string_view kUnknown = "unknown";

std::string_view orUnknown(const std::string& s) { return s.empty() ? kUnknown : std::string_view(s); }

// Empty when the party has no service account (unknown).
std::string principalOf(const std::string& trust_domain, const TrafficKey::Party& p) {
  if (p.account.empty()) return {};
  return workloads::spiffeIdOf(trust_domain, p.ns.str(), p.account.str());
}

// The eight labels that name one end of a connection, for the source or the destination.
struct SideLabels {
  std::string_view workload, canonical_service, canonical_revision, workload_namespace, principal, app, version,
      cluster;
};
constexpr SideLabels kSourceLabels{"source_workload", "source_canonical_service", "source_canonical_revision",
                                   "source_workload_namespace", "source_principal", "source_app",
                                   "source_version", "source_cluster"};
constexpr SideLabels kDestinationLabels{"destination_workload", "destination_canonical_service",
                                        "destination_canonical_revision", "destination_workload_namespace",
                                        "destination_principal", "destination_app", "destination_version",
                                        "destination_cluster"};

// Appends one end's labels: app and version repeat the canonical service and revision, as
// ztunnel reports them; the cluster is known with the workload.
void addSide(std::vector<telemetry::Label>& out, const SideLabels& names, const TrafficKey::Party& party,
             const std::string& principal, const std::string& cluster_id) {
  const workloads::TelemetryMeta* meta = party.meta.get();
  std::string_view service = meta ? orUnknown(meta->canonical_service) : kUnknown;
  std::string_view revision = meta ? orUnknown(meta->canonical_revision) : kUnknown;
  out.insert(out.end(), {{names.workload, meta ? orUnknown(meta->workload) : kUnknown},
                         {names.canonical_service, service},
                         {names.canonical_revision, revision},
                         {names.workload_namespace, orUnknown(party.ns.str())},
                         {names.principal, orUnknown(principal)},
                         {names.app, service},
                         {names.version, revision},
                         {names.cluster, meta ? std::string_view(cluster_id) : kUnknown}});
}

struct KeyPtrHash {
  size_t operator()(const TrafficKey* k) const { return absl::HashOf(*k); }
};
struct KeyPtrEq {
  bool operator()(const TrafficKey* a, const TrafficKey* b) const { return *a == *b; }
};

TrafficKey::Party partyOf(const workloads::Workload* w) {
  if (w == nullptr) return {};
  return {w->telemetry, w->namespace_name, w->service_account};
}
}  // namespace

TrafficKey& TrafficKey::from(const workloads::Workload* w) {
  source = partyOf(w);
  return *this;
}

TrafficKey& TrafficKey::to(const workloads::Workload* w) {
  destination = partyOf(w);
  return *this;
}

IstioMetrics::IstioMetrics(size_t workers, const config::Config& config)
    : trust_domain_(config.trust_domain), telemetry_(config.telemetry) {
  for (size_t i = 0; i < workers; ++i) shards_.push_back(std::make_unique<Shard>());
}

void IstioMetrics::Sums::add(const TrafficSeries& s) {
  opened += s.opened.load(std::memory_order_relaxed);
  closed += s.closed.load(std::memory_order_relaxed);
  request_bytes += s.request_bytes.load(std::memory_order_relaxed);
  response_bytes += s.response_bytes.load(std::memory_order_relaxed);
}

void IstioMetrics::Sums::add(const Sums& s) {
  opened += s.opened;
  closed += s.closed;
  request_bytes += s.request_bytes;
  response_bytes += s.response_bytes;
}

TrafficSeries& IstioMetrics::series(size_t worker, TrafficKey key) {
  Shard& shard = *shards_[worker];
  auto it = shard.by_key.find(key);
  if (it != shard.by_key.end()) return it->second->series;
  {
    std::lock_guard lock(keys_mu_);
    Shared& shared = keys_[key];
    if (!shared.key) shared.key = std::make_shared<const TrafficKey>(key);
    ++shared.shards;
  }
  std::list<Entry>::iterator made;
  {
    std::lock_guard lock(shard.mu);
    shard.entries.emplace_back(key);
    made = std::prev(shard.entries.end());
  }
  shard.by_key.emplace(std::move(key), made);
  return made->series;
}

size_t IstioMetrics::sweep(size_t worker, std::chrono::steady_clock::time_point now) {
  Shard& shard = *shards_[worker];
  size_t dropped = 0;
  for (auto it = shard.entries.begin(); it != shard.entries.end();) {
    auto& s = it->series;
    const uint64_t opened = s.opened.load(std::memory_order_relaxed);
    const uint64_t closed = s.closed.load(std::memory_order_relaxed);
    const uint64_t sum = opened + closed + s.request_bytes.load(std::memory_order_relaxed) +
                         s.response_bytes.load(std::memory_order_relaxed);
    if (sum != it->seen || opened != closed) {
      it->seen = sum;
      it->still_since = now;
      ++it;
      continue;
    }
    if (now - it->still_since < telemetry_.series_expiry) {
      ++it;
      continue;
    }
    shard.by_key.erase(*it->key);
    // Both under the shard's lock, which a scrape holds with keys_mu_ while it sums: it sees
    // the counts in the entry or in `dropped`, never in both or in neither.
    std::lock_guard lock(shard.mu);
    {
      std::lock_guard keys_lock(keys_mu_);
      auto shared = keys_.find(*it->key);
      if (shared != keys_.end() && --shared->second.shards == 0) {
        keys_.erase(shared);  // idle on every worker: the series goes
      } else if (shared != keys_.end()) {
        shared->second.dropped.add(s);  // another worker carries the pair: its sum stays
      }
    }
    it = shard.entries.erase(it);
    ++dropped;
  }
  return dropped;
}

size_t IstioMetrics::size() const {
  size_t n = 0;
  for (const auto& shard : shards_) {
    std::lock_guard lock(shard->mu);
    n += shard->entries.size();
  }
  return n;
}

void IstioMetrics::collect(telemetry::Exposition& out) const {
  // Sum each key over the workers, and what dropped entries had counted, under every shard's
  // lock and keys_mu_ at once (the order a sweep takes them: a shard's, then keys_mu_), so
  // that a drop is seen whole. Workers wait on these only to make a new series. The keys
  // are held shared for the rendering after; the counters are atomics.
  absl::flat_hash_map<const TrafficKey*, Sums, KeyPtrHash, KeyPtrEq> sums;
  std::vector<std::shared_ptr<const TrafficKey>> held;
  {
    std::vector<std::unique_lock<std::mutex>> locks;
    for (const auto& shard : shards_) locks.emplace_back(shard->mu);
    std::lock_guard keys_lock(keys_mu_);
    for (const auto& shard : shards_) {
      for (const Entry& e : shard->entries) {
        auto [slot, made] = sums.try_emplace(e.key.get());
        if (made) held.push_back(e.key);
        slot->second.add(e.series);
      }
    }
    // What workers that let go of a key had counted, while another still carries it.
    for (const auto& [key, shared] : keys_) {
      if (shared.dropped.opened == 0) continue;  // none dropped (a dropped entry had opened one)
      auto [slot, made] = sums.try_emplace(shared.key.get());
      if (made) held.push_back(shared.key);
      slot->second.add(shared.dropped);
    }
  }
  auto opened = out.counter("istio_tcp_connections_opened_total", "The total number of TCP connections opened");
  auto closed = out.counter("istio_tcp_connections_closed_total", "The total number of TCP connections closed");
  auto sent = out.counter("istio_tcp_sent_bytes_total",
                          "The size of total bytes sent during response in case of a TCP connection");
  auto received = out.counter("istio_tcp_received_bytes_total",
                              "The size of total bytes received during request in case of a TCP connection");
  std::vector<telemetry::Label> labels;
  for (const auto& [key, s] : sums) {
    std::string src_principal = principalOf(trust_domain_, key->source);
    if (src_principal.empty()) src_principal = key->source_principal;
    std::string dst_principal = principalOf(trust_domain_, key->destination);
    std::string_view service_key = key->service.str();  // "<namespace>/<name>"
    size_t slash = service_key.find('/');
    std::string service_host, service_ns, service_name;
    if (slash != std::string_view::npos) {
      service_ns = service_key.substr(0, slash);
      service_name = service_key.substr(slash + 1);
      service_host = absl::StrCat(service_name, ".", service_ns, ".svc.", telemetry_.cluster_domain);
    }
    labels.clear();
    labels.push_back({"reporter", key->reporter == Reporter::kSource ? "source" : "destination"});
    addSide(labels, kSourceLabels, key->source, src_principal, telemetry_.cluster_id);
    labels.insert(labels.end(), {{"destination_service", orUnknown(service_host)},
                                 {"destination_service_namespace", orUnknown(service_ns)},
                                 {"destination_service_name", orUnknown(service_name)}});
    addSide(labels, kDestinationLabels, key->destination, dst_principal, telemetry_.cluster_id);
    labels.insert(labels.end(), {{"request_protocol", "tcp"},
                                 {"response_flags", "-"},
                                 {"connection_security_policy", key->mutual_tls ? "mutual_tls" : "none"}});
    opened.add(static_cast<double>(s.opened), labels);
    closed.add(static_cast<double>(s.closed), labels);
    sent.add(static_cast<double>(s.response_bytes), labels);
    received.add(static_cast<double>(s.request_bytes), labels);
  }
}

}  // namespace ferry::session
