// docs/benchmarks/telemetry.md: what Istio's TCP metrics cost with 1,000 workload pairs.
// Prints the heap (mallinfo2) and RSS taken by the workloads' shared telemetry metadata, by
// the series of 1,000 (source, destination) workload pairs on one worker and again on a
// second one, and by one scrape (text size, time, the heap it held while it ran).
#include <malloc.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "proxy/session/istio_metrics.h"
#include "proxy/telemetry/metrics.h"
#include "tests/bench/proc_status.h"

namespace {

using namespace ferry;

// Allocated bytes, the large blocks malloc takes with mmap (a hash table of 1,000 keys) included.
size_t heapBytes() {
  auto m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

}  // namespace

int main(int argc, char** argv) {
  size_t pairs = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 1000;
  config::Config config;
  config.trust_domain = "cluster.local";
  long rss0 = bench::rssKb();
  size_t heap0 = heapBytes();

  // 2 x pairs workloads: client-N talks to server-N, each a Deployment of its own.
  std::vector<workloads::Workload> clients, servers;
  for (size_t i = 0; i < pairs; ++i) {
    for (auto* list : {&clients, &servers}) {
      std::string name = absl::StrCat(list == &clients ? "client-" : "server-", i);
      workloads::Workload w;
      w.name = name + "-7d4b9c8f6-x2x9k";
      w.namespace_name = workloads::intern(absl::StrCat("fy-ns-", i % 50));
      w.service_account = workloads::intern(name);
      w.telemetry = workloads::internTelemetry({name, name, "v1"});
      list->push_back(std::move(w));
    }
  }
  size_t heap_meta = heapBytes();

  session::IstioMetrics metrics(2, config);
  auto key = [&](size_t i) {
    return session::TrafficKey(session::Reporter::kSource, true)
        .from(&clients[i])
        .to(&servers[i]);
  };
  for (size_t i = 0; i < pairs; ++i) metrics.series(0, key(i)).opened += 1;
  size_t heap_one_worker = heapBytes();
  for (size_t i = 0; i < pairs; ++i) metrics.series(1, key(i)).opened += 1;
  size_t heap_two_workers = heapBytes();
  long rss_series = bench::rssKb();

  // One scrape: the families, then the text.
  size_t peak = 0;
  std::string text;
  auto start = std::chrono::steady_clock::now();
  text = ferry::telemetry::renderText([&](ferry::telemetry::Exposition& out) {
    metrics.collect(out);
    peak = heapBytes();
  });
  auto took = std::chrono::steady_clock::now() - start;

  // Lookups of known keys, as each connection does once.
  auto lookups_start = std::chrono::steady_clock::now();
  constexpr int kRounds = 100;
  for (int r = 0; r < kRounds; ++r) {
    for (size_t i = 0; i < pairs; ++i) metrics.series(0, key(i)).opened += 1;
  }
  auto lookup_ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - lookups_start).count() /
                   (kRounds * pairs);

  std::printf("workload pairs: %zu (%zu workloads)\n", pairs, 2 * pairs);
  std::printf("telemetry metadata of the workloads (incl. the bench's Workload objects): %zu KiB\n",
              (heap_meta - heap0) / 1024);
  std::printf("series on one worker: %zu keys, %zu KiB heap, %.0f bytes per key\n", pairs,
              (heap_one_worker - heap_meta) / 1024, double(heap_one_worker - heap_meta) / pairs);
  std::printf("series on two workers: %zu entries, %zu KiB heap\n", metrics.size(), (heap_two_workers - heap_meta) / 1024);
  std::printf("RSS: start %ld KiB, with series %ld KiB\n", rss0, rss_series);
  std::printf("one scrape: %zu series per counter, %zu KiB of text, %.1f ms, %zu KiB heap held while collecting\n",
              pairs, text.size() / 1024, std::chrono::duration<double, std::milli>(took).count(),
              (peak - heap_two_workers) / 1024);
  std::printf("lookup of a known key (key built + found), per connection: %.0f ns\n", lookup_ns);
  return 0;
}
