#include "proxy/session/record.h"

#include "absl/strings/str_cat.h"

namespace ferry::session {

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

}  // namespace ferry::session
