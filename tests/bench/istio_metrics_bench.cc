// docs/benchmarks/telemetry.md: what Istio's TCP metrics cost with 1,000 and 10,000 workload
// pairs. Prints the heap (mallinfo2) and RSS taken by the workloads' shared telemetry
// metadata, by the series of N (source, destination) workload pairs on one worker and again
// on a second one, and what one scrape of the four istio_tcp_* families costs: its time on
// the calling thread (the control thread in ferryd) and the heap it holds while it runs.
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "proxy/session/istio_metrics.h"
#include "proxy/telemetry/metrics.h"
#include "tests/bench/proc_status.h"

// The scrape's transient heap is its peak, which mallinfo2 cannot tell (it sees the heap only
// where it is called, and the peak may be inside prometheus-cpp or the writer). The bench
// replaces operator new/delete to keep the live bytes and their high-water mark. Every
// allocation of a scrape (std::string, absl's tables, prometheus-cpp) goes through them.
namespace {
std::atomic<size_t> live_bytes{0};
std::atomic<size_t> peak_bytes{0};

void* track(void* p) {
  if (p == nullptr) throw std::bad_alloc();
  size_t now = live_bytes.fetch_add(malloc_usable_size(p), std::memory_order_relaxed) + malloc_usable_size(p);
  size_t peak = peak_bytes.load(std::memory_order_relaxed);
  while (now > peak && !peak_bytes.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
  return p;
}
void untrack(void* p) {
  if (p == nullptr) return;
  live_bytes.fetch_sub(malloc_usable_size(p), std::memory_order_relaxed);
  std::free(p);
}
}  // namespace

void* operator new(size_t n) { return track(std::malloc(n == 0 ? 1 : n)); }
void operator delete(void* p) noexcept { untrack(p); }
void operator delete(void* p, size_t) noexcept { untrack(p); }

namespace {

using namespace ferry;

// Allocated bytes, the large blocks malloc takes with mmap (a hash table of 1,000 keys) included.
size_t heapBytes() {
  auto m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

double ms(std::chrono::steady_clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

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

  // Scrapes, as the metrics listener renders them: the families, then the text. The first
  // one's heap and the process's peak RSS after it; the time of each.
  constexpr int kScrapes = 5;
  std::vector<double> took;
  size_t text_bytes = 0, transient = 0;
  for (int i = 0; i < kScrapes; ++i) {
    size_t before = live_bytes.load();
    peak_bytes.store(before);
    auto start = std::chrono::steady_clock::now();
    std::string text = telemetry::renderText([&](telemetry::Exposition& out) { metrics.collect(out); });
    took.push_back(ms(std::chrono::steady_clock::now() - start));
    if (i > 0) continue;
    text_bytes = text.size();
    // What the scrape held beyond the text it returns (its capacity: what malloc gave it).
    transient = peak_bytes.load() - before - malloc_usable_size(text.data());
  }
  // The same scrapes compressed as they are written (a scraper that accepts gzip, as
  // Prometheus does): everything the scrape holds at its peak, the compressed answer included.
  std::vector<double> took_gzip;
  size_t gzip_bytes = 0, gzip_peak = 0;
  for (int i = 0; i < kScrapes; ++i) {
    size_t before = live_bytes.load();
    peak_bytes.store(before);
    auto start = std::chrono::steady_clock::now();
    std::string gz = telemetry::renderGzip([&](telemetry::Exposition& out) { metrics.collect(out); });
    took_gzip.push_back(ms(std::chrono::steady_clock::now() - start));
    if (i > 0) continue;
    gzip_bytes = gz.size();
    gzip_peak = peak_bytes.load() - before;
  }
  long rss_peak = bench::peakRssKb();
  std::vector<double> sorted = took;
  std::sort(sorted.begin(), sorted.end());
  std::vector<double> sorted_gzip = took_gzip;
  std::sort(sorted_gzip.begin(), sorted_gzip.end());

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
  std::printf("RSS: start %ld KiB, with series %ld KiB, peak after a scrape %ld KiB\n", rss0, rss_series, rss_peak);
  std::printf("one scrape: %zu series per counter, %zu KiB of text, %zu KiB heap held beyond the text at its peak\n",
              pairs, text_bytes / 1024, transient / 1024);
  std::printf("scrape time over %d scrapes: median %.1f ms (min %.1f, max %.1f, first %.1f)\n", kScrapes,
              sorted[kScrapes / 2], sorted.front(), sorted.back(), took.front());
  std::printf("gzip scrape: %zu KiB compressed, %zu KiB heap at its peak (everything, the answer included)\n",
              gzip_bytes / 1024, gzip_peak / 1024);
  std::printf("gzip scrape time over %d scrapes: median %.1f ms (min %.1f, max %.1f, first %.1f)\n", kScrapes,
              sorted_gzip[kScrapes / 2], sorted_gzip.front(), sorted_gzip.back(), took_gzip.front());
  std::printf("lookup of a known key (key built + found), per connection: %.0f ns\n", lookup_ns);
  return 0;
}
