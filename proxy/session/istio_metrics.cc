#include "proxy/session/istio_metrics.h"

#include <array>
#include <type_traits>

#include "proxy/telemetry/metrics.h"
#include "proxy/telemetry/text_format.h"

namespace ferry::session {
namespace {

constexpr std::string_view kUnknown = "unknown";

std::string_view orUnknown(std::string_view s) { return s.empty() ? kUnknown : s; }

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

// The four families, in the order they are written; a series' values come in this order.
struct FamilyName {
  std::string_view name, help;
};
constexpr std::array<FamilyName, 4> kFamilies{{
    {"istio_tcp_connections_opened_total", "The total number of TCP connections opened"},
    {"istio_tcp_connections_closed_total", "The total number of TCP connections closed"},
    {"istio_tcp_sent_bytes_total", "The size of total bytes sent during response in case of a TCP connection"},
    {"istio_tcp_received_bytes_total",
     "The size of total bytes received during request in case of a TCP connection"},
}};

// One key's line in each family: its values, and where its label text (between the braces,
// the same in all four) was written in the first family.
struct SeriesLine {
  const TrafficKey* key;
  std::array<uint64_t, kFamilies.size()> values;
  size_t labels_at = 0, labels_size = 0;
};

// `name="value"`, the value escaped; `comma`: one goes before it.
template <typename Out>
void label(Out& out, std::string_view name, std::string_view value, bool comma = true) {
  if (comma) out.raw(",");
  out.raw(name);
  out.raw("=\"");
  out.escaped(value);
  out.raw("\"");
}

// The label text of the series, in the order ztunnel reports them (23 labels). What describes
// one workload (8 labels) or one Service (3) is the same in every series that names it: the
// first series writes it, the others repeat its bytes, so a scrape escapes each once.
class LabelText {
 public:
  LabelText(const std::string& trust_domain, const config::Telemetry& telemetry)
      : trust_domain_(trust_domain), telemetry_(telemetry) {}
  // Keeps each part in a buffer of its own and copies it from there: for a text that is
  // compressed and let go as it is written (Exposition::streaming), where an earlier part's
  // bytes are no longer in the text to repeat.
  void keepPartsApart() { apart_ = true; }

  template <typename Out>
  void write(Out& out, const TrafficKey& key) {
    label(out, "reporter", key.reporter == Reporter::kSource ? "source" : "destination", false);
    side(out, kSourceLabels, key.source, key.source_principal);
    once(out, services_[&key.service.str()], [&](auto& o) { service(o, key.service.str()); });
    side(out, kDestinationLabels, key.destination, {});
    label(out, "request_protocol", "tcp");
    label(out, "response_flags", "-");
    label(out, "connection_security_policy", key.mutual_tls ? "mutual_tls" : "none");
  }

 private:
  // A part written once per scrape: its size (when measured: TextSize) and where it is (when
  // written: TextWriter). The same LabelText measures the scrape, then writes it.
  struct Part {
    static constexpr size_t kNowhere = ~size_t{0};
    size_t size = kNowhere, at = kNowhere;
  };

  template <typename Out, typename Write>
  void once(Out& out, Part& part, Write&& write) {
    constexpr bool kWrites = std::is_same_v<Out, telemetry::TextWriter>;
    if constexpr (kWrites) {
      if (apart_) {
        if (part.at == Part::kNowhere) {
          telemetry::TextWriter parts(parts_);
          part.at = parts_.size();
          write(parts);
          part.size = parts_.size() - part.at;
        }
        out.raw(std::string_view(parts_).substr(part.at, part.size));
        return;
      }
    }
    if (kWrites ? part.at != Part::kNowhere : part.size != Part::kNowhere) {
      out.repeat(part.at, part.size);
      return;
    }
    size_t start = out.size();
    write(out);
    part.size = out.size() - start;
    if (kWrites) part.at = start;
  }

  // One end's labels: app and version repeat the canonical service and revision, as ztunnel
  // reports them; the cluster is known with the workload. `peer_principal`: the principal
  // when no service account is known (a peer that is no workload known here).
  template <typename Out>
  void side(Out& out, const SideLabels& names, const TrafficKey::Party& party, std::string_view peer_principal) {
    auto write = [&](auto& out) {
      const workloads::TelemetryMeta* meta = party.meta.get();
      std::string_view service = meta ? orUnknown(meta->canonical_service) : kUnknown;
      std::string_view revision = meta ? orUnknown(meta->canonical_revision) : kUnknown;
      std::string principal = party.account.empty()
                                  ? std::string(peer_principal)
                                  : workloads::spiffeIdOf(trust_domain_, party.ns.str(), party.account.str());
      label(out, names.workload, meta ? orUnknown(meta->workload) : kUnknown);
      label(out, names.canonical_service, service);
      label(out, names.canonical_revision, revision);
      label(out, names.workload_namespace, orUnknown(party.ns.str()));
      label(out, names.principal, orUnknown(principal));
      label(out, names.app, service);
      label(out, names.version, revision);
      label(out, names.cluster, meta ? std::string_view(telemetry_.cluster_id) : kUnknown);
    };
    if (party.account.empty() && !peer_principal.empty()) {
      write(out);  // labels of this key only
      return;
    }
    once(out, sides_[{&names, party.meta.get(), &party.ns.str(), &party.account.str()}], write);
  }

  // The Service called, from its "<namespace>/<name>" (empty: none, "unknown").
  template <typename Out>
  void service(Out& out, std::string_view service_key) {
    size_t slash = service_key.find('/');
    if (slash == std::string_view::npos) {
      label(out, "destination_service", kUnknown);
      label(out, "destination_service_namespace", kUnknown);
      label(out, "destination_service_name", kUnknown);
      return;
    }
    std::string_view ns = service_key.substr(0, slash);
    std::string_view name = service_key.substr(slash + 1);
    // "<name>.<namespace>.svc.<domain>", escaped a piece at a time (the same bytes).
    out.raw(",destination_service=\"");
    for (std::string_view piece : {name, std::string_view("."), ns, std::string_view(".svc."),
                                   std::string_view(telemetry_.cluster_domain)}) {
      out.escaped(piece);
    }
    out.raw("\"");
    label(out, "destination_service_namespace", orUnknown(ns));
    label(out, "destination_service_name", orUnknown(name));
  }

  const std::string& trust_domain_;
  const config::Telemetry& telemetry_;
  using SideKey = std::tuple<const SideLabels*, const workloads::TelemetryMeta*, const std::string*, const std::string*>;
  absl::flat_hash_map<SideKey, Part> sides_;
  absl::flat_hash_map<const std::string*, Part> services_;
  bool apart_ = false;
  std::string parts_;  // keepPartsApart(): every part once
};

// The four families, one line per key in each. Run with TextSize, then with TextWriter into
// the text reserved for what TextSize counted.
template <typename Out>
void writeFamilies(Out& out, std::vector<SeriesLine>& lines, LabelText& labels) {
  for (size_t f = 0; f < kFamilies.size(); ++f) {
    telemetry::counterHeader(out, kFamilies[f].name, kFamilies[f].help);
    for (SeriesLine& line : lines) {
      out.raw(kFamilies[f].name);
      out.raw("{");
      if (f == 0) {
        line.labels_at = out.size();
        labels.write(out, *line.key);
        line.labels_size = out.size() - line.labels_at;
      } else {
        out.repeat(line.labels_at, line.labels_size);
      }
      out.raw("} ");
      out.number(line.values[f]);
      out.raw("\n");
    }
  }
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
  // are held shared for the writing after; the counters are atomics.
  std::vector<std::shared_ptr<const TrafficKey>> held;
  std::vector<SeriesLine> lines;
  {
    absl::flat_hash_map<const TrafficKey*, Sums, KeyPtrHash, KeyPtrEq> sums;
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
    lines.reserve(sums.size());
    for (const auto& [key, s] : sums) {
      lines.push_back({key, {s.opened, s.closed, s.response_bytes, s.request_bytes}});
    }
  }
  // The text, written directly (telemetry/text_format.h): prometheus-cpp's data model would
  // hold each of the 23 labels of every series as two strings (docs/benchmarks/telemetry.md).
  // Measured first, so that it is reserved once.
  LabelText labels(trust_domain_, telemetry_);
  if (out.streaming()) {
    // Compressed as it is written: the families in parts that the exposition compresses and
    // lets go (Exposition::drain), so that the whole text is never held; each series' labels
    // written again in each family from the per-workload pieces LabelText keeps
    // (docs/benchmarks/telemetry.md).
    labels.keepPartsApart();
    std::string& text = out.text(0);
    telemetry::TextWriter writer(text);
    for (size_t f = 0; f < kFamilies.size(); ++f) {
      telemetry::counterHeader(writer, kFamilies[f].name, kFamilies[f].help);
      for (const SeriesLine& line : lines) {
        writer.raw(kFamilies[f].name);
        writer.raw("{");
        labels.write(writer, *line.key);
        writer.raw("} ");
        writer.number(line.values[f]);
        writer.raw("\n");
        out.drain();  // compresses once the text reaches the threshold
      }
    }
    return;
  }
  telemetry::TextSize size;
  writeFamilies(size, lines, labels);
  telemetry::TextWriter text(out.text(size.size()));
  writeFamilies(text, lines, labels);
}

}  // namespace ferry::session
