// KernelSocketFactory: the socket options ferryd's listeners hand to what they accept.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "proxy/session/socket_factory.h"

namespace ferry::session {
namespace {

namespace asio = boost::asio;

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

}  // namespace
}  // namespace ferry::session
