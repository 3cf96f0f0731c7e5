#include "proxy/session/original_destination.h"

#include "proxy/session/proxy_protocol.h"

namespace ferry::session {

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

}  // namespace ferry::session
