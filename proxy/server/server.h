#pragma once
// ferryd's process: one control thread (signals, workloads file, operator endpoints) and N
// workers, each with its own io_context and its own SO_REUSEPORT listeners on 15001, 15006
// and 15008. An accepted connection is placed on the least loaded worker (moved there
// before a byte is read) and lives on that worker for life.
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/json/object.hpp>

#include "absl/status/status.h"
#include "proxy/common/file.h"
#include "proxy/common/log.h"
#include "proxy/config/config.h"
#include "proxy/datapath/datapath.h"
#include "proxy/datapath/netns.h"
#include "proxy/datapath/proxy_netns.h"
#include "proxy/server/cni_endpoint.h"
#include "proxy/server/cni_credentials.h"
#include "proxy/server/cni_enrolment.h"
#include "proxy/server/cni_install.h"
#include "proxy/server/handover.h"
#include "proxy/server/identity_runtime.h"
#include "proxy/server/policy_runtime.h"
#include "proxy/server/http_server.h"
#include "proxy/session/context.h"
#include "proxy/telemetry/metrics.h"
#include "proxy/workloads/registry.h"
#include "proxy/workloads/source.h"

namespace ferry::workloads {
class KubernetesSource;
}

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

class Server {
 public:
  // `config_path`: the file `config` was read from, re-read on SIGHUP and when it changes;
  // empty: no reloads.
  // `config_file`: the file `config` was read from (config::loadConfigFile), holding that
  // read as the baseline later reloads compare with; none: a config built in-process.
  explicit Server(config::Config config, std::optional<common::WatchedFile> config_file = std::nullopt);
  ~Server();

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
  absl::Status readiness();
  // What readiness() judges once started: the workload source has listed and is fresh, the
  // identity material is loaded.
  absl::Status health();
  bool ready() { return readiness().ok(); }
  // The Prometheus text served on /metrics (the one registry, rendered).
  std::string renderMetrics();
  session::Stats& stats() { return stats_; }
  // Thread-safe.
  ReloadStatus reloadStatus() const;
  // The bound address of the first listener of each kind (for tests that bind port 0).
  size_t workerCount() const { return workers_.size(); }

  // Upgrades (docs/operations.md, "Upgrades and restarts"): this generation and the one
  // before it, while both run. Thread-safe.
  struct HandoverStatus {
    std::string state = "serving";  // "offered": a successor is starting; "retiring"
    int successor_pid = 0;          // offered, retiring
    std::string successor_name;     // handover::Message::name
    int previous_pid = 0;           // a previous generation still carrying connections; 0: none
    std::string previous_name;
    int64_t previous_live = 0;
    int64_t previous_deadline_ms = 0;  // until it resets what it still carries
    uint64_t taken = 0;   // handovers taken at start (0 or 1)
    uint64_t given = 0;   // to a successor that became ready
    uint64_t failed = 0;  // offers whose successor failed before it was ready
  };
  HandoverStatus handoverStatus() const;

 private:
  // The phases of start(), in order: the workload, policy and identity sources; the workers
  // and what they share; the datapath; following the registry; the listeners; the operator
  // endpoints' routes; the control loop's signals and timers; the worker threads.
  absl::Status startSources();
  absl::Status startWorkers();
  absl::Status startDatapath();
  void followWorkloads();
  absl::Status bindAllListeners();
  void routeOperatorEndpoints();
  void startControlLoop();
  void startWorkerThreads();
  void pollWorkloads();
  // `reread_config`: SIGHUP, the config file is read even if it looks unchanged.
  void pollOnce(bool reread_config = false);
  // /metrics: every part's collector, in order (server_metrics.cc).
  void registerMetrics();
  void collectIstioMetrics(telemetry::Exposition& out);
  void collectResourceMetrics(telemetry::Exposition& out);
  void collectAdminRefusals(telemetry::Exposition& out);
  void collectProcessMetrics(telemetry::Exposition& out);
  void armSignals();
  // The admin endpoint's pages (server_admin.cc; docs/operations.md, "Endpoints"): the
  // read-only ones are admin_pages.h's; these need the server's own state.
  void routeAdmin();
  boost::json::object statusJson();
  boost::json::object configDumpJson();
  HttpResponse quitQuitQuit();
  // /connections: asks every worker for its live connections (on its own thread) and
  // replies on the control thread once all have answered.
  void serveConnections(const HttpRequest& request, HttpServer::Reply reply);
  // /explain?from=IP&to=IP:PORT (proxy/server/explain_admin.h).
  void serveExplain(const HttpRequest& request, HttpServer::Reply reply);
  // The connections every worker carries now.
  int64_t liveConnections();
  // Reads the config file when it changed (or, `reread`, in any case: SIGHUP) and applies
  // its live keys; a file that does not load changes nothing (docs/configuration.md,
  // "Reloading").
  void reloadConfig(bool reread);
  void rejectReload(const absl::Status& why);
  // `new_policy_files`: policy_ has loaded a new list of files (or the root namespace changed).
  void applyConfig(const config::Config& next, bool new_policy_files);
  void collectReloadMetrics(telemetry::Exposition& out);
  void preallocateSocketStates(int descriptor_cap);
  // Gives freed heap back to the kernel after a burst of closes (docs/security.md, Memory).
  void scheduleMemoryTrim();
  void maybeTrimMemory();
  void trimHeap(uint64_t closes);
  void beginDrain();
  void finishDrain();
  // Every worker closes its listeners (on its own thread) and sends GOAWAY on its pooled
  // tunnels; `notice_tunnels`: and tells the clients of its HBONE server connections to open
  // no more streams there (a handover: they must not be refused anything in flight).
  void stopAccepting(bool notice_tunnels);

  // Upgrades (server_handover.cc). The new side: takes the running ferryd's sockets at start
  // (before the datapath and the listeners), tells it when this one serves, then follows its
  // retirement. The old side: offers its sockets to the next ferryd and retires once it is
  // ready, or goes on serving when it fails.
  enum class Generation { kServing, kOffered, kRetiring };
  absl::Status takeOverFromPrevious();
  // The descriptors taken over for `role`, for `addr` when given (its port 0 matching any),
  // each given out once.
  std::vector<common::UniqueFd> takenSockets(handover::Role role, const common::HostPort* addr = nullptr);
  absl::Status startHandoverEndpoint();
  absl::Status announceReady();
  boost::asio::awaitable<void> followPrevious(boost::asio::local::stream_protocol::socket link,
                                              handover::FrameReader reader, int pid);
  boost::asio::awaitable<void> handoverAcceptLoop();
  boost::asio::awaitable<void> serveSuccessor(boost::asio::local::stream_protocol::socket link);
  absl::StatusOr<handover::Message> makeOffer();
  void retire(int successor_pid);
  // Taken over: waits until health() is OK (at most kSuccessorReadyTimeout), then serves the operator
  // endpoints and the CNI socket, tells the previous ferryd and starts accepting; else exits
  // (exitStatus) and the previous one goes on.
  boost::asio::awaitable<void> takeOverWhenReady();
  // Stops the control loop and the workers without a drain: nothing was accepted.
  void exitWithoutServing(absl::Status why);
  // The datapath's first full sync, once the workload source has listed.
  absl::Status syncDatapathOnceSourceListed();
  void collectHandoverMetrics(telemetry::Exposition& out);
  // handover.readiness_file: this process's readiness line, written now and refreshed every
  // common::kReadinessFileInterval until exit, when the file goes.
  std::string readinessLine();
  void publishReadinessFile();
  void removeReadinessFile();

  // The config in force: the one ferryd started with, with the live keys of each reload.
  // Control thread; workers hold copies (session::Worker::config()).
  config::Config config_;
  std::optional<common::WatchedFile> config_file_;
  mutable std::mutex reload_mu_;
  ReloadStatus reload_;  // under reload_mu_
  // The one metrics registry (/metrics) and this server's parts in it (registerMetrics).
  telemetry::Registry metrics_registry_;
  std::vector<telemetry::Registry::Registration> metric_parts_;
  session::Stats stats_;
  // Istio's TCP metrics, one shard per worker (made in start(): outlives the workers).
  std::unique_ptr<session::IstioMetrics> istio_;
  workloads::Store workloads_;
  // Authorization policies and PeerAuthentications (docs/policy.md): from policy.files and,
  // with the Kubernetes source, the API server.
  PolicyRuntime policy_;
  // The policies changed: the datapath's plaintext capture follows, and every worker judges
  // its open inbound connections again.
  void onPoliciesChanged(const policy::PolicySet& after);
  void reauthorizeLive(const char* why);
  std::unique_ptr<workloads::Source> source_;
  workloads::KubernetesSource* k8s_source_ = nullptr;  // source_, when it is the Kubernetes one
  absl::Status makeWorkloadSource();
  // A registry change: the datapath applies it, identities no local workload uses go.
  void onWorkloadsChanged(const workloads::Registry& after, const workloads::Delta& delta);
  // The workload identities: the configured source, its TLS contexts, timer and metrics.
  std::unique_ptr<IdentityRuntime> identity_;
  net::KernelSocketFactory sockets_;
  session::Admission admission_;
  uint64_t descriptor_limit_ = 0;  // RLIMIT_NOFILE in force (after raising it)
  std::unique_ptr<session::Shared> shared_;
  std::vector<std::unique_ptr<session::Worker>> workers_;
  // acceptors_[worker] are only touched on that worker's thread after start().
  std::vector<std::vector<std::unique_ptr<boost::asio::ip::tcp::acceptor>>> acceptors_;
  // Every data-plane listener as bound (control thread; the descriptors are the acceptors'),
  // for the next ferryd.
  struct BoundListener {
    handover::Role role;
    std::string address;
    int fd;
  };
  std::vector<BoundListener> bound_listeners_;
  std::optional<handover::TakeOver> taken_;  // during start(): what the previous ferryd handed over
  std::unique_ptr<boost::asio::local::stream_protocol::acceptor> handover_acceptor_;
  Generation generation_ = Generation::kServing;  // control thread
  bool handed_over_ = false;  // a successor took the sockets: at exit nothing of the node is undone
  bool defer_accepting_ = false;  // taken over and not ready yet: the accept loops wait
  bool exit_signalled_ = false;     // SIGTERM/SIGINT came while retiring
  bool waiting_for_signal_ = false;  // retiring, holding nothing, handover.wait_for_signal
  std::vector<std::function<void()>> deferred_accepts_;
  std::vector<std::function<absl::Status()>> deferred_endpoints_;  // operator listeners taken over
  bool datapath_synced_ = false;
  bool datapath_sync_waiting_logged_ = false;
  absl::Status exit_status_;  // why run() returned other than after a drain
  mutable std::mutex handover_mu_;
  HandoverStatus handover_;  // under handover_mu_
  std::vector<std::thread> threads_;

  boost::asio::io_context control_{1};
  boost::asio::signal_set signals_{control_};
  boost::asio::steady_timer poll_timer_{control_};
  boost::asio::steady_timer drain_timer_{control_};
  boost::asio::steady_timer trim_timer_{control_};
  boost::asio::steady_timer readiness_file_timer_{control_};
  std::string readiness_file_line_;  // what handover.readiness_file holds
  // Close counts (admission tickets + proxied connections) at the last trim and last check.
  uint64_t closes_at_trim_ = 0;
  uint64_t closes_at_check_ = 0;
  std::chrono::steady_clock::time_point last_trim_;
  // Istio series of idle pairs dropped (telemetry.series_expiry): when the workers last swept.
  std::chrono::steady_clock::time_point last_series_sweep_;
  std::atomic<uint64_t> istio_series_dropped_{0};
  void sweepIstioSeries();
  std::atomic<uint64_t> memory_trims_{0};
  std::chrono::steady_clock::time_point drain_deadline_;
  bool drain_aborted_ = false;  // the deadline passed and live connections were reset
  HttpServer metrics_{control_, "metrics"};
  HttpServer readiness_{control_, "readiness"};
  HttpServer admin_{control_, "admin"};
  std::atomic<bool> started_{false};
  std::atomic<bool> stopping_{false};
  std::chrono::steady_clock::time_point started_at_;
  // With the tc datapath: the proxy netns (sockets live there) and the loaded programs.
  // With datapath.proxy_netns auto: held for ferryd's life (proxy/datapath/proxy_netns.h).
  std::optional<datapath::HostInterfaceClaim> proxy_claim_;
  // The Service capture line (control thread): what changed since the last one written.
  common::LogLimiter service_log_{5, std::chrono::seconds(1)};
  size_t service_log_added_ = 0, service_log_removed_ = 0;
  std::optional<datapath::NetnsFd> proxy_netns_;
  std::unique_ptr<datapath::Datapath> datapath_;
  // cni.enabled: ferry-cni's endpoint (proxy/server/cni_endpoint.h).
  std::unique_ptr<PodEnrolment> cni_enrolment_;
  std::unique_ptr<CniEndpoint> cni_endpoint_;
  absl::Status startCniEndpoint();
  // The source's first whole state was in and the datapath released what an earlier ferryd
  // left for pods no longer enrolled (Datapath::releaseStale).
  bool stale_released_ = false;
  // cni.install: ferry-cni in the node's CNI configuration (docs/install.md, "The CNI chain").
  std::optional<CniInstaller> cni_installer_;
  std::unique_ptr<CniCredentials> cni_credentials_;  // cni.service_account
  // The data-plane listeners, and the operator ones (readiness, metrics, admin) when
  // `operator_too`; bindOperatorListeners() does those alone.
  absl::Status bindListeners(bool operator_too);
  absl::Status bindOperatorListeners();
  // datapath.proxy_netns: auto.
  absl::StatusOr<datapath::NetnsFd> createProxyNetns();
};

}  // namespace ferry::server
