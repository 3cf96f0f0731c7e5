// The workloads file (proxy/config/workloads_file.h): written by a controller, re-read while
// ferryd runs; a broken version must be refused with a message, never crash the daemon.
// Checks beyond "does not crash": every workload of an accepted file (read as YAML, and as
// JSON) is found by each of its addresses once loaded into a registry, a local one by
// findLocalByIp, and nothing is refused (the file has no IP twice).
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <utility>
#include <vector>

#include "proxy/config/workloads_file.h"
#include "proxy/workloads/file_source.h"
#include "proxy/workloads/registry.h"

using ferry::config::FileFormat;

namespace {

void check(std::string_view text, FileFormat format) {
  std::vector<ferry::workloads::Workload> all;
  auto status = ferry::config::parseWorkloads(text, "fuzz.yaml", format, [&](ferry::config::WorkloadEntry&& e) {
    all.push_back(ferry::workloads::workloadFromEntry(std::move(e)));
  });
  if (!status.ok()) {
    if (status.message().substr(0, 9) != "fuzz.yaml") std::abort();
    return;
  }
  ferry::workloads::Store store("node-1");
  auto copy = all;
  if (!store.replaceAll(std::move(copy)).rejected.empty()) std::abort();
  auto registry = store.current();
  if (registry->size() != all.size()) std::abort();
  for (const auto& w : all) {
    for (const auto& ip : w.ips) {
      const auto* found = registry->findByIp(ip);
      if (found == nullptr || !(*found == w)) std::abort();
      if (w.node == "node-1" && registry->findLocalByIp(ip) == nullptr) std::abort();
    }
    (void)w.spiffeId("cluster.local");
    (void)w.displayName();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  check(text, FileFormat::kYaml);
  check(text, FileFormat::kJson);
  return 0;
}
