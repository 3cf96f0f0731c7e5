// Outbound (15001): a connection captured as it left a local pod. HBONE-capable
// destinations get a CONNECT stream over a pooled mTLS connection from the pod's own IP;
// anything else is passed through as plain TCP, also from the pod's IP (docs/datapath.md,
// "Packet walk", step 3).

#include <random>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "proxy/common/duration.h"
#include "proxy/common/log.h"
#include "proxy/hbone/connect_request.h"
#include "proxy/identity/spiffe_id.h"
#include "proxy/net/deadline.h"
#include "proxy/net/mtls.h"
#include "proxy/session/context.h"
#include "proxy/session/forward.h"
#include "proxy/session/original_destination.h"
#include "proxy/session/record.h"

namespace ferry::session {
namespace asio = boost::asio;
using asio::awaitable;

namespace {

constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);

// What an outbound connection to a mesh workload needs once it has been classified.
struct OutboundPlan {
  common::HostPort source;        // the application's address (a local pod)
  common::HostPort destination;   // original destination (pod ip:app port)
  workloads::WorkloadPtr source_workload;  // a local pod
  workloads::WorkloadPtr destination_workload;
  hbone::PoolKey key;
  workloads::InternedString service;  // the Service whose ClusterIP was dialled; empty: none
};

// Why the TCP connect to the destination's HBONE port failed, naming the peer ferryd (the
// destination pod's node) and what to look at. A refusal means nothing listens on 15008
// there: that node's ferryd is not running (it answers at once, so the application is
// reset at once). Silence until the timeout is a node or path that drops packets.
absl::Status dialFailure(const boost::system::error_code& ec, const workloads::Workload& destination,
                         const common::HostPort& target, std::chrono::milliseconds timeout) {
  auto peer = absl::StrCat("ferryd on node ", destination.node.str(), " (", common::formatHostPort(target),
                           ", HBONE port ", target.port, ")");
  if (ec == asio::error::timed_out) {
    return absl::DeadlineExceededError(absl::StrCat(
        "connecting to ", peer, " timed out after ", common::formatDuration(timeout),
        ": the node or its ferryd is down or unreachable, or a NetworkPolicy drops HBONE port ",
        target.port));
  }
  if (ec == asio::error::connection_refused) {
    return absl::UnavailableError(absl::StrCat(peer, " refused the connection: is ferryd running on node ",
                                               destination.node.str(), "?"));
  }
  if (ec == asio::error::host_unreachable || ec == asio::error::network_unreachable) {
    return absl::UnavailableError(absl::StrCat(peer, " is unreachable (", ec.message(),
                                               "): check the route to node ", destination.node.str()));
  }
  return absl::UnavailableError(absl::StrCat("connecting to ", peer, ": ", ec.message()));
}

// Opens one HBONE connection for `plan`: TCP from the source pod's IP to the destination
// pod's 15008, TLS 1.3 as the source identity, the server must prove the destination
// identity, ALPN h2.
awaitable<absl::StatusOr<std::shared_ptr<hbone::H2Connection>>> dialHbone(Worker& worker,
                                                                         const OutboundPlan& plan) {
  auto& shared = worker.shared();
  auto settings = worker.config();
  const auto& cfg = *settings;
  auto source_id = identity::SpiffeId::forWorkload(
      cfg.trust_domain, plan.source_workload->namespace_name.str(), plan.source_workload->service_account.str());
  auto ctx = shared.tls.clientContext(source_id);
  if (!ctx.ok()) {
    co_return absl::FailedPreconditionError(
        absl::StrCat("no certificate for ", source_id.str(), ": ", ctx.status().message()));
  }
  Tcp::socket socket(worker.io());
  auto target = plan.key.destination;
  auto ec = co_await shared.sockets.connect(socket, plan.source.ip, target, cfg.timeouts.connect);
  if (ec) co_return absl::Status(dialFailure(ec, *plan.destination_workload, target, cfg.timeouts.connect));
  net::MtlsOptions mtls{cfg.trust_domain, plan.key.destination_id,
                        std::chrono::steady_clock::now() + cfg.timeouts.handshake};
  auto hs = co_await net::dialMtls(std::move(socket), **ctx, mtls);
  if (!hs.ok()) {
    if (hs.rejection) shared.stats.recordRejection(Direction::kOutbound, *hs.rejection);
    co_return absl::Status(hs.status.code(),
                           absl::StrCat("server ", common::formatHostPort(target), ": ", hs.status.message()));
  }
  hbone::H2Options options;
  options.ping_interval = cfg.pool.ping_interval;
  options.ping_timeout = cfg.pool.ping_timeout;
  options.idle_release = cfg.pool.idle_release;
  options.max_streams = cfg.pool.max_streams;
  options.receive_budget = shared.receive_budget;
  auto conn = hbone::H2Connection::create(hbone::H2Connection::Role::kClient, std::move(hs.tls), options);
  Stats* stats = &shared.stats;
  Worker* w = &worker;
  conn->setCloseHandler([stats, w](hbone::H2Connection& c) {
    stats->hbone_connections_closed.fetch_add(1, std::memory_order_relaxed);
    FERRY_LOG(kDebug, "hbone: pooled connection closed: %s", c.closeReason());
    // After this handler: the pool's reference may be the last one.
    asio::post(w->io(), [w] { w->pool().dropClosed(); });
  });
  conn->start();
  shared.stats.hbone_connections_opened.fetch_add(1, std::memory_order_relaxed);
  FERRY_LOG(kDebug, "hbone: connected %s", plan.key.str());
  co_return conn;
}

// `load` and `admitted` are held for the connection's life, as in tunnel().
// `source` and `destination` are the workloads at either end when known (the destination
// of a passthrough may be a workload without HBONE).
awaitable<void> passthrough(Worker& worker, Tcp::socket socket, Endpoints ends,
                            workloads::WorkloadPtr source, workloads::WorkloadPtr destination,
                            workloads::InternedString service, LoadUnit load, Admitted admitted) {
  auto& shared = worker.shared();
  ConnectionRecord record(worker, Direction::kOutbound);
  record.src = common::formatHostPort(ends.peer);
  record.dst = common::formatHostPort(ends.destination);
  record.source_workload = std::move(source);
  record.destination_workload = std::move(destination);
  record.attribute(Reporter::kSource, /*mutual_tls=*/false, service);
  shared.stats.passthrough_connections.fetch_add(1, std::memory_order_relaxed);
  record.peer_identity = "passthrough";
  WatchedSocket watched(record, socket);
  co_await forwardTcp(worker, socket, ends.peer.ip, ends.destination, record);
}

// A CONNECT stream on this worker's pooled HBONE connection for the key, answered 200;
// null after resetting `socket` and finishing `record` with why not. A coroutine of its
// own so that what only the CONNECT needs (the answer timer, the pool's result) is freed
// before the relay, which may idle for an hour.
awaitable<std::shared_ptr<hbone::H2Stream>> openStream(Worker& worker, Tcp::socket& socket,
                                                       const OutboundPlan& plan,
                                                       ConnectionRecord& record) {
  auto& shared = worker.shared();
  auto settings = worker.config();
  const auto& cfg = *settings;
  // A stream the server refused unprocessed (REFUSED_STREAM: RFC 9113 §8.7, e.g. opened as its
  // GOAWAY arrived, when the ferryd there hands over to the next one) is opened once more;
  // the pool no longer offers that connection.
  for (int attempt = 1;; ++attempt) {
    auto conn = co_await worker.pool().acquire(plan.key, [&]() { return dialHbone(worker, plan); });
    if (!conn.ok()) {
      record.detail = std::string(conn.status().message());
      net::abortSocket(socket);
      CloseReason reason = CloseReason::kConnectFailed;
      if (absl::IsDeadlineExceeded(conn.status())) reason = CloseReason::kConnectTimeout;
      if (absl::IsPermissionDenied(conn.status())) reason = CloseReason::kHandshakeFailed;
      if (absl::IsFailedPrecondition(conn.status())) reason = CloseReason::kNoCertificate;
      if (reason == CloseReason::kHandshakeFailed) {
        shared.stats.hbone_handshake_failures.fetch_add(1, std::memory_order_relaxed);
      }
      record.finish(reason);
      co_return nullptr;
    }
    // The Service called, by its hostname: the destination counts the connection under it.
    std::string service_host;
    if (!plan.service.str().empty()) {
      const std::string& key = plan.service.str();  // "<namespace>/<name>"
      size_t slash = key.find('/');
      service_host.append(key, slash + 1).append(".").append(key, 0, slash).append(".svc.");
      service_host += worker.config()->telemetry.cluster_domain;
    }
    hbone::ConnectParams params{plan.destination, plan.source, plan.source_workload->namespace_name.str(),
                                plan.source_workload->name, service_host};
    auto stream = (*conn)->openStream(hbone::buildConnectHeaders(params));
    if (!stream) {
      record.detail = "could not open a stream on the pooled HBONE connection";
      net::abortSocket(socket);
      record.finish(CloseReason::kPeerReset);
      co_return nullptr;
    }
    shared.stats.hbone_streams_opened.fetch_add(1, std::memory_order_relaxed);
    record.watchStream(stream);

    // The server connects upstream before it answers: wait for the answer, bounded.
    auto wait_headers = [&]() -> awaitable<void> {
      while (!stream->headersDone() && !stream->resetCode()) co_await stream->recvReady().wait();
    };
    bool answered = co_await net::withTimeout(wait_headers(), cfg.timeouts.connect + cfg.timeouts.handshake);
    if (!answered) {
      stream->reset(hbone::kH2Cancel);
      record.detail = absl::StrCat("no answer to CONNECT ", record.dst, " within ",
                                   common::formatDuration(cfg.timeouts.connect + cfg.timeouts.handshake));
      net::abortSocket(socket);
      record.finish(CloseReason::kConnectTimeout);
      co_return nullptr;
    }
    if (attempt == 1 && stream->status() == 0 && stream->resetCode() == hbone::kH2RefusedStream) {
      shared.stats.hbone_streams_retried.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    if (stream->resetCode() || stream->status() != 200) {
      // An upstream refusal reaches the application as a reset, never as connect-then-EOF.
      record.detail = stream->status() != 0
                          ? absl::StrCat("CONNECT answered ", stream->status())
                          : absl::StrCat("stream reset (code ", stream->resetCode().value_or(0), ")");
      stream->reset(hbone::kH2Cancel);
      net::abortSocket(socket);
      record.finish(stream->status() != 0 ? CloseReason::kTunnelRefused : CloseReason::kPeerReset);
      co_return nullptr;
    }
    stream->releaseHeaders();
    co_return stream;
  }
}

// One CONNECT stream on this worker's pooled HBONE connection for the key, then the relay,
// which owns the connection from there (this coroutine ends). `load` counts the connection
// on this worker for as long as it lives; `admitted` on the outbound listener's limits.
awaitable<void> tunnel(Worker& worker, Tcp::socket socket, OutboundPlan plan, LoadUnit load,
                       Admitted admitted) {
  auto conn = std::make_unique<LiveConnection>(worker, Direction::kOutbound, std::move(socket), std::move(load));
  conn->admitted = std::move(admitted);
  ConnectionRecord& record = conn->record;
  record.src = common::formatHostPort(plan.source);
  record.dst = common::formatHostPort(plan.destination);
  record.peer_identity = "expected:" + plan.key.destination_id;
  record.source_workload = plan.source_workload;
  record.destination_workload = plan.destination_workload;
  record.source_principal = plan.key.source_id;
  record.destination_principal = plan.key.destination_id;
  record.attribute(Reporter::kSource, /*mutual_tls=*/true, plan.service);
  auto stream = co_await openStream(worker, conn->socket, plan, record);
  if (!stream) co_return;
  record.peer_identity = plan.key.destination_id;  // proven by the handshake
  relayOnStream(worker, std::move(conn), *stream);  // the record holds the stream
}

// A Service's ClusterIP (captured because the Service has mesh endpoints): one of its
// ready mesh endpoints, uniformly at random (as kube-proxy's iptables mode picks), at
// the target port the EndpointSlice resolved. From here on the connection is to that
// pod, as if the app had dialled it: HBONE to <pod>:15008, CONNECT <pod>:<target port>.
// The Service, with `destination` moved to its endpoint; empty when `destination` is no
// Service's.
workloads::InternedString pickServiceEndpoint(const workloads::ServiceTable& services,
                                              common::HostPort& destination) {
  const auto* svc = services.find({common::canonicalIp(destination.ip), destination.port});
  if (svc == nullptr) return {};
  thread_local std::minstd_rand pick{std::random_device{}()};
  const auto& eps = svc->endpoints;
  const auto& ep = eps[std::uniform_int_distribution<size_t>(0, eps.size() - 1)(pick)];
  destination = common::HostPort{ep.first, ep.second};
  return svc->name;
}

// A connection to a mesh workload from an address that is no local pod has no identity to
// present: it fails closed, never plaintext to a mesh workload.
void refuseUnknownSource(Worker& worker, const config::Config& cfg, Tcp::socket& socket, const Endpoints& ends,
                         const workloads::WorkloadPtr& src, const workloads::WorkloadPtr& dst) {
  ConnectionRecord record(worker, Direction::kOutbound);
  record.src = common::formatHostPort(ends.peer);
  record.dst = common::formatHostPort(ends.destination);
  record.source_workload = src;
  record.destination_workload = dst;
  record.detail = absl::StrCat(ends.peer.ip.to_string(),
                               " is not a workload of node ", cfg.node,
                               "; refusing to reach mesh workload ", dst->displayName());
  net::abortSocket(socket);
  record.finish(CloseReason::kUnknownSource);
}

// On the accepting worker: the original destination, then passthrough or tunnel, each
// placed on its worker.
awaitable<void> classifyOutbound(Worker& worker, Tcp::socket socket, Admitted admitted) {
  auto& shared = worker.shared();
  auto settings = worker.config();
  const auto& cfg = *settings;
  auto ends = co_await originalEndpoints(worker, socket);
  if (!ends.ok()) {
    ConnectionRecord record(worker, Direction::kOutbound);
    record.detail = std::string(ends.status().message());
    net::abortSocket(socket);
    record.finish(CloseReason::kBadProxyHeader);
    co_return;
  }
  admitted->handshakeDone();
  if (shared.self.contains(ends->destination)) {
    // Before anything else: a passthrough to one of ferryd's listeners would parse the next
    // PROXY header again, and again (finding: 600 nested headers took every descriptor).
    ConnectionRecord record(worker, Direction::kOutbound);
    record.src = common::formatHostPort(ends->peer);
    record.dst = common::formatHostPort(ends->destination);
    record.source_workload = shared.workloads.current()->sharedByIp(ends->peer.ip);
    refuseSelfTarget(worker, socket, ends->destination, record);
    co_return;
  }
  auto services = shared.workloads.services();
  workloads::InternedString service = pickServiceEndpoint(*services, ends->destination);
  auto registry = shared.workloads.current();
  auto dst = registry->sharedByIp(ends->destination.ip);
  auto src = registry->sharedByIp(ends->peer.ip);  // a local pod, or (refused below) another node's
  if (dst == nullptr || !dst->hbone) {
    runPlaced(worker, std::move(socket),
              [ends = *ends, source = src, dst, service, admitted](
                  Worker& w, Tcp::socket s, LoadUnit load) {
                return passthrough(w, std::move(s), ends, source, dst, service, std::move(load), admitted);
              },
              placeOnAnyWorker(worker));
    co_return;
  }
  OutboundPlan plan;
  plan.source = ends->peer;
  plan.destination = ends->destination;
  plan.destination_workload = dst;
  plan.service = service;
  if (src != nullptr && registry->isLocal(*src)) plan.source_workload = src;
  if (plan.source_workload == nullptr) {
    refuseUnknownSource(worker, cfg, socket, *ends, src, dst);
    co_return;
  }
  plan.key = hbone::PoolKey{plan.source_workload->spiffeId(cfg.trust_domain), ends->peer.ip,
                            dst->spiffeId(cfg.trust_domain),
                            common::HostPort{ends->destination.ip, cfg.hbone_port}};
  // The pair's connections spread over `workers_per_pair` workers from its home worker,
  // each worker with its own pooled tunnel.
  auto& placement = shared.placement;
  size_t home = absl::HashOf(plan.key) % placement.workers();
  LoadUnit load = placement.place(home, cfg.pool.workers_per_pair);
  runPlaced(worker, std::move(socket),
            [plan = std::move(plan), admitted](Worker& w, Tcp::socket s, LoadUnit load) mutable {
              return tunnel(w, std::move(s), std::move(plan), std::move(load), admitted);
            },
            std::move(load));
}

}  // namespace

void acceptOutbound(Worker& worker, Tcp::socket socket, Admitted admitted) {
  asio::co_spawn(worker.io(), classifyOutbound(worker, std::move(socket), std::move(admitted)), logTaskError);
}

}  // namespace ferry::session
