#include "proxy/session/relay.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <array>
#include <exception>
#include <memory>
#include <span>
#include <tuple>

#include "proxy/common/log.h"

#include "proxy/net/socket_io.h"
#include "proxy/net/socket_factory.h"

namespace ferry::session {
namespace asio = boost::asio;
using asio::awaitable;
using asio::use_awaitable;
using Clock = std::chrono::steady_clock;

namespace {

constexpr auto kTuple = asio::as_tuple(use_awaitable);

// `n` more bytes went one way: into the connection's count, and into `live` when set (one
// relaxed add per write, on a counter only this worker writes).
void count(uint64_t& total, std::atomic<uint64_t>* live, size_t n) {
  total += n;
  if (live != nullptr) live->fetch_add(n, std::memory_order_relaxed);
}

// How one direction of a relay ended.
enum class Leg { kEof, kReadReset, kWriteFailed, kPeerReset, kAborted };

// A read error that ends the connection as a reset would: the peer reset it, or the
// kernel gave up on it (a keepalive or retransmission timeout, an unreachable host). Only
// our own abort of the socket (an idle timeout, the drain deadline, the other leg's
// reset) is not: whoever aborted it has already dealt with both sides. Anything else must
// reach the other side as a reset at once, not wait there for the idle timeout.
bool isCut(const boost::system::error_code& ec) {
  return ec && ec != asio::error::operation_aborted && ec != asio::error::bad_descriptor;
}

struct Activity {
  Clock::time_point last = Clock::now();
  void touch() { last = Clock::now(); }
};

// Writes all of `data` to `to`: straight from the caller's buffer when the socket takes it
// at once (the common case), else from a copy, since the scratch buffer is shared.
awaitable<boost::system::error_code> writeAll(Tcp::socket& to, const char* data, size_t size) {
  boost::system::error_code ec;
  size_t done = to.write_some(asio::buffer(data, size), ec);
  if (ec == asio::error::would_block || ec == asio::error::try_again) {
    ec.clear();
    done = 0;
  }
  if (ec) co_return ec;
  if (done == size) co_return ec;
  std::vector<char> rest(data + done, data + size);
  auto [wec, n] = co_await asio::async_write(to, asio::buffer(rest), kTuple);
  co_return wec;
}

// Reads whatever is available into the worker's scratch buffer, waiting for readability
// only when the socket is drained (net::readAvailable). Returns bytes read (ec == eof at
// end of stream).
awaitable<std::pair<boost::system::error_code, size_t>> readSome(Tcp::socket& from,
                                                                 Scratch& scratch,
                                                                 size_t limit,
                                                                 net::Drained& drained) {
  for (;;) {
    if (drained != net::Drained::kNo) {  // written out here: no coroutine frame per message
      auto [wec] = co_await net::asyncReadable(from, kTuple);
      drained = net::Drained::kNo;
      if (wec) co_return std::pair{wec, size_t{0}};
    }
    asio::mutable_buffer buf = asio::buffer(scratch.bytes.data(), std::min(limit, scratch.bytes.size()));
    boost::system::error_code ec;
    size_t n = net::readAvailable(from, std::span<const asio::mutable_buffer>(&buf, 1), drained, ec);
    if (ec != asio::error::would_block) co_return std::pair{ec, n};
  }
}

// What `chain` offers to one gathered write (its first kMaxGather runs) after the first
// `done` bytes.
std::vector<asio::const_buffer> restAfter(const net::BufferChain& chain, size_t done) {
  std::array<asio::const_buffer, net::kMaxGather> bufs;
  size_t count = chain.gather(bufs.data(), bufs.size());
  std::vector<asio::const_buffer> rest;
  for (size_t i = 0; i < count; ++i) {
    if (done >= bufs[i].size()) {
      done -= bufs[i].size();
      continue;
    }
    rest.push_back(bufs[i] + done);
    done = 0;
  }
  return rest;
}

// Writes what `chain` offers (net::writeSome) in one writev while the socket takes it;
// Asio finishes a partial write. Sets `total` to the bytes written, which the caller then
// consumes. The chain stays put until then.
awaitable<boost::system::error_code> writeQueued(Tcp::socket& to, const net::BufferChain& chain,
                                                 size_t& total) {
  boost::system::error_code ec;
  size_t done = net::writeSome(to, chain, ec, &total);
  if (ec == asio::error::would_block) ec.clear();
  if (ec || done == total) co_return ec;
  auto [wec, n] = co_await asio::async_write(to, restAfter(chain, done), kTuple);
  co_return wec;
}

awaitable<Leg> copyTcp(Tcp::socket& from, Tcp::socket& to, uint64_t& counter, std::atomic<uint64_t>* live,
                       Activity& act, Scratch& scratch) {
  net::Drained drained = net::Drained::kNo;  // what the last read left (net::readAvailable)
  for (;;) {
    auto [ec, n] = co_await readSome(from, scratch, scratch.bytes.size(), drained);
    if (ec == asio::error::eof) {
      boost::system::error_code ignored;
      to.shutdown(Tcp::socket::shutdown_send, ignored);
      co_return Leg::kEof;
    }
    if (ec) co_return isCut(ec) ? Leg::kReadReset : Leg::kAborted;
    act.touch();
    auto wec = co_await writeAll(to, scratch.bytes.data(), n);
    if (wec) co_return Leg::kWriteFailed;
    count(counter, live, n);
  }
}

// Writes what a stream received to the application socket from the HBONE connection's read
// pass while the relay's stream->TCP loop is parked (hbone::ReceiveSink): a message then
// costs no wake-up of that loop. Whatever the socket does not take at once, and every
// error, is left to the loop.
class DirectWriter final : public hbone::ReceiveSink {
 public:
  DirectWriter(Tcp::socket& tcp, hbone::H2Stream& stream, Activity& act, uint64_t& received,
               std::atomic<uint64_t>* live)
      : tcp_(tcp), stream_(stream), act_(act), received_(received), live_(live) {
    stream_.setReceiveSink(this);
  }
  ~DirectWriter() { stream_.setReceiveSink(nullptr); }
  DirectWriter(const DirectWriter&) = delete;
  DirectWriter& operator=(const DirectWriter&) = delete;

  // Set while the loop waits on recvReady(): only then may bytes go out from here, or
  // they could overtake the ones the loop is writing.
  bool parked = false;

  void onReceived(hbone::H2Stream& stream) override {
    if (!parked) return;
    boost::system::error_code ec;
    size_t n = net::writeSome(tcp_, stream.received(), ec);
    if (ec || n == 0) return;
    act_.touch();
    written(n);
  }

  // `n` bytes of received() reached the application: drop them, count them, give the peer
  // its window back (last: may send a WINDOW_UPDATE, and a failed send ends the stream).
  void written(size_t n) {
    stream_.received().consume(n);
    count(received_, live_, n);
    stream_.consumed(n);
  }

 private:
  Tcp::socket& tcp_;
  hbone::H2Stream& stream_;
  Activity& act_;
  uint64_t& received_;
  std::atomic<uint64_t>* live_;
};

// The idle timeout of a relay: a timer with a plain completion handler, a few hundred
// bytes per connection, instead of a coroutine raced against the relay with `||`. Shared
// with the pending handler, which may run after the relay is gone (`active` says whether to
// act). On expiry it resets the stream (if any) and the sockets, which ends both directions.
struct IdleState {
  IdleState(const asio::any_io_executor& ex, Activity& act, std::chrono::milliseconds idle,
            Tcp::socket& a, Tcp::socket* b, hbone::H2Stream* stream)
      : timer(ex), act(act), idle(idle), a(a), b(b), stream(stream) {}
  void disarm() {
    active = false;
    timer.cancel();
  }
  asio::steady_timer timer;
  Activity& act;
  std::chrono::milliseconds idle;
  Tcp::socket& a;
  Tcp::socket* b;
  hbone::H2Stream* stream;
  bool active = true;
  bool expired = false;
};

void armIdle(const std::shared_ptr<IdleState>& s) {
  s->timer.expires_at(s->act.last + s->idle);
  s->timer.async_wait([s](const boost::system::error_code& ec) {
    if (ec || !s->active) return;
    if (Clock::now() - s->act.last < s->idle) {
      armIdle(s);
      return;
    }
    s->expired = true;
    if (s->stream != nullptr) s->stream->reset(hbone::kH2Cancel);
    net::abortSocket(s->a);
    if (s->b != nullptr) net::abortSocket(*s->b);
  });
}

// Arms an idle timeout for the lifetime of a relay's frame.
class IdleTimeout {
 public:
  IdleTimeout(Activity& act, std::chrono::milliseconds idle, Tcp::socket& a, Tcp::socket* b,
              hbone::H2Stream* stream)
      : state_(std::make_shared<IdleState>(a.get_executor(), act, idle, a, b, stream)) {
    armIdle(state_);
  }
  ~IdleTimeout() { state_->disarm(); }
  IdleTimeout(const IdleTimeout&) = delete;
  IdleTimeout& operator=(const IdleTimeout&) = delete;
  bool expired() const { return state_->expired; }

 private:
  std::shared_ptr<IdleState> state_;
};

// One direction of a relay run as a coroutine of its own, while the relay's frame runs the
// other (a parallel group would spawn both, with their frames and cancellation state).
// The body refers to the relay's frame: the relay must join() before it returns, whatever
// happened to its own direction.
class SpawnedDirection {
 public:
  SpawnedDirection(const asio::any_io_executor& ex, awaitable<CloseReason> body) : done_(ex) {
    asio::co_spawn(ex, std::move(body), [this](std::exception_ptr e, CloseReason r) {
      reason_ = e ? CloseReason::kInternal : r;
      done_.set();
    });
  }
  SpawnedDirection(const SpawnedDirection&) = delete;
  SpawnedDirection& operator=(const SpawnedDirection&) = delete;

  awaitable<CloseReason> join() {
    co_await done_.wait();
    co_return reason_;
  }

 private:
  net::Event done_;
  CloseReason reason_ = CloseReason::kOk;
};

void setNonBlocking(Tcp::socket& s) {
  boost::system::error_code ignored;
  s.non_blocking(true, ignored);
}

}  // namespace

awaitable<RelayResult> relayTcp(Tcp::socket& downstream, Tcp::socket& upstream,
                                std::chrono::milliseconds idle, Scratch& scratch, ByteCounts& bytes) {
  RelayResult result;
  Activity act;
  setNonBlocking(downstream);
  setNonBlocking(upstream);
  IdleTimeout idle_timeout(act, idle, downstream, &upstream, nullptr);
  // Each leg, when it sees a reset, resets the other side at once so that the other leg
  // (waiting for readability) wakes up; a clean EOF only half-closes.
  int clean_ends = 0;  // directions that ended with a FIN
  auto leg = [&](Tcp::socket& from, Tcp::socket& to, uint64_t& counter, std::atomic<uint64_t>* live,
                 CloseReason read_reset) -> awaitable<CloseReason> {
    Leg l = co_await copyTcp(from, to, counter, live, act, scratch);
    switch (l) {
      case Leg::kEof:
        ++clean_ends;
        co_return CloseReason::kOk;
      case Leg::kReadReset:
        net::abortSocket(to);
        net::abortSocket(from);
        co_return read_reset;
      case Leg::kWriteFailed:
        net::abortSocket(from);
        net::abortSocket(to);
        co_return read_reset == CloseReason::kDownstreamReset ? CloseReason::kUpstreamReset
                                                              : CloseReason::kDownstreamReset;
      default:
        co_return CloseReason::kOk;
    }
  };
  // The far side -> accepted side leg is spawned, this frame runs the other.
  SpawnedDirection back_leg(downstream.get_executor(),
                            leg(upstream, downstream, bytes.received, bytes.live_received, CloseReason::kUpstreamReset));
  CloseReason forth = CloseReason::kOk;
  std::exception_ptr error;
  try {
    forth = co_await leg(downstream, upstream, bytes.sent, bytes.live_sent, CloseReason::kDownstreamReset);
  } catch (...) {
    error = std::current_exception();
    net::abortSocket(downstream);
    net::abortSocket(upstream);
  }
  CloseReason back = co_await back_leg.join();
  if (error) std::rethrow_exception(error);
  result.sent = bytes.sent;
  result.received = bytes.received;
  if (idle_timeout.expired()) {
    result.reason = CloseReason::kIdleTimeout;  // the timer aborted both sockets
    co_return result;
  }
  result.reason = forth != CloseReason::kOk ? forth : back;
  if (clean_ends == 2) {
    net::closeGracefully(downstream);
    net::closeGracefully(upstream);
  } else {
    // A direction was cut (its socket closed under it, an error that is not a reset): the
    // connection did not end as both sides meant, so neither may see a clean FIN.
    net::abortSocket(downstream);
    net::abortSocket(upstream);
  }
  co_return result;
}

awaitable<RelayResult> relayStream(Tcp::socket& tcp, hbone::H2Stream& stream,
                                   std::chrono::milliseconds idle, Scratch& scratch, ByteCounts& bytes) {
  RelayResult result;
  Activity act;
  setNonBlocking(tcp);
  DirectWriter direct(tcp, stream, act, bytes.received, bytes.live_received);
  IdleTimeout idle_timeout(act, idle, tcp, nullptr, &stream);

  // Memory per connection is mostly coroutine frames: stream -> TCP is a SpawnedDirection,
  // TCP -> stream runs in this frame.

  // Set when a direction ended with a FIN / END_STREAM: only then does the socket close
  // with a FIN (closeGracefully).
  bool down_clean = false;
  bool up_clean = false;

  // stream -> TCP.
  auto down = [&]() -> awaitable<CloseReason> {
    for (;;) {
      if (stream.resetCode()) {
        // The far end reset (or the tunnel died): reset the application's connection. What
        // is still queued for it will never be written: give its window back.
        stream.discardReceived();
        net::abortSocket(tcp);
        co_return CloseReason::kPeerReset;
      }
      if (stream.hasReceived()) {
        // Everything queued, in one gathered write; consumed (and the peer's window given
        // back) only once written.
        act.touch();
        size_t total = 0;
        auto ec = co_await writeQueued(tcp, stream.received(), total);
        if (ec) {
          stream.discardReceived();
          stream.reset(hbone::kH2ConnectError);
          net::abortSocket(tcp);
          co_return CloseReason::kDownstreamReset;
        }
        direct.written(total);
        continue;
      }
      if (stream.receivedEof()) {
        boost::system::error_code ignored;
        tcp.shutdown(Tcp::socket::shutdown_send, ignored);
        down_clean = true;
        co_return CloseReason::kOk;
      }
      direct.parked = true;
      co_await stream.recvReady().wait();
      direct.parked = false;
    }
  };
  SpawnedDirection down_direction(tcp.get_executor(), down());

  // TCP -> stream, reading straight into the stream's send chain, written out here: no
  // coroutine frame of its own, none per message.
  CloseReason up_reason = CloseReason::kOk;
  net::Drained drained = net::Drained::kNo;  // what the last read left (net::readAvailable)
  std::exception_ptr up_error;  // raised only after the spawned direction has ended
  try {
    for (;;) {
      if (stream.resetCode()) {
        up_reason = CloseReason::kPeerReset;
        break;
      }
      size_t space = stream.sendSpace();
      if (space == 0) {
        co_await stream.sendReady().wait();
        continue;
      }
      boost::system::error_code ec;
      if (drained != net::Drained::kNo) {
        std::tie(ec) = co_await net::asyncReadable(tcp, kTuple);
        drained = net::Drained::kNo;
      }
      size_t n = 0;
      if (!ec) {
        asio::mutable_buffer bufs[2];
        size_t count = stream.pending().prepare(space, bufs);
        n = net::readAvailable(tcp, std::span<const asio::mutable_buffer>(bufs, count), drained, ec);
        if (ec == asio::error::would_block) {
          stream.pending().commit(0);
          continue;
        }
      }
      if (ec) stream.pending().commit(0);
      FERRY_LOG(kTrace, "relay: tcp read %d bytes: %s", n, ec.message());
      if (ec == asio::error::eof) {
        stream.sendEof();
        up_clean = true;
        break;
      }
      if (ec) {
        if (stream.resetCode()) {
          up_reason = CloseReason::kPeerReset;  // we aborted the socket
        } else if (isCut(ec)) {
          // The application reset its connection, or the kernel gave up on it: tell the
          // far end to reset too.
          stream.reset(hbone::kH2ConnectError);
          net::abortSocket(tcp);
          up_reason = CloseReason::kDownstreamReset;
        } else {
          up_reason = CloseReason::kInternal;
        }
        break;
      }
      act.touch();
      stream.sent(n);
      count(bytes.sent, bytes.live_sent, n);
    }
  } catch (...) {
    up_error = std::current_exception();
    stream.reset(hbone::kH2InternalError);
    net::abortSocket(tcp);
  }
  CloseReason down_reason = co_await down_direction.join();
  if (up_error) std::rethrow_exception(up_error);
  result.sent = bytes.sent;
  result.received = bytes.received;

  // Both directions are done (nothing is being written from the receive chain any more):
  // whatever is left in it will never reach the application, so its window goes back.
  stream.discardReceived();
  if (idle_timeout.expired()) {
    result.reason = CloseReason::kIdleTimeout;  // the timer reset the stream and the socket
    co_return result;
  }
  result.reason = up_reason != CloseReason::kOk ? up_reason : down_reason;
  if (up_clean && down_clean && !stream.resetCode()) {
    net::closeGracefully(tcp);
  } else {
    net::abortSocket(tcp);
  }
  co_return result;
}

}  // namespace ferry::session
