// Inbound HBONE (15008): mTLS with the certificate of the local workload being called
// (chosen by the connection's original destination IP), then one CONNECT per proxied
// connection, validated, and re-originated to the workload from the client pod's IP
// (docs/datapath.md, "Packet walk", step 6; docs/hbone.md, "How the server judges a request").
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <deque>
#include <memory>
#include <optional>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "absl/strings/str_cat.h"
#include "proxy/common/duration.h"
#include "proxy/common/log.h"
#include "proxy/identity/spiffe_id.h"
#include "proxy/net/deadline.h"
#include "proxy/net/mtls.h"
#include "proxy/net/signal.h"
#include "proxy/session/authorize.h"
#include "proxy/session/connect_target.h"
#include "proxy/session/context.h"
#include "proxy/session/forward.h"
#include "proxy/session/original_destination.h"
#include "proxy/session/record.h"

namespace ferry::session {
namespace asio = boost::asio;
using asio::awaitable;

namespace {

constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);

// What the handshake established, shared by all streams of one HBONE connection.
struct TunnelInfo {
  common::HostPort client;         // outer TCP source: the client pod
  common::IpAddress local_ip;      // outer TCP destination: the local pod being called
  std::string peer_id;             // client certificate's SPIFFE ID
  std::string local_id;            // the SPIFFE ID this side presented
  // The workloads at either end as the handshake found them (the client's may be unknown),
  // for the streams' records.
  workloads::WorkloadPtr client_workload;
  workloads::WorkloadPtr local_workload;
  // Anti-spoofing (docs/security.md, "Anti-spoofing"): the identity must be that of the
  // workload owning the client IP. Decided once per connection, answered per stream with 401.
  std::string spoof_reason;
};

// The upstream connects one HBONE connection may have in flight (hbone.max_pending_connects);
// streams beyond them wait in arrival order. A reset stream leaves the queue at once.
class ConnectSlots {
 public:
  explicit ConnectSlots(size_t limit) : limit_(limit) {}

  // Takes a slot, waiting for one if needed; false (no slot taken) once `stream` is reset.
  // `wake` is the caller's: notified when a slot may be free, and by the stream's abort
  // handler.
  awaitable<bool> acquire(const hbone::H2Stream& stream, net::Signal& wake, Stats& stats) {
    if (used_ >= limit_ || !waiting_.empty()) {
      stats.hbone_connect_waits.fetch_add(1, std::memory_order_relaxed);
      // Leaves the queue however this frame ends: also when it is destroyed suspended
      // (the worker's io_context stopped at exit), so that no other frame's release()
      // notifies a Signal that is gone.
      struct Waiter {
        std::deque<net::Signal*>& queue;
        net::Signal* wake;
        ~Waiter() {
          auto it = std::find(queue.begin(), queue.end(), wake);
          if (it != queue.end()) queue.erase(it);
        }
      } waiter{waiting_, &wake};
      waiting_.push_back(&wake);
      while (!stream.resetCode() && (used_ >= limit_ || waiting_.front() != &wake)) {
        co_await wake.wait();
      }
    }
    bool ok = !stream.resetCode();
    if (ok) ++used_;
    passOn();
    co_return ok;
  }
  void release() {
    --used_;
    passOn();
  }

 private:
  void passOn() {
    if (used_ < limit_ && !waiting_.empty()) waiting_.front()->notify();
  }
  size_t limit_;
  size_t used_ = 0;
  std::deque<net::Signal*> waiting_;
};

// Per-connection warning lines: 10 at once, then one a second (a client whose every stream
// fails writes about 100 bytes a second, not megabytes; ferry_connections_closed_total
// still counts every stream).
constexpr uint32_t kWarnBurst = 10;
constexpr std::chrono::seconds kWarnInterval{1};

// What the streams of one HBONE connection share and change (one worker, no locks).
struct TunnelState {
  TunnelState(size_t max_pending_connects, std::string client)
      : connects(max_pending_connects), client(std::move(client)) {}
  // The last stream of the connection has finished: say once what the limit held back.
  ~TunnelState() {
    if (warnings.suppressed() > 0) {
      FERRY_LOG(kWarn, "hbone: %u warning lines about streams of the connection from %s were not written (rate limit)",
                warnings.suppressed(), client);
    }
  }
  TunnelState(const TunnelState&) = delete;
  TunnelState& operator=(const TunnelState&) = delete;

  ConnectSlots connects;
  common::LogLimiter warnings{kWarnBurst, kWarnInterval};
  std::string client;
};

// The connection one stream proxies, its record filled from the request and the tunnel it
// came on. Its socket is the one to the workload, opened once the stream is judged; a stream
// runs on its connection's worker, and its load steers where new connections go.
std::unique_ptr<LiveConnection> newStreamConnection(Worker& worker, const std::shared_ptr<hbone::H2Stream>& stream,
                                                    const TunnelInfo& info,
                                                    const std::shared_ptr<TunnelState>& tunnel) {
  auto& shared = worker.shared();
  auto conn = std::make_unique<LiveConnection>(worker, Direction::kInbound, Tcp::socket(worker.io()),
                                               LoadUnit::add(shared.placement, worker.index()));
  ConnectionRecord& record = conn->record;
  record.src = common::formatHostPort(info.client);
  record.peer_identity = info.peer_id;
  record.dst = stream->header(":authority");
  record.source_workload = info.client_workload;
  record.destination_workload = info.local_workload;
  record.source_principal = info.peer_id;
  record.destination_principal = info.local_id;
  record.watchStream(stream);
  record.warn_limiter = &tunnel->warnings;
  conn->keep = tunnel;
  return conn;
}

// Rapid reset: the client gave up on the stream before it was answered. Nothing more is
// done for it (H2Connection counts these and ends a connection that lives on them).
void resetBeforeAnswer(Shared& shared, ConnectionRecord& record) {
  shared.stats.hbone_streams_reset_unanswered.fetch_add(1, std::memory_order_relaxed);
  record.detail = "client reset the stream before it was answered";
  record.finish(CloseReason::kPeerReset);
}

// Answers the stream `status` and finishes its record with `reason`.
void rejectStream(Shared& shared, hbone::H2Stream& stream, ConnectionRecord& record, int status,
                  CloseReason reason, std::string why) {
  shared.stats.hbone_streams_rejected.fetch_add(1, std::memory_order_relaxed);
  record.detail = why.empty() ? absl::StrCat(status) : absl::StrCat(status, ": ", why);
  stream.respond(status);
  record.finish(reason);
}

// Whether the stream may go where it asks: its form and target, the connection's identity
// (anti-spoofing), the drain, ferryd itself, and then the policies (docs/policy.md) at the
// destination's node, on the peer's verified identity, before anything is connected. The
// target, or nothing once the stream has been rejected (a policy denial is a 401 naming the
// policy).
std::optional<ConnectTarget> judgeStream(Worker& worker, hbone::H2Stream& stream, const TunnelInfo& info,
                                         const workloads::Registry& registry, ConnectionRecord& record) {
  auto& shared = worker.shared();
  auto verdict = validateConnect(stream.headers(), info.local_ip, registry, shared.ferry_ports);
  if (verdict.status != 200) {
    rejectStream(shared, stream, record, verdict.status, CloseReason::kBadRequest, verdict.reason);
    return std::nullopt;
  }
  if (!info.spoof_reason.empty()) {
    shared.stats.identity_spoofing_denied.fetch_add(1, std::memory_order_relaxed);
    rejectStream(shared, stream, record, 401, CloseReason::kDenied, info.spoof_reason);
    return std::nullopt;
  }
  if (shared.draining.load(std::memory_order_relaxed)) {
    rejectStream(shared, stream, record, 503, CloseReason::kShutdown, "ferryd is shutting down");
    return std::nullopt;
  }
  if (shared.self.contains(verdict.target)) {
    // Only reachable when a workload's address is one of ferryd's own (its ports are
    // refused above): ferryd never connects to itself.
    shared.stats.self_target_refused.fetch_add(1, std::memory_order_relaxed);
    rejectStream(shared, stream, record, 400, CloseReason::kSelfTarget,
                 absl::StrCat(common::formatHostPort(verdict.target), " is ferryd itself"));
    return std::nullopt;
  }
  auto decision = authorize(worker, Direction::kInbound, *shared.policies.current(), *verdict.workload,
                            policy::Request{info.client.ip, policy::principalOf(info.peer_id), verdict.target.ip,
                                            verdict.target.port},
                            record);
  if (!decision.allowed) {
    // The access line's policy= says why.
    rejectStream(shared, stream, record, 401, CloseReason::kPolicyDenied, "");
    return std::nullopt;
  }
  return verdict;
}

// Connects `upstream` to `target` from the client pod's IP, before the stream is answered, so
// a refusal is a 503 and not a 200 followed by a reset. A reset of the stream cancels the
// connect at once: the socket is closed (the workload sees no connection, or one that ends at
// once), and a stream still waiting for a slot leaves the queue. False once the stream has
// been answered or was reset (its record finished).
awaitable<bool> connectUpstream(Worker& worker, const config::Config& cfg, hbone::H2Stream& stream,
                                const TunnelInfo& info, TunnelState& tunnel, const common::HostPort& target,
                                ConnectionRecord& record, Tcp::socket& upstream) {
  auto& shared = worker.shared();
  net::Signal wake(worker.io().get_executor());
  stream.setAbortHandler([&upstream, &wake] {
    boost::system::error_code ignored;
    upstream.close(ignored);
    wake.notify();
  });
  struct AbortHandlerGuard {
    hbone::H2Stream& stream;
    ~AbortHandlerGuard() { stream.setAbortHandler(nullptr); }
  } abort_guard{stream};
  // An identity closed for rapid reset shares one connect budget across its connections.
  if (auto budget = shared.reset_penalties.budgetOf(info.peer_id, std::chrono::steady_clock::now());
      budget != nullptr && !budget->take(std::chrono::steady_clock::now())) {
    shared.stats.hbone_streams_penalized.fetch_add(1, std::memory_order_relaxed);
    rejectStream(shared, stream, record, 503, CloseReason::kBadRequest,
                 absl::StrCat(info.peer_id, " was closed for rapid reset: its upstream connects are limited to ",
                              cfg.hbone.max_pending_connects, " a second for ", ResetPenalties::kPenalty.count(),
                              " s"));
    co_return false;
  }
  if (!co_await tunnel.connects.acquire(stream, wake, shared.stats)) {
    resetBeforeAnswer(shared, record);
    co_return false;
  }
  boost::system::error_code ec;
  {
    struct SlotGuard {
      ConnectSlots& slots;
      ~SlotGuard() { slots.release(); }
    } slot{tunnel.connects};
    ec = co_await shared.sockets.connect(upstream, info.client.ip, target, cfg.timeouts.connect);
  }
  stream.setAbortHandler(nullptr);  // the relay watches the stream from here on
  if (stream.resetCode()) {
    net::abortSocket(upstream);
    resetBeforeAnswer(shared, record);
    co_return false;
  }
  if (ec) {
    rejectStream(shared, stream, record, 503,
                 ec == asio::error::timed_out ? CloseReason::kConnectTimeout : CloseReason::kConnectFailed,
                 absl::StrCat("connecting to ", common::formatHostPort(target), ": ", ec.message()));
    co_return false;
  }
  co_return true;
}

awaitable<void> serveStream(Worker& worker, std::shared_ptr<hbone::H2Stream> stream,
                            std::shared_ptr<const TunnelInfo> info,
                            std::shared_ptr<TunnelState> tunnel) {
  auto& shared = worker.shared();
  auto settings = worker.config();
  const auto& cfg = *settings;
  auto conn = newStreamConnection(worker, stream, *info, tunnel);
  ConnectionRecord& record = conn->record;
  if (stream->resetCode()) {  // HEADERS and RST_STREAM came in one read
    resetBeforeAnswer(shared, record);
    co_return;
  }

  auto registry = shared.workloads.current();
  auto verdict = judgeStream(worker, *stream, *info, *registry, record);
  if (!verdict) co_return;
  // Istio's metrics, as the server's node reports them (the client named by its workload, or
  // by its proven identity alone when its IP is no workload known here).
  if (shared.istio != nullptr) {
    record.attribute(Reporter::kDestination, /*mutual_tls=*/true,
                     calledService(hbone::forwardedHost(stream->headers()), cfg.telemetry.cluster_domain,
                                   *shared.workloads.services(),
                                   {common::canonicalIp(verdict->target.ip), verdict->target.port}));
  }

  if (!co_await connectUpstream(worker, cfg, *stream, *info, *tunnel, verdict->target, record, conn->socket)) {
    co_return;
  }
  stream->respond(200);
  shared.stats.hbone_streams_accepted.fetch_add(1, std::memory_order_relaxed);
  // The relay may idle for an hour: it needs neither the request nor this registry
  // snapshot (which would otherwise outlive every later workload change).
  stream->releaseHeaders();
  registry.reset();
  // The relay's socket is the workload's: the record reads its bytes so (requestBytes()).
  // From here the relay owns the connection, and this coroutine ends.
  relayOnStream(worker, std::move(conn), *stream);
}

// A pending connection's socket, for Admission to end it (AdmissionTicket::setEvictor):
// valid while `fd` >= 0, which the connection's own coroutine clears on its worker thread
// when its handshake is over, before anything can close the socket and free the number.
struct EvictableSocket {
  int fd = -1;
};

// Counts and logs an HBONE connection refused before its tunnel was open.
void refuseTunnel(Shared& shared, const common::HostPort& client, const common::HostPort& local,
                  const std::string& why) {
  shared.stats.hbone_handshake_failures.fetch_add(1, std::memory_order_relaxed);
  FERRY_LOG(kWarn, "hbone: refused connection %s -> %s: %s", common::formatHostPort(client),
            common::formatHostPort(local), why);
}

// What the handshake from `client` to the local workload `local_workload` established, for
// every stream of the tunnel, with the anti-spoofing decision already taken.
std::shared_ptr<const TunnelInfo> describeTunnel(const config::Config& cfg, const workloads::Registry& registry,
                                                 const common::HostPort& client, const common::IpAddress& local_ip,
                                                 std::string peer_id, std::string local_id,
                                                 workloads::WorkloadPtr local_workload) {
  auto info = std::make_shared<TunnelInfo>();
  info->client = client;
  info->local_ip = local_ip;
  info->peer_id = std::move(peer_id);
  info->local_id = std::move(local_id);
  info->local_workload = std::move(local_workload);
  info->client_workload = registry.sharedByIp(client.ip);
  const auto* source = info->client_workload.get();
  if (source == nullptr) {
    info->spoof_reason = absl::StrCat("client address ", client.ip.to_string(),
                                      " is not a known workload");
  } else if (source->spiffeId(cfg.trust_domain) != info->peer_id) {
    info->spoof_reason = absl::StrCat("identity ", info->peer_id, " does not own ",
                                      client.ip.to_string(), " (owned by ",
                                      source->spiffeId(cfg.trust_domain), ")");
  }
  return info;
}

// The server side of a tunnel's HTTP/2 connection.
hbone::H2Options tunnelOptions(const config::Config& cfg, const Shared& shared) {
  hbone::H2Options options;
  options.ping_interval = cfg.pool.ping_interval;
  options.ping_timeout = cfg.pool.ping_timeout;
  // Twice the clients' own release time: a well-behaved pool lets go first, and a client
  // that completes a handshake and then sends nothing cannot hold the connection forever.
  options.idle_release = cfg.pool.idle_release * 2;
  options.max_premature_resets = cfg.hbone.max_premature_resets;
  options.receive_budget = shared.receive_budget;
  return options;
}

// What the tunnel's end does: it leaves the worker and lets go of the handshake's unit and
// admission, which stay with the tunnel for as long as it is open; a connection error is
// logged, and a close for rapid reset penalizes `peer` (`rate` upstream connects a second).
void onTunnelClose(hbone::H2Connection& conn, Worker& worker, LoadUnit load, Admitted admitted,
                   const common::HostPort& client, const std::string& peer, uint32_t rate) {
  auto& shared = worker.shared();
  conn.setCloseHandler([load = std::make_shared<LoadUnit>(std::move(load)), admitted = std::move(admitted),
                        client, stats = &shared.stats, penalties = &shared.reset_penalties, peer,
                        rate, w = &worker](hbone::H2Connection& c) mutable {
    w->removeTunnel(&c);
    load->reset();
    admitted.reset();
    // One line per connection that ended in a connection error (never rate-limited: it is
    // one per handshake, and handshakes are what admission control bounds).
    if (auto code = c.goawayError()) {
      stats->recordGoaway(*code);
      FERRY_LOG(kWarn, "hbone: closed connection from %s with GOAWAY %s: %s",
                common::formatHostPort(client), hbone::h2ErrorName(*code), c.closeReason());
      if (c.closedForRapidReset() && penalties->penalize(peer, rate, std::chrono::steady_clock::now())) {
        FERRY_LOG(kWarn, "hbone: %s was closed for rapid reset: for %d s its upstream connects to this node, on "
                  "every connection, are limited to %u a second",
                  peer, static_cast<int>(ResetPenalties::kPenalty.count()), rate);
      }
    }
  });
}

// `load` counts the handshake on this worker, then the tunnel for its life; so does
// `admitted` on the listener's limits, pending until the handshake is done.
awaitable<void> handshakeAndServe(Worker& worker, Tcp::socket socket, LoadUnit load, Admitted admitted,
                                  std::chrono::steady_clock::time_point deadline,
                                  std::shared_ptr<EvictableSocket> evictable) {
  auto& shared = worker.shared();
  auto settings = worker.config();
  const auto& cfg = *settings;
  boost::system::error_code ec;
  auto peer_ep = socket.remote_endpoint(ec);
  auto local_ep = socket.local_endpoint(ec);
  if (ec) {
    evictable->fd = -1;
    co_return;
  }
  auto client = toHostPort(peer_ep);
  auto local = toHostPort(local_ep);

  auto registry = shared.workloads.current();
  auto workload = registry->sharedLocalByIp(local.ip);
  if (workload == nullptr) {
    evictable->fd = -1;
    refuseTunnel(shared, client, local,
                 absl::StrCat(local.ip.to_string(), " is not a workload on node ", cfg.node));
    net::abortSocket(socket);
    co_return;
  }
  auto local_id = identity::SpiffeId::forWorkload(cfg.trust_domain, workload->namespace_name.str(),
                                                  workload->service_account.str());
  auto ctx = shared.tls.serverContext(local_id);
  if (!ctx.ok()) {
    evictable->fd = -1;
    refuseTunnel(shared, client, local,
                 absl::StrCat("no certificate for ", local_id.str(), ": ", ctx.status().message()));
    net::abortSocket(socket);
    co_return;
  }
  socket.set_option(Tcp::no_delay(true), ec);
  net::MtlsOptions mtls{cfg.trust_domain, {}, deadline};
  auto hs = co_await net::acceptMtls(std::move(socket), **ctx, mtls);
  evictable->fd = -1;
  if (!hs.ok()) {
    if (hs.rejection) shared.stats.recordRejection(Direction::kInbound, *hs.rejection);
    refuseTunnel(shared, client, local, absl::StrCat("client ", hs.status.message()));
    co_return;
  }
  shared.stats.hbone_connections_accepted.fetch_add(1, std::memory_order_relaxed);
  admitted->handshakeDone();

  auto info = describeTunnel(cfg, *registry, client, local.ip, hs.peer_id, local_id.str(), workload);
  auto conn = hbone::H2Connection::create(hbone::H2Connection::Role::kServer, std::move(hs.tls),
                                          tunnelOptions(cfg, shared));
  auto tunnel = std::make_shared<TunnelState>(cfg.hbone.max_pending_connects,
                                              common::formatHostPort(client));
  onTunnelClose(*conn, worker, std::move(load), std::move(admitted), client, info->peer_id,
                cfg.hbone.max_pending_connects);
  Worker* w = &worker;
  conn->setRequestHandler([w, info, tunnel](std::shared_ptr<hbone::H2Stream> stream) {
    asio::co_spawn(w->io(), serveStream(*w, std::move(stream), info, tunnel), logTaskError);
  });
  conn->start();
  worker.addTunnel(conn);  // started: a shutdown notice goes after its SETTINGS
}

// The first byte of a TLS handshake record (RFC 8446 §5.1, ContentType handshake).
constexpr uint8_t kTlsHandshakeRecord = 0x16;

// A connection that has sent nothing costs a descriptor and this small frame: the TLS
// state (the SSL object, Asio's and the BIO pair's record buffers, ~85 KB together) is
// made only once the client's first byte is there, within the handshake deadline, and is
// the start of a TLS handshake (a peer that closed, or sent something else, never gets it).
awaitable<void> serveHbone(Worker& worker, Tcp::socket socket, LoadUnit load, Admitted admitted) {
  auto& shared = worker.shared();
  auto settings = worker.config();
  const auto& cfg = *settings;
  auto deadline = std::chrono::steady_clock::now() + cfg.timeouts.handshake;
  // Until its handshake is done, a newer client may take this connection's place when the
  // pending handshakes are at their limit (Admission::admit): the socket is shut down on
  // this worker, which ends the wait or the handshake at once.
  auto evictable = std::make_shared<EvictableSocket>(EvictableSocket{socket.native_handle()});
  admitted->setEvictor([&io = worker.io(), weak = std::weak_ptr<EvictableSocket>(evictable)] {
    boost::asio::post(io, [weak] {
      if (auto e = weak.lock(); e && e->fd >= 0) ::shutdown(e->fd, SHUT_RDWR);
    });
  });
  bool readable = false;
  {
    auto first = co_await net::withDeadline(socket.async_wait(Tcp::socket::wait_read, kTuple), deadline);
    readable = first && !std::get<0>(*first);
  }
  const char* why = nullptr;
  if (!readable) {
    why = "sent nothing within the handshake timeout";
  } else {
    uint8_t byte = 0;
    ssize_t n = ::recv(socket.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) why = "closed before sending anything";
    // EAGAIN (readiness that went away) is left to the handshake, which waits again.
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) why = "failed before sending anything";
    if (n == 1 && byte != kTlsHandshakeRecord) why = "did not start a TLS handshake";
  }
  if (why != nullptr) {
    evictable->fd = -1;
    shared.stats.hbone_handshake_failures.fetch_add(1, std::memory_order_relaxed);
    boost::system::error_code ec;
    auto peer = socket.remote_endpoint(ec);
    // Debug: a flood of these must not flood the log; the counter has them all.
    FERRY_LOG(kDebug, "hbone: %s %s", ec ? std::string("a client") : common::formatHostPort(toHostPort(peer)),
              why);
    net::abortSocket(socket);
    co_return;
  }
  co_await handshakeAndServe(worker, std::move(socket), std::move(load), std::move(admitted), deadline, evictable);
}

}  // namespace

void acceptHbone(Worker& worker, Tcp::socket socket, Admitted admitted) {
  // Any worker will do: the tunnel goes where the load is least.
  runPlaced(worker, std::move(socket),
            [admitted = std::move(admitted)](Worker& w, Tcp::socket s, LoadUnit load) {
              return serveHbone(w, std::move(s), std::move(load), admitted);
            },
            placeOnAnyWorker(worker));
}

}  // namespace ferry::session
