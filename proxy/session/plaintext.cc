// Inbound plaintext (15006): a captured connection to a local workload that did not come
// through HBONE. PERMISSIVE workloads get it forwarded from the client's IP; STRICT ones
// refuse it with a reset (design §6; the full policy engine comes later).
#include "absl/strings/str_cat.h"
#include "proxy/session/common.h"
#include "proxy/session/context.h"

namespace ferry::session {
namespace asio = boost::asio;
using asio::awaitable;

namespace {

// `load` is held for the connection's life.
awaitable<void> servePlaintext(Worker& worker, Tcp::socket socket, LoadUnit load) {
  auto& shared = worker.shared();
  const auto& cfg = shared.config;
  ConnectionRecord record(worker, Direction::kPlaintext);
  WatchedSocket watched(record, socket);
  auto ends = co_await originalEndpoints(worker, socket);
  if (!ends.ok()) {
    record.detail = std::string(ends.status().message());
    abortSocket(socket);
    record.finish(CloseReason::kBadProxyHeader);
    co_return;
  }
  record.src = common::formatHostPort(ends->peer);
  record.dst = common::formatHostPort(ends->destination);
  record.peer_identity = "plaintext";
  auto registry = shared.workloads.current();
  const auto* workload = registry->findLocalByIp(ends->destination.ip);
  if (workload == nullptr) {
    record.detail = absl::StrCat(ends->destination.ip.to_string(), " is not a workload on node ",
                                 cfg.node);
    abortSocket(socket);
    record.finish(CloseReason::kBadRequest);
    co_return;
  }
  for (auto port : shared.ferry_ports) {
    if (port == ends->destination.port) {
      record.detail = "destination is a ferry port";
      abortSocket(socket);
      record.finish(CloseReason::kBadRequest);
      co_return;
    }
  }
  if (workload->tls_mode == workloads::TlsMode::kStrict) {
    record.detail = absl::StrCat(workload->displayName(), " is STRICT: plaintext refused");
    abortSocket(socket);
    record.finish(CloseReason::kStrictPlaintext);
    co_return;
  }
  co_await forwardTcp(worker, socket, ends->peer.ip, ends->destination, record);
}

}  // namespace

void acceptPlaintext(Worker& worker, Tcp::socket socket) {
  runPlaced(worker, std::move(socket), &servePlaintext, placeOnAnyWorker(worker));
}

}  // namespace ferry::session
