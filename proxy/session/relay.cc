#include "proxy/session/relay.h"

#include <boost/asio/async_result.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <array>
#include <exception>
#include <memory>
#include <span>
#include <type_traits>
#include <utility>

#include "proxy/common/log.h"
#include "proxy/net/socket_factory.h"
#include "proxy/net/socket_io.h"
#include "proxy/session/context.h"

// One relay for TCP <-> TCP and TCP <-> stream. A relay joins two ends: `near`, always a
// socket, and `far`, a socket or a CONNECT stream. Both directions run as completion
// handlers on one object (Relay), which a coroutine awaits (relayTcp) or which runs detached
// and hands its result to a callback (startRelayStream): an idle connection holds that
// object, one wait per direction and the idle timer's wait, no coroutine frame.

namespace ferry::session {
namespace asio = boost::asio;
using asio::awaitable;
using asio::use_awaitable;
using Clock = std::chrono::steady_clock;

namespace {

// How one direction of a relay ended.
enum class Leg {
  kEof,          // the source ended cleanly (FIN / END_STREAM)
  kReadReset,    // the source's peer reset it (or the kernel gave up on it)
  kWriteFailed,  // the destination took no more: a write failed, the stream was reset
  kAborted,      // the source was aborted under the direction by whoever gave the reason
  kFailed,       // an exception
};

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

// One direction's accounting: the relay's activity (for the idle timeout) and where its
// bytes are counted: the connection's count, and `live` when set (one relaxed add per
// write, on a counter only this worker writes).
struct Flow {
  Activity* act;
  uint64_t* total;
  std::atomic<uint64_t>* live;
  void moved(size_t n) const {
    *total += n;
    if (live != nullptr) live->fetch_add(n, std::memory_order_relaxed);
  }
};

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

// --- The two kinds of end ----------------------------------------------------------------
//
// An end carries what the relay decides to its peer (a half-close, a reset, the close at
// the end) and names the CloseReason of its peer's reset. As the destination of a socket's
// bytes (copySocket) it says where they are read into: a socket's through the worker's
// scratch buffer, written on at once; a stream's straight into its send chain (no copy).
// Ends are handles: copies refer to the same socket or stream.

// An application socket: either side of a TCP <-> TCP relay, the application side of a
// TCP <-> stream one.
class SocketEnd {
 public:
  // From here on non-blocking: the relay reads and writes before it waits.
  SocketEnd(Tcp::socket& socket, CloseReason reset_reason, Scratch& scratch)
      : socket_(&socket), scratch_(&scratch), reset_reason_(reset_reason) {
    boost::system::error_code ignored;
    socket.non_blocking(true, ignored);
  }

  Tcp::socket& socket() const { return *socket_; }
  CloseReason resetReason() const { return reset_reason_; }
  bool wasReset() const { return false; }  // a socket's reset shows on a read or a write
  void halfClose() {
    boost::system::error_code ignored;
    socket_->shutdown(Tcp::socket::shutdown_send, ignored);
  }
  // SO_LINGER 0: the peer sees a RST. (`h2_code` is what a stream would send.)
  void reset(uint32_t /*h2_code*/) { net::abortSocket(*socket_); }
  // A FIN when the connection ended as both sides meant, else a RST.
  void close(bool graceful) { graceful ? net::closeGracefully(*socket_) : net::abortSocket(*socket_); }

  // As a destination. The scratch buffer always has room.
  size_t space() const { return scratch_->bytes.size(); }
  size_t prepare(size_t max, asio::mutable_buffer out[2]) {
    out[0] = asio::buffer(scratch_->bytes.data(), std::min(max, scratch_->bytes.size()));
    return 1;
  }
  void discardPrepared() {}
  // Writes the `n` bytes read into prepare()'s buffer as far as the socket takes them at
  // once (the common case); returns the rest, which the relay copies out of the scratch
  // buffer (the worker's: other connections read into it while this write waits) and
  // writes when the socket takes it.
  std::span<const char> commit(size_t n, boost::system::error_code& ec) {
    size_t done = socket_->write_some(asio::buffer(scratch_->bytes.data(), n), ec);
    if (ec == asio::error::would_block || ec == asio::error::try_again) {
      ec.clear();
      done = 0;
    }
    if (ec) return {};
    return {scratch_->bytes.data() + done, n - done};
  }

 private:
  Tcp::socket* socket_;
  Scratch* scratch_;
  CloseReason reset_reason_;
};

// A CONNECT stream that is established (200 seen or sent).
class StreamEnd {
 public:
  explicit StreamEnd(hbone::H2Stream& stream) : stream_(&stream) {}

  hbone::H2Stream& stream() const { return *stream_; }
  CloseReason resetReason() const { return CloseReason::kPeerReset; }
  // RST_STREAM from the peer, from us, or the HBONE connection died.
  bool wasReset() const { return stream_->resetCode().has_value(); }
  void halfClose() { stream_->sendEof(); }  // END_STREAM once the queued bytes are sent
  void reset(uint32_t h2_code) { stream_->reset(h2_code); }
  // The stream already ended (END_STREAM or reset); what it received and will never be
  // written out gives its flow-control window back.
  void close(bool /*graceful*/) { stream_->discardReceived(); }

  // As a destination: bounded by the stream's send buffer, read straight into its chain.
  size_t space() const { return stream_->sendSpace(); }
  size_t prepare(size_t max, asio::mutable_buffer out[2]) { return stream_->pending().prepare(max, out); }
  void discardPrepared() { stream_->pending().commit(0); }
  std::span<const char> commit(size_t n, boost::system::error_code& /*ec*/) {
    stream_->sent(n);
    return {};
  }

 private:
  hbone::H2Stream* stream_;
};

// Carries how a direction ended to both ends at once: a clean end half-closes the
// destination; anything else resets both, which also wakes the other direction.
template <class From, class To>
void carry(Leg leg, From& from, To& to) {
  if (leg == Leg::kEof) {
    to.halfClose();
    return;
  }
  uint32_t code = leg == Leg::kFailed ? hbone::kH2InternalError : hbone::kH2ConnectError;
  to.reset(code);
  from.reset(code);
}

// The CloseReason a direction's end gives the connection.
template <class From, class To>
CloseReason reasonOf(Leg leg, const From& from, const To& to) {
  switch (leg) {
    case Leg::kReadReset:
      return from.resetReason();
    case Leg::kWriteFailed:
      return to.resetReason();
    case Leg::kFailed:
      return CloseReason::kInternal;
    default:  // kEof; kAborted: whoever aborted the source gives the reason
      return CloseReason::kOk;
  }
}


// One direction's state between its wake-ups.
struct DirectionState {
  bool ended = false;
  Leg leg = Leg::kEof;
  net::Drained drained = net::Drained::kNo;  // what the last read left (net::readAvailable)
  std::vector<char> left;                    // socket -> socket: what the destination did not take at once
};

// No stream end: the relay needs no ReceiveSink.
struct NoSink {};

// A relay in flight: both directions as completion handlers on this one object (an idle
// connection holds it, one wait per parked direction and the idle timer's wait: no
// coroutine frame). Pending handlers share it; the ends belong to the caller, who keeps them
// until `Handler` (the caller's continuation, or its RelayDone) gets the result, and nothing touches them
// after that. A direction runs until it must wait, and arms the wait with a handler that
// runs it again.
template <class Far, class Handler>
class Relay final : public std::enable_shared_from_this<Relay<Far, Handler>>,
                    public std::conditional_t<std::is_same_v<Far, StreamEnd>, hbone::ReceiveSink, NoSink> {
  static constexpr bool kStream = std::is_same_v<Far, StreamEnd>;

 public:
  Relay(SocketEnd near, Far far, std::chrono::milliseconds idle, ByteCounts& bytes, Handler handler)
      : near_(near),
        far_(far),
        bytes_(bytes),
        idle_(idle),
        idle_timer_(near.socket().get_executor()),
        handler_(std::move(handler)) {}
  Relay(const Relay&) = delete;
  Relay& operator=(const Relay&) = delete;
  ~Relay() {
    if constexpr (kStream) {
      if (!back_.ended) far_.stream().setReceiveSink(nullptr);
    }
  }

  void start() {
    if constexpr (kStream) far_.stream().setReceiveSink(this);
    armIdle();
    copyFromSocket<true>();
    if constexpr (kStream) {
      runStream();
    } else {
      copyFromSocket<false>();  // socket -> socket both ways
    }
  }

  // hbone::ReceiveSink: called from the HBONE connection's read pass with what the stream
  // received. Writes it to the application socket at once while the stream -> socket
  // direction is parked (only then: else these bytes could overtake the ones it writes); a
  // message then costs no wake-up of that direction. What the socket does not take, and
  // every error, is left to the direction.
  void onReceived(hbone::H2Stream& stream) {
    if (!parked_) return;
    boost::system::error_code ec;
    size_t n = net::writeSome(near_.socket(), stream.received(), ec);
    if (ec || n == 0) return;
    act_.touch();
    written(n);
  }

 private:
  std::shared_ptr<Relay> self() { return this->shared_from_this(); }

  // Direction `kForth` is near -> far; the other far -> near.
  template <bool kForth>
  DirectionState& state() {
    return kForth ? forth_ : back_;
  }
  template <bool kForth>
  Flow flow() {
    return kForth ? Flow{&act_, &bytes_.sent, bytes_.live_sent} : Flow{&act_, &bytes_.received, bytes_.live_received};
  }
  template <bool kForth>
  auto& fromOf() {
    if constexpr (kForth) {
      return near_;
    } else {
      return far_;
    }
  }
  template <bool kForth>
  auto& toOf() {
    if constexpr (kForth) {
      return far_;
    } else {
      return near_;
    }
  }

  // socket -> socket or stream: read straight into what the destination prepares (the
  // worker's scratch buffer, or the stream's send chain), written out here. `wait_ec` is
  // how the readiness wait ended, when this runs after it.
  template <bool kForth>
  void copyFromSocket(boost::system::error_code wait_ec = {}) {
    DirectionState& d = state<kForth>();
    SocketEnd& from = fromOf<kForth>();
    auto& to = toOf<kForth>();
    using To = std::remove_reference_t<decltype(to)>;
    try {
      for (;;) {
        boost::system::error_code ec = std::exchange(wait_ec, {});
        if (!ec) {
          if (to.wasReset()) return end(d, Leg::kWriteFailed, from, to);
          size_t space = to.space();
          if (space == 0) {  // only a stream's send buffer fills up
            if constexpr (std::is_same_v<To, StreamEnd>) {
              if (to.stream().sendReady().take()) continue;
              to.stream().sendReady().asyncWait([self = self()] {
                if (!self->finished_) self->template copyFromSocket<kForth>();
              });
            }
            return;
          }
          if (d.drained != net::Drained::kNo) {
            d.drained = net::Drained::kNo;
            net::asyncReadable(from.socket(), [self = self()](const boost::system::error_code& ec) {
              if (!self->finished_) self->template copyFromSocket<kForth>(ec);
            });
            return;
          }
          asio::mutable_buffer bufs[2];
          size_t count = to.prepare(space, bufs);
          size_t n = net::readAvailable(from.socket(), std::span<const asio::mutable_buffer>(bufs, count),
                                        d.drained, ec);
          if (ec == asio::error::would_block) {
            to.discardPrepared();
            continue;
          }
          FERRY_LOG(kTrace, "relay: tcp read %d bytes: %s", n, ec.message());
          if (!ec) {
            act_.touch();
            auto rest = to.commit(n, ec);
            if (ec) return end(d, Leg::kWriteFailed, from, to);
            if (!rest.empty()) {
              if constexpr (std::is_same_v<To, SocketEnd>) {  // a stream's commit() takes all
                d.left.assign(rest.begin(), rest.end());
                asio::async_write(to.socket(), asio::buffer(d.left),
                                  [self = self(), n](const boost::system::error_code& ec, size_t) {
                                    DirectionState& d = self->template state<kForth>();
                                    std::vector<char>().swap(d.left);
                                    if (self->finished_) return;
                                    if (ec) {
                                      return self->end(d, Leg::kWriteFailed, self->template fromOf<kForth>(),
                                                       self->template toOf<kForth>());
                                    }
                                    self->template flow<kForth>().moved(n);
                                    self->template copyFromSocket<kForth>();
                                  });
                return;
              }
            }
            flow<kForth>().moved(n);
            continue;
          }
        }
        // The wait or the read failed.
        to.discardPrepared();
        if (ec == asio::error::eof) return end(d, Leg::kEof, from, to);
        return end(d,
                   to.wasReset() ? Leg::kWriteFailed  // we aborted the socket: the stream was reset
                   : isCut(ec)   ? Leg::kReadReset
                                 : Leg::kAborted,
                   from, to);
      }
    } catch (...) {
      logTaskError(std::current_exception());
      end(d, Leg::kFailed, from, to);
    }
  }

  // stream -> socket: everything the stream queued, in one gathered write, consumed (and
  // the peer's window given back) only once written; while it waits for more, the HBONE read
  // pass writes for it (onReceived). `write_ec` / `wrote` are how the last write that had
  // to wait ended.
  void runStream(boost::system::error_code write_ec = {}, size_t wrote = 0) {
    if constexpr (kStream) {
      hbone::H2Stream& stream = far_.stream();
      try {
        if (write_ec) return endStream(Leg::kWriteFailed);
        if (wrote > 0) written(wrote);
        for (;;) {
          if (stream.resetCode()) return endStream(Leg::kReadReset);  // the far end reset, or the tunnel died
          if (stream.hasReceived()) {
            act_.touch();
            boost::system::error_code ec;
            size_t total = 0;
            size_t done = net::writeSome(near_.socket(), stream.received(), ec, &total);
            if (ec == asio::error::would_block) ec.clear();
            if (ec) return endStream(Leg::kWriteFailed);
            if (done == total) {
              written(total);
              continue;
            }
            // Asio finishes the write; the chain stays put until then.
            gather_ = restAfter(stream.received(), done);
            asio::async_write(near_.socket(), gather_,
                              [self = self(), total](const boost::system::error_code& ec, size_t) {
                                std::vector<asio::const_buffer>().swap(self->gather_);
                                if (!self->finished_) self->runStream(ec, total);
                              });
            return;
          }
          if (stream.receivedEof()) return endStream(Leg::kEof);
          if (stream.recvReady().take()) continue;
          parked_ = true;
          stream.recvReady().asyncWait([self = self()] {
            self->parked_ = false;
            if (!self->finished_) self->runStream();
          });
          return;
        }
      } catch (...) {
        logTaskError(std::current_exception());
        endStream(Leg::kFailed);
      }
    }
  }

  // `n` bytes of the stream's received() reached the application: drop them, count them,
  // give the peer its window back (last: may send a WINDOW_UPDATE, and a failed send ends
  // the stream).
  void written(size_t n) {
    if constexpr (kStream) {
      hbone::H2Stream& stream = far_.stream();
      stream.received().consume(n);
      flow<false>().moved(n);
      stream.consumed(n);
    }
  }

  void endStream(Leg leg) {
    if constexpr (kStream) {
      parked_ = false;
      far_.stream().setReceiveSink(nullptr);
      // What is still queued will never be written: its window goes back.
      if (leg != Leg::kEof) far_.stream().discardReceived();
      end(back_, leg, far_, near_);
    }
  }

  // A direction ended as `leg`: carried to both ends at once, and once the other one has
  // ended too, the relay ends.
  template <class From, class To>
  void end(DirectionState& d, Leg leg, From& from, To& to) {
    d.ended = true;
    d.leg = leg;
    try {
      carry(leg, from, to);
    } catch (...) {
      logTaskError(std::current_exception());
    }
    if (forth_.ended && back_.ended) finish();
  }

  // Both directions ended: close the ends and hand the result to the caller.
  void finish() {
    finished_ = true;
    idle_timer_.cancel();
    // Only when both directions ended with a FIN / END_STREAM and nothing was reset may
    // the sockets close with a FIN: else the connection did not end as both sides meant.
    bool graceful =
        forth_.leg == Leg::kEof && back_.leg == Leg::kEof && !near_.wasReset() && !far_.wasReset();
    near_.close(graceful);
    far_.close(graceful);
    RelayResult result;
    result.sent = bytes_.sent;
    result.received = bytes_.received;
    if (expired_) {
      result.reason = CloseReason::kIdleTimeout;  // the timer reset both ends
    } else {
      CloseReason first = reasonOf(forth_.leg, near_, far_);
      result.reason = first != CloseReason::kOk ? first : reasonOf(back_.leg, far_, near_);
    }
    // Through the executor: the caller may free the ends at once, and this may run inside
    // a handler that still uses them.
    asio::post(idle_timer_.get_executor(),
               [handler = std::move(handler_), result]() mutable { std::move(handler)(result); });
  }

  // The idle timeout: a timer with a plain handler. On expiry it resets both ends, which
  // ends both directions.
  void armIdle() {
    idle_timer_.expires_at(act_.last + idle_);
    idle_timer_.async_wait([self = self()](const boost::system::error_code& ec) {
      if (ec || self->finished_) return;
      if (Clock::now() - self->act_.last < self->idle_) {
        self->armIdle();
        return;
      }
      self->expired_ = true;
      self->far_.reset(hbone::kH2Cancel);
      self->near_.reset(hbone::kH2Cancel);
    });
  }

  SocketEnd near_;
  Far far_;
  ByteCounts& bytes_;
  Activity act_;
  std::chrono::milliseconds idle_;
  asio::steady_timer idle_timer_;
  DirectionState forth_;
  DirectionState back_;
  std::vector<asio::const_buffer> gather_;  // stream -> socket: a write that waits
  bool parked_ = false;                     // stream -> socket waits for the stream
  bool expired_ = false;
  bool finished_ = false;
  Handler handler_;
};

// Starts a relay; `handler` gets its result (through the executor).
struct StartRelay {
  template <class Handler, class Far>
  void operator()(Handler&& handler, SocketEnd near, Far far, std::chrono::milliseconds idle,
                  ByteCounts* bytes) const {
    auto relay = std::make_shared<Relay<Far, std::decay_t<Handler>>>(near, far, idle, *bytes,
                                                                      std::forward<Handler>(handler));
    relay->start();
  }
};

}  // namespace

awaitable<RelayResult> relayTcp(Tcp::socket& downstream, Tcp::socket& upstream,
                                std::chrono::milliseconds idle, Scratch& scratch, ByteCounts& bytes) {
  return asio::async_initiate<const asio::use_awaitable_t<>&, void(RelayResult)>(
      StartRelay{}, use_awaitable, SocketEnd(downstream, CloseReason::kDownstreamReset, scratch),
      SocketEnd(upstream, CloseReason::kUpstreamReset, scratch), idle, &bytes);
}

void startRelayStream(Tcp::socket& tcp, hbone::H2Stream& stream, std::chrono::milliseconds idle,
                      Scratch& scratch, ByteCounts& bytes, RelayDone done) {
  StartRelay{}(std::move(done), SocketEnd(tcp, CloseReason::kDownstreamReset, scratch), StreamEnd(stream), idle,
               &bytes);
}

}  // namespace ferry::session
