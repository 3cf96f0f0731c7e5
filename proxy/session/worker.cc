// The worker's own work (session/context.h): placing a connection on a worker, its live
// records and tunnels, judging them again, and what a connection's coroutine let escape.
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>

#include "proxy/common/log.h"
#include "proxy/session/context.h"
#include "proxy/session/record.h"

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

}  // namespace ferry::session
