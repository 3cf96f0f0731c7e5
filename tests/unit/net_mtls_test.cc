// net/mtls, net/tls_channel and net/deadline: real TLS 1.3 handshakes between dialMtls
// and acceptMtls on a loopback TCP pair driven by one thread, then records both ways
// through TlsChannel.
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <gtest/gtest.h>

#include "proxy/identity/ca.h"
#include "proxy/identity/ca_cert_source.h"
#include "proxy/identity/openssl_util.h"
#include "proxy/identity/tls_context.h"
#include "proxy/net/deadline.h"
#include "proxy/net/mtls.h"
#include "proxy/net/tls_channel.h"

namespace ferry::net {
namespace {

namespace asio = boost::asio;
using Tcp = asio::ip::tcp;
using namespace std::chrono_literals;
using asio::awaitable;

constexpr char kTd[] = "example.org";
constexpr char kClient[] = "spiffe://example.org/ns/shop/sa/client";
constexpr char kServer[] = "spiffe://example.org/ns/shop/sa/server";

// One trust domain: a root that issues every identity asked for, and the TLS contexts.
// `also_trusted`: another root its bundle holds too.
struct Pki {
  explicit Pki(X509* also_trusted = nullptr, const char* td = kTd) {
    auto root = identity::CertificateAuthority::createRoot(td, 24h);
    EXPECT_TRUE(root.ok()) << root.status();
    root_cert = identity::upRef(root->cert());
    std::vector<identity::X509Ptr> roots;
    roots.push_back(identity::upRef(root->cert()));
    if (also_trusted != nullptr) roots.push_back(identity::upRef(also_trusted));
    auto src = identity::CaCertSource::create(*std::move(root), {}, std::move(roots), td, 1h);
    EXPECT_TRUE(src.ok()) << src.status();
    source = *std::move(src);
    cache = std::make_unique<identity::TlsContextCache>(*source, td);
  }
  asio::ssl::context& client(const char* id) { return **cache->clientContext(*identity::SpiffeId::parse(id)); }
  asio::ssl::context& server(const char* id) { return **cache->serverContext(*identity::SpiffeId::parse(id)); }

  identity::X509Ptr root_cert;
  std::unique_ptr<identity::CaCertSource> source;
  std::unique_ptr<identity::TlsContextCache> cache;
};

class NetMtlsTest : public ::testing::Test {
 protected:
  // A connected loopback pair: client_ dialled, server_ accepted.
  void SetUp() override {
    Tcp::acceptor acceptor(io_, Tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    client_.connect(acceptor.local_endpoint());
    acceptor.accept(server_);
  }

  // Runs dialMtls and acceptMtls (each with its own deadline) to the end of both.
  void handshake(asio::ssl::context& client_ctx, asio::ssl::context& server_ctx, std::string_view expect,
                 std::chrono::milliseconds client_time = 5s, std::chrono::milliseconds server_time = 5s) {
    auto now = std::chrono::steady_clock::now();
    MtlsOptions dial{kTd, expect, now + client_time};
    MtlsOptions accept{kTd, {}, now + server_time};
    asio::co_spawn(io_, dialMtls(std::move(client_), client_ctx, dial),
                   [this](std::exception_ptr e, MtlsSession s) {
                     ASSERT_FALSE(e);
                     dialled_ = std::move(s);
                   });
    asio::co_spawn(io_, acceptMtls(std::move(server_), server_ctx, accept),
                   [this](std::exception_ptr e, MtlsSession s) {
                     ASSERT_FALSE(e);
                     accepted_ = std::move(s);
                   });
    io_.run();
    io_.restart();
    ASSERT_TRUE(dialled_.has_value());
    ASSERT_TRUE(accepted_.has_value());
  }

  asio::io_context io_{1};
  Tcp::socket client_{io_};
  Tcp::socket server_{io_};
  std::optional<MtlsSession> dialled_;
  std::optional<MtlsSession> accepted_;
};

TEST_F(NetMtlsTest, DialAndAcceptProveEachOthersIdentity) {
  Pki pki;
  handshake(pki.client(kClient), pki.server(kServer), kServer);
  ASSERT_TRUE(dialled_->ok()) << dialled_->status;
  ASSERT_TRUE(accepted_->ok()) << accepted_->status;
  EXPECT_EQ(dialled_->peer_id, kServer);
  EXPECT_EQ(accepted_->peer_id, kClient);
  EXPECT_FALSE(dialled_->rejection);
}

TEST_F(NetMtlsTest, DialRefusesAServerThatProvesAnotherIdentity) {
  Pki pki;
  handshake(pki.client(kClient), pki.server("spiffe://example.org/ns/shop/sa/other"), kServer);
  ASSERT_FALSE(dialled_->ok());
  EXPECT_EQ(dialled_->status.code(), absl::StatusCode::kPermissionDenied) << dialled_->status;
  EXPECT_NE(dialled_->status.message().find("expected spiffe://example.org/ns/shop/sa/server"), std::string::npos)
      << dialled_->status;
  EXPECT_EQ(dialled_->tls, nullptr);
  // The server never saw a client certificate: the client stopped before sending it.
  EXPECT_FALSE(accepted_->ok());
  EXPECT_TRUE(accepted_->peer_id.empty());
}

TEST_F(NetMtlsTest, AcceptRefusesAClientCertificateFromARootItDoesNotTrust) {
  Pki ours;
  // The same trust domain name under another root, which trusts ours: it accepts our
  // server and sends its certificate, which our bundle does not hold.
  Pki theirs(ours.root_cert.get());
  handshake(theirs.client(kClient), ours.server(kServer), kServer);
  ASSERT_FALSE(accepted_->ok());
  EXPECT_EQ(accepted_->status.code(), absl::StatusCode::kPermissionDenied) << accepted_->status;
  EXPECT_TRUE(accepted_->rejection.has_value()) << accepted_->status;
  EXPECT_NE(accepted_->status.message().find("certificate refused"), std::string::npos) << accepted_->status;
  EXPECT_FALSE(dialled_->ok() && accepted_->ok());
}

TEST_F(NetMtlsTest, SilentPeerEndsInTheDeadline) {
  Pki pki;
  // Only the server runs: the client's socket stays open and says nothing.
  Tcp::socket silent = std::move(client_);
  MtlsOptions accept{kTd, {}, std::chrono::steady_clock::now() + 100ms};
  asio::co_spawn(io_, acceptMtls(std::move(server_), pki.server(kServer), accept),
                 [this](std::exception_ptr, MtlsSession s) { accepted_ = std::move(s); });
  io_.run();
  ASSERT_TRUE(accepted_.has_value());
  EXPECT_EQ(accepted_->status.code(), absl::StatusCode::kDeadlineExceeded) << accepted_->status;
  EXPECT_EQ(accepted_->tls, nullptr);
}

TEST_F(NetMtlsTest, ChannelCarriesRecordsBothWaysAfterTheHandshake) {
  Pki pki;
  handshake(pki.client(kClient), pki.server(kServer), kServer);
  ASSERT_TRUE(dialled_->ok() && accepted_->ok());
  TlsChannel a(std::move(dialled_->tls));
  TlsChannel b(std::move(accepted_->tls));
  boost::system::error_code ec;
  a.socket().non_blocking(true, ec);
  b.socket().non_blocking(true, ec);
  // A write batch larger than one record (16 KiB) leaves as several records in one go.
  std::string sent(100 * 1024, 'x');
  for (size_t i = 0; i < sent.size(); ++i) sent[i] = static_cast<char>('a' + i % 26);
  std::string error;
  ASSERT_TRUE(a.encrypt(reinterpret_cast<const uint8_t*>(sent.data()), sent.size(), error)) << error;
  EXPECT_TRUE(a.hasCiphertextOut());
  std::string got;
  uint8_t plain[64 * 1024];
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (got.size() < sent.size() && std::chrono::steady_clock::now() < deadline) {
    if (a.hasCiphertextOut()) {
      ASSERT_NE(a.drain(ec), TlsChannel::Drain::kFailed) << ec.message();
    }
    Drained drained = Drained::kNo;
    b.readCiphertext(64 * 1024, drained, ec);
    ASSERT_TRUE(!ec || ec == asio::error::would_block) << ec.message();
    for (int n; (n = b.decrypt(plain, sizeof(plain), error)) != 0;) {
      ASSERT_GT(n, 0) << error;
      got.append(reinterpret_cast<char*>(plain), static_cast<size_t>(n));
    }
  }
  EXPECT_EQ(got, sent);
  // And back, until the peer closes: decrypt then says why the channel ended.
  ASSERT_TRUE(b.encrypt(reinterpret_cast<const uint8_t*>("pong"), 4, error)) << error;
  ASSERT_EQ(b.drain(ec), TlsChannel::Drain::kDone) << ec.message();
  SSL_shutdown(b.ssl());  // close_notify, into the channel
  ASSERT_EQ(b.drain(ec), TlsChannel::Drain::kDone) << ec.message();
  std::string back;
  int end = 0;
  while (end == 0 && std::chrono::steady_clock::now() < deadline) {
    Drained drained = Drained::kNo;
    a.readCiphertext(64 * 1024, drained, ec);
    for (int n; (n = a.decrypt(plain, sizeof(plain), error)) != 0;) {
      if (n < 0) {
        end = n;
        break;
      }
      back.append(reinterpret_cast<char*>(plain), static_cast<size_t>(n));
    }
  }
  EXPECT_EQ(back, "pong");
  EXPECT_EQ(end, -1);
  EXPECT_EQ(error, "peer closed the connection");
}

// The channel replaces the handshake's stream: what that stream had read ahead (a record
// half decrypted in the SSL object, the start of the next one in Asio's BIO pair) comes
// out of the channel, and the SSL object outlives the stream, without the verify callback
// the stream kept in it (ASan shows a use after free if anything still reaches it).
TEST_F(NetMtlsTest, ChannelKeepsWhatTheStreamItReplacesHadReadAhead) {
  Pki pki;
  handshake(pki.client(kClient), pki.server(kServer), kServer);
  ASSERT_TRUE(dialled_->ok() && accepted_->ok());
  // Two records (16 KiB and the rest) from the client's stream, before either end has a
  // channel; the server's stream reads one byte of them.
  std::string sent(20000, 'x');
  for (size_t i = 0; i < sent.size(); ++i) sent[i] = static_cast<char>('a' + i % 26);
  boost::system::error_code ec;
  asio::write(*dialled_->tls, asio::buffer(sent), ec);
  ASSERT_FALSE(ec) << ec.message();
  char first = 0;
  ASSERT_EQ(accepted_->tls->read_some(asio::buffer(&first, 1), ec), 1u) << ec.message();
  ASSERT_GT(SSL_pending(accepted_->tls->native_handle()), 0);
  // A verify callback of Asio's own: its engine deletes it when the stream goes.
  accepted_->tls->set_verify_callback([](bool preverified, asio::ssl::verify_context&) { return preverified; });
  int verify_mode = SSL_get_verify_mode(accepted_->tls->native_handle());
  TlsChannel b(std::move(accepted_->tls));
  EXPECT_EQ(SSL_get_app_data(b.ssl()), nullptr);
  EXPECT_EQ(SSL_get_verify_mode(b.ssl()), verify_mode);
  b.socket().non_blocking(true, ec);
  std::string got(1, first);
  std::string error;
  uint8_t plain[64 * 1024];
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (got.size() < sent.size() && std::chrono::steady_clock::now() < deadline) {
    for (int n; (n = b.decrypt(plain, sizeof(plain), error)) != 0;) {
      ASSERT_GT(n, 0) << error;
      got.append(reinterpret_cast<char*>(plain), static_cast<size_t>(n));
    }
    Drained drained = Drained::kNo;
    b.readCiphertext(64 * 1024, drained, ec);
    ASSERT_TRUE(!ec || ec == asio::error::would_block) << ec.message();
  }
  EXPECT_EQ(got, sent);
  // And the SSL object still writes: the client's stream reads what the channel sends.
  ASSERT_TRUE(b.encrypt(reinterpret_cast<const uint8_t*>("pong"), 4, error)) << error;
  ASSERT_EQ(b.drain(ec), TlsChannel::Drain::kDone) << ec.message();
  char back[4];
  asio::read(*dialled_->tls, asio::buffer(back), ec);
  ASSERT_FALSE(ec) << ec.message();
  EXPECT_EQ(std::string(back, 4), "pong");
}

TEST(NetDeadlineTest, TheOperationThatEndsFirstWins) {
  asio::io_context io;
  std::optional<bool> in_time, late;
  std::optional<boost::system::error_code> late_op;
  asio::co_spawn(io, [&]() -> awaitable<void> {
    asio::steady_timer quick(io, 10ms);
    auto r = co_await withTimeout(quick.async_wait(asio::as_tuple(asio::use_awaitable)), 5s);
    in_time = r.has_value();
    asio::steady_timer slow(io, 5s);
    auto wait_slow = [&]() -> awaitable<void> {
      auto [ec] = co_await slow.async_wait(asio::as_tuple(asio::use_awaitable));
      late_op = ec;
    };
    late = co_await withTimeout(wait_slow(), 20ms);
  }, asio::detached);
  io.run();
  EXPECT_EQ(in_time, true);
  EXPECT_EQ(late, false);
  // The losing operation was cancelled and had completed before withTimeout returned.
  EXPECT_EQ(late_op, asio::error::operation_aborted);
}

}  // namespace
}  // namespace ferry::net
