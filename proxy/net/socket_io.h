#pragma once
// Non-blocking socket reads, the readiness wait and gathered writes, shared by the HBONE
// connection and the relays.
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>

#include <boost/asio/buffer.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/system/error_code.hpp>

#include "proxy/net/buffer_chain.h"

namespace ferry::net {

// What a read learned about the socket's receive queue: whether the next step is another
// read or the wait (asyncReadable).
enum class Drained : uint8_t {
  // Bytes (or the end of the stream) may be waiting: read again, do not wait. A socket is
  // not known to be drained at first: bytes may be queued from before (or from a
  // hand-over to this worker), and a wait would not wake for them until the peer sent more.
  kNo,
  // A short read on a socket without TCP_INQ: probably empty; wait. (A FIN that came in
  // with the last bytes raises no new edge, but Asio's wait re-arms the descriptor and so
  // still reports it.)
  kShort,
  // The kernel said nothing is left (TCP_INQ count 0, or EAGAIN): wait. Without TCP_INQ a
  // full read would say kNo and cost one more read() that only says EAGAIN.
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

// Waits until `socket` has something to read (bytes, its end, or an error); the caller
// then reads it (readAvailable). Callers wait only after a read left the socket drained
// (Drained::kShort or kEmpty), never before a first read: bytes queued before the wait
// started would otherwise wait for more. Asio's public wait: its reactor re-arms the
// descriptor (one epoll_ctl) per wait, so readiness that came before the wait is never
// lost. Skipping that re-arm through Asio's private reactor was measured once and gained
// less than the benchmark's run-to-run spread (docs/architecture.md, "Transport").
// Completion: void(error_code); operation_aborted when the socket is closed or cancelled.
template <typename Token>
auto asyncReadable(boost::asio::ip::tcp::socket& socket, Token&& token) {
  return socket.async_wait(boost::asio::ip::tcp::socket::wait_read, std::forward<Token>(token));
}

// Runs of a BufferChain that go into one gathered write.
constexpr size_t kMaxGather = 16;

// One gathered write of the first bytes queued in `chain` (up to kMaxGather runs) to a
// non-blocking socket. Returns the bytes written, which the caller consumes (`ec` is
// would_block when the socket took none); `offered`, if given, is set to the bytes gathered.
size_t writeSome(boost::asio::ip::tcp::socket& socket, const BufferChain& chain,
                 boost::system::error_code& ec, size_t* offered = nullptr);

// Asio's reactor keeps one state object (~200 bytes) per socket it has ever had open at
// once, in a free list it never gives back to malloc. Grown during a flood, those objects
// sit between the pages the flood's connections freed and keep them resident, where
// malloc_trim() cannot reach them: 2,000 silent connections left ferryd's RSS 40 % above its
// baseline this way, 1,100 ferry-ca's 16 %. Made at start, before anything else, they lie
// together in a few pages and a flood of up to `count` sockets reuses them. Fewer when the
// descriptors run out (only less memory given back later).
void warmSocketStates(boost::asio::io_context& io, size_t count);

}  // namespace ferry::net
