#pragma once
// ferryd's process (docs/architecture.md, "Inside ferryd's process"): the composition root.
// It makes the components (the workload, policy and identity runtimes, the data plane, the
// handover), wires what one tells another (a policy or workload change, a drain), and runs
// the control thread: signals, the poll timer, the reloads and the operator endpoints.
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/json/object.hpp>

#include "absl/status/status.h"
#include "proxy/common/file.h"
#include "proxy/config/config.h"
#include "proxy/server/data_plane.h"
#include "proxy/server/handover_runtime.h"
#include "proxy/server/http_server.h"
#include "proxy/server/identity_runtime.h"
#include "proxy/server/policy_runtime.h"
#include "proxy/server/workload_runtime.h"
#include "proxy/session/context.h"
#include "proxy/telemetry/metrics.h"

namespace ferry::server {

// The reloads of the config file (docs/configuration.md, "Reloading"), for /config_dump,
// ferryctl and the metrics.
struct ReloadStatus {
  std::string path;         // the config file; empty: none (a Config built in-process)
  uint64_t generation = 0;  // reloads that changed a live key (0: the config ferryd started with)
  uint64_t applied = 0;     // valid versions read (a changed file or a SIGHUP), changes or not
  uint64_t rejected = 0;    // versions refused as a whole: nothing of them applied
  std::chrono::system_clock::time_point last_attempt{};  // the epoch: none yet
  std::chrono::system_clock::time_point last_success{};  // the last version applied
  std::string last_result;  // "applied", "rejected"; "" before the first attempt
  std::string error;        // why the last attempt was rejected (names the file, line and key)
  std::vector<std::string> last_applied_keys;      // live keys the last applied version changed
  std::vector<std::string> restart_required_keys;  // keys whose file value waits for a restart
};

// ReloadStatus for any thread: the control thread records, the admin pages and tests read.
class ReloadHistory {
 public:
  explicit ReloadHistory(std::string path) { status_.path = std::move(path); }
  ReloadStatus get() const {
    std::lock_guard lock(mu_);
    return status_;
  }
  void applied(std::vector<std::string> live_keys, std::vector<std::string> restart_keys);
  void rejected(std::string why);
  void collect(telemetry::Exposition& out) const;

 private:
  mutable std::mutex mu_;
  ReloadStatus status_;
};

class Server final : private HandoverHost {
 public:
  // `config_file`: the file `config` was read from (config::loadConfigFile), holding that
  // read as the baseline later reloads compare with, re-read on SIGHUP and when it changes;
  // none: a config built in-process, no reloads.
  explicit Server(config::Config config, std::optional<common::WatchedFile> config_file = std::nullopt);
  ~Server() override;

  // Loads workloads, binds every listener, starts the workers. Errors are start-up errors.
  absl::Status start();
  // Runs the control loop on the calling thread until SIGTERM/SIGINT (or shutdown()), then
  // drains and stops the workers.
  void run();
  // Not OK when run() returned because this ferryd could not take over (the previous one
  // goes on serving): the process exits 1 with it.
  const absl::Status& exitStatus() const { return exit_status_; }
  // Thread-safe: begins a graceful shutdown; a ferryd that has not taken over yet exits
  // without one, as at a signal.
  void shutdown();

  // Ready = started, not draining, and certificates can be had (the CA material or the
  // trust bundle is loaded). Not ready says why, for /healthz/ready.
  absl::Status readiness() override;
  // What readiness() judges once started: the workload source has listed and is fresh, the
  // identity material is loaded.
  absl::Status health();
  bool ready() { return readiness().ok(); }
  // The Prometheus text served on /metrics (the one registry, rendered).
  std::string renderMetrics() { return metrics_registry_.render(); }
  session::Stats& stats() { return data_plane_->stats(); }
  // Thread-safe.
  ReloadStatus reloadStatus() const { return reloads_.get(); }
  size_t workerCount() const { return data_plane_->workers().size(); }
  // Upgrades (docs/operations.md, "Upgrades and restarts"). Thread-safe.
  HandoverStatus handoverStatus() const { return handover_->status(); }

 private:
  // The phases of start(), in order: the workload, policy and identity sources; the workers
  // and what they share; the datapath; following the registry; the listeners; the operator
  // endpoints' routes; the control loop's signals and timers; the worker threads.
  absl::Status startSources();
  absl::Status startDatapath();
  void followWorkloads();
  absl::Status bindAllListeners();
  absl::Status bindOperatorListeners();
  void routeOperatorEndpoints();
  void startControlLoop();
  void pollWorkloads();
  // `reread_config`: SIGHUP, the config file is read even if it looks unchanged.
  void pollOnce(bool reread_config = false);
  // /metrics: every part's collector, in order (server_metrics.cc).
  void registerMetrics();
  void collectAdminRefusals(telemetry::Exposition& out);
  void collectProcessMetrics(telemetry::Exposition& out);
  void armSignals();
  void onSignal(int sig);
  // The admin endpoint's pages (server_admin.cc; docs/operations.md, "Endpoints"): the
  // read-only ones are admin_pages.h's; these need the server's own state.
  void routeAdmin();
  boost::json::object statusJson();
  std::string datapathMode();  // the datapath's injection mode, or "disabled"
  boost::json::object configDumpJson();
  HttpResponse quitQuitQuit();
  // /connections: asks every worker for its live connections (on its own thread) and
  // replies on the control thread once all have answered.
  void serveConnections(const HttpRequest& request, HttpServer::Reply reply);
  // /explain?from=IP&to=IP:PORT (proxy/server/explain_admin.h).
  void serveExplain(const HttpRequest& request, HttpServer::Reply reply);
  // Reads the config file when it changed (or, `reread`, in any case: SIGHUP) and applies
  // its live keys; a file that does not load changes nothing (docs/configuration.md,
  // "Reloading").
  void reloadConfig(bool reread);
  void rejectReload(const absl::Status& why);
  // `new_policy_files`: policy_ has loaded a new list of files (or the root namespace changed).
  void applyConfig(const config::Config& next, bool new_policy_files);
  // The policies changed: the datapath's plaintext capture follows, and every worker judges
  // its open inbound connections again.
  void onPoliciesChanged(const policy::PolicySet& after);
  // A registry change: tunnels of local pods that left go, identities no local workload
  // uses go, and a local workload's connections are judged again.
  void onWorkloadsChanged(const workloads::Registry& after, const workloads::Delta& delta);
  void beginDrain();
  // Draining or retiring: no more workload, config or identity polls, trims or sweeps.
  void stopPeriodicWork();
  void stopOperatorEndpoints();

  // HandoverHost (handover_runtime.h).
  absl::Status readyToServe() override;
  int64_t liveConnections() override { return data_plane_->liveConnections(); }
  bool stopping() override { return stopping_.load(); }
  std::chrono::steady_clock::time_point drainDeadline() override { return data_plane_->drainDeadline(); }
  absl::Status offerSockets(const handover::OfferSocket& add) override;
  void offered() override { workloads_->setHandedOver(true); }
  void offerFailed() override { workloads_->resumeAfterFailedHandover(); }
  void retire(std::chrono::steady_clock::time_point deadline) override;
  void finishDrain() override;
  absl::Status startServing() override;
  void serving() override;
  void exitWithoutServing(absl::Status why) override;

  // The control thread's loop: first made, last to go (every component's timers and
  // sockets live on it).
  boost::asio::io_context control_{1};
  // The config in force: the one ferryd started with, with the live keys of each reload.
  // Control thread; workers hold copies (session::Worker::config()).
  config::Config config_;
  std::optional<common::WatchedFile> config_file_;
  ReloadHistory reloads_;
  // The one metrics registry (/metrics) and this server's parts in it (registerMetrics).
  telemetry::Registry metrics_registry_;
  std::vector<telemetry::Registry::Registration> metric_parts_;
  std::unique_ptr<WorkloadRuntime> workloads_;
  // Authorization policies and PeerAuthentications (docs/policy.md): from policy.files and,
  // with the Kubernetes source, the API server.
  PolicyRuntime policy_;
  // The workload identities: the configured source, its TLS contexts, timer and metrics.
  std::unique_ptr<IdentityRuntime> identity_;
  std::unique_ptr<DataPlane> data_plane_;
  std::unique_ptr<HandoverRuntime> handover_;
  boost::asio::signal_set signals_{control_};
  boost::asio::steady_timer poll_timer_{control_};
  HttpServer metrics_{control_, "metrics"};
  HttpServer readiness_{control_, "readiness"};
  HttpServer admin_{control_, "admin"};
  std::atomic<bool> started_{false};
  std::atomic<bool> stopping_{false};
  std::chrono::steady_clock::time_point started_at_;
  absl::Status exit_status_;  // why run() returned other than after a drain
};

}  // namespace ferry::server
