#include "proxy/net/socket_io.h"

#include <vector>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

#include <boost/asio/error.hpp>

namespace ferry::net {
namespace asio = boost::asio;

void enableReceiveQueueCount(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_INQ, &one, sizeof(one));
}

size_t readAvailable(asio::ip::tcp::socket& socket, std::span<const asio::mutable_buffer> buffers,
                     Drained& drained, boost::system::error_code& ec) {
  std::array<iovec, 4> iov;
  size_t count = std::min(buffers.size(), iov.size());
  size_t room = 0;
  for (size_t i = 0; i < count; ++i) {
    iov[i].iov_base = buffers[i].data();
    iov[i].iov_len = buffers[i].size();
    room += buffers[i].size();
  }
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  msghdr msg{};
  msg.msg_iov = iov.data();
  msg.msg_iovlen = count;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n;
  do {
    n = ::recvmsg(socket.native_handle(), &msg, 0);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      ec = asio::error::would_block;
      drained = Drained::kEmpty;
    } else {
      ec = boost::system::error_code(errno, boost::system::system_category());
      drained = Drained::kNo;
    }
    return 0;
  }
  if (n == 0 && room > 0) {
    ec = asio::error::eof;
    drained = Drained::kNo;
    return 0;
  }
  ec.clear();
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_TCP && c->cmsg_type == TCP_CM_INQ) {
      int inq;
      std::memcpy(&inq, CMSG_DATA(c), sizeof(inq));
      drained = inq == 0 ? Drained::kEmpty : Drained::kNo;
      return static_cast<size_t>(n);
    }
  }
  drained = static_cast<size_t>(n) < room ? Drained::kShort : Drained::kNo;
  return static_cast<size_t>(n);
}

size_t writeSome(asio::ip::tcp::socket& socket, const BufferChain& chain,
                 boost::system::error_code& ec, size_t* offered) {
  std::array<asio::const_buffer, kMaxGather> bufs;
  size_t count = chain.gather(bufs.data(), bufs.size());
  std::span<const asio::const_buffer> gathered(bufs.data(), count);
  if (offered != nullptr) *offered = asio::buffer_size(gathered);
  size_t n = socket.write_some(gathered, ec);
  if (ec == asio::error::try_again) ec = asio::error::would_block;
  return ec ? 0 : n;
}

void warmSocketStates(boost::asio::io_context& io, size_t count) {
  std::vector<boost::asio::ip::tcp::socket> sockets;
  sockets.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    boost::system::error_code ec;
    sockets.emplace_back(io);
    sockets.back().open(boost::asio::ip::tcp::v4(), ec);
    if (ec) break;
  }
}

}  // namespace ferry::net
