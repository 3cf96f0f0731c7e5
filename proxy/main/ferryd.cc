// ferryd: the per-node mTLS proxy. `ferryd --config FILE` runs it; `ferryd --check-config
// FILE` validates a configuration (and the workloads file it names) without starting.
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cerrno>
#include <string>
#include <string_view>
#include <vector>

#include <unistd.h>

#include "proxy/common/file.h"
#include "proxy/common/log.h"
#include "absl/strings/str_cat.h"
#include "proxy/config/config.h"
#include "proxy/config/memory_budget.h"
#include "proxy/server/check_config.h"
#include "proxy/server/server.h"

namespace {

constexpr const char* kUsage =
    "usage: ferryd --config FILE        run the proxy\n"
    "       ferryd --check-config FILE  validate FILE and its workloads file, then exit\n"
    "       ferryd --help\n";

int fail(const std::string& what) {
  std::fprintf(stderr, "ferryd: %s\n", what.c_str());
  return 1;
}

// glibc's allocator settings for a proxy whose memory must come back after a flood
// (docs/security.md, Memory): no per-thread cache (tcache: each thread keeps up to 7 free
// chunks per size class, which pin pages that malloc_trim cannot reach) and one arena
// (the workers' own arenas fragment apart). Measured with 5,000 idle proxied connections:
// RSS after their close went from +22..27 % of the baseline to +10 % with both, with
// malloc_trim and the other measures in place. They are read only at start-up, from the
// environment, so ferryd re-executes itself once with them; an operator who sets
// GLIBC_TUNABLES keeps their own.
constexpr const char* kMallocTunables = "glibc.malloc.tcache_count=0:glibc.malloc.arena_max=1";

void applyMallocTunables(char** argv) {
  if (std::getenv("GLIBC_TUNABLES") != nullptr) return;  // the operator's (or our first pass's)
  ::setenv("GLIBC_TUNABLES", kMallocTunables, 1);
  ::execv("/proc/self/exe", argv);
  // No /proc: run with glibc's defaults (memory after floods comes back less completely).
  ::unsetenv("GLIBC_TUNABLES");
  std::fprintf(stderr, "ferryd: re-executing with GLIBC_TUNABLES failed (%s); running with glibc's defaults\n",
               std::strerror(errno));
}

}  // namespace

int main(int argc, char** argv) {
  std::string config_path;
  bool check_only = false;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if ((arg == "--config" || arg == "--check-config") && i + 1 < argc) {
      check_only = arg == "--check-config";
      config_path = argv[++i];
      continue;
    }
    std::fprintf(stderr, "ferryd: unknown or incomplete argument '%s'\n%s", argv[i], kUsage);
    return 2;
  }
  if (config_path.empty()) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  // Read once: the text parsed here is the baseline the running ferryd's reloads compare with.
  ferry::common::WatchedFile config_file(config_path);
  auto config = ferry::config::loadConfigFile(config_file);
  if (!config.ok()) return fail(std::string(config.status().message()));
  // The admission limits against the memory limit (docs/configuration.md, "Memory"): limits
  // written too high for it refuse the start, naming both.
  if (auto st = ferry::config::fitConfigToMemory(*config); !st.ok()) {
    return fail(absl::StrCat(config_path, ": ", st.message()));
  }
  if (check_only) {
    // What the start would build, through the same builders (proxy/server/check_config.h).
    std::vector<std::string> report;
    absl::Status st = ferry::server::checkConfig(*config, config_path, report);
    for (const auto& line : report) std::printf("%s\n", line.c_str());
    return st.ok() ? 0 : fail(std::string(st.message()));
  }
  applyMallocTunables(argv);
  // Writes to a peer that reset must return EPIPE, not kill the process.
  std::signal(SIGPIPE, SIG_IGN);
  ferry::server::Server server(std::move(*config), std::move(config_file));
  if (auto st = server.start(); !st.ok()) return fail(std::string(st.message()));
  server.run();
  if (!server.exitStatus().ok()) return fail(std::string(server.exitStatus().message()));
  return 0;
}
