// ferry-ca's signing throughput and latency over HTTPS on loopback: the real transport and
// pipeline (CSR parse, authorize, rate limit, sign, audit line) in-process on its one io
// thread, N client connections kept alive, each sending one sign request after another
// (a fresh P-256 key and CSR each, made before the clock starts). The TokenReview is a
// table lookup (tests/integration/ca_lab.h): a real one adds an API server round trip
// (ferry_ca_token_review_duration_seconds says how long in a cluster).
//
//   ca_sign_bench [--seconds N] [--connections N,N,...] [--out FILE]
//
// Prints the numbers; with --out writes them as Markdown (docs/benchmarks/ferry-ca.md).
#include <sys/utsname.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "proxy/common/log.h"
#include "tests/integration/ca_lab.h"

namespace ferry::bench {
namespace {
using namespace ca::lab;
using Clock = std::chrono::steady_clock;

// Distinct CSRs prepared per connection: cycled, so the pipeline's work per request is the
// same as with fresh ones (nothing is cached by identity on the server).
constexpr int kBodiesPerConnection = 64;

struct Result {
  int connections = 0;
  uint64_t requests = 0;
  uint64_t failures = 0;
  double seconds = 0;
  double p50_ms = 0, p99_ms = 0, max_ms = 0;
  double cpu_share = 0;  // process CPU time / wall time
};

double cpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

Result run(int connections, double seconds) {
  LabOptions options;
  // The node's bucket must not be what is measured.
  options.node_rate = 1e9;
  options.node_burst = 1e9;
  CaLab lab(options);
  std::vector<std::vector<std::string>> bodies(connections);
  const std::string id = workloadId("app", "web");
  for (auto& b : bodies) {
    for (int i = 0; i < kBodiesPerConnection; ++i) b.push_back(signBody(id));
  }
  auto tls = lab.clientTls();
  std::atomic<bool> stop{false};
  std::vector<std::vector<double>> latencies(connections);
  std::vector<uint64_t> failures(connections, 0);
  std::vector<std::thread> threads;
  double cpu_before = cpuSeconds();
  auto began = Clock::now();
  for (int c = 0; c < connections; ++c) {
    threads.emplace_back([&, c] {
      KeepAliveClient client(*tls, lab.port());
      if (client.connect()) {
        ++failures[c];
        return;
      }
      for (size_t i = 0; !stop.load(std::memory_order_relaxed); ++i) {
        auto t0 = Clock::now();
        auto reply = client.post("hdr.token-a.sig", bodies[c][i % bodies[c].size()]);
        auto t1 = Clock::now();
        if (!reply || reply->status != 200) {
          ++failures[c];
          if (!reply) return;
          continue;
        }
        latencies[c].push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& t : threads) t.join();
  double wall = std::chrono::duration<double>(Clock::now() - began).count();
  Result r;
  r.connections = connections;
  r.seconds = wall;
  r.cpu_share = (cpuSeconds() - cpu_before) / wall;
  std::vector<double> all;
  for (auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
  for (uint64_t f : failures) r.failures += f;
  r.requests = all.size();
  std::sort(all.begin(), all.end());
  auto pct = [&all](double p) { return all.empty() ? 0.0 : all[std::min(all.size() - 1, static_cast<size_t>(p * all.size()))]; };
  r.p50_ms = pct(0.50);
  r.p99_ms = pct(0.99);
  r.max_ms = all.empty() ? 0 : all.back();
  return r;
}

std::string machine() {
  utsname u{};
  uname(&u);
  std::ostringstream out;
  out << std::thread::hardware_concurrency() << " cores; kernel " << u.release;
  return out.str();
}

}  // namespace
}  // namespace ferry::bench

int main(int argc, char** argv) {
  using namespace ferry::bench;
  double seconds = 5;
  std::vector<int> connections = {1, 4, 16, 64};
  std::string out;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "--seconds" && i + 1 < argc && absl::SimpleAtod(argv[i + 1], &seconds) && seconds > 0) {
      ++i;
    } else if (a == "--connections" && i + 1 < argc) {
      connections.clear();
      for (absl::string_view n : absl::StrSplit(argv[++i], ',')) {
        int v = 0;
        if (!absl::SimpleAtoi(n, &v) || v <= 0) {
          std::fprintf(stderr, "ca_sign_bench: --connections: '%s' is not a count\n", std::string(n).c_str());
          return 2;
        }
        connections.push_back(v);
      }
    } else if (a == "--out" && i + 1 < argc) {
      out = argv[++i];
    } else {
      std::fprintf(stderr, "usage: ca_sign_bench [--seconds N] [--connections N,N,...] [--out FILE]\n");
      return 2;
    }
  }
  ferry::common::setLogLevel(ferry::common::LogLevel::kWarn);
  std::vector<Result> results;
  std::printf("%-12s %10s %10s %10s %10s %10s %9s\n", "connections", "signed/s", "p50 ms", "p99 ms", "max ms",
              "failures", "CPU");
  for (int c : connections) {
    Result r = run(c, seconds);
    results.push_back(r);
    std::printf("%-12d %10.0f %10.2f %10.2f %10.2f %10llu %8.0f%%\n", r.connections, r.requests / r.seconds, r.p50_ms,
                r.p99_ms, r.max_ms, static_cast<unsigned long long>(r.failures), r.cpu_share * 100);
  }
  if (out.empty()) return 0;
  std::ofstream md(out);
  md << "# ferry-ca: signing throughput and latency\n\n"
     << "Generated by `tests/bench/ca_sign_bench` (`ca_sign_bench --seconds " << seconds << " --out "
     << "docs/benchmarks/ferry-ca.md`); do not edit by hand. Numbers, never assertions.\n\n"
     << "## Machine\n\n- " << ferry::common::formatTimestamp(std::chrono::system_clock::now()) << "; " << machine() << "\n"
     << "- the server and every client thread share these cores: the clients' TLS and HTTP work is in the CPU share\n\n"
     << "## Method\n\n"
     << "- ferry-ca's HTTPS transport and signing pipeline in-process (tests/integration/ca_lab.h), one io thread "
        "as in the binary; TLS 1.3 on 127.0.0.1, ECDSA P-256 serving certificate from an intermediate under a root.\n"
     << "- N client threads, one kept-alive connection each, one request after another: a P-256 CSR (made before "
        "the clock starts) for a pod on the caller's node. Per request the server decodes the JSON, parses and "
        "verifies the CSR, looks the token up, authorizes against the pod view, takes a rate-limit token, signs, "
        "encodes the chain and writes an audit line (to memory here, stdout in the binary).\n"
     << "- **The TokenReview is a table lookup.** A real one is an API server round trip (typically 1-20 ms, "
        "`ferry_ca_token_review_duration_seconds`); it suspends the request, not the io thread, so it adds to "
        "latency, and to throughput only through the API server's own capacity.\n"
     << "- Latency: from writing the request to reading the whole answer, on the client.\n\n"
     << "## Results\n\n"
     << "| connections | signed/s | p50 ms | p99 ms | max ms | failures | CPU (process) |\n|---|---|---|---|---|---|---|\n";
  for (const Result& r : results) {
    char line[256];
    std::snprintf(line, sizeof line, "| %d | %.0f | %.2f | %.2f | %.2f | %llu | %.0f %% |\n", r.connections,
                  r.requests / r.seconds, r.p50_ms, r.p99_ms, r.max_ms, static_cast<unsigned long long>(r.failures),
                  r.cpu_share * 100);
    md << line;
  }
  md << "\n## What the numbers say\n\n"
     << "One io thread signs; with more connections than one, requests queue on it, so throughput levels off "
        "and latency grows with the number of connections. A node asks for a certificate per local identity "
        "at start and at half life (12 h by default): 5,000 nodes with 20 identities each are ~2.3 signatures "
        "per second in steady state, and a full restart of every node is 100,000 signatures.\n";
  std::printf("wrote %s\n", out.c_str());
  return 0;
}
