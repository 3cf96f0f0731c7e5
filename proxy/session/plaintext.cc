// Inbound plaintext (15006): a captured connection to a local workload that did not come
// through HBONE, captured because its port is STRICT or policies apply to the workload
// (docs/policy.md): STRICT refuses it with a reset; otherwise the authorization policies
// judge it with no peer identity, and an allowed one is forwarded from the client's IP.
#include "absl/strings/str_cat.h"
#include "proxy/session/authorize.h"
#include "proxy/session/context.h"
#include "proxy/session/forward.h"
#include "proxy/session/original_destination.h"
#include "proxy/session/record.h"

namespace ferry::session {
namespace asio = boost::asio;
using asio::awaitable;

namespace {

// `load` and `admitted` are held for the connection's life.
awaitable<void> servePlaintext(Worker& worker, Tcp::socket socket, LoadUnit load, Admitted admitted) {
  auto& shared = worker.shared();
  auto settings = worker.config();
  const auto& cfg = *settings;
  ConnectionRecord record(worker, Direction::kPlaintext);
  WatchedSocket watched(record, socket);
  auto ends = co_await originalEndpoints(worker, socket);
  if (!ends.ok()) {
    record.detail = std::string(ends.status().message());
    net::abortSocket(socket);
    record.finish(CloseReason::kBadProxyHeader);
    co_return;
  }
  admitted->handshakeDone();
  record.src = common::formatHostPort(ends->peer);
  record.dst = common::formatHostPort(ends->destination);
  record.peer_identity = "plaintext";
  auto registry = shared.workloads.current();
  record.source_workload = registry->sharedByIp(ends->peer.ip);
  auto workload = registry->sharedLocalByIp(ends->destination.ip);
  record.destination_workload = workload;
  if (workload == nullptr) {
    record.detail = absl::StrCat(ends->destination.ip.to_string(), " is not a workload on node ",
                                 cfg.node);
    net::abortSocket(socket);
    record.finish(CloseReason::kBadRequest);
    co_return;
  }
  for (auto port : shared.ferry_ports) {
    if (port == ends->destination.port) {
      record.detail = "destination is a ferry port";
      net::abortSocket(socket);
      record.finish(CloseReason::kBadRequest);
      co_return;
    }
  }
  // Plaintext has no peer identity: the port's mTLS mode first, then the policies.
  auto policies = shared.policies.current();  // one snapshot for the mode and the decision
  auto mtls = policies->mtls(*workload, ends->destination.port, fallbackMode(*workload));
  if (mtls.mode == policy::MtlsMode::kStrict) {
    record.detail = absl::StrCat(workload->displayName(), " port ", ends->destination.port,
                                 " is STRICT: plaintext refused (",
                                 mtls.policy ? absl::StrCat("PeerAuthentication ", mtls.policy->meta.key(),
                                                            mtls.port_level ? " portLevelMtls" : "")
                                             : std::string("the workload's tls_mode"),
                                 ")");
    net::abortSocket(socket);
    record.finish(CloseReason::kStrictPlaintext);
    co_return;
  }
  auto decision = authorize(worker, Direction::kPlaintext, *policies, *workload,
                            policy::Request{ends->peer.ip, "", ends->destination.ip, ends->destination.port}, record);
  if (!decision.allowed) {
    net::abortSocket(socket);
    record.finish(CloseReason::kPolicyDenied);
    co_return;
  }
  record.attribute(Reporter::kDestination, /*mutual_tls=*/false);
  co_await forwardTcp(worker, socket, ends->peer.ip, ends->destination, record);
}

}  // namespace

void acceptPlaintext(Worker& worker, Tcp::socket socket, Admitted admitted) {
  runPlaced(worker, std::move(socket),
            [admitted = std::move(admitted)](Worker& w, Tcp::socket s, LoadUnit load) {
              return servePlaintext(w, std::move(s), std::move(load), admitted);
            },
            placeOnAnyWorker(worker));
}

}  // namespace ferry::session
