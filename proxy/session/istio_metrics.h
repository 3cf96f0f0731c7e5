#pragma once
// Istio's standard TCP metrics (docs/operations.md, "Istio TCP metrics"), as ztunnel reports
// them: istio_tcp_connections_opened_total, _closed_total, istio_tcp_sent_bytes_total and
// istio_tcp_received_bytes_total, one series per (reporter, source workload, destination
// workload, Service called, security policy). Never per pod, IP or port: the label values
// come from the workloads' shared TelemetryMeta.
//
// Hot path: a connection finds its series once (TrafficKey -> TrafficSeries in its worker's
// own map, no lock) and then bumps relaxed atomics. Only the first connection of a key on a
// worker takes that worker's shard lock, to publish the new series to scrapes. A series
// that has had no open connection and no new byte for telemetry.series_expiry is dropped
// (sweep), so Deployment churn does not grow them until restart; the bound is the pairs of
// workloads that talked through this node within that time.
#include <atomic>
#include <cstdint>
#include <chrono>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "proxy/config/config.h"
#include "proxy/workloads/workload.h"

namespace ferry::telemetry {
class Exposition;
}  // namespace ferry::telemetry

namespace ferry::session {

// Which ferryd reports: the client's node (outbound) or the server's (inbound HBONE,
// inbound plaintext).
enum class Reporter : uint8_t { kSource, kDestination };

// The labels of one series, by reference: building one copies no string and takes no lock
// (InternedString and TelemetryMeta are shared), except a source principal no workload
// explains (a peer whose IP is no workload known here).
struct TrafficKey {
  TrafficKey(Reporter r, bool mtls, workloads::InternedString called = {})
      : reporter(r), mutual_tls(mtls), service(called) {}

  // One end: its workload's shared metadata (null: unknown), namespace and service account.
  struct Party {
    workloads::TelemetryMetaPtr meta;
    workloads::InternedString ns, account;
    friend bool operator==(const Party&, const Party&) = default;
  };

  Reporter reporter = Reporter::kSource;
  bool mutual_tls = false;
  Party source, destination;
  std::string source_principal;        // only when no source workload is known
  workloads::InternedString service;   // "<namespace>/<name>" of the Service called; empty: none

  // The workload at either end (null: unknown; the labels say "unknown").
  TrafficKey& from(const workloads::Workload* w);
  TrafficKey& to(const workloads::Workload* w);

  friend bool operator==(const TrafficKey&, const TrafficKey&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const TrafficKey& k) {
    auto party = [](const Party& p) { return std::tuple(p.meta.get(), &p.ns.str(), &p.account.str()); };
    return H::combine(std::move(h), k.reporter, k.mutual_tls, party(k.source), party(k.destination), k.source_principal,
                      &k.service.str());
  }
};

struct TrafficSeries {
  std::atomic<uint64_t> opened{0};
  std::atomic<uint64_t> closed{0};
  std::atomic<uint64_t> request_bytes{0};   // client -> server: istio_tcp_received_bytes_total
  std::atomic<uint64_t> response_bytes{0};  // server -> client: istio_tcp_sent_bytes_total
};

class IstioMetrics {
 public:
  IstioMetrics(size_t workers, const config::Config& config);
  IstioMetrics(const IstioMetrics&) = delete;
  IstioMetrics& operator=(const IstioMetrics&) = delete;

  // On worker `worker`'s thread only: the series of `key` there, made on first sight. It
  // lives while a connection counts in it (opened, not yet closed), and until sweep() finds
  // it unchanged for the expiry.
  TrafficSeries& series(size_t worker, TrafficKey key);
  // On worker `worker`'s thread only (a connection bumps `opened` in the same step as it
  // finds its series, and writes nothing after `closed`): drops that worker's series with
  // no open connection whose counters have not moved since a sweep at least the expiry ago.
  // Returns how many.
  size_t sweep(size_t worker, std::chrono::steady_clock::time_point now);

  // Any thread (a scrape): the four families, each key once (summed over workers).
  void collect(telemetry::Exposition& out) const;
  // Series held, over all workers (a key on two workers counts twice).
  size_t size() const;

 private:
  struct Entry {
    explicit Entry(TrafficKey k) : key(std::make_shared<const TrafficKey>(std::move(k))) {}
    // Shared with a scrape that is still naming the series after the lock is let go.
    std::shared_ptr<const TrafficKey> key;
    TrafficSeries series;
    // The worker's own (sweep): the counters' sum at the sweep that last saw them move.
    uint64_t seen = 0;
    std::chrono::steady_clock::time_point still_since{};
  };
  struct Shard {
    absl::flat_hash_map<TrafficKey, std::list<Entry>::iterator> by_key;  // the worker's own: no lock
    mutable std::mutex mu;  // entries: the worker adds and removes, scrapes read
    std::list<Entry> entries;
  };
  struct Sums {
    uint64_t opened = 0, closed = 0, request_bytes = 0, response_bytes = 0;
    void add(const TrafficSeries& s);
    void add(const Sums& s);
  };
  // Per key, over the workers: how many hold an entry, and what the entries a sweep dropped
  // had counted while another worker still carries the pair, so that the sum a scrape
  // exports never goes down (Prometheus would read a counter reset). The key goes when the
  // last worker drops it.
  struct Shared {
    std::shared_ptr<const TrafficKey> key;
    uint32_t shards = 0;
    Sums dropped;
  };
  std::vector<std::unique_ptr<Shard>> shards_;
  mutable std::mutex keys_mu_;  // a worker's first entry of a key, a sweep's drop, a scrape
  absl::flat_hash_map<TrafficKey, Shared> keys_;
  std::string trust_domain_;
  config::Telemetry telemetry_;
};

}  // namespace ferry::session
