#pragma once
// The one mTLS handshake of both directions (dialMtls for ferryd's side of an outbound
// tunnel, acceptMtls for an inbound one): TLS 1.3 with the context's SVID, the peer's
// certificate chained to the bundle, the SVID rules and the SPIFFE ID checked (and, when
// dialling, the identity the server must prove), ALPN h2. docs/hbone.md and
// docs/security.md say what each check stops.
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>

#include "absl/status/status.h"
#include "proxy/identity/svid.h"
#include "proxy/net/tls_channel.h"  // TlsStream, what the handshake hands to a TlsChannel

namespace ferry::net {

struct MtlsOptions {
  std::string_view trust_domain;
  // Dialling: the SPIFFE ID the server must present (checked during the handshake, so a
  // wrong server gets no client certificate, and again after it). Empty when accepting.
  std::string_view expected_peer;
  std::chrono::steady_clock::time_point deadline;
};

struct MtlsSession {
  std::unique_ptr<TlsStream> tls;  // set when status is OK; owns the socket
  std::string peer_id;             // the peer's proven SPIFFE ID
  // OK; DeadlineExceeded (no handshake by the deadline); PermissionDenied (the peer's
  // certificate, identity or ALPN was refused); Unavailable (TLS or the network failed).
  // The message names what was refused and why, without saying who the peer is: the
  // caller's log line does.
  absl::Status status;
  // Which SVID rule the peer's certificate broke, when that is why (metrics count it).
  std::optional<identity::SvidRejection> rejection;
  bool ok() const { return status.ok(); }
};

boost::asio::awaitable<MtlsSession> dialMtls(boost::asio::ip::tcp::socket socket, boost::asio::ssl::context& ctx,
                                             MtlsOptions options);
boost::asio::awaitable<MtlsSession> acceptMtls(boost::asio::ip::tcp::socket socket, boost::asio::ssl::context& ctx,
                                               MtlsOptions options);

}  // namespace ferry::net
