#include "proxy/session/common.h"

#include <unistd.h>

#include <algorithm>
#include <functional>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>

#include "absl/strings/str_cat.h"
#include "proxy/common/log.h"
#include "proxy/session/proxy_protocol.h"

namespace ferry::session {

void logTaskError(std::exception_ptr e) {
  if (!e) return;
  try {
    std::rethrow_exception(e);
  } catch (const boost::system::system_error& ex) {
    if (ex.code() != boost::asio::error::operation_aborted) {
      FERRY_LOG(kError, "connection handler failed: %s", ex.what());
    }
  } catch (const std::exception& ex) {
    FERRY_LOG(kError, "connection handler failed: %s", ex.what());
  } catch (...) {
    FERRY_LOG(kError, "connection handler failed: an exception that is not a std::exception");
  }
}

namespace {

// Moves `socket` to `target`'s event loop and starts `task` there; false, with the socket
// still usable here (or closed if even that failed), when it cannot be moved.
bool moveTo(Worker& target, Tcp::socket& socket, SocketTask& task, LoadUnit& load) {
  boost::system::error_code ec;
  const auto protocol = socket.local_endpoint(ec).protocol();
  if (ec) return false;
  int fd = socket.release(ec);
  if (ec) return false;
  Tcp::socket moved(target.io());
  moved.assign(protocol, fd, ec);
  if (ec) {
    FERRY_LOG(kWarn, "moving a connection to worker %d: %s", target.index(), ec.message());
    socket.assign(protocol, fd, ec);
    if (ec) ::close(fd);  // the task then sees a closed socket and records why
    return false;
  }
  target.shared().stats.worker_handoffs.fetch_add(1, std::memory_order_relaxed);
  boost::asio::post(target.io(), [&target, moved = std::move(moved), task = std::move(task),
                                  load = std::move(load)]() mutable {
    boost::asio::co_spawn(target.io(), task(target, std::move(moved), std::move(load)), logTaskError);
  });
  return true;
}

}  // namespace

LoadUnit placeOnAnyWorker(Worker& here) {
  auto& placement = here.shared().placement;
  return placement.place(here.index(), placement.workers());
}

void runPlaced(Worker& here, Tcp::socket socket, SocketTask task, LoadUnit load) {
  auto& shared = here.shared();
  size_t to = load.worker();
  if (to != here.index()) {
    if (to < shared.workers.size() && moveTo(*shared.workers[to], socket, task, load)) return;
    load = LoadUnit::add(shared.placement, here.index());
  }
  boost::asio::co_spawn(here.io(), task(here, std::move(socket), std::move(load)), logTaskError);
}

common::HostPort toHostPort(const Tcp::endpoint& ep) {
  auto ip = ep.address();
  // Dual-stack sockets report IPv4 peers as ::ffff:a.b.c.d; the registry holds plain IPv4.
  if (ip.is_v6() && ip.to_v6().is_v4_mapped()) {
    ip = boost::asio::ip::make_address_v4(boost::asio::ip::v4_mapped, ip.to_v6());
  }
  return {ip, ep.port()};
}

boost::asio::awaitable<absl::StatusOr<Endpoints>> originalEndpoints(Worker& worker,
                                                                    Tcp::socket& socket) {
  boost::system::error_code ec;
  auto peer = socket.remote_endpoint(ec);
  if (ec) co_return absl::UnavailableError("connection gone before it could be handled");
  auto local = socket.local_endpoint(ec);
  if (ec) co_return absl::UnavailableError("connection gone before it could be handled");
  Endpoints out{toHostPort(peer), toHostPort(local)};
  if (worker.config()->original_destination != config::OriginalDestination::kProxyProtocol) {
    co_return out;
  }
  auto header = co_await readProxyV2(socket, worker.config()->timeouts.handshake);
  if (!header.ok()) co_return header.status();
  if (header->source.ip != out.peer.ip) {
    co_return absl::PermissionDeniedError(
        "PROXY header source " + header->source.ip.to_string() +
        " is not the connection's source " + out.peer.ip.to_string());
  }
  out.peer = header->source;
  out.destination = header->destination;
  co_return out;
}

ConnectionRecord::ConnectionRecord(Worker& worker, Direction direction)
    : worker_(worker), direction_(direction), start_(std::chrono::steady_clock::now()) {
  auto& stats = worker_.shared().stats;
  stats.opened[static_cast<size_t>(direction)].fetch_add(1, std::memory_order_relaxed);
  stats.active[static_cast<size_t>(direction)].fetch_add(1, std::memory_order_relaxed);
  worker_.live().fetch_add(1, std::memory_order_relaxed);
  auto& head = worker_.records();
  next_ = head;
  if (head != nullptr) head->prev_ = this;
  head = this;
}

ConnectionRecord::~ConnectionRecord() {
  if (!finished_) finish(CloseReason::kInternal);
  if (prev_ != nullptr) prev_->next_ = next_;
  else worker_.records() = next_;
  if (next_ != nullptr) next_->prev_ = prev_;
  worker_.live().fetch_sub(1, std::memory_order_relaxed);
}

void ConnectionRecord::attribute(Reporter reporter, bool mutual_tls, workloads::InternedString service) {
  IstioMetrics* istio = worker_.shared().istio;
  if (istio == nullptr || istio_ != nullptr || finished_) return;
  TrafficKey key(reporter, mutual_tls, service);
  key.from(source_workload.get()).to(destination_workload.get());
  if (source_workload == nullptr) key.source_principal = source_principal;
  istio_ = &istio->series(worker_.index(), std::move(key));
  istio_->opened.fetch_add(1, std::memory_order_relaxed);
  // In the relay's orientation, as requestBytes() / responseBytes() read them.
  bytes.live_sent = relaysServerSide() ? &istio_->response_bytes : &istio_->request_bytes;
  bytes.live_received = relaysServerSide() ? &istio_->request_bytes : &istio_->response_bytes;
}

void ConnectionRecord::abort(CloseReason reason) {
  if (finished_) return;
  aborted_ = reason;
  // RST_STREAM first, so that the far end resets its application too; then the sockets.
  // Both only cancel what the connection's coroutines wait on: they run later and finish
  // the record (as `reason`).
  if (stream_) stream_->reset(hbone::kH2Cancel);
  for (auto* socket : sockets_) {
    if (socket != nullptr) net::abortSocket(*socket);
  }
}

size_t Worker::abortLive() {
  std::vector<ConnectionRecord*> live;
  for (auto* r = records_; r != nullptr; r = r->next_) {
    if (!r->finished_) live.push_back(r);
  }
  for (auto* r : live) r->abort(CloseReason::kShutdown);
  return live.size();
}

void Worker::addTunnel(const std::shared_ptr<hbone::H2Connection>& tunnel) {
  if (tunnel->dead()) return;  // closed already: its close handler has run
  tunnels_.insert_or_assign(tunnel.get(), tunnel);
  if (tunnels_noticed_) tunnel->noticeShutdown();
}

void Worker::removeTunnel(const hbone::H2Connection* tunnel) {
  tunnels_.erase(tunnel);
  if (tunnels_.empty()) tunnels_ = {};  // the table's memory too, after a flood of them
}

size_t Worker::noticeShutdownToTunnels() {
  tunnels_noticed_ = true;
  // A notice may close a tunnel, whose close handler leaves the list: walk a copy.
  std::vector<std::shared_ptr<hbone::H2Connection>> open;
  open.reserve(tunnels_.size());
  for (const auto& [key, weak] : tunnels_) {
    if (auto t = weak.lock()) open.push_back(std::move(t));
  }
  for (auto& t : open) t->noticeShutdown();
  return open.size();
}

std::vector<ConnectionInfo> Worker::connections(size_t limit, size_t& total) const {
  std::vector<const ConnectionRecord*> live;
  for (const auto* r = records_; r != nullptr; r = r->next_) {
    if (!r->finished_) live.push_back(r);
  }
  total = live.size();
  // The list is newest first: the oldest are at its end.
  std::reverse(live.begin(), live.end());
  if (live.size() > limit) live.resize(limit);
  auto now = std::chrono::steady_clock::now();
  std::vector<ConnectionInfo> out;
  out.reserve(live.size());
  for (const auto* r : live) {
    ConnectionInfo info{r->direction_, r->src, r->dst, r->peer_identity, now - r->start_,
                        r->requestBytes(), r->responseBytes(), index_};
    out.push_back(std::move(info));
  }
  return out;
}

size_t Worker::reauthorize(const policy::PolicySet& policies, const workloads::Registry& registry) {
  std::vector<std::pair<ConnectionRecord*, std::string>> revoked;
  for (auto* r = records_; r != nullptr; r = r->next_) {
    if (r->finished_ || !r->subject) continue;
    const auto& subject = *r->subject;
    const auto* destination = registry.findLocalByIp(subject.destination_ip);
    std::string why;
    if (destination == nullptr) continue;  // the workload left: its connections end with it
    if (subject.principal.empty()) {
      auto mtls = policies.mtls(*destination, subject.destination_port, fallbackMode(*destination));
      if (mtls.mode == policy::MtlsMode::kStrict) why = "plaintext: the port's mTLS mode is now STRICT";
    }
    if (why.empty()) {
      auto decision = policies.authorize(*destination, subject);
      if (!decision.allowed) why = decision.reason;
    }
    if (!why.empty()) revoked.emplace_back(r, std::move(why));
  }
  for (auto& [r, why] : revoked) {
    r->detail = std::move(why);
    r->policy_verdict = PolicyVerdict::kDenied;
    r->abort(CloseReason::kPolicyRevoked);
  }
  return revoked.size();
}

policy::MtlsMode fallbackMode(const workloads::Workload& w) {
  return w.tls_mode == workloads::TlsMode::kStrict ? policy::MtlsMode::kStrict : policy::MtlsMode::kPermissive;
}

policy::Decision authorize(Worker& worker, Direction direction, const policy::PolicySet& policies,
                           const workloads::Workload& destination, policy::Request request, ConnectionRecord& record) {
  auto& shared = worker.shared();
  policy::Decision decision;
  if (shared.policies_loaded.load(std::memory_order_acquire)) {
    decision = policies.authorize(destination, request);
  } else {
    decision.allowed = false;  // fail closed: what the policies say is not known yet
    decision.reason = "denied: the policies are not loaded from the API server yet";
  }
  using PolicyAction = Stats::PolicyAction;
  PolicyAction action = PolicyAction::kNone;
  if (decision.policy) action = decision.policy->action == policy::Action::kDeny ? PolicyAction::kDeny : PolicyAction::kAllow;
  shared.stats.recordDecision(direction, action, decision.allowed);
  for (const auto& audited : decision.audited) {
    shared.stats.policy_audit_matches.fetch_add(1, std::memory_order_relaxed);
    FERRY_LOG(kInfo, "policy: %s%s policy %s matched %s -> %s (peer %s); the connection is %s",
              audited->dry_run ? "dry-run " : "", policy::actionName(audited->action), audited->meta.key(),
              record.src, record.dst, request.principal.empty() ? "plaintext" : request.principal,
              decision.allowed ? "allowed" : "denied");
  }
  // Named when a policy decided, or denied; "no ALLOW policy applies" is every line's
  // default and would only lengthen it.
  if (decision.policy || !decision.allowed) record.policy = decision.reason;
  record.policy_verdict = decision.allowed ? PolicyVerdict::kAllowed : PolicyVerdict::kDenied;
  if (decision.allowed) record.subject = std::move(request);
  return decision;
}

WatchedSocket::WatchedSocket(ConnectionRecord& record, Tcp::socket& socket)
    : record_(record), socket_(&socket) {
  for (auto& slot : record_.sockets_) {
    if (slot == nullptr) {
      slot = socket_;
      return;
    }
  }
  socket_ = nullptr;  // a connection has at most two sockets; never reached
}

WatchedSocket::~WatchedSocket() {
  for (auto& slot : record_.sockets_) {
    if (slot == socket_) slot = nullptr;
  }
}

LiveConnection::LiveConnection(Worker& worker, Direction direction, Tcp::socket socket, LoadUnit load)
    : record(worker, direction), socket(std::move(socket)), load(std::move(load)) {}

void relayOnStream(Worker& worker, std::unique_ptr<LiveConnection> conn, hbone::H2Stream& stream) {
  Tcp::socket& socket = conn->socket;
  ByteCounts& bytes = conn->record.bytes;
  startRelayStream(socket, stream, worker.config()->timeouts.idle, worker.scratch(), bytes,
                   [conn = std::move(conn)](RelayResult result) { conn->record.finish(result.reason); });
}

void ConnectionRecord::keep(ClosedConnection& slot, CloseReason reason, std::chrono::milliseconds duration,
                            std::chrono::system_clock::time_point time) const {
  slot.direction = direction_;
  slot.reason = reason;
  slot.src = src;  // assigned over: the slot's strings keep their capacity
  slot.dst = dst;
  slot.source_principal = source_principal;
  slot.destination_principal = destination_principal;
  slot.detail = detail;
  slot.policy = policy;
  slot.time = time;
  slot.duration = duration;
  slot.sent = requestBytes();
  slot.received = responseBytes();
}

void ConnectionRecord::finish(CloseReason reason) {
  if (finished_) return;
  finished_ = true;
  if (aborted_) reason = *aborted_;
  auto& stats = worker_.shared().stats;
  stats.recordClose(direction_, reason, requestBytes(), responseBytes());
  if (istio_ != nullptr) istio_->closed.fetch_add(1, std::memory_order_relaxed);  // bytes went in as they flowed
  bool success = reason == CloseReason::kOk;
  auto now = std::chrono::steady_clock::now();
  auto duration = std::chrono::duration_cast<std::chrono::milliseconds>(now - start_);
  auto wall = std::chrono::system_clock::now();
  keep(worker_.recentCloses().next(success), reason, duration, wall);
  auto level = success ? common::LogLevel::kInfo : common::LogLevel::kWarn;
  if (!common::logEnabled(level)) return;
  // The connection's own limit first (the streams of one HBONE connection), then the
  // worker's sampling and failure limit (access_log).
  if (!success && warn_limiter != nullptr && !warn_limiter->allow()) {
    stats.log_lines_suppressed.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  auto& access_log = worker_.accessLog();
  switch (access_log.admit(success, now)) {
    case AccessLogger::Admit::kWrite: break;
    case AccessLogger::Admit::kOff: return;
    case AccessLogger::Admit::kSampledOut:
      stats.access_log_sampled_out.fetch_add(1, std::memory_order_relaxed);
      return;
    case AccessLogger::Admit::kRateLimited:
      stats.access_log_failures_suppressed.fetch_add(1, std::memory_order_relaxed);
      return;
  }
  AccessEntry entry{reason, duration, wall};
  if (access_log.settings().format == config::AccessLogFormat::kJson) {
    common::writeRawLine(formatAccessJson(*this, entry));
  } else {
    common::logLine(level, formatAccessText(*this, entry));
  }
}

void refuseSelfTarget(Worker& worker, Tcp::socket& socket, const common::HostPort& destination,
                      ConnectionRecord& record) {
  worker.shared().stats.self_target_refused.fetch_add(1, std::memory_order_relaxed);
  record.detail = absl::StrCat(common::formatHostPort(destination),
                               " is ferryd itself (one of its listeners or addresses); refused");
  net::abortSocket(socket);
  record.finish(CloseReason::kSelfTarget);
}

boost::asio::awaitable<void> forwardTcp(Worker& worker, Tcp::socket& socket,
                                        const common::IpAddress& source,
                                        const common::HostPort& destination,
                                        ConnectionRecord& record) {
  auto settings = worker.config();
  const auto& cfg = *settings;
  if (worker.shared().self.contains(destination)) {
    refuseSelfTarget(worker, socket, destination, record);
    co_return;
  }
  Tcp::socket upstream(worker.io());
  WatchedSocket watched(record, upstream);
  auto ec = co_await worker.shared().sockets.connect(upstream, source, destination, cfg.timeouts.connect);
  if (ec) {
    record.detail = absl::StrCat("connect: ", ec.message());
    net::abortSocket(socket);
    record.finish(ec == boost::asio::error::timed_out ? CloseReason::kConnectTimeout
                                                      : CloseReason::kConnectFailed);
    co_return;
  }
  auto result = co_await relayTcp(socket, upstream, cfg.timeouts.idle, worker.scratch(), record.bytes);
  record.finish(result.reason);
}

}  // namespace ferry::session
