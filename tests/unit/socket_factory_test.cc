// KernelSocketFactory: the socket options ferryd's listeners hand to what they accept.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <memory>
#include <optional>
#include <vector>
#include <thread>

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>

#include "proxy/net/socket_factory.h"
#include "proxy/session/original_destination.h"
#include "proxy/session/self_addresses.h"

namespace ferry::net {
namespace {

namespace asio = boost::asio;
using session::SelfAddresses;
using session::toHostPort;

TEST(SocketFactoryTest, AcceptedSocketsHaveNagleOff) {
  asio::io_context io;
  KernelSocketFactory factory(/*transparent=*/false);
  auto addr = common::parseHostPort("127.0.0.1:0", /*allow_zero_port=*/true);
  ASSERT_TRUE(addr.ok()) << addr.status();
  auto acceptor = factory.listen(io.get_executor(), *addr);
  ASSERT_TRUE(acceptor.ok()) << acceptor.status();
  Tcp::socket client(io);
  client.connect(acceptor->local_endpoint());
  Tcp::socket accepted = acceptor->accept();
  int nodelay = 0;
  socklen_t len = sizeof(nodelay);
  ASSERT_EQ(::getsockopt(accepted.native_handle(), IPPROTO_TCP, TCP_NODELAY, &nodelay, &len), 0);
  EXPECT_NE(nodelay, 0) << "an application's small writes would wait for ACKs in ferryd";
}

// An accepted connection of a listener from the factory, and the client's end of it.
struct Accepted {
  asio::io_context io;
  KernelSocketFactory factory{/*transparent=*/false};
  std::optional<Tcp::acceptor> acceptor;
  std::optional<Tcp::socket> client;
  std::optional<Tcp::socket> accepted;
  Accepted() {
    auto addr = common::parseHostPort("127.0.0.1:0", /*allow_zero_port=*/true);
    auto a = factory.listen(io.get_executor(), *addr);
    EXPECT_TRUE(a.ok()) << a.status();
    acceptor.emplace(std::move(*a));
    client.emplace(io);
    client->connect(acceptor->local_endpoint());
    accepted.emplace(acceptor->accept());
  }
  // What the client reads next: 0 (a FIN), or -errno.
  ssize_t clientRead() {
    char buf[8];
    ssize_t n = ::recv(client->native_handle(), buf, sizeof(buf), 0);
    return n < 0 ? -errno : n;
  }
};

TEST(SocketFactoryTest, AcceptedSocketsInheritResetOnClose) {
  Accepted c;
  linger l{};
  socklen_t len = sizeof(l);
  ASSERT_EQ(::getsockopt(c.accepted->native_handle(), SOL_SOCKET, SO_LINGER, &l, &len), 0);
  EXPECT_EQ(l.l_onoff, 1) << "a killed ferryd would end this connection with a FIN";
  EXPECT_EQ(l.l_linger, 0);
}

TEST(SocketFactoryTest, AcceptedSocketClosedByTheKernelResetsThePeer) {
  // What the kernel does when ferryd dies: a plain close() of every descriptor.
  Accepted c;
  ::close(c.accepted->release());
  EXPECT_EQ(c.clientRead(), -ECONNRESET);
}

TEST(SocketFactoryTest, HalfClosedSocketClosedByTheKernelStillResetsThePeer) {
  // One direction ended with a FIN, the other was still open: the peer must not be able
  // to take the end for a complete exchange.
  Accepted c;
  c.accepted->shutdown(Tcp::socket::shutdown_send);
  EXPECT_EQ(c.clientRead(), 0);
  ::close(c.accepted->release());
  char byte = 'x';
  ::send(c.client->native_handle(), &byte, 1, MSG_NOSIGNAL);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the RST answers the byte
  int err = 0;
  socklen_t len = sizeof(err);
  ::getsockopt(c.client->native_handle(), SOL_SOCKET, SO_ERROR, &err, &len);
  ssize_t again = ::send(c.client->native_handle(), &byte, 1, MSG_NOSIGNAL);
  EXPECT_TRUE(err == ECONNRESET || (again < 0 && (errno == EPIPE || errno == ECONNRESET)))
      << "err=" << err << " again=" << again;
}

TEST(SocketFactoryTest, GracefulCloseSendsFin) {
  Accepted c;
  c.accepted->shutdown(Tcp::socket::shutdown_send);
  closeGracefully(*c.accepted);
  EXPECT_EQ(c.clientRead(), 0);
}

TEST(SocketFactoryTest, ConnectedSocketsAreArmedToo) {
  asio::io_context io;
  KernelSocketFactory factory(/*transparent=*/false);
  auto addr = common::parseHostPort("127.0.0.1:0", /*allow_zero_port=*/true);
  auto acceptor = factory.listen(io.get_executor(), *addr);
  ASSERT_TRUE(acceptor.ok()) << acceptor.status();
  Tcp::socket upstream(io);
  auto to = toHostPort(acceptor->local_endpoint());
  boost::system::error_code result = asio::error::fault;
  asio::co_spawn(io, [&]() -> asio::awaitable<void> {
    result = co_await factory.connect(upstream, to.ip, to, std::chrono::seconds(5));
  }, asio::detached);
  io.run();
  ASSERT_FALSE(result) << result.message();
  linger l{};
  socklen_t len = sizeof(l);
  ASSERT_EQ(::getsockopt(upstream.native_handle(), SOL_SOCKET, SO_LINGER, &l, &len), 0);
  EXPECT_EQ(l.l_onoff, 1);
  EXPECT_EQ(l.l_linger, 0);
}

// Same-node connections: ferryd's leg from the client pod's address must not take a port the
// pod's own kernel may pick (kTransparentPortLow/High).
TEST(SocketFactoryTest, TransparentConnectionsTakeTheirPortsBelowThePodsEphemeralRange) {
  if (::geteuid() != 0) GTEST_SKIP() << "IP_TRANSPARENT needs CAP_NET_ADMIN (root)";
  asio::io_context io;
  KernelSocketFactory plain(/*transparent=*/false), transparent(/*transparent=*/true);
  auto addr = common::parseHostPort("127.0.0.1:0", /*allow_zero_port=*/true);
  auto acceptor = plain.listen(io.get_executor(), *addr);
  ASSERT_TRUE(acceptor.ok()) << acceptor.status();
  auto to = toHostPort(acceptor->local_endpoint());
  std::vector<std::unique_ptr<Tcp::socket>> sockets;
  int done = 0;
  for (int i = 0; i < 20; ++i) {
    sockets.push_back(std::make_unique<Tcp::socket>(io));
    asio::co_spawn(io, [&, s = sockets.back().get()]() -> asio::awaitable<void> {
      auto ec = co_await transparent.connect(*s, to.ip, to, std::chrono::seconds(5));
      EXPECT_FALSE(ec) << ec.message();
      ++done;
    }, asio::detached);
  }
  io.run();
  ASSERT_EQ(done, 20);
  for (const auto& s : sockets) {
    boost::system::error_code ec;
    auto port = s->local_endpoint(ec).port();
    ASSERT_FALSE(ec);
    EXPECT_GE(port, kTransparentPortLow);
    EXPECT_LE(port, kTransparentPortHigh);
  }
}

// Measured, never asserted: what the one extra setsockopt of an orderly close costs.
TEST(SocketFactoryTest, MeasuresTheCostOfDisarmingBeforeAGracefulClose) {
  Accepted c;
  constexpr int kRounds = 200000;
  linger off{0, 0};
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kRounds; ++i) {
    ::setsockopt(c.accepted->native_handle(), SOL_SOCKET, SO_LINGER, &off, sizeof(off));
  }
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start);
  std::printf("SO_LINGER {0,0}: %.0f ns per call\n", static_cast<double>(ns.count()) / kRounds);
}

TEST(SelfAddressesTest, ListenerPairsAreSelfOtherPortsOfTheSameAddressAreNot) {
  auto ip = [](const char* s) { return *common::parseIp(s); };
  SelfAddresses self({{ip("127.0.1.1"), 15001}, {ip("127.0.1.10"), 15008}}, {ip("127.0.0.1")},
                     /*own_netns=*/false);
  EXPECT_TRUE(self.contains({ip("127.0.1.1"), 15001}));
  EXPECT_TRUE(self.contains({ip("::ffff:127.0.1.1"), 15001}));
  EXPECT_TRUE(self.contains({ip("127.0.1.10"), 15008}));
  EXPECT_FALSE(self.contains({ip("127.0.1.10"), 8080})) << "a pod of the loopback lab";
  EXPECT_FALSE(self.contains({ip("127.0.1.1"), 8080}));
  EXPECT_FALSE(self.contains({ip("127.0.0.1"), 8080})) << "the namespace is shared: not ferryd's";
}

TEST(SelfAddressesTest, WildcardListenerCoversEveryLocalAddress) {
  auto ip = [](const char* s) { return *common::parseIp(s); };
  SelfAddresses self({{ip("0.0.0.0"), 15001}}, {ip("10.0.0.5")}, /*own_netns=*/false);
  EXPECT_TRUE(self.contains({ip("10.0.0.5"), 15001}));
  EXPECT_TRUE(self.contains({ip("127.0.0.1"), 15001}));
  EXPECT_TRUE(self.contains({ip("127.0.2.10"), 15001}));
  EXPECT_TRUE(self.contains({ip("0.0.0.0"), 15001}));
  EXPECT_FALSE(self.contains({ip("10.0.0.6"), 15001}));
}

TEST(SelfAddressesTest, InItsOwnNetnsEveryAddressOfFerrydIsSelfOnEveryPort) {
  auto ip = [](const char* s) { return *common::parseIp(s); };
  SelfAddresses self({{ip("0.0.0.0"), 15001}}, {ip("10.0.0.5"), ip("fd00::5")}, /*own_netns=*/true);
  EXPECT_TRUE(self.contains({ip("10.0.0.5"), 22}));
  EXPECT_TRUE(self.contains({ip("fd00::5"), 80}));
  EXPECT_TRUE(self.contains({ip("127.0.0.1"), 9}));
  EXPECT_TRUE(self.contains({ip("::1"), 9}));
  EXPECT_FALSE(self.contains({ip("10.0.0.6"), 80})) << "a pod";
}

}  // namespace
}  // namespace ferry::net
