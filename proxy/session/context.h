#pragma once
// What a connection handler can reach: process-wide shared state (thread-safe or
// immutable) and the worker it runs on (single-threaded, no locks).
#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "absl/container/flat_hash_map.h"
#include "proxy/config/config.h"
#include "proxy/hbone/pool.h"
#include "proxy/hbone/receive_budget.h"
#include "proxy/identity/cert_source.h"
#include "proxy/identity/tls_context.h"
#include "proxy/policy/store.h"
#include "proxy/session/access_log.h"
#include "proxy/session/admission.h"
#include "proxy/session/istio_metrics.h"
#include "proxy/session/placement.h"
#include "proxy/session/recent_closes.h"
#include "proxy/session/relay.h"
#include "proxy/session/reset_penalties.h"
#include "proxy/session/self_addresses.h"
#include "proxy/net/socket_factory.h"
#include "proxy/session/stats.h"
#include "proxy/workloads/registry.h"

namespace ferry::session {

class Worker;
class ConnectionRecord;

struct Shared {
  // What the server hands the workers at start, each part by name (designated initializers).
  struct Parts {
    const workloads::Store& workloads;
    const policy::Store& policies;
    identity::TlsContextCache& tls;
    net::SocketFactory& sockets;
    Stats& stats;
    Admission& admission;
    std::vector<uint16_t> ferry_ports;
    size_t workers = 1;
    int descriptor_cap = 0;
    int descriptor_slack = 0;
    bool policies_loaded = true;
    config::AccessLog access_log;
    IstioMetrics* istio = nullptr;
  };
  explicit Shared(Parts parts)
      : workloads(parts.workloads), policies(parts.policies), tls(parts.tls), sockets(parts.sockets),
        stats(parts.stats), ferry_ports(std::move(parts.ferry_ports)), placement(parts.workers),
        admission(parts.admission), descriptor_cap(parts.descriptor_cap), policies_loaded(parts.policies_loaded),
        access_log(parts.access_log), istio(parts.istio), descriptor_slack(parts.descriptor_slack) {}

  // No config here: each worker holds the config in force (Worker::config()), which a
  // reload replaces.
  const workloads::Store& workloads;
  // The authorization policies and PeerAuthentications in force (docs/policy.md).
  const policy::Store& policies;
  identity::TlsContextCache& tls;
  net::SocketFactory& sockets;
  Stats& stats;
  // Ports that are never a valid application target (ferry's own listeners).
  std::vector<uint16_t> ferry_ports;
  // ferryd's own listeners and addresses: never a destination ferryd connects to. Set by
  // the server once its listeners are bound, before a worker runs.
  SelfAddresses self;
  std::atomic<bool> draining{false};
  // Load per worker: where accepted connections are placed.
  Placement placement;
  // Every worker, by index; filled in by the server before the first accept.
  std::vector<Worker*> workers;
  // Connection and handshake limits of the listeners (session/admission.h).
  Admission& admission;
  // Data-plane sockets numbered at or above this are closed at once: the descriptors
  // above it are the operator endpoints' reserve (dataPlaneDescriptorCap).
  int descriptor_cap = 0;
  // False until every policy source has delivered its first state (the API server's lists):
  // until then inbound connections are refused, never judged against policies not yet read.
  std::atomic<bool> policies_loaded{true};
  // Read per record by every worker; set() applies new settings live (config reload).
  AccessLogSettings access_log;
  // Istio's TCP metrics (session/istio_metrics.h); null: not kept (tests that need none).
  IstioMetrics* istio = nullptr;
  // Peer identities closed for rapid reset, and the connect budget they share meanwhile.
  ResetPenalties reset_penalties;
  // How far above descriptor_cap a socket may be numbered when admission ended a pending
  // connection to make room for it (Admission::admit): a part of the reserve, so that the
  // operator endpoints keep the rest while evicted connections close.
  int descriptor_slack = 0;
  // Bytes received over HBONE and not yet written out, every connection together; its limit
  // is the config's (MemoryBudget::receive_buffer), set by the server at start and reload.
  std::shared_ptr<hbone::ReceiveBudget> receive_budget = std::make_shared<hbone::ReceiveBudget>();
};

// One live proxied connection as /connections shows it (Worker::connections).
struct ConnectionInfo {
  Direction direction = Direction::kOutbound;
  std::string src, dst, peer_identity;
  std::chrono::steady_clock::duration age{};
  uint64_t sent = 0, received = 0;  // src -> dst, dst -> src
  size_t worker = 0;
};

class Worker {
 public:
  Worker(Shared& shared, size_t index, std::shared_ptr<const config::Config> config)
      : shared_(shared), index_(index), config_(std::move(config)), pool_(io_.get_executor()),
        access_log_(shared.access_log) {}

  Shared& shared() { return shared_; }
  // The config in force, on this worker's thread (docs/configuration.md, "Reloading"). A
  // connection takes it once, when it starts, and keeps those settings for life; a reload
  // hands each worker the new one on its own thread (setConfig), so reading it needs no
  // lock and never sees half a change.
  const std::shared_ptr<const config::Config>& config() const { return config_; }
  void setConfig(std::shared_ptr<const config::Config> config) { config_ = std::move(config); }
  size_t index() const { return index_; }
  boost::asio::io_context& io() { return io_; }
  hbone::Pool& pool() { return pool_; }
  Scratch& scratch() { return scratch_; }
  AccessLogger& accessLog() { return access_log_; }
  // The last connections this worker closed (worker thread only; /connections?state=closed).
  RecentCloses& recentCloses() { return recent_closes_; }
  // Live proxied connections on this worker (drain waits for zero).
  std::atomic<int64_t>& live() { return live_; }
  // The ConnectionRecords alive on this worker, linked by themselves (worker thread only).
  ConnectionRecord*& records() { return records_; }
  // The drain deadline, on this worker's thread: resets every live connection (a RST to
  // the application, RST_STREAM to the HBONE peer), each then recorded as `shutdown`.
  // Returns how many.
  size_t abortLive();
  // On this worker's thread, after the policies or the workloads changed: every inbound
  // connection whose subject the policies now deny (or plaintext to a port now STRICT) is
  // reset and recorded as `policy_revoked`. Returns how many.
  size_t reauthorize(const policy::PolicySet& policies, const workloads::Registry& registry);
  // On this worker's thread: its live connections, the oldest first, at most `limit` of
  // them; `total` is set to how many are live.
  std::vector<ConnectionInfo> connections(size_t limit, size_t& total) const;
  // HBONE server connections (15008) accepted on this worker, while they are open; started
  // ones. After noticeShutdownToTunnels, each is told at once as well: a tunnel whose
  // handshake was under way when the listeners closed would otherwise idle in its client's
  // pool, and a retiring ferryd would wait for it until handover.deadline.
  void addTunnel(const std::shared_ptr<hbone::H2Connection>& tunnel);
  // On this worker's thread, from the tunnel's close handler: it leaves the list at once.
  // (Swept lazily, each closed tunnel's shared_ptr control block stayed: a wave of 1,000
  // idle tunnels left ~1,000 such 32-byte blocks spread over the heap, pinning 3.4 MB of
  // free pages that malloc_trim cannot give back.)
  void removeTunnel(const hbone::H2Connection* tunnel);
  // On this worker's thread: tells every open HBONE server connection's client to open no
  // more streams on it (H2Connection::noticeShutdown), and every later one. Returns how many.
  size_t noticeShutdownToTunnels();

 private:
  Shared& shared_;
  size_t index_;
  std::shared_ptr<const config::Config> config_;
  boost::asio::io_context io_{1};
  hbone::Pool pool_;
  Scratch scratch_;
  std::atomic<int64_t> live_{0};
  ConnectionRecord* records_ = nullptr;
  // Weak: a tunnel its io_context drops without closing it (at the end) is not kept.
  absl::flat_hash_map<const hbone::H2Connection*, std::weak_ptr<hbone::H2Connection>> tunnels_;
  bool tunnels_noticed_ = false;  // noticeShutdownToTunnels ran
  AccessLogger access_log_;
  RecentCloses recent_closes_;
};

// What runs a connection once its worker is chosen: a coroutine that owns the socket, and
// the load unit counted for it, for life.
using SocketTask =
    std::function<boost::asio::awaitable<void>(Worker&, boost::asio::ip::tcp::socket, LoadUnit)>;

// Runs `task` for `socket` on the worker `load` is counted on. When that is not `here`, the
// socket moves there as a raw fd, with nothing in flight on it; if it cannot be moved it
// runs here, and its load with it.
void runPlaced(Worker& here, boost::asio::ip::tcp::socket socket, SocketTask task, LoadUnit load);
// A unit on the least loaded worker, `here` on ties: for a connection any worker may run.
LoadUnit placeOnAnyWorker(Worker& here);
// Completion of a connection's coroutine, and the relay's handlers: logs what escaped them
// (never an aborted operation), whatever its type.
void logTaskError(std::exception_ptr e);

// Accept handlers, one per listener kind: each places the connection and starts its task,
// which holds `admitted` for the connection's life and marks its handshake done.
void acceptOutbound(Worker& worker, boost::asio::ip::tcp::socket socket, Admitted admitted);
void acceptHbone(Worker& worker, boost::asio::ip::tcp::socket socket, Admitted admitted);
void acceptPlaintext(Worker& worker, boost::asio::ip::tcp::socket socket, Admitted admitted);

// The mTLS mode when no PeerAuthentication decides: the workload's own tls_mode.
policy::MtlsMode fallbackMode(const workloads::Workload& w);

}  // namespace ferry::session
