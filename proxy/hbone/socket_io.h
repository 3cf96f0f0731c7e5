#pragma once
// Non-blocking socket reads and gathered writes, shared by the HBONE connection and the
// relays.
#include <cstddef>
#include <span>

#include <boost/asio/buffer.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/system/error_code.hpp>

#include "proxy/hbone/buffer_chain.h"

namespace ferry::hbone {

// Reads what a non-blocking socket holds now into `buffers`, and says whether the socket is
// known to be empty afterwards (`drained`): the read found nothing (`ec` is would_block, no
// bytes) or returned less than there was room for. A drained socket's next step is the
// wait, not a read() that would only say EAGAIN (one syscall per message saved): bytes
// that arrive after the read raise a readiness event that the reactor, running on this
// thread, cannot have consumed before the wait is queued. A socket is not known to be
// drained at first: bytes may be queued from before (or from a hand-over to this worker),
// and a wait would not wake for them until the peer sends more.
size_t readAvailable(boost::asio::ip::tcp::socket& socket,
                     std::span<const boost::asio::mutable_buffer> buffers, bool& drained,
                     boost::system::error_code& ec);

// Runs of a BufferChain that go into one gathered write.
constexpr size_t kMaxGather = 16;

// One gathered write of the first bytes queued in `chain` (up to kMaxGather runs) to a
// non-blocking socket. Returns the bytes written, which the caller consumes (`ec` is
// would_block when the socket took none); `offered`, if given, is set to the bytes gathered.
size_t writeSome(boost::asio::ip::tcp::socket& socket, const BufferChain& chain,
                 boost::system::error_code& ec, size_t* offered = nullptr);

}  // namespace ferry::hbone
