#pragma once
// ferryd's data plane (docs/architecture.md, "Inside ferryd's process"): the workers and
// their threads, what they share (admission, the socket factory, the Istio metrics), the
// listeners on 15001, 15006 and 15008 with their accept loops, the drain, and giving memory
// back after bursts of closes. An accepted connection is placed on the least loaded worker
// (moved there before a byte is read) and lives on that worker for life.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include "absl/status/status.h"
#include "proxy/common/file.h"
#include "proxy/config/config.h"
#include "proxy/datapath/netns.h"
#include "proxy/net/socket_factory.h"
#include "proxy/server/handover.h"
#include "proxy/session/context.h"
#include "proxy/telemetry/metrics.h"

namespace ferry::server {

class DataPlane;

// Gives freed heap back to the kernel after a burst of closes (docs/security.md, Memory) and
// drops the Istio series idle for telemetry.series_expiry: one check a second on the
// control thread.
class Housekeeping {
 public:
  Housekeeping(DataPlane& data_plane, const config::Config& config, boost::asio::io_context& control);
  void start();
  void stop();
  uint64_t trims() const { return memory_trims_.load(std::memory_order_relaxed); }
  uint64_t seriesDropped() const { return istio_series_dropped_.load(std::memory_order_relaxed); }

 private:
  void schedule();
  void sweepIstioSeries();
  void maybeTrimMemory();
  void trimHeap(uint64_t closes);

  DataPlane& data_plane_;
  const config::Config& config_;  // the server's, in force (control thread)
  boost::asio::io_context& control_;
  boost::asio::steady_timer timer_;
  bool stopped_ = false;
  // Close counts (admission tickets + proxied connections) at the last trim and last check.
  uint64_t closes_at_trim_ = 0;
  uint64_t closes_at_check_ = 0;
  std::chrono::steady_clock::time_point last_trim_;
  // When the workers last swept their idle Istio series.
  std::chrono::steady_clock::time_point last_series_sweep_;
  std::atomic<uint64_t> istio_series_dropped_{0};
  std::atomic<uint64_t> memory_trims_{0};
};

class DataPlane {
 public:
  // `config`: the server's config in force, read on the control thread (a reload changes it
  // in place and then calls applyConfig); the workers hold copies.
  DataPlane(const config::Config& config, boost::asio::io_context& control);
  // Stops the workers and joins their threads; the listeners go before their workers.
  ~DataPlane();

  // What the sessions read besides the config: the registry, the policies, the TLS contexts.
  struct Sources {
    const workloads::Store& workloads;
    const policy::Store& policies;
    identity::TlsContextCache& tls;
    bool policies_loaded = true;  // false: inbound connections are refused until markPoliciesLoaded
  };
  // Raises the descriptor limit, makes the workers and what they share.
  absl::Status start(const Sources& sources);
  // Binds (or adopts) every data-plane listener, one per worker, and starts their accept
  // loops; `defer_accepting`: the loops wait for acceptDeferred (taken over, not ready yet).
  // Called in the netns the data plane's sockets live in.
  absl::Status bindListeners(const handover::TakenSockets& taken, bool defer_accepting);
  // Runs every worker on its own thread, in `netns` when given (upstream sockets too).
  void startThreads(const datapath::NetnsFd* netns);
  void acceptDeferred();
  // Every worker closes its listeners (on its own thread) and sends GOAWAY on its pooled
  // tunnels; `notice_tunnels`: and tells the clients of its HBONE server connections to open
  // no more streams there (a handover: they must not be refused anything in flight).
  void stopAccepting(bool notice_tunnels);
  void stopWorkers();

  // The drain (docs/operations.md): a connection accepted from now on is reset at once
  // (stopAccepting closes the listeners); live connections may finish until the deadline.
  void refuseNewConnections() { shared_->draining = true; }
  void setDrainDeadline(std::chrono::steady_clock::time_point deadline) { drain_deadline_ = deadline; }
  std::chrono::steady_clock::time_point drainDeadline() const { return drain_deadline_; }
  // One look at what is left: true once nothing is (live connections; `accepted_too`: and
  // connections accepted and not relaying yet) or the deadline passed, when the live ones
  // were reset; else looks again shortly, calling `again`.
  bool drainPass(bool accepted_too, std::function<void()> again);

  int64_t liveConnections();
  // Every worker judges its open inbound connections again by the policies in force.
  void reauthorize(const char* why);
  // Local pods left these addresses: their pooled tunnels go (hbone::Pool::drainSource).
  void drainTunnelsFrom(std::vector<common::IpAddress> left);
  // A reload changed the config in force (`before`: the one it replaced).
  void applyConfig(const config::Config& before);
  // A reload fitted the config to a new memory budget (config.memory_budget).
  void applyMemoryBudget();
  // Every source of policies has delivered its first state.
  void markPoliciesLoaded();
  bool policiesLoaded() const;
  Housekeeping& housekeeping() { return housekeeping_; }

  session::Stats& stats() { return stats_; }
  const std::vector<std::unique_ptr<session::Worker>>& workers() const { return workers_; }
  // Every data-plane listener as bound (control thread; the descriptors are the acceptors'),
  // for the next ferryd.
  struct BoundListener {
    handover::Role role;
    std::string address;
    int fd;
  };
  const std::vector<BoundListener>& boundListeners() const { return bound_listeners_; }

  // Metrics, each a part of /metrics in the server's order.
  void collectIstio(telemetry::Exposition& out);
  void collectAdmission(telemetry::Exposition& out) const { admission_.collect(out); }
  void collectResources(telemetry::Exposition& out);
  void collectWorkers(telemetry::Exposition& out);

 private:
  void preallocateSocketStates(int descriptor_cap);
  absl::Status bindListenersOf(const std::vector<common::HostPort>& addrs, session::Listener listener,
                               const handover::TakenSockets& taken, bool defer_accepting);
  void recordSelfAddresses();

  const config::Config& config_;
  boost::asio::io_context& control_;
  session::Stats stats_;
  net::KernelSocketFactory sockets_;
  session::Admission admission_;
  uint64_t descriptor_limit_ = 0;  // RLIMIT_NOFILE in force (after raising it)
  // Istio's TCP metrics, one shard per worker (made in start(): outlives the workers).
  std::unique_ptr<session::IstioMetrics> istio_;
  std::unique_ptr<session::Shared> shared_;
  std::vector<std::unique_ptr<session::Worker>> workers_;
  // acceptors_[worker] are only touched on that worker's thread after start().
  std::vector<std::vector<std::unique_ptr<boost::asio::ip::tcp::acceptor>>> acceptors_;
  std::vector<BoundListener> bound_listeners_;
  std::vector<std::function<void()>> deferred_accepts_;
  std::vector<std::thread> threads_;
  boost::asio::steady_timer drain_timer_;
  std::chrono::steady_clock::time_point drain_deadline_;
  bool drain_aborted_ = false;  // the deadline passed and live connections were reset
  Housekeeping housekeeping_;

  friend class Housekeeping;
};

}  // namespace ferry::server
