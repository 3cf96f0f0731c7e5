#include "proxy/hbone/socket_io.h"

#include <array>

#include <boost/asio/error.hpp>

namespace ferry::hbone {
namespace asio = boost::asio;

size_t readAvailable(asio::ip::tcp::socket& socket, std::span<const asio::mutable_buffer> buffers,
                     bool& drained, boost::system::error_code& ec) {
  size_t room = asio::buffer_size(buffers);
  size_t n = socket.read_some(buffers, ec);
  if (ec == asio::error::would_block || ec == asio::error::try_again) {
    ec = asio::error::would_block;
    drained = true;
    return 0;
  }
  drained = !ec && n < room;
  return n;
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

}  // namespace ferry::hbone
