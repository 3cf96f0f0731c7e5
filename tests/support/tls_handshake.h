#pragma once
// An in-memory TLS handshake between two SSL_CTX (a BIO pair, no sockets), for tests of TLS
// contexts and the certificates in them: header-only, linked by tests only.
#include <openssl/err.h>
#include <openssl/ssl.h>

#include <functional>
#include <string>
#include <string_view>

#include "gtest/gtest.h"
#include "proxy/identity/openssl_util.h"
#include "proxy/identity/spiffe_id.h"
#include "proxy/identity/tls_context.h"

namespace ferry::test_support {

struct Handshake {
  identity::SslPtr client, server;
  bool client_ok = false, server_ok = false;
  std::string client_error, server_error;
};

// Drives both ends until each has finished or failed. In TLS 1.3 the client finishes before
// the server has judged its certificate, so a client that "finished" then reads once to
// collect any alert the server sent.
inline Handshake runHandshake(SSL_CTX* client_ctx, SSL_CTX* server_ctx,
                              const std::function<void(SSL*)>& tweak_client = nullptr) {
  Handshake h;
  h.client.reset(SSL_new(client_ctx));
  h.server.reset(SSL_new(server_ctx));
  BIO* client_bio = nullptr;
  BIO* server_bio = nullptr;
  EXPECT_EQ(BIO_new_bio_pair(&client_bio, 0, &server_bio, 0), 1);
  SSL_set_bio(h.client.get(), client_bio, client_bio);
  SSL_set_bio(h.server.get(), server_bio, server_bio);
  SSL_set_connect_state(h.client.get());
  SSL_set_accept_state(h.server.get());
  if (tweak_client) tweak_client(h.client.get());

  bool client_failed = false, server_failed = false;
  auto step = [](SSL* ssl, bool& ok, bool& failed, std::string& error) {
    if (ok || failed) return;
    int rc = SSL_do_handshake(ssl);
    if (rc == 1) {
      ok = true;
      return;
    }
    int err = SSL_get_error(ssl, rc);
    if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) return;
    failed = true;
    error = identity::drainOpenSslErrors();
  };
  for (int round = 0; round < 20; ++round) {
    step(h.client.get(), h.client_ok, client_failed, h.client_error);
    step(h.server.get(), h.server_ok, server_failed, h.server_error);
    if ((h.client_ok || client_failed) && (h.server_ok || server_failed)) break;
  }
  if (h.client_ok) {
    char byte;
    int rc = SSL_read(h.client.get(), &byte, 1);
    int err = SSL_get_error(h.client.get(), rc);
    if (err != SSL_ERROR_WANT_READ) {
      h.client_ok = false;
      h.client_error = identity::drainOpenSslErrors();
    }
  }
  ERR_clear_error();
  return h;
}

// Over a finished handshake each end verifies the other (verifyPeer, as ferryd does after its
// handshakes) as the identity expected. Use as ASSERT_NO_FATAL_FAILURE(expectPeers(...)).
inline void expectPeers(const Handshake& h, std::string_view trust_domain, const identity::SpiffeId& client,
                        const identity::SpiffeId& server) {
  auto seen_by_server = identity::verifyPeer(h.server.get(), trust_domain);
  ASSERT_TRUE(seen_by_server.ok()) << seen_by_server.status();
  EXPECT_EQ(*seen_by_server, client);
  auto seen_by_client = identity::verifyPeer(h.client.get(), trust_domain);
  ASSERT_TRUE(seen_by_client.ok()) << seen_by_client.status();
  EXPECT_EQ(*seen_by_client, server);
}

// Application data flows both ways over a finished handshake.
inline void expectDataFlows(Handshake& h) {
  ASSERT_EQ(SSL_write(h.client.get(), "ping", 4), 4);
  char buf[8] = {};
  ASSERT_EQ(SSL_read(h.server.get(), buf, sizeof(buf)), 4);
  EXPECT_EQ(std::string(buf, 4), "ping");
  ASSERT_EQ(SSL_write(h.server.get(), "pong", 4), 4);
  ASSERT_EQ(SSL_read(h.client.get(), buf, sizeof(buf)), 4);
  EXPECT_EQ(std::string(buf, 4), "pong");
}

}  // namespace ferry::test_support
