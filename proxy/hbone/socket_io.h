#pragma once
// Non-blocking socket reads and gathered writes, shared by the HBONE connection and the
// relays.
#include <cstddef>
#include <cstdint>
#include <span>

#include <boost/asio/buffer.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/system/error_code.hpp>

#include "proxy/hbone/buffer_chain.h"

namespace ferry::hbone {

// What a read learned about the socket's receive queue, which decides how to wait before
// the next read.
enum class Drained : uint8_t {
  // Bytes (or the end of the stream) may be waiting: read again, do not wait. A socket is
  // not known to be drained at first: bytes may be queued from before (or from a
  // hand-over to this worker), and a wait would not wake for them until the peer sent more.
  kNo,
  // A short read on a socket without TCP_INQ: probably empty, but a FIN (or an error) that
  // came in with the last bytes is still to be read and raises no new readiness event.
  // The wait must re-arm the descriptor (asyncReadable does).
  kShort,
  // The kernel said nothing is left (TCP_INQ count 0, or EAGAIN): whatever comes next
  // raises a readiness event, so the wait needs no system call (asyncReadable).
  kEmpty,
};

// Turns on TCP_INQ (the receive queue's remaining bytes, FIN counted as one, as a control
// message on every read). Set on listeners it is inherited by accepted sockets. Best
// effort: without it readAvailable falls back to the short-read rule.
void enableReceiveQueueCount(int fd);

// Reads what a non-blocking TCP socket holds now into `buffers` (one recvmsg) and says what
// is left (`drained`). `ec` is would_block (no bytes, kEmpty) or eof when the peer closed.
// A drained socket's next step is the wait, not a read() that would only say EAGAIN (one
// system call per message saved).
size_t readAvailable(boost::asio::ip::tcp::socket& socket,
                     std::span<const boost::asio::mutable_buffer> buffers, Drained& drained,
                     boost::system::error_code& ec);

// Runs of a BufferChain that go into one gathered write.
constexpr size_t kMaxGather = 16;

// One gathered write of the first bytes queued in `chain` (up to kMaxGather runs) to a
// non-blocking socket. Returns the bytes written, which the caller consumes (`ec` is
// would_block when the socket took none); `offered`, if given, is set to the bytes gathered.
size_t writeSome(boost::asio::ip::tcp::socket& socket, const BufferChain& chain,
                 boost::system::error_code& ec, size_t* offered = nullptr);

}  // namespace ferry::hbone
