#include "proxy/net/socket_factory.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <random>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "absl/strings/str_cat.h"
#include "proxy/net/deadline.h"
#include "proxy/net/socket_io.h"



namespace ferry::net {
namespace asio = boost::asio;

namespace {

Tcp::endpoint toEndpoint(const HostPort& hp) { return Tcp::endpoint(hp.ip, hp.port); }

bool setTransparent(int fd, bool v6) {
  int one = 1;
  if (v6) return ::setsockopt(fd, SOL_IPV6, IPV6_TRANSPARENT, &one, sizeof(one)) == 0;
  return ::setsockopt(fd, SOL_IP, IP_TRANSPARENT, &one, sizeof(one)) == 0;
}

// ztunnel's values: probe after 180 s idle, every 180 s, 9 probes. HTTP/2 PINGs find dead
// tunnels sooner; this reclaims half-dead plain TCP legs that nobody writes to.
constexpr int kKeepaliveIdleSecs = 180;
constexpr int kKeepaliveIntervalSecs = 180;
constexpr int kKeepaliveProbes = 9;

void setKeepalive(int fd) {
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &kKeepaliveIdleSecs, sizeof(int));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &kKeepaliveIntervalSecs, sizeof(int));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &kKeepaliveProbes, sizeof(int));
}

}  // namespace

absl::StatusOr<Tcp::acceptor> KernelSocketFactory::listen(const asio::any_io_executor& ex,
                                                          const HostPort& addr) {
  Tcp::acceptor acceptor(ex);
  boost::system::error_code ec;
  auto ep = toEndpoint(addr);
  auto where = common::formatHostPort(addr);
  acceptor.open(ep.protocol(), ec);
  if (ec) return absl::InternalError(absl::StrCat("socket for ", where, ": ", ec.message()));
  acceptor.set_option(Tcp::acceptor::reuse_address(true), ec);
  int one = 1;
  if (::setsockopt(acceptor.native_handle(), SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) != 0) {
    return absl::InternalError(absl::StrCat("SO_REUSEPORT on ", where, ": ", strerror(errno)));
  }
  if (transparent_ && !setTransparent(acceptor.native_handle(), ep.address().is_v6())) {
    return absl::PermissionDeniedError(absl::StrCat(
        "IP_TRANSPARENT on ", where, ": ", strerror(errno),
        " (needs CAP_NET_ADMIN; set `transparent: false` only where nothing is captured)"));
  }
  // Accepted sockets inherit it: a proxy must not add Nagle's delay to what the
  // application wrote (a small write after an unacknowledged one would wait for an ACK).
  acceptor.set_option(Tcp::no_delay(true), ec);
  // Inherited too: every read then says whether the socket is empty, so the relays wait
  // for the next bytes without re-arming epoll (hbone/readable.h).
  net::enableReceiveQueueCount(acceptor.native_handle());
  // Inherited as well (verified on 6.18): a connection accepted here ends with a RST if
  // ferryd dies with it open (closeGracefully).
  armResetOnClose(acceptor.native_handle());
  acceptor.bind(ep, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("bind ", where, ": ", ec.message()));
  acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("listen ", where, ": ", ec.message()));
  return acceptor;
}

namespace {

// A port of kTransparentPortLow..High, drawn at random: two draws for the same source
// address rarely meet, and when they do bind() or connect() says so and the next draw is
// taken.
uint16_t transparentPort() {
  thread_local std::minstd_rand rng{std::random_device{}()};
  std::uniform_int_distribution<uint32_t> port(kTransparentPortLow, kTransparentPortHigh);
  return static_cast<uint16_t>(port(rng));
}

// Draws before a transparent connection gives up with the port error: each is taken with
// the share of the range this 4-tuple's source uses already, so at 9,000 connections of one
// pod to one destination (28 %) sixteen in a row are taken about once in 10^9 connections,
// at 20,000 (63 %) once in 1,600. (Eight draws from 20000-32767 failed 52 of 9,000.)
constexpr int kTransparentPortDraws = 16;

}  // namespace

asio::awaitable<boost::system::error_code> KernelSocketFactory::connect(
    Tcp::socket& socket, const IpAddress& source, const HostPort& destination,
    std::chrono::milliseconds timeout) {
  auto dst = toEndpoint(destination);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (int draw = 1;; ++draw) {
    boost::system::error_code ec;
    if (socket.is_open()) socket.close(ec);
    socket.open(dst.protocol(), ec);
    if (ec) co_return ec;
    if (socket.native_handle() >= descriptor_cap_) {
      socket.close(ec);
      co_return boost::system::error_code(EMFILE, boost::system::system_category());
    }
    int one = 1;
    if (transparent_) {
      if (!setTransparent(socket.native_handle(), dst.address().is_v6())) {
        co_return boost::system::error_code(errno, boost::system::system_category());
      }
      // From a pod's own address, a port of ferryd's range, never one the pod's kernel may
      // pick (kTransparentPortLow). SO_REUSEADDR: the port may be bound already for another
      // destination; connect() refuses only a 4-tuple in use.
      ::setsockopt(socket.native_handle(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      socket.bind(Tcp::endpoint(source, transparentPort()), ec);
    } else {
      // The kernel picks the port at connect(); without this, bind() would reserve one per
      // source address for the whole ephemeral range (connection-rate cost).
      ::setsockopt(socket.native_handle(), SOL_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
      socket.bind(Tcp::endpoint(source, 0), ec);
    }
    if (!ec) {
      socket.set_option(Tcp::no_delay(true), ec);
      net::enableReceiveQueueCount(socket.native_handle());
      setKeepalive(socket.native_handle());
      armResetOnClose(socket.native_handle());
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      auto result = co_await withTimeout(socket.async_connect(dst, asio::as_tuple(asio::use_awaitable)),
                                         std::max(left, std::chrono::milliseconds(1)));
      if (!result) co_return asio::error::timed_out;
      ec = std::get<0>(*result);
    }
    bool port_taken = ec == asio::error::address_in_use || ec.value() == EADDRNOTAVAIL;
    if (!(transparent_ && port_taken && draw < kTransparentPortDraws)) co_return ec;
  }
}

void armResetOnClose(int fd) {
  linger l{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
}

void closeGracefully(Tcp::socket& socket) {
  if (!socket.is_open()) return;
  boost::system::error_code ignored;
  socket.set_option(asio::socket_base::linger(false, 0), ignored);
  socket.close(ignored);
}

void abortSocket(Tcp::socket& socket) {
  if (!socket.is_open()) return;
  boost::system::error_code ignored;
  socket.set_option(asio::socket_base::linger(true, 0), ignored);
  socket.close(ignored);
}

}  // namespace ferry::net
