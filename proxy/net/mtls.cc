#include "proxy/net/mtls.h"

#include <openssl/x509.h>

#include <utility>

#include <boost/asio/use_awaitable.hpp>

#include "absl/strings/str_cat.h"
#include "proxy/identity/tls_context.h"
#include "proxy/net/deadline.h"

namespace ferry::net {
namespace asio = boost::asio;
using asio::awaitable;

namespace {

MtlsSession refused(absl::Status status, std::optional<identity::SvidRejection> rejection = std::nullopt) {
  MtlsSession out;
  out.status = std::move(status);
  out.rejection = rejection;
  return out;
}

awaitable<MtlsSession> handshake(asio::ssl::stream_base::handshake_type side, asio::ip::tcp::socket socket,
                                 asio::ssl::context& ctx, MtlsOptions options) {
  auto tls = std::make_unique<TlsStream>(std::move(socket), ctx);
  SSL* ssl = tls->native_handle();
  // Kept alive in this frame for as long as the handshake's verify callback may read it.
  std::string expected(options.expected_peer);
  if (!expected.empty()) identity::requirePeerIdentity(ssl, &expected);
  auto op = tls->async_handshake(side, asio::as_tuple(asio::use_awaitable));
  auto done = co_await withDeadline(std::move(op), options.deadline);
  if (!done) co_return refused(absl::DeadlineExceededError("TLS handshake timed out"));
  if (auto [ec] = *done; ec) {
    auto rejection = identity::handshakeRejection(ssl, ec);
    long verify = SSL_get_verify_result(ssl);
    if (verify != X509_V_OK && !expected.empty()) {
      // The server's certificate failed: a wrong or untrusted identity, not a network error.
      co_return refused(absl::PermissionDeniedError(absl::StrCat("failed verification (",
                                                                 X509_verify_cert_error_string(verify),
                                                                 "); expected ", expected)),
                        rejection);
    }
    if (rejection) {
      co_return refused(absl::PermissionDeniedError(absl::StrCat(
                            "certificate refused (", identity::svidRejectionLabel(*rejection), "): ", ec.message())),
                        rejection);
    }
    co_return refused(absl::UnavailableError(absl::StrCat("TLS handshake: ", ec.message())));
  }
  identity::SvidRejection rejected{};
  auto peer = identity::verifyPeer(ssl, options.trust_domain, &rejected);
  if (!peer.ok()) {
    co_return refused(absl::PermissionDeniedError(absl::StrCat("certificate refused (",
                                                               identity::svidRejectionLabel(rejected),
                                                               "): ", peer.status().message())),
                      rejected);
  }
  if (!expected.empty() && peer->str() != expected) {
    co_return refused(absl::PermissionDeniedError(absl::StrCat("presented ", peer->str(), ", expected ", expected)),
                      identity::SvidRejection::kIdentityMismatch);
  }
  if (identity::negotiatedAlpn(ssl) != "h2") {
    co_return refused(absl::PermissionDeniedError("did not negotiate ALPN h2"));
  }
  // The callback's pointer goes with this frame.
  if (!expected.empty()) identity::requirePeerIdentity(ssl, nullptr);
  MtlsSession out;
  out.tls = std::move(tls);
  out.peer_id = peer->str();
  co_return out;
}

}  // namespace

awaitable<MtlsSession> dialMtls(asio::ip::tcp::socket socket, asio::ssl::context& ctx, MtlsOptions options) {
  return handshake(asio::ssl::stream_base::client, std::move(socket), ctx, options);
}

awaitable<MtlsSession> acceptMtls(asio::ip::tcp::socket socket, asio::ssl::context& ctx, MtlsOptions options) {
  options.expected_peer = {};
  return handshake(asio::ssl::stream_base::server, std::move(socket), ctx, options);
}

}  // namespace ferry::net
