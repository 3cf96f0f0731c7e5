// Two ferryd instances on loopback with real TLS and HBONE between them: byte-exact data,
// concurrency, half-close, resets, refusals, timeouts, pooling, backpressure.
#include <arpa/inet.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "proxy/identity/ca.h"
#include "tests/integration/loopback_lab.h"

namespace ferry::testing {
namespace {

using session::CloseReason;
using session::Direction;

constexpr uint16_t kAppPort = 8080;

std::string randomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (size_t i = 0; i < n; i += 4) {
    uint32_t v = rng();
    std::memcpy(&s[i], &v, std::min<size_t>(4, n - i));
  }
  return s;
}

class RelayTest : public LoopbackNodesTest {};

TEST_F(RelayTest, EchoesSixtyFourMiBByteExactAndServerSeesClientPodAddress) {
  startNodes();
  AppServer app("127.0.2.10", kAppPort, AppServer::echo);
  const size_t kSize = 64u << 20;
  std::string payload = randomBytes(kSize, 1);
  int fd = connectOutbound("127.0.1.10", "127.0.2.10", kAppPort);
  ASSERT_GE(fd, 0);
  auto start = Clock::now();
  std::thread writer([&] {
    EXPECT_TRUE(sendAll(fd, payload.data(), payload.size()));
    ::shutdown(fd, SHUT_WR);
  });
  std::string echoed;
  EXPECT_TRUE(recvAll(fd, echoed));
  writer.join();
  double secs = std::chrono::duration<double>(Clock::now() - start).count();
  ::close(fd);
  ASSERT_EQ(echoed.size(), payload.size());
  EXPECT_TRUE(echoed == payload) << "echoed bytes differ";
  // Reported, never asserted: speed is the benchmarks' business.
  std::printf("[ measure  ] 64 MiB echoed through two ferryd in %.3f s (%.1f MiB/s each way)\n",
              secs, 64.0 / secs);
  ASSERT_EQ(app.peers().size(), 1u);
  EXPECT_EQ(app.peers()[0], "127.0.1.10");
  EXPECT_TRUE(waitFor([&] { return n1_->closed(Direction::kOutbound, CloseReason::kOk) == 1; }));
  EXPECT_TRUE(waitFor([&] { return n2_->closed(Direction::kInbound, CloseReason::kOk) == 1; }));
  EXPECT_EQ(n2_->stats().hbone_streams_accepted.load(), 1u);
}

TEST_F(RelayTest, ThousandConcurrentConnectionsAllEchoAndShareFewTunnels) {
  startNodes();
  AppServer app("127.0.2.10", kAppPort, AppServer::echo);
  constexpr int kConns = 1000;
  std::vector<int> fds(kConns, -1);
  auto start = Clock::now();
  // All connected and holding a stream before any finishes: truly concurrent.
  for (int i = 0; i < kConns; ++i) {
    fds[i] = connectOutbound("127.0.1.10", "127.0.2.10", kAppPort);
    ASSERT_GE(fds[i], 0) << "connection " << i;
  }
  std::atomic<int> good{0};
  std::vector<std::thread> threads;
  constexpr int kThreads = 20;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = t; i < kConns; i += kThreads) {
        std::string msg = "connection " + std::to_string(i) + " " + randomBytes(1000, i);
        setRecvTimeout(fds[i], std::chrono::seconds(30));
        if (!sendAll(fds[i], msg.data(), msg.size())) continue;
        std::string back(msg.size(), '\0');
        if (recvExact(fds[i], back.data(), back.size()) && back == msg) ++good;
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int fd : fds) ::close(fd);
  double secs = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf("[ measure  ] 1000 concurrent connections opened and echoed in %.3f s\n", secs);
  EXPECT_EQ(good.load(), kConns);
  EXPECT_EQ(app.accepted(), static_cast<size_t>(kConns));
  // 1000 streams at 100 per connection: 10 tunnels, not 1000 handshakes.
  EXPECT_EQ(n1_->stats().hbone_connections_opened.load(), 10u);
  EXPECT_TRUE(waitFor([&] { return n1_->closed(Direction::kOutbound, CloseReason::kOk) == kConns; }));
}

TEST_F(RelayTest, BurstOfFirstConnectionsWaitsOnOneHandshakePerWorker) {
  startNodes();
  AppServer app("127.0.2.10", kAppPort, AppServer::echo);
  constexpr int kBurst = 50;
  std::vector<std::thread> threads;
  std::atomic<int> good{0};
  for (int i = 0; i < kBurst; ++i) {
    threads.emplace_back([&] {
      int fd = connectOutbound("127.0.1.10", "127.0.2.10", kAppPort);
      if (fd < 0) return;
      const char msg[] = "ping";
      char back[4];
      if (sendAll(fd, msg, 4) && recvExact(fd, back, 4) && std::memcmp(msg, back, 4) == 0) ++good;
      ::close(fd);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(good.load(), kBurst);
  // The burst is placed over both workers, and each worker's pool dials once.
  EXPECT_EQ(n1_->server().workerCount(), 2u);
  EXPECT_EQ(n1_->stats().hbone_connections_opened.load(), 2u);
  EXPECT_EQ(n2_->stats().hbone_connections_accepted.load(), 2u);
}

// Four long connections of one pod pair (iperf3 -P 4): two per worker on the client node,
// over one tunnel per worker, and the two tunnels on different workers of the server node.
TEST_F(RelayTest, ConcurrentConnectionsOfOnePairAreSpreadOverTheWorkersOfBothNodes) {
  startNodes();
  AppServer app("127.0.2.10", kAppPort, AppServer::echo);
  ASSERT_EQ(n1_->server().workerCount(), 2u);
  auto load = [](Node& n, int w) { return n.metric("ferry_worker_load{worker=\"" + std::to_string(w) + "\"}"); };
  std::vector<int> fds;
  for (int i = 0; i < 4; ++i) {
    int fd = connectOutbound("127.0.1.10", "127.0.2.10", kAppPort);
    ASSERT_GE(fd, 0);
    fds.push_back(fd);
    // Each connection is proven end to end (its stream is open on n2) before the next.
    std::string msg = "stream " + std::to_string(i);
    std::string back(msg.size(), '\0');
    ASSERT_TRUE(sendAll(fd, msg.data(), msg.size()) && recvExact(fd, back.data(), back.size()));
    EXPECT_EQ(back, msg);
  }
  EXPECT_EQ(load(*n1_, 0), 2);
  EXPECT_EQ(load(*n1_, 1), 2);
  // Two tunnels: the connections really run on both workers' pools, not only count there.
  EXPECT_EQ(n1_->stats().hbone_connections_opened.load(), 2u);
  // n2: a tunnel and its two streams on each worker.
  EXPECT_TRUE(waitFor([&] { return load(*n2_, 0) == 3 && load(*n2_, 1) == 3; }))
      << "n2 loads " << load(*n2_, 0) << " and " << load(*n2_, 1);
  for (int fd : fds) ::close(fd);
  // Connections gone, their load too; n2 keeps one pooled tunnel per worker.
  EXPECT_TRUE(waitFor([&] { return load(*n1_, 0) == 0 && load(*n1_, 1) == 0; }));
  EXPECT_TRUE(waitFor([&] { return load(*n2_, 0) == 1 && load(*n2_, 1) == 1; }));
}

TEST_F(RelayTest, ClientHalfCloseReachesServerAndAnswerStillFlows) {
  startNodes();
  // The server reads until the client's FIN, then answers and closes.
  AppServer app("127.0.2.10", kAppPort, [](int fd) {
    std::string got;
    recvAll(fd, got);
    std::string answer = "got " + std::to_string(got.size()) + " bytes";
    sendAll(fd, answer.data(), answer.size());
    // the AppServer closes fd when this returns
  });
  int fd = connectOutbound("127.0.1.10", "127.0.2.10", kAppPort);
  ASSERT_GE(fd, 0);
  std::string msg(100000, 'x');
  ASSERT_TRUE(sendAll(fd, msg.data(), msg.size()));
  ::shutdown(fd, SHUT_WR);
  std::string answer;
  setRecvTimeout(fd, std::chrono::seconds(10));
  EXPECT_TRUE(recvAll(fd, answer));
  EXPECT_EQ(answer, "got 100000 bytes");
  ::close(fd);
}

TEST_F(RelayTest, ServerHalfCloseReachesClientAndClientCanStillSend) {
  startNodes();
  std::atomic<bool> server_got_late_data{false};
  AppServer app("127.0.2.10", kAppPort, [&](int fd) {
    sendAll(fd, "hello", 5);
    ::shutdown(fd, SHUT_WR);  // server is done talking
    std::string got;
    recvAll(fd, got);
    server_got_late_data = got == "after your FIN";
    // the AppServer closes fd when this returns
  });
  int fd = connectOutbound("127.0.1.10", "127.0.2.10", kAppPort);
  ASSERT_GE(fd, 0);
  std::string greeting;
  setRecvTimeout(fd, std::chrono::seconds(10));
  EXPECT_TRUE(recvAll(fd, greeting));  // EOF arrives: END_STREAM became a FIN
  EXPECT_EQ(greeting, "hello");
  std::string late = "after your FIN";
  EXPECT_TRUE(sendAll(fd, late.data(), late.size()));
  ::shutdown(fd, SHUT_WR);
  ::close(fd);
  EXPECT_TRUE(waitFor([&] { return server_got_late_data.load(); }));
}

// A server at `server_ip` reads the request and closes with a RST: the client (pod 1)
// must see a RST too, never an EOF.
void expectServerResetSeenByClient(const char* server_ip) {
  AppServer app(server_ip, kAppPort, [](int fd) {
    char buf[16];
    ::recv(fd, buf, sizeof(buf), 0);
    setAbortOnClose(fd);  // RST when the AppServer closes it
  });
  int fd = connectOutbound("127.0.1.10", server_ip, kAppPort);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(sendAll(fd, "boom", 4));
  setRecvTimeout(fd, std::chrono::seconds(10));
  char buf[16];
  ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
  EXPECT_EQ(n, -1);
  EXPECT_EQ(errno, ECONNRESET) << "expected a TCP RST, got " << (n == 0 ? "EOF" : strerror(errno));
  ::close(fd);
}

TEST_F(RelayTest, ServerResetReachesClientAsReset) {
  startNodes();
  expectServerResetSeenByClient("127.0.2.10");
  EXPECT_TRUE(waitFor([&] { return n2_->closed(Direction::kInbound, CloseReason::kUpstreamReset) +
                                       n2_->closed(Direction::kInbound, CloseReason::kDownstreamReset) ==
                                   1; }));
}

TEST_F(RelayTest, ClientResetReachesServerAsReset) {
  startNodes();
  std::atomic<int> server_errno{0};
  std::atomic<bool> server_got_hi{false};
  std::atomic<bool> server_done{false};
  AppServer app("127.0.2.10", kAppPort, [&](int fd) {
    char buf[16];
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);  // "hi"
    server_got_hi = n == 2;
    setRecvTimeout(fd, std::chrono::seconds(10));
    n = ::recv(fd, buf, sizeof(buf), 0);
    server_errno = n < 0 ? errno : 0;
    server_done = true;
    // the AppServer closes fd when this returns
  });
  int fd = connectOutbound("127.0.1.10", "127.0.2.10", kAppPort);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(sendAll(fd, "hi", 2));
  // Reset only once "hi" reached the application, so that the reset is what it reads next.
  ASSERT_TRUE(waitFor([&] { return server_got_hi.load(); }));
  abortClose(fd);
  ASSERT_TRUE(waitFor([&] { return server_done.load(); }));
  EXPECT_EQ(server_errno.load(), ECONNRESET);
}

TEST_F(RelayTest, RefusedUpstreamIsSeenAsResetNeverAsEof) {
  startNodes();
  // Nothing listens on s1:9.
  int fd = connectOutbound("127.0.1.10", "127.0.2.10", 9);
  ASSERT_GE(fd, 0);
  setRecvTimeout(fd, std::chrono::seconds(10));
  char buf[16];
  ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
  EXPECT_EQ(n, -1);
  EXPECT_EQ(errno, ECONNRESET);
  ::close(fd);
  EXPECT_TRUE(waitFor([&] { return n1_->closed(Direction::kOutbound, CloseReason::kTunnelRefused) == 1; }));
  EXPECT_EQ(n2_->stats().hbone_streams_rejected.load(), 1u);
}

// One echo through pod 1 to an echo server at `server_ip`, then silence: ferryd (idle
// timeout 1 s) must close the client's connection well before the 15 s receive timeout.
void expectIdleConnectionClosed(const char* server_ip) {
  AppServer app(server_ip, kAppPort, AppServer::echo);
  int fd = connectOutbound("127.0.1.10", server_ip, kAppPort);
  ASSERT_GE(fd, 0);
  char back[2];
  ASSERT_TRUE(sendAll(fd, "hi", 2));
  ASSERT_TRUE(recvExact(fd, back, 2));
  setRecvTimeout(fd, std::chrono::seconds(15));
  auto start = Clock::now();
  char buf[16];
  ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
  EXPECT_LE(n, 0) << "the idle connection must be closed";
  EXPECT_NE(errno, EAGAIN) << "recv timed out instead of seeing the idle close";
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(15));
  ::close(fd);
}

TEST_F(RelayTest, IdleConnectionIsClosedAfterIdleTimeout) {
  startNodes("timeouts: {idle: 1s}\n");
  expectIdleConnectionClosed("127.0.2.10");
  EXPECT_TRUE(waitFor([&] {
    return n1_->closed(Direction::kOutbound, CloseReason::kIdleTimeout) +
               n2_->closed(Direction::kInbound, CloseReason::kIdleTimeout) >= 1;
  }));
}

TEST_F(RelayTest, HboneConnectTimeoutResetsClientAndNamesPort15008) {
  startNodes("timeouts: {connect: 1s}\n");
  // b1 (127.0.4.10, node n3) "has" an HBONE port whose accept queue is full: SYNs are
  // dropped, so connecting times out instead of being refused.
  int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(15008);
  inet_pton(AF_INET, "127.0.4.10", &a.sin_addr);
  ASSERT_EQ(::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0) << strerror(errno);
  ASSERT_EQ(::listen(lfd, 0), 0);
  std::vector<int> fillers;
  for (int i = 0; i < 4; ++i) {
    int f = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    ::connect(f, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    fillers.push_back(f);
  }
  // The real check, with warn-level logging so the error text is visible.
  n1_.reset();
  ::testing::internal::CaptureStderr();
  n1_ = std::make_unique<Node>(files_, "n1", "timeouts: {connect: 1s}\nlog_level: warn\n");
  int fd = connectOutbound("127.0.1.10", "127.0.4.10", kAppPort);
  ASSERT_GE(fd, 0);
  setRecvTimeout(fd, std::chrono::seconds(15));
  char buf[16];
  ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
  int err = errno;
  ASSERT_TRUE(waitFor([&] { return n1_->closed(Direction::kOutbound, CloseReason::kConnectTimeout) == 1; }));
  n1_.reset();
  std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(n, -1);
  EXPECT_EQ(err, ECONNRESET);
  EXPECT_NE(log.find("timed out"), std::string::npos) << log;
  EXPECT_NE(log.find("HBONE port 15008"), std::string::npos) << log;
  ::close(fd);
  for (int f : fillers) ::close(f);
  ::close(lfd);
}

TEST_F(RelayTest, PassthroughToNonMeshDestinationKeepsPodAddress) {
  startNodes();
  AppServer app("127.0.3.10", kAppPort, AppServer::echo);
  int fd = connectOutbound("127.0.1.10", "127.0.3.10", kAppPort);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(sendAll(fd, "plain", 5));
  char back[5];
  ASSERT_TRUE(recvExact(fd, back, 5));
  ::close(fd);
  ASSERT_EQ(app.peers().size(), 1u);
  EXPECT_EQ(app.peers()[0], "127.0.1.10");
  EXPECT_EQ(n1_->stats().passthrough_connections.load(), 1u);
  EXPECT_EQ(n1_->stats().hbone_connections_opened.load(), 0u);
}

TEST_F(RelayTest, PassthroughIdleConnectionIsClosedAfterIdleTimeout) {
  startNodes("timeouts: {idle: 1s}\n");
  expectIdleConnectionClosed("127.0.3.10");
  EXPECT_TRUE(waitFor([&] { return n1_->closed(Direction::kOutbound, CloseReason::kIdleTimeout) == 1; }));
  EXPECT_EQ(n1_->stats().passthrough_connections.load(), 1u);
}

TEST_F(RelayTest, PassthroughServerResetReachesClientAsReset) {
  startNodes();
  expectServerResetSeenByClient("127.0.3.10");
  EXPECT_TRUE(waitFor([&] { return n1_->closed(Direction::kOutbound, CloseReason::kUpstreamReset) == 1; }));
}

TEST_F(RelayTest, UnknownSourceToMeshDestinationIsResetNotSentInPlaintext) {
  startNodes();
  AppServer app("127.0.2.10", kAppPort, AppServer::echo);
  // 127.0.1.99 is no workload: ferryd has no identity to present for it.
  int fd = connectOutbound("127.0.1.99", "127.0.2.10", kAppPort);
  ASSERT_GE(fd, 0);
  setRecvTimeout(fd, std::chrono::seconds(10));
  char buf[4];
  EXPECT_EQ(::recv(fd, buf, sizeof(buf), 0), -1);
  EXPECT_EQ(errno, ECONNRESET);
  ::close(fd);
  EXPECT_EQ(app.accepted(), 0u);
  EXPECT_TRUE(waitFor([&] { return n1_->closed(Direction::kOutbound, CloseReason::kUnknownSource) == 1; }));
}

TEST_F(RelayTest, PermissivePlaintextIsForwardedFromClientAddress) {
  startNodes();
  AppServer app("127.0.2.10", kAppPort, AppServer::echo);
  int fd = connectCaptured("127.0.1.10", "127.0.2.1", 15006, "127.0.2.10", kAppPort);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(sendAll(fd, "abc", 3));
  char back[3];
  ASSERT_TRUE(recvExact(fd, back, 3));
  ::close(fd);
  ASSERT_EQ(app.peers().size(), 1u);
  EXPECT_EQ(app.peers()[0], "127.0.1.10");
}

TEST_F(RelayTest, StrictWorkloadRefusesPlaintextWithReset) {
  startNodes();
  AppServer app("127.0.2.11", kAppPort, AppServer::echo);
  int fd = connectCaptured("127.0.1.10", "127.0.2.1", 15006, "127.0.2.11", kAppPort);
  ASSERT_GE(fd, 0);
  setRecvTimeout(fd, std::chrono::seconds(10));
  char buf[4];
  EXPECT_EQ(::recv(fd, buf, sizeof(buf), 0), -1);
  EXPECT_EQ(errno, ECONNRESET);
  ::close(fd);
  EXPECT_EQ(app.accepted(), 0u);
  EXPECT_TRUE(waitFor([&] { return n2_->closed(Direction::kPlaintext, CloseReason::kStrictPlaintext) == 1; }));
  // The same workload is reachable through HBONE.
  int fd2 = connectOutbound("127.0.1.10", "127.0.2.11", kAppPort);
  ASSERT_GE(fd2, 0);
  ASSERT_TRUE(sendAll(fd2, "mtls", 4));
  char back[4];
  EXPECT_TRUE(recvExact(fd2, back, 4));
  ::close(fd2);
}

TEST_F(RelayTest, SlowReaderBoundsWhatTheWriterCanPushIn) {
  startNodes();
  std::atomic<bool> release{false};
  std::atomic<size_t> drained{0};
  AppServer app("127.0.2.10", kAppPort, [&](int fd) {
    // Reads nothing until released, then drains everything.
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    char buf[65536];
    for (;;) {
      ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) break;
      drained += static_cast<size_t>(n);
    }
    // the AppServer closes fd when this returns
  });
  int fd = connectOutbound("127.0.1.10", "127.0.2.10", kAppPort);
  ASSERT_GE(fd, 0);
  // Push until the kernel refuses more for a full second.
  timeval tv{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  std::string chunk(64 * 1024, 'z');
  size_t pushed = 0;
  for (;;) {
    ssize_t n = ::send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL);
    if (n <= 0) break;
    pushed += static_cast<size_t>(n);
    ASSERT_LT(pushed, 256u << 20) << "no backpressure: 256 MiB accepted while nobody reads";
  }
  std::printf("[ measure  ] writer blocked after %.1f MiB in flight (socket buffers + windows)\n",
              pushed / 1048576.0);
  // Four socket buffers on the path plus one 4 MiB stream window and ferryd's 256 KiB
  // queue: far below what an unbounded relay would swallow.
  EXPECT_LT(pushed, 48u << 20);
  release = true;
  ::shutdown(fd, SHUT_WR);
  EXPECT_TRUE(waitFor([&] { return drained.load() == pushed; }, std::chrono::seconds(20)));
  ::close(fd);
}

// A stream reset while the server side still holds received bytes for a slow application
// (here: the application resets its socket with data unread) must give those bytes' window
// back to the connection. Otherwise each such reset shrinks the 16 MiB connection window for
// good, and after a few of them every stream on the pooled connection stalls: the lost
// wake-up seen with iperf3 -P 4 (whose server closes its data sockets with data in flight).
TEST_F(RelayTest, ResetsWithUnreadDataDoNotLeakTheConnectionWindow) {
  // One worker: every stream goes over the same pooled connection, whose window is at stake.
  startNodes("workers: 1\n");
  constexpr uint16_t kSinkPort = 8081;
  std::atomic<int> rst_now{0};
  AppServer sink("127.0.2.10", kSinkPort, [&](int fd) {
    // Reads nothing; when told, resets with everything unread.
    while (rst_now.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    rst_now = 0;
    setAbortOnClose(fd);
  });
  AppServer app("127.0.2.10", kAppPort, AppServer::echo);
  std::string chunk(64 * 1024, 'x');
  size_t total = 0;
  for (int round = 0; round < 8; ++round) {
    int fd = connectOutbound("127.0.1.10", "127.0.2.10", kSinkPort);
    ASSERT_GE(fd, 0);
    timeval tv{0, 300 * 1000};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    size_t pushed = 0;
    for (;;) {
      ssize_t n = ::send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL);
      if (n <= 0) break;
      pushed += static_cast<size_t>(n);
      ASSERT_LT(pushed, 256u << 20);
    }
    total += pushed;
    rst_now = 1;
    setRecvTimeout(fd, std::chrono::seconds(10));
    char buf[16];
    EXPECT_LE(::recv(fd, buf, sizeof(buf), 0), 0);  // the reset comes through
    ::close(fd);
  }
  std::printf("[ measure  ] %.1f MiB pushed into resets over one pooled connection\n",
              total / 1048576.0);
  // Far more than the connection window went into streams that were reset.
  EXPECT_GT(total, 24u << 20);
  // The pooled connection still carries data.
  const std::string payload = randomBytes(2u << 20, 7);
  int fd = connectOutbound("127.0.1.10", "127.0.2.10", kAppPort);
  ASSERT_GE(fd, 0);
  setRecvTimeout(fd, std::chrono::seconds(10));
  std::thread writer([&] { EXPECT_TRUE(sendAll(fd, payload.data(), payload.size())); });
  std::string back(payload.size(), '\0');
  EXPECT_TRUE(recvExact(fd, back.data(), back.size())) << "stalled: connection window leaked";
  writer.join();
  EXPECT_TRUE(back == payload);
  ::close(fd);
  EXPECT_EQ(n1_->stats().hbone_connections_opened.load(), 1u);
}

TEST_F(RelayTest, IdlePoolConnectionIsReleasedAndReplacedOnDemand) {
  startNodes("pool: {idle_release: 300ms, ping_interval: 100ms, ping_timeout: 5s}\n");
  AppServer app("127.0.2.10", kAppPort, AppServer::echo);
  auto roundTrip = [] { return echoOnce("127.0.1.10", "127.0.2.10", "pool"); };
  ASSERT_TRUE(roundTrip());
  EXPECT_EQ(n1_->stats().hbone_connections_opened.load(), 1u);
  // Once its last stream is gone the tunnel is released (GOAWAY, close).
  EXPECT_TRUE(waitFor([&] { return n1_->stats().hbone_connections_closed.load() == 1; }));
  EXPECT_TRUE(roundTrip());
  // The next connection could not reuse the released tunnel: a second handshake.
  EXPECT_EQ(n1_->stats().hbone_connections_opened.load(), 2u);
}

TEST_F(RelayTest, AnsweredPingsKeepAnIdleTunnelAlivePastThePingTimeout) {
  startNodes("pool: {idle_release: 5m, ping_interval: 100ms, ping_timeout: 400ms}\n");
  AppServer app("127.0.2.10", kAppPort, AppServer::echo);
  int fd = connectOutbound("127.0.1.10", "127.0.2.10", kAppPort);
  ASSERT_GE(fd, 0);
  char back[4];
  ASSERT_TRUE(sendAll(fd, "ping", 4) && recvExact(fd, back, 4));
  // The behaviour under test is the passing of time without application bytes, so this
  // wait has no event to wait on: ~4 ping timeouts during which only PINGs and ACKs flow.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  ASSERT_TRUE(sendAll(fd, "pong", 4));
  EXPECT_TRUE(recvExact(fd, back, 4)) << "the tunnel died although the peer answered PINGs";
  EXPECT_EQ(std::string(back, 4), "pong");
  ::close(fd);
  EXPECT_EQ(n1_->stats().hbone_connections_opened.load(), 1u);
  EXPECT_EQ(n1_->stats().hbone_connections_closed.load(), 0u);
}

TEST_F(RelayTest, BuiltInCaIssuesWorkloadCertificatesInProcessAndRefreshesThem) {
  // Each node issues from its own intermediate of the lab root; no leaf files exist.
  auto root = identity::CertificateAuthority::load(files_.caDir() + "/ca.pem", files_.caDir() + "/ca.key");
  ASSERT_TRUE(root.ok()) << root.status();
  for (const char* node : {"n1", "n2"}) {
    auto inter = root->issueIntermediate(std::chrono::hours(1));
    ASSERT_TRUE(inter.ok()) << inter.status();
    ASSERT_TRUE(inter->writePem(files_.caDir() + "/" + node + "-ca.pem", files_.caDir() + "/" + node + "-ca.key").ok());
  }
  for (const auto& pod : LabFiles::defaultPods()) {
    std::filesystem::remove_all(files_.certDir() + "/default/" + pod.sa);
  }
  auto identity = [&](const char* node) {
    return "identity: {source: ca, ca_cert: " + files_.caDir() + "/" + node + "-ca.pem, ca_key: " +
           files_.caDir() + "/" + node + "-ca.key, leaf_lifetime: 2s}\n";
  };
  n1_ = std::make_unique<Node>(files_, "n1", identity("n1"));
  n2_ = std::make_unique<Node>(files_, "n2", identity("n2"));
  ASSERT_TRUE(n1_->ok() && n2_->ok());
  AppServer app("127.0.2.10", kAppPort, AppServer::echo);
  ASSERT_TRUE(echoOnce("127.0.1.10", "127.0.2.10", "ca-1"));
  auto metric = [](Node& n, const std::string& name) {
    std::string text = n.server().renderMetrics();
    auto pos = text.find("\n" + name + " ");
    return pos == std::string::npos ? -1 : std::stol(text.substr(pos + name.size() + 2));
  };
  EXPECT_GE(metric(*n1_, "ferry_certificates_issued_total"), 1);
  EXPECT_GE(metric(*n2_, "ferry_certificates_issued_total"), 1);
  // Half of the 2 s lifetime must pass for a refresh; the behaviour is the passage of time.
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  // A new handshake is needed to use a new certificate: a new client pod's key.
  ASSERT_TRUE(echoOnce("127.0.1.11", "127.0.2.10", "ca-2"));
  EXPECT_TRUE(echoOnce("127.0.1.10", "127.0.2.10", "ca-3"));
  EXPECT_GE(metric(*n2_, "ferry_certificates_refreshed_total"), 1)
      << "n2's server certificate is past half life: the new handshake re-issued it";
  EXPECT_EQ(metric(*n1_, "ferry_certificate_issue_failures_total"), 0);
}

}  // namespace
}  // namespace ferry::testing
