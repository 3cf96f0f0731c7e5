#include "proxy/server/check_config.h"

#include <boost/asio/io_context.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "proxy/common/log.h"
#include "proxy/config/memory_budget.h"
#include "proxy/server/identity_runtime.h"
#include "proxy/server/policy_runtime.h"
#include "proxy/server/workload_runtime.h"

namespace ferry::server {

absl::Status checkConfig(const config::Config& config, const std::string& path, std::vector<std::string>& report) {
  // The builders log what they load at info; the check prints its own summary.
  const common::LogLevel level = common::logLevel();
  common::setLogLevel(common::LogLevel::kWarn);
  struct RestoreLevel {
    common::LogLevel level;
    ~RestoreLevel() { common::setLogLevel(level); }
  } restore{level};
  // Never run: a builder may arm a timer or queue a request on it, and nothing is sent.
  boost::asio::io_context io;
  WorkloadRuntime workloads(config, io);
  PolicyRuntime policy(config.policy);
  if (config.workload_source == config::WorkloadSourceKind::kKubernetes) {
    // The API server is not asked (it may not be reachable from where the file is
    // checked); a kubeconfig the config names must parse.
    if (auto st = WorkloadRuntime::checkApiServer(config); !st.ok()) return st;
    report.push_back(absl::StrFormat(
        "%s: OK (node %s, workloads from the Kubernetes API: %s)", path, config.node,
        config.kubernetes.kubeconfig.empty() ? "in-cluster" : config.kubernetes.kubeconfig));
  } else {
    if (auto st = workloads.startSource(policy, nullptr); !st.ok()) return st;
    auto registry = workloads.store().current();
    report.push_back(absl::StrFormat("%s: OK (node %s, %d workloads, %d local)", path, config.node, registry->size(),
                                     registry->localCount()));
  }
  // Policy files: one that cannot be read or parsed as a whole stops ferryd's start; a
  // refused object in one does not, and is listed.
  if (auto st = policy.start(nullptr); !st.ok()) return st;
  for (const auto& refused : policy.store().refusals()) {
    report.push_back(absl::StrFormat("warning: %s: %s %s refused: %s", refused.origin, refused.kind, refused.key,
                                     refused.reason));
  }
  report.push_back(absl::StrCat("memory: ", config::describeBudget(config.memory_budget)));
  // Certificates and CA material may legitimately appear later (written by an agent), so
  // their absence is a warning here, not an error; ferryd itself starts not ready and fails
  // closed until they exist.
  auto identity = IdentityRuntime::create(config, io, workloads.store(), nullptr);
  if (!identity.ok()) return identity.status();
  if (auto st = (*identity)->sourceStatus(); !st.ok()) report.push_back(absl::StrCat("warning: ", st.message()));
  (*identity)->stop();
  return absl::OkStatus();
}

}  // namespace ferry::server
