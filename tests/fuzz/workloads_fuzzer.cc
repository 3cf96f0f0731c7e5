// The workloads file (proxy/workloads): written by a controller, re-read while ferryd runs;
// a broken version must be refused with a message, never crash the daemon. Checks beyond
// "does not crash": every workload of an accepted file is found by each of its addresses,
// and a local one by findLocalByIp.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "proxy/workloads/registry.h"

using ferry::workloads::Registry;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto registry = Registry::parse(text, "fuzz.yaml", "node-1");
  if (!registry.ok()) {
    if (registry.status().message().substr(0, 9) != "fuzz.yaml") std::abort();
    return 0;
  }
  for (const auto& w : (*registry)->all()) {
    for (const auto& ip : w.ips) {
      const auto* found = (*registry)->findByIp(ip);
      if (found == nullptr) std::abort();
      if (w.node == "node-1" && (*registry)->findLocalByIp(ip) == nullptr) std::abort();
    }
    (void)w.spiffeId("cluster.local");
    (void)w.displayName();
  }
  return 0;
}
