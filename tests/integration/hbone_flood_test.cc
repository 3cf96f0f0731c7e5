// HTTP/2 abuse on 15008 from a client with a valid certificate (docs/security.md, "HTTP/2
// abuse"): rapid reset, resets racing the upstream connect, CONTINUATION and ACK floods.
// Each attack gets the right GOAWAY and a close well before the keepalive would act, the
// workload is spared, and a legitimate client on another connection keeps working.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <dirent.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <thread>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <gtest/gtest.h>

#include "proxy/identity/dir_cert_source.h"
#include "proxy/identity/tls_context.h"
#include "tests/integration/h2_frames.h"
#include "tests/integration/loopback_lab.h"

namespace ferry::testing {
namespace {

namespace asio = boost::asio;
constexpr uint16_t kAppPort = 8080;


struct Frame {
  uint8_t type = 0;
  uint8_t flags = 0;
  uint32_t stream = 0;
  std::string payload;
};

// A hand-driven HTTP/2 client over TLS: writes whatever bytes it is given, as fast as the
// server takes them, while collecting every frame that comes back (one thread, one SSL, a
// non-blocking socket: a server that stops reading must not block the test).
class RawH2Client {
 public:
  RawH2Client() = default;
  ~RawH2Client() {
    if (ssl_ != nullptr) SSL_free(ssl_);
    if (fd_ >= 0) ::close(fd_);
  }

  bool connect(const std::string& src, const std::string& dst, SSL_CTX* ctx) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{}, b{};
    a.sin_family = b.sin_family = AF_INET;
    inet_pton(AF_INET, src.c_str(), &a.sin_addr);
    inet_pton(AF_INET, dst.c_str(), &b.sin_addr);
    b.sin_port = htons(15008);
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return false;
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&b), sizeof(b)) != 0) return false;
    ssl_ = SSL_new(ctx);
    SSL_set_fd(ssl_, fd_);
    SSL_set_mode(ssl_, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    if (SSL_connect(ssl_) != 1) {
      ERR_clear_error();
      return false;
    }
    ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) | O_NONBLOCK);
    return true;
  }

  // Writes `out` while reading, until `done()` holds (once all is written; no `done`: as
  // soon as all is written), the server closed the connection, or
  // `limit` passed. With `cork`, `out` leaves in as few TCP segments as it fits in, so that
  // the server reads it in one pass.
  void pump(const std::string& out, const std::function<bool()>& done,
            std::chrono::milliseconds limit = std::chrono::seconds(10), bool cork = false) {
    auto deadline = Clock::now() + limit;
    size_t off = 0;
    int one = 1, zero = 0;
    if (cork) ::setsockopt(fd_, IPPROTO_TCP, TCP_CORK, &one, sizeof(one));
    while (!closed_ && Clock::now() < deadline) {
      while (!write_failed_ && off < out.size()) {
        int len = static_cast<int>(std::min<size_t>(out.size() - off, 16384));
        int n = SSL_write(ssl_, out.data() + off, len);
        if (n > 0) {
          off += static_cast<size_t>(n);
          continue;
        }
        int err = SSL_get_error(ssl_, n);
        if (err != SSL_ERROR_WANT_WRITE && err != SSL_ERROR_WANT_READ) {
          write_failed_ = true;  // the server closed: stop writing, keep reading
          ERR_clear_error();
        }
        break;
      }
      if (cork && (off == out.size() || write_failed_)) {
        ::setsockopt(fd_, IPPROTO_TCP, TCP_CORK, &zero, sizeof(zero));
        cork = false;
      }
      readAvailable();
      if (closed_ || (off == out.size() && (!done || done()))) break;
      pollfd p{fd_, static_cast<short>(POLLIN | (off < out.size() && !write_failed_ ? POLLOUT : 0)), 0};
      ::poll(&p, 1, 20);
    }
    if (cork) ::setsockopt(fd_, IPPROTO_TCP, TCP_CORK, &zero, sizeof(zero));
    written_ += off;
  }

  // Reads until the server closes the connection or `limit` passes.
  void readUntilClosed(std::chrono::milliseconds limit) {
    pump("", [] { return false; }, limit);
  }

  bool closed() const { return closed_; }
  size_t written() const { return written_; }
  const std::vector<Frame>& frames() const { return frames_; }
  std::optional<uint32_t> goawayCode() const {
    for (const auto& f : frames_) {
      if (f.type == kGoaway && f.payload.size() >= 8) {
        auto* p = reinterpret_cast<const unsigned char*>(f.payload.data());
        return (uint32_t{p[4]} << 24) | (uint32_t{p[5]} << 16) | (uint32_t{p[6]} << 8) | p[7];
      }
    }
    return std::nullopt;
  }
  // The :status of the response on `stream`, when the server encoded it as a static-table
  // index (nghttp2 does for 200, 400, 404, 500...: 0x88 is 200).
  std::optional<uint8_t> firstHeaderByte(uint32_t stream) const {
    for (const auto& f : frames_) {
      if (f.type == kHeaders && f.stream == stream && !f.payload.empty()) {
        return static_cast<uint8_t>(f.payload[0]);
      }
    }
    return std::nullopt;
  }

 private:
  void readAvailable() {
    char buf[16384];
    for (;;) {
      int n = SSL_read(ssl_, buf, sizeof(buf));
      if (n > 0) {
        in_.append(buf, static_cast<size_t>(n));
        continue;
      }
      int err = SSL_get_error(ssl_, n);
      if (err != SSL_ERROR_WANT_READ && err != SSL_ERROR_WANT_WRITE) {
        closed_ = true;  // EOF, close_notify or a reset: the server is gone
        ERR_clear_error();
      }
      break;
    }
    while (in_.size() >= 9) {
      auto* p = reinterpret_cast<const unsigned char*>(in_.data());
      size_t len = (size_t{p[0]} << 16) | (size_t{p[1]} << 8) | p[2];
      if (in_.size() < 9 + len) break;
      Frame f;
      f.type = p[3];
      f.flags = p[4];
      f.stream = ((uint32_t{p[5]} << 24) | (uint32_t{p[6]} << 16) | (uint32_t{p[7]} << 8) | p[8]) &
                 0x7fffffff;
      f.payload = in_.substr(9, len);
      in_.erase(0, 9 + len);
      frames_.push_back(std::move(f));
    }
  }

  int fd_ = -1;
  SSL* ssl_ = nullptr;
  std::string in_;
  std::vector<Frame> frames_;
  bool closed_ = false;
  bool write_failed_ = false;
  size_t written_ = 0;
};

// Sockets in this network namespace from `local_ip` to `remote_ip:remote_port`, any state
// (/proc/net/tcp: little-endian IPv4, big-endian port, both hex).
int socketsBetween(const std::string& local_ip, const std::string& remote_ip, uint16_t remote_port) {
  auto hexIp = [](const std::string& ip) {
    in_addr a{};
    inet_pton(AF_INET, ip.c_str(), &a);
    char buf[9];
    std::snprintf(buf, sizeof(buf), "%08X", a.s_addr);
    return std::string(buf);
  };
  char port[5];
  std::snprintf(port, sizeof(port), "%04X", remote_port);
  std::string local = hexIp(local_ip) + ":", remote = hexIp(remote_ip) + ":" + port;
  std::ifstream in("/proc/self/net/tcp");
  std::string line;
  int count = 0;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string sl, l, r;
    fields >> sl >> l >> r;
    if (l.rfind(local, 0) == 0 && r == remote) ++count;
  }
  return count;
}

size_t openDescriptors() {
  size_t n = 0;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (::readdir(d) != nullptr) ++n;
    ::closedir(d);
  }
  return n;
}

long rssKiB() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

// A workload at 127.0.2.10:`port` whose accept queue is full: the kernel drops further SYNs,
// so a connect to it stays pending. Closes everything on destruction.
class StuckWorkload {
 public:
  explicit StuckWorkload(uint16_t port) {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    int on = 1;
    ::setsockopt(listener_, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    inet_pton(AF_INET, "127.0.2.10", &addr.sin_addr);
    addr.sin_port = htons(port);
    ok_ = ::bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
          ::listen(listener_, 0) == 0;
    for (int i = 0; i < 2; ++i) {  // the first fills the queue; the second one's SYN is dropped
      int f = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
      ::connect(f, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
      fillers_.push_back(f);
    }
  }
  ~StuckWorkload() {
    for (int f : fillers_) ::close(f);
    ::close(listener_);
  }
  bool ok() const { return ok_; }

 private:
  int listener_ = -1;
  bool ok_ = false;
  std::vector<int> fillers_;
};

class HboneFloodTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ::signal(SIGPIPE, SIG_IGN);  // the server closes while the attacker still writes
    startNode("");
    app_ = std::make_unique<AppServer>("127.0.2.10", kAppPort, AppServer::echo);
    tls_ = std::make_unique<LabClientTls>(files_);
    good_ctx_ = tls_->context("client");
    ASSERT_NE(good_ctx_, nullptr);
    auto other = tls_->context("other");
    ASSERT_NE(other, nullptr);
    other_ctx_ = other;
  }

  void startNode(const std::string& extra) {
    n2_.reset();
    n2_ = std::make_unique<Node>(files_, "n2", extra);
    ASSERT_TRUE(n2_->ok());
  }

  // A client that passed the handshake and sent the preface.
  std::unique_ptr<RawH2Client> attacker() {
    auto c = std::make_unique<RawH2Client>();
    EXPECT_TRUE(c->connect("127.0.1.10", "127.0.2.10", good_ctx_->native_handle()));
    return c;
  }

  // A well-formed, authorized request on its own connection is relayed end to end; by
  // default from the attackers' identity (sa client), `other`: from sa other at 127.0.1.11.
  void expectServing(bool other = false) {
    RawH2Client c;
    ASSERT_TRUE(c.connect(other ? "127.0.1.11" : "127.0.1.10", "127.0.2.10",
                          other ? other_ctx_->native_handle() : good_ctx_->native_handle()));
    std::string req = kPreface + frame(kSettings, 0, 0, "") +
                      frame(kHeaders, kEndHeaders, 1, connectBlock("127.0.2.10:8080"));
    c.pump(req, [&] { return c.firstHeaderByte(1).has_value(); });
    ASSERT_EQ(c.firstHeaderByte(1), 0x88) << "no 200 for a legitimate CONNECT";
    c.pump(frame(kData, 0, 1, "still serving"), [&] {
      for (const auto& f : c.frames()) {
        if (f.type == kData && f.stream == 1 && f.payload == "still serving") return true;
      }
      return false;
    });
    bool echoed = false;
    for (const auto& f : c.frames()) echoed |= f.type == kData && f.payload == "still serving";
    EXPECT_TRUE(echoed);
  }

  // Read from /metrics, like an operator would.
  double goaways(const std::string& code) {
    return n2_->metric("ferry_hbone_goaway_sent_total{code=\"" + code + "\"}");
  }
  double resetsUnanswered() { return n2_->metric("ferry_hbone_streams_reset_unanswered_total"); }

  LabFiles files_;
  std::unique_ptr<Node> n2_;
  std::unique_ptr<AppServer> app_;
  std::unique_ptr<LabClientTls> tls_;
  std::shared_ptr<asio::ssl::context> good_ctx_, other_ctx_;
};

TEST_F(HboneFloodTest, RapidResetGetsEnhanceYourCalmAndSparesTheWorkload) {
  expectServing();  // warm: the baseline below includes a served connection
  ASSERT_TRUE(waitFor([&] { return n2_->stats().active[static_cast<size_t>(session::Direction::kInbound)].load() == 0; }));
  size_t fds_before = openDescriptors();
  long rss_before = rssKiB();
  size_t accepted_before = app_->accepted();

  constexpr uint32_t kStreams = 20'000;
  std::string flood = kPreface + frame(kSettings, 0, 0, "");
  for (uint32_t i = 0; i < kStreams; ++i) {
    uint32_t id = 2 * i + 1;
    flood += frame(kHeaders, kEndHeaders, id, connectBlock("127.0.2.10:8080"));
    flood += rstStream(id);
  }
  auto c = attacker();
  c->pump(flood, nullptr);
  c->readUntilClosed(std::chrono::seconds(10));

  EXPECT_EQ(c->goawayCode(), kEnhanceYourCalm);
  EXPECT_TRUE(c->closed()) << "the connection must be closed after the GOAWAY";
  EXPECT_TRUE(waitFor([&] { return goaways("enhance_your_calm") == 1; }));
  // The streams' own tasks finish after the connection closed.
  EXPECT_TRUE(waitFor([&] { return resetsUnanswered() >= 100; }));
  size_t connects = app_->accepted() - accepted_before;
  std::printf("[ measure  ] rapid reset: %u streams sent (%zu bytes taken), %zu upstream connections "
              "accepted by the workload, %.0f resets counted\n",
              kStreams, c->written(), connects,
              resetsUnanswered());
  // hbone.max_premature_resets (100) plus the connects in flight when it tripped.
  EXPECT_LT(connects, 200u) << "every reset stream was connected upstream anyway";

  // Nothing is left behind: no descriptors, no runaway memory.
  ASSERT_TRUE(waitFor([&] { return n2_->stats().active[static_cast<size_t>(session::Direction::kInbound)].load() == 0; }));
  EXPECT_TRUE(waitFor([&] { return openDescriptors() <= fds_before + 4; }))
      << openDescriptors() << " descriptors open, " << fds_before << " before";
  long rss_after = rssKiB();
  std::printf("[ measure  ] rapid reset: RSS %ld KiB before, %ld KiB after; descriptors %zu before, "
              "%zu after\n", rss_before, rss_after, fds_before, openDescriptors());
  EXPECT_LT(rss_after - rss_before, 64 * 1024) << "RSS grew by more than 64 MiB";
  // The attacker's identity is held to a shared connect budget for a while (the next test);
  // another client is served at once.
  expectServing(/*other=*/true);
}

// The attacker of the test above reconnects: each new connection used to get
// hbone.max_pending_connects (16) upstream connects before it was closed too, about 480 a
// second from one identity. Now the identity shares one budget of 16 connects a second
// across its connections for 30 s after a close for rapid reset.
TEST_F(HboneFloodTest, ReconnectingRapidResetIsBoundedPerIdentityAcrossConnections) {
  expectServing();
  const size_t accepted_before = app_->accepted();
  constexpr int kConnections = 20;
  constexpr uint32_t kPairs = 200;  // beyond hbone.max_premature_resets (100)
  std::string flood = kPreface + frame(kSettings, 0, 0, "");
  for (uint32_t i = 0; i < kPairs; ++i) {
    flood += frame(kHeaders, kEndHeaders, 2 * i + 1, connectBlock("127.0.2.10:8080"));
    flood += rstStream(2 * i + 1);
  }
  auto t0 = std::chrono::steady_clock::now();
  int calmed = 0;
  for (int i = 0; i < kConnections; ++i) {
    auto c = attacker();
    c->pump(flood, nullptr);
    c->readUntilClosed(std::chrono::milliseconds(100));
    calmed += c->goawayCode() == kEnhanceYourCalm ? 1 : 0;
  }
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(calmed, 1) << "the first connection was closed for rapid reset";
  // The workload's accepts settle once the last connects ended.
  size_t connects = 0;
  waitFor([&] {
    size_t now = app_->accepted() - accepted_before;
    bool settled = now == connects;
    connects = now;
    return settled;
  });
  const double penalized = n2_->metric("ferry_hbone_streams_penalized_total");
  std::printf("[ measure  ] rapid reset over %d connections in %.2f s: %zu upstream connects (%.0f a second), "
              "%d closed with enhance_your_calm, %.0f streams refused by the identity's budget\n",
              kConnections, elapsed, connects, connects / elapsed, calmed, penalized);
  // The first connection's 16 in flight, then 16 a second shared by all the others (and the
  // connects in flight at the moment the penalty began). Without it: 16 per connection.
  EXPECT_LE(connects, 16 + 16 * (elapsed + 1) + 16) << "the identity's connects are not bounded across connections";
  EXPECT_LT(connects, static_cast<size_t>(kConnections) * 16 / 2);
  EXPECT_GT(penalized, 0);

  // Another identity is not touched by the penalty; the attacker's own is served again at
  // the budget's pace (16 a second).
  expectServing(/*other=*/true);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // one token: 62.5 ms
  expectServing();
}

TEST_F(HboneFloodTest, ResetBeforeTheUpstreamConnectCompletesLeavesNoUpstreamConnection) {
  // A workload whose accept queue is full: the kernel drops the SYN of ferryd's connect, so
  // the connect stays pending for as long as timeouts.connect allows (60 s here).
  startNode("timeouts: {connect: 60s}\n");
  StuckWorkload workload(8083);
  ASSERT_TRUE(workload.ok());

  auto c = attacker();
  c->pump(kPreface + frame(kSettings, 0, 0, "") +
              frame(kHeaders, kEndHeaders, 1, connectBlock("127.0.2.10:8083")),
          [&] { return socketsBetween("127.0.1.10", "127.0.2.10", 8083) == 1; });
  ASSERT_EQ(socketsBetween("127.0.1.10", "127.0.2.10", 8083), 1) << "ferryd never started the connect";

  c->pump(rstStream(1), nullptr);
  EXPECT_TRUE(waitFor([&] { return socketsBetween("127.0.1.10", "127.0.2.10", 8083) == 0; },
                      std::chrono::seconds(5)))
      << "the upstream connect outlived the reset of its stream";
  EXPECT_TRUE(waitFor([&] { return resetsUnanswered() == 1; }));
  EXPECT_EQ(n2_->closed(session::Direction::kInbound, session::CloseReason::kPeerReset), 1u);

  // The connection itself is fine: the next CONNECT on it is served.
  c->pump(frame(kHeaders, kEndHeaders, 3, connectBlock("127.0.2.10:8080")),
          [&] { return c->firstHeaderByte(3).has_value(); });
  EXPECT_EQ(c->firstHeaderByte(3), 0x88);
  EXPECT_FALSE(c->closed());
}

TEST_F(HboneFloodTest, PendingUpstreamConnectsPerConnectionAreBounded) {
  startNode("timeouts: {connect: 60s}\nhbone: {max_pending_connects: 2}\n");
  StuckWorkload workload(8084);
  ASSERT_TRUE(workload.ok());
  auto c = attacker();
  std::string req = kPreface + frame(kSettings, 0, 0, "");
  for (uint32_t id : {1, 3, 5, 7, 9}) {
    req += frame(kHeaders, kEndHeaders, id, connectBlock("127.0.2.10:8084"));
  }
  // Three of the five wait for a slot (counted when they start waiting).
  c->pump(req, [&] { return n2_->metric("ferry_hbone_connect_waits_total") == 3; });
  ASSERT_EQ(n2_->metric("ferry_hbone_connect_waits_total"), 3);
  EXPECT_EQ(socketsBetween("127.0.1.10", "127.0.2.10", 8084), 2);

  // A reset frees its slot for the next in line; resetting all leaves nothing behind.
  c->pump(rstStream(1), nullptr);
  EXPECT_TRUE(waitFor([&] { return resetsUnanswered() == 1; }));
  EXPECT_TRUE(waitFor([&] { return socketsBetween("127.0.1.10", "127.0.2.10", 8084) == 2; }));
  c->pump(rstStream(3) + rstStream(5) + rstStream(7) + rstStream(9), nullptr);
  EXPECT_TRUE(waitFor([&] { return resetsUnanswered() == 5; }));
  EXPECT_TRUE(waitFor([&] { return socketsBetween("127.0.1.10", "127.0.2.10", 8084) == 0; }));
  EXPECT_FALSE(c->closed()) << "five resets are no rapid reset";
}

TEST_F(HboneFloodTest, MoreThanEightContinuationFramesGetGoawayAndCloseAtOnce) {
  auto c = attacker();
  std::string req = kPreface + frame(kSettings, 0, 0, "") + frame(kHeaders, 0, 1, literal(2, "CONNECT"));
  for (int i = 0; i < 20; ++i) req += frame(kContinuation, 0, 1, literalNew("x-pad", "a"));
  // Not asserted as a time: "well under the 30 s keepalive" is the 10 s read limit.
  c->pump(req, nullptr);
  c->readUntilClosed(std::chrono::seconds(10));
  EXPECT_EQ(c->goawayCode(), kEnhanceYourCalm);
  EXPECT_TRUE(c->closed()) << "the connection was held open after too many CONTINUATION frames";
  EXPECT_TRUE(waitFor([&] { return goaways("enhance_your_calm") == 1; }));
  EXPECT_EQ(app_->accepted(), 0u);
  expectServing();
}

TEST_F(HboneFloodTest, HeaderBlockOverTheHardCapGetsGoawayAndClose) {
  // Five frames (within the CONTINUATION limit) of small headers, about 20 KiB decoded each:
  // past the 16 KiB list cap the stream alone would be refused; past 64 KiB it is a flood.
  std::string headers;
  while (headers.size() < 16'000) headers += literalNew("x-pad", std::string(100, 'a'));
  auto c = attacker();
  std::string req = kPreface + frame(kSettings, 0, 0, "") +
                    frame(kHeaders, 0, 1, connectBlock("127.0.2.10:8080") + headers);
  for (int i = 0; i < 4; ++i) req += frame(kContinuation, 0, 1, headers);
  c->pump(req, nullptr);
  c->readUntilClosed(std::chrono::seconds(10));
  EXPECT_EQ(c->goawayCode(), kEnhanceYourCalm);
  EXPECT_TRUE(c->closed()) << "the connection was held open after an oversized header block";
  EXPECT_EQ(app_->accepted(), 0u);
  expectServing();
}

TEST_F(HboneFloodTest, PingFloodGetsGoawayThenClose) {
  auto c = attacker();
  c->pump(kPreface + frame(kSettings, 0, 0, ""), nullptr, std::chrono::milliseconds(200));
  std::string flood;
  for (int i = 0; i < 3000; ++i) flood += frame(kPing, 0, 0, "12345678");  // ~51 KB
  c->pump(flood, nullptr, std::chrono::seconds(10), /*cork=*/true);
  c->readUntilClosed(std::chrono::seconds(10));
  EXPECT_EQ(c->goawayCode(), kEnhanceYourCalm);
  EXPECT_TRUE(c->closed());
  EXPECT_TRUE(waitFor([&] { return goaways("enhance_your_calm") == 1; }));
  expectServing();
}

TEST_F(HboneFloodTest, SettingsFloodGetsGoawayThenClose) {
  auto c = attacker();
  std::string flood = kPreface;
  for (int i = 0; i < 3000; ++i) flood += frame(kSettings, 0, 0, "");  // 1,800 in one record
  c->pump(flood, nullptr, std::chrono::seconds(10), /*cork=*/true);
  c->readUntilClosed(std::chrono::seconds(10));
  EXPECT_EQ(c->goawayCode(), kEnhanceYourCalm);
  EXPECT_TRUE(c->closed());
  EXPECT_TRUE(waitFor([&] { return goaways("enhance_your_calm") == 1; }));
  expectServing();
}

TEST_F(HboneFloodTest, InvalidFrameGetsProtocolErrorGoawayAndClose) {
  // A frame nghttp2 rejects itself (DATA on stream 0): its own GOAWAY must leave too.
  auto c = attacker();
  c->pump(kPreface + frame(kSettings, 0, 0, "") + frame(kData, kEndStream, 0, "x"), nullptr);
  c->readUntilClosed(std::chrono::seconds(10));
  EXPECT_EQ(c->goawayCode(), kProtocolError);
  EXPECT_TRUE(c->closed());
  EXPECT_TRUE(waitFor([&] { return goaways("protocol_error") == 1; }));
  expectServing();
}

}  // namespace
}  // namespace ferry::testing
