// Bad input on 15008: every case gets its specified answer, nothing crashes, and the
// listener keeps serving afterwards (asserted after each case).
#include <arpa/inet.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>
#include <thread>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <gtest/gtest.h>

#include "proxy/hbone/connect_request.h"
#include "proxy/hbone/h2_connection.h"
#include "proxy/identity/dir_cert_source.h"
#include "proxy/identity/ca.h"
#include "proxy/identity/openssl_util.h"
#include "proxy/identity/tls_context.h"
#include "tests/integration/access_log_capture.h"
#include "tests/integration/loopback_lab.h"
#include "tests/support/forge_cert.h"

namespace ferry::testing {
namespace {

namespace asio = boost::asio;
using hbone::H2Connection;
using hbone::Header;
constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);
constexpr uint16_t kAppPort = 8080;

// A hand-driven HBONE client: any certificate, any headers.
class TestClient {
 public:
  TestClient() : guard_(asio::make_work_guard(io_)), thread_([this] { io_.run(); }) {}
  ~TestClient() {
    run<bool>([this]() -> asio::awaitable<bool> {
      if (conn_) conn_->close("test done");
      conn_.reset();
      co_return true;
    });
    guard_.reset();
    io_.stop();
    thread_.join();
  }

  // Connects from `src` to `dst`:15008 with `ctx`; true when TLS completed with ALPN h2.
  bool connect(const std::string& src, const std::string& dst, asio::ssl::context& ctx) {
    return run<bool>([&]() -> asio::awaitable<bool> {
      asio::ip::tcp::socket s(io_);
      s.open(asio::ip::tcp::v4());
      s.bind({asio::ip::make_address(src), 0});
      auto [ec] = co_await s.async_connect({asio::ip::make_address(dst), 15008}, kTuple);
      if (ec) co_return false;
      auto tls = std::make_unique<hbone::TlsStream>(std::move(s), ctx);
      auto [hec] = co_await tls->async_handshake(asio::ssl::stream_base::client, kTuple);
      if (hec) co_return false;
      if (identity::negotiatedAlpn(tls->native_handle()) != "h2") co_return false;
      conn_ = H2Connection::create(H2Connection::Role::kClient, std::move(tls), {});
      conn_->start();
      co_return true;
    });
  }

  struct Answer {
    int status = 0;           // :status, 0 if none
    bool reset = false;       // stream reset (or connection died) without a status
    std::shared_ptr<hbone::H2Stream> stream;
  };
  Answer request(const std::vector<Header>& headers) {
    return run<Answer>([&]() -> asio::awaitable<Answer> {
      Answer a;
      if (!conn_ || !conn_->usable()) {
        a.reset = true;
        co_return a;
      }
      a.stream = conn_->openStream(headers);
      if (!a.stream) {
        a.reset = true;
        co_return a;
      }
      while (!a.stream->headersDone() && !a.stream->resetCode()) co_await a.stream->recvReady().wait();
      a.status = a.stream->status();
      a.reset = a.status == 0;
      co_return a;
    });
  }
  // Sends bytes on an open stream and waits until `n` bytes came back (echo).
  std::string exchange(const std::shared_ptr<hbone::H2Stream>& s, const std::string& data) {
    return run<std::string>([&]() -> asio::awaitable<std::string> {
      s->send(data.data(), data.size());
      std::string got;
      while (got.size() < data.size() && !s->resetCode()) {
        if (s->hasReceived()) {
          auto chunk = s->received().toString();
          s->received().clear();
          s->consumed(chunk.size());
          got += chunk;
          continue;
        }
        co_await s->recvReady().wait();
      }
      co_return got;
    });
  }
  void reset(const std::shared_ptr<hbone::H2Stream>& s) {
    run<bool>([&]() -> asio::awaitable<bool> {
      s->reset(hbone::kH2Cancel);
      co_return true;
    });
  }
  // Writes bytes to the TCP socket under the TLS session, as if TLS said them.
  bool sendRaw(const std::string& bytes) {
    return run<bool>([&]() -> asio::awaitable<bool> {
      if (!conn_) co_return false;
      auto [ec, n] = co_await asio::async_write(conn_->socket(), asio::buffer(bytes), kTuple);
      co_return !ec;
    });
  }
  bool alive() {
    return run<bool>([&]() -> asio::awaitable<bool> { co_return conn_ && conn_->usable(); });
  }

 private:
  template <typename T, typename F>
  T run(F&& make) {
    // Shared: on a timeout the operation may still complete after we returned.
    auto p = std::make_shared<std::promise<T>>();
    auto fut = p->get_future();
    asio::co_spawn(io_, make(), [p](std::exception_ptr e, T v) {
      if (e) p->set_exception(e); else p->set_value(std::move(v));
    });
    if (fut.wait_for(std::chrono::seconds(15)) != std::future_status::ready) {
      ADD_FAILURE() << "test client operation timed out";
      return T{};
    }
    return fut.get();
  }

  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> guard_;
  std::thread thread_;
  std::shared_ptr<H2Connection> conn_;
};

std::vector<Header> connectTo(const std::string& authority) {
  return {{":method", "CONNECT"}, {":authority", authority}};
}

class HboneBadInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    n2_ = std::make_unique<Node>(files_, "n2");
    ASSERT_TRUE(n2_->ok());
    app_ = std::make_unique<AppServer>("127.0.2.10", kAppPort, AppServer::echo);
    tls_ = std::make_unique<LabClientTls>(files_);
    good_ctx_ = tls_->context("client");
    ASSERT_NE(good_ctx_, nullptr);
  }

  // The listener still serves a well-formed, authorized request end to end.
  void expectServing() {
    TestClient c;
    ASSERT_TRUE(c.connect("127.0.1.10", "127.0.2.10", *good_ctx_));
    auto a = c.request(connectTo("127.0.2.10:8080"));
    ASSERT_EQ(a.status, 200);
    EXPECT_EQ(c.exchange(a.stream, "still serving"), "still serving");
  }

  // A client context presenting `leaf` (signed by `ca`) and trusting the lab bundle.
  std::shared_ptr<asio::ssl::context> contextWith(const identity::CertificateAuthority& ca,
                                                  const ForgeOptions& opts) {
    auto leaf = forgeLeaf(ca, opts);
    EXPECT_TRUE(leaf.ok()) << leaf.status();
    auto ctx = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_client);
    SSL_CTX* raw = ctx->native_handle();
    SSL_CTX_set_min_proto_version(raw, TLS1_3_VERSION);
    SSL_CTX_use_certificate(raw, leaf->cert.get());
    SSL_CTX_use_PrivateKey(raw, leaf->key.get());
    SSL_CTX_load_verify_locations(raw, (files_.certDir() + "/bundle.pem").c_str(), nullptr);
    static const unsigned char kAlpn[] = {2, 'h', '2'};
    SSL_CTX_set_alpn_protos(raw, kAlpn, sizeof(kAlpn));
    return ctx;
  }

  uint64_t rejections(identity::SvidRejection r) {
    return n2_->stats().rejections(session::Direction::kInbound, r);
  }

  LabFiles files_;
  std::unique_ptr<Node> n2_;
  std::unique_ptr<AppServer> app_;
  std::unique_ptr<LabClientTls> tls_;
  std::shared_ptr<asio::ssl::context> good_ctx_;
};

TEST_F(HboneBadInputTest, ValidRequestIsRelayed) {
  expectServing();
  ASSERT_EQ(app_->peers().size(), 1u);
  EXPECT_EQ(app_->peers()[0], "127.0.1.10");
}

TEST_F(HboneBadInputTest, PlainBytesAreDroppedAndListenerKeepsServing) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in src{}, dst{};
  src.sin_family = dst.sin_family = AF_INET;
  inet_pton(AF_INET, "127.0.1.10", &src.sin_addr);
  inet_pton(AF_INET, "127.0.2.10", &dst.sin_addr);
  dst.sin_port = htons(15008);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&src), sizeof(src)), 0);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&dst), sizeof(dst)), 0);
  const char req[] = "CONNECT 127.0.2.10:8080 HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_TRUE(sendAll(fd, req, sizeof(req) - 1));
  setRecvTimeout(fd, std::chrono::seconds(10));
  std::string got;
  recvAll(fd, got);  // ends with EOF or RST, never with a relayed connection
  EXPECT_EQ(got.find("200"), std::string::npos);
  ::close(fd);
  EXPECT_EQ(app_->accepted(), 0u);
  expectServing();
}

TEST_F(HboneBadInputTest, TlsWithoutClientCertificateIsRefused) {
  asio::ssl::context ctx(asio::ssl::context::tls_client);
  SSL_CTX_set_min_proto_version(ctx.native_handle(), TLS1_3_VERSION);
  static const unsigned char kAlpn[] = {2, 'h', '2'};
  SSL_CTX_set_alpn_protos(ctx.native_handle(), kAlpn, sizeof(kAlpn));
  TestClient c;
  if (c.connect("127.0.1.10", "127.0.2.10", ctx)) {
    // TLS 1.3: the client finishes before the server has judged its (missing) certificate.
    auto a = c.request(connectTo("127.0.2.10:8080"));
    EXPECT_TRUE(a.reset) << "status " << a.status;
  }
  EXPECT_EQ(app_->accepted(), 0u);
  EXPECT_TRUE(waitFor([&] { return rejections(identity::SvidRejection::kNoCertificate) == 1; }));
  expectServing();
}

TEST_F(HboneBadInputTest, CertificateFromAnotherCaIsRefused) {
  auto other = identity::CertificateAuthority::createRoot("cluster.local", std::chrono::hours(1));
  ASSERT_TRUE(other.ok());
  ForgeOptions opts;
  opts.uri_sans = {"spiffe://cluster.local/ns/default/sa/client"};
  auto ctx = contextWith(*other, opts);
  TestClient c;
  if (c.connect("127.0.1.10", "127.0.2.10", *ctx)) {
    EXPECT_TRUE(c.request(connectTo("127.0.2.10:8080")).reset);
  }
  EXPECT_EQ(app_->accepted(), 0u);
  EXPECT_TRUE(waitFor([&] { return rejections(identity::SvidRejection::kUntrustedChain) == 1; }));
  expectServing();
}

TEST_F(HboneBadInputTest, LeafWithTwoUriSansIsRefusedAndCountedByRule) {
  auto ca = identity::CertificateAuthority::load(files_.caDir() + "/ca.pem", files_.caDir() + "/ca.key");
  ASSERT_TRUE(ca.ok()) << ca.status();
  ForgeOptions opts;
  opts.uri_sans = {"spiffe://cluster.local/ns/default/sa/client", "spiffe://cluster.local/ns/default/sa/other"};
  auto ctx = contextWith(*ca, opts);
  TestClient c;
  if (c.connect("127.0.1.10", "127.0.2.10", *ctx)) {
    EXPECT_TRUE(c.request(connectTo("127.0.2.10:8080")).reset);
  }
  EXPECT_EQ(app_->accepted(), 0u);
  EXPECT_TRUE(waitFor([&] { return rejections(identity::SvidRejection::kUriSanCount) == 1; }));
  EXPECT_NE(n2_->server().renderMetrics().find(
                "ferry_svid_rejections_total{direction=\"inbound\",reason=\"uri_san_count\"} 1\n"),
            std::string::npos);
  expectServing();
}

TEST_F(HboneBadInputTest, LeafWithoutClientAuthEkuIsCountedAsEkuNoClientAuth) {
  // OpenSSL's own purpose check refuses it during the handshake; the counter must name the
  // EKU rule, not a generic chain failure.
  auto ca = identity::CertificateAuthority::load(files_.caDir() + "/ca.pem", files_.caDir() + "/ca.key");
  ASSERT_TRUE(ca.ok()) << ca.status();
  ForgeOptions opts;
  opts.uri_sans = {"spiffe://cluster.local/ns/default/sa/client"};
  opts.eku_client = false;
  auto ctx = contextWith(*ca, opts);
  TestClient c;
  if (c.connect("127.0.1.10", "127.0.2.10", *ctx)) {
    EXPECT_TRUE(c.request(connectTo("127.0.2.10:8080")).reset);
  }
  EXPECT_EQ(app_->accepted(), 0u);
  EXPECT_TRUE(waitFor([&] { return rejections(identity::SvidRejection::kEkuNoClientAuth) == 1; }));
  EXPECT_EQ(rejections(identity::SvidRejection::kChainInvalid), 0u);
  expectServing();
}

TEST_F(HboneBadInputTest, CertificateOfAnotherTrustDomainIsRefused) {
  auto ca = identity::CertificateAuthority::load(files_.caDir() + "/ca.pem", files_.caDir() + "/ca.key");
  ASSERT_TRUE(ca.ok()) << ca.status();
  ForgeOptions opts;
  opts.uri_sans = {"spiffe://evil.example/ns/default/sa/client"};
  auto ctx = contextWith(*ca, opts);
  TestClient c;
  if (c.connect("127.0.1.10", "127.0.2.10", *ctx)) {
    EXPECT_TRUE(c.request(connectTo("127.0.2.10:8080")).reset);
  }
  EXPECT_EQ(app_->accepted(), 0u);
  EXPECT_TRUE(waitFor([&] { return rejections(identity::SvidRejection::kTrustDomain) == 1; }));
  expectServing();
}

TEST_F(HboneBadInputTest, IdentityThatDoesNotOwnTheSourceAddressGets401) {
  // The refusal's access record says who claimed what (docs/operations.md, Access log).
  LogCapture log;
  n2_.reset();
  n2_ = std::make_unique<Node>(files_, "n2", "log_level: info\naccess_log: {format: json}\n");
  ASSERT_TRUE(n2_->ok());
  // A valid certificate for "other" (pod c2) used from c1's address.
  auto ctx = tls_->context("other");
  ASSERT_NE(ctx, nullptr);
  TestClient c;
  ASSERT_TRUE(c.connect("127.0.1.10", "127.0.2.10", *ctx));
  EXPECT_EQ(c.request(connectTo("127.0.2.10:8080")).status, 401);
  EXPECT_EQ(app_->accepted(), 0u);
  EXPECT_EQ(n2_->stats().identity_spoofing_denied.load(), 1u);
  auto record = onlyRecord(log, "inbound", "denied");
  EXPECT_EQ(record.text["source_workload"], "default/c1");
  EXPECT_EQ(record.text["source_principal"], "spiffe://cluster.local/ns/default/sa/other");
  EXPECT_EQ(record.text["destination_workload"], "default/s1");
  EXPECT_NE(record.text["detail"].find("does not own 127.0.1.10"), std::string::npos) << record.raw;
  expectServing();
}

TEST_F(HboneBadInputTest, AuthorityNotEqualToDestinationGets400) {
  TestClient c;
  ASSERT_TRUE(c.connect("127.0.1.10", "127.0.2.10", *good_ctx_));
  EXPECT_EQ(c.request(connectTo("127.0.2.11:8080")).status, 400);  // another local pod
  EXPECT_EQ(c.request(connectTo("127.0.1.10:8080")).status, 400);  // a non-local IP
  EXPECT_EQ(c.request(connectTo("169.254.169.254:80")).status, 400);
  EXPECT_EQ(c.request(connectTo("127.0.0.1:8080")).status, 400);
  EXPECT_TRUE(c.alive()) << "a bad stream must not kill the connection";
  EXPECT_EQ(app_->accepted(), 0u);
  expectServing();
}

TEST_F(HboneBadInputTest, FerryPortsAreNeverTargets) {
  TestClient c;
  ASSERT_TRUE(c.connect("127.0.1.10", "127.0.2.10", *good_ctx_));
  for (const char* port : {"15001", "15006", "15008", "15000", "15020", "15021"}) {
    EXPECT_EQ(c.request(connectTo(std::string("127.0.2.10:") + port)).status, 400) << port;
  }
  expectServing();
}

TEST_F(HboneBadInputTest, MalformedAuthorityGets400) {
  TestClient c;
  ASSERT_TRUE(c.connect("127.0.1.10", "127.0.2.10", *good_ctx_));
  for (const char* authority : {"nonsense", "127.0.2.10", "127.0.2.10:0", "127.0.2.10:99999",
                                "127.0.2.10:80a", "[::1]:8080", "example.com:8080"}) {
    EXPECT_EQ(c.request(connectTo(authority)).status, 400) << authority;
  }
  expectServing();
}

TEST_F(HboneBadInputTest, NonConnectMethodGets400) {
  TestClient c;
  ASSERT_TRUE(c.connect("127.0.1.10", "127.0.2.10", *good_ctx_));
  auto a = c.request({{":method", "GET"}, {":scheme", "https"}, {":path", "/"},
                      {":authority", "127.0.2.10:8080"}});
  EXPECT_EQ(a.status, 400);
  expectServing();
}

TEST_F(HboneBadInputTest, OversizedHeaderListIsAnswered431OnThatStreamOnly) {
  TestClient c;
  ASSERT_TRUE(c.connect("127.0.1.10", "127.0.2.10", *good_ctx_));
  auto headers = connectTo("127.0.2.10:8080");
  headers.push_back({"x-padding", std::string(hbone::kServerMaxHeaderList + 1024, 'a')});
  auto a = c.request(headers);
  EXPECT_EQ(a.status, 431);
  EXPECT_EQ(app_->accepted(), 0u);
  // The same connection still carries a good request.
  auto b = c.request(connectTo("127.0.2.10:8080"));
  EXPECT_EQ(b.status, 200);
  EXPECT_EQ(c.exchange(b.stream, "after"), "after");
}

TEST_F(HboneBadInputTest, StreamResetMidTransferResetsTheApplication) {
  std::atomic<int> app_errno{0};
  std::atomic<bool> app_done{false};
  AppServer resettable("127.0.2.10", 8081, [&](int fd) {
    char buf[64];
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    sendAll(fd, buf, n > 0 ? n : 0);
    setRecvTimeout(fd, std::chrono::seconds(10));
    n = ::recv(fd, buf, sizeof(buf), 0);
    app_errno = n < 0 ? errno : 0;
    app_done = true;
    // the AppServer closes fd when this returns
  });
  TestClient c;
  ASSERT_TRUE(c.connect("127.0.1.10", "127.0.2.10", *good_ctx_));
  auto a = c.request(connectTo("127.0.2.10:8081"));
  ASSERT_EQ(a.status, 200);
  EXPECT_EQ(c.exchange(a.stream, "half"), "half");
  c.reset(a.stream);
  ASSERT_TRUE(waitFor([&] { return app_done.load(); }));
  EXPECT_EQ(app_errno.load(), ECONNRESET);
  EXPECT_TRUE(c.alive());
  expectServing();
}

TEST_F(HboneBadInputTest, TlsRecordLongerThanTheProtocolAllowsEndsTheConnectionAtOnce) {
  // An application-data record header claiming 65,535 bytes (TLS 1.3 allows 2^14 + 256):
  // ferryd must reject it as soon as the header is in, not wait for 64 KiB that never come
  // (the ping timeout, 20 s by default, would be the only way out).
  TestClient c;
  ASSERT_TRUE(c.connect("127.0.1.10", "127.0.2.10", *good_ctx_));
  ASSERT_TRUE(c.alive());
  ASSERT_TRUE(c.sendRaw(std::string("\x17\x03\x03\xff\xff", 5)));
  EXPECT_TRUE(waitFor([&] { return !c.alive(); }, std::chrono::seconds(5)))
      << "the server kept the connection open on a record it can never accept";
  EXPECT_EQ(app_->accepted(), 0u);
  expectServing();
}

TEST_F(HboneBadInputTest, ConnectionThatNeverOpensAStreamIsReclaimed) {
  // Server side releases after twice pool.idle_release without streams (here 2 x 200 ms).
  n2_.reset();
  n2_ = std::make_unique<Node>(files_, "n2", "pool: {idle_release: 200ms, ping_interval: 100ms, ping_timeout: 5s}\n");
  ASSERT_TRUE(n2_->ok());
  TestClient c;
  ASSERT_TRUE(c.connect("127.0.1.10", "127.0.2.10", *good_ctx_));
  EXPECT_TRUE(waitFor([&] { return !c.alive(); }, std::chrono::seconds(10)))
      << "an idle HBONE connection must not be held open forever";
  expectServing();
}

}  // namespace
}  // namespace ferry::testing
