// One pod's change in a registry of 150,001 workloads (docs/benchmarks/registry.md): how
// long Store::apply takes, PodSync's reaction included (through a PodSteering that only
// counts, so no kernel), and what the registry costs in RSS. Prints numbers, judges none.
//
//   build/default/tests/bench/registry_delta_bench [workloads] [changes]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <malloc.h>

#include "absl/strings/str_cat.h"
#include "proxy/datapath/pod_sync.h"
#include "proxy/workloads/registry.h"
#include "tests/bench/proc_status.h"

namespace {

using namespace ferry;
using Clock = std::chrono::steady_clock;

struct CountingSteering : datapath::PodSteering {
  absl::StatusOr<std::string> deviceOf(uint32_t, const workloads::Workload& w) override { return w.host_interface; }
  absl::Status enroll(uint32_t, const workloads::Workload&, const std::string&, uint32_t) override {
    ++ops;
    return absl::OkStatus();
  }
  void release(uint32_t) override { ++ops; }
  absl::Status setFlags(uint32_t, uint32_t) override {
    ++ops;
    return absl::OkStatus();
  }
  void setCapture(uint32_t, bool) override { ++ops; }
  uint64_t ops = 0;
};

workloads::Workload pod(int i, int address) {
  workloads::Workload w;
  w.name = absl::StrCat("web-", i);
  w.namespace_name = workloads::intern(absl::StrCat("ns-", i % 500));
  w.service_account = workloads::intern(absl::StrCat("sa-", i % 500));
  w.node = workloads::intern(absl::StrCat("node-", i % 5000));
  w.ips = {common::IpAddress(boost::asio::ip::address_v4(0x0a400000u + address))};
  w.hbone = true;
  if (i % 5000 == 1) w.host_interface = absl::StrCat("fy-", i);
  return w;
}

double ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

}  // namespace

int main(int argc, char** argv) {
  int count = argc > 1 ? std::atoi(argv[1]) : 150001;
  int changes = argc > 2 ? std::atoi(argv[2]) : 2000;
  long rss_start = bench::rssKb();
  workloads::Store store("node-1");
  CountingSteering kernel;
  datapath::PodSync sync(kernel);
  store.subscribe([&](const workloads::Registry& after, const workloads::Delta& delta) { sync.apply(after, delta); });

  std::vector<workloads::Workload> all;
  all.reserve(count);
  for (int i = 0; i < count; ++i) all.push_back(pod(i, i));
  auto t0 = Clock::now();
  store.replaceAll(std::move(all));
  auto initial = Clock::now() - t0;
  all = {};
  malloc_trim(0);
  long rss_loaded = bench::rssKb();

  // Each change moves one pod to a fresh IP (a delete and re-create in Kubernetes terms):
  // one capture entry out, one in, and for local pods a release and an enrolment.
  std::vector<double> apply_ms;
  apply_ms.reserve(changes);
  uint64_t ops_before = kernel.ops;
  for (int c = 0; c < changes; ++c) {
    int i = (c * 7919) % count;
    auto update = pod(i, count + c);
    auto start = Clock::now();
    store.apply({workloads::Update{update.displayName(), std::move(update)}});
    apply_ms.push_back(ms(Clock::now() - start));
  }
  std::sort(apply_ms.begin(), apply_ms.end());
  auto pct = [&](double p) { return apply_ms[std::min(apply_ms.size() - 1, static_cast<size_t>(p * apply_ms.size()))]; };
  std::printf("workloads %d: initial replaceAll + PodSync %.0f ms; RSS %.1f MB (%.0f bytes per workload)\n", count,
              ms(initial), rss_loaded / 1024.0, (rss_loaded - rss_start) * 1024.0 / count);
  std::printf("one pod's change (%d changes): p50 %.3f ms, p99 %.3f ms, max %.3f ms; %.1f kernel operations each\n",
              changes, pct(0.5), pct(0.99), apply_ms.back(), double(kernel.ops - ops_before) / changes);
  std::printf("RSS after the changes %.1f MB\n", bench::rssKb() / 1024.0);
  return 0;
}
