#include "proxy/session/forward.h"

#include "proxy/common/log.h"

namespace ferry::session {

LiveConnection::LiveConnection(Worker& worker, Direction direction, Tcp::socket socket, LoadUnit load)
    : record(worker, direction), socket(std::move(socket)), load(std::move(load)) {}

void relayOnStream(Worker& worker, std::unique_ptr<LiveConnection> conn, hbone::H2Stream& stream) {
  Tcp::socket& socket = conn->socket;
  ByteCounts& bytes = conn->record.bytes;
  startRelayStream(socket, stream, worker.config()->timeouts.idle, worker.scratch(), bytes,
                   [conn = std::move(conn)](RelayResult result) { conn->record.finish(result.reason); });
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
