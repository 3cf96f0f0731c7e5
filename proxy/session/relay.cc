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

// One relay for TCP <-> TCP and TCP <-> stream. A relay joins two ends: `near`, always a
// socket, and `far`, a socket or a CONNECT stream. Its near -> far direction runs in the
// relay's own coroutine frame (copySocket as the Lead) and spawns far -> near (copySocket
// again as a Follower, or copyStream). Memory per idle connection is mostly coroutine
// frames: a relay holds two, and a parked stream direction the wait's.

namespace ferry::session {
namespace asio = boost::asio;
using asio::awaitable;
using asio::use_awaitable;
using Clock = std::chrono::steady_clock;

namespace {

constexpr auto kTuple = asio::as_tuple(use_awaitable);

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
  void moved(size_t n) {
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
  awaitable<void> spaceReady() { co_return; }  // never waited for: space() is never 0
  size_t prepare(size_t max, asio::mutable_buffer out[2]) {
    out[0] = asio::buffer(scratch_->bytes.data(), std::min(max, scratch_->bytes.size()));
    return 1;
  }
  void discardPrepared() {}
  // Writes the `n` bytes read into prepare()'s buffer as far as the socket takes them at
  // once (the common case); returns the rest, for writeLeft().
  std::span<const char> commit(size_t n, boost::system::error_code& ec) {
    size_t done = socket_->write_some(asio::buffer(scratch_->bytes.data(), n), ec);
    if (ec == asio::error::would_block || ec == asio::error::try_again) {
      ec.clear();
      done = 0;
    }
    if (ec) return {};
    return {scratch_->bytes.data() + done, n - done};
  }
  // From a copy: the scratch buffer is the worker's, and other connections read into it
  // while this write waits.
  awaitable<boost::system::error_code> writeLeft(std::span<const char> left) {
    std::vector<char> rest(left.begin(), left.end());
    auto [ec, n] = co_await asio::async_write(*socket_, asio::buffer(rest), kTuple);
    co_return ec;
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
  awaitable<void> spaceReady() { return stream_->sendReady().wait(); }
  size_t prepare(size_t max, asio::mutable_buffer out[2]) { return stream_->pending().prepare(max, out); }
  void discardPrepared() { stream_->pending().commit(0); }
  std::span<const char> commit(size_t n, boost::system::error_code& /*ec*/) {
    stream_->sent(n);
    return {};
  }
  awaitable<boost::system::error_code> writeLeft(std::span<const char>) {  // never: commit() takes all
    co_return boost::system::error_code{};
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

// Writes what a stream received to the application socket from the HBONE connection's read
// pass while the relay's stream->TCP loop is parked (hbone::ReceiveSink): a message then
// costs no wake-up of that loop. Whatever the socket does not take at once, and every
// error, is left to the loop.
class DirectWriter final : public hbone::ReceiveSink {
 public:
  DirectWriter(Tcp::socket& tcp, hbone::H2Stream& stream, Flow& flow)
      : tcp_(tcp), stream_(stream), flow_(flow) {
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
    flow_.act->touch();
    written(n);
  }

  // `n` bytes of received() reached the application: drop them, count them, give the peer
  // its window back (last: may send a WINDOW_UPDATE, and a failed send ends the stream).
  void written(size_t n) {
    stream_.received().consume(n);
    flow_.moved(n);
    stream_.consumed(n);
  }

 private:
  Tcp::socket& tcp_;
  hbone::H2Stream& stream_;
  Flow& flow_;
};

// The idle timeout of a relay: a timer with a plain completion handler, a few hundred
// bytes per connection, instead of a coroutine raced against the relay with `||`. Shared
// with the pending handler, which may run after the relay is gone (`active` says whether to
// act; the ends live in the relay's frame). On expiry it resets both ends, which ends both
// directions.
template <class Far>
struct IdleState {
  IdleState(const asio::any_io_executor& ex, Activity& act, std::chrono::milliseconds idle,
            SocketEnd& near, Far& far)
      : timer(ex), act(act), idle(idle), near(near), far(far) {}
  void disarm() {
    active = false;
    timer.cancel();
  }
  asio::steady_timer timer;
  Activity& act;
  std::chrono::milliseconds idle;
  SocketEnd& near;
  Far& far;
  bool active = true;
  bool expired = false;
};

template <class Far>
void armIdle(const std::shared_ptr<IdleState<Far>>& s) {
  s->timer.expires_at(s->act.last + s->idle);
  s->timer.async_wait([s](const boost::system::error_code& ec) {
    if (ec || !s->active) return;
    if (Clock::now() - s->act.last < s->idle) {
      armIdle(s);
      return;
    }
    s->expired = true;
    s->far.reset(hbone::kH2Cancel);
    s->near.reset(hbone::kH2Cancel);
  });
}

// Arms an idle timeout for the lifetime of a relay's frame.
template <class Far>
class IdleTimeout {
 public:
  IdleTimeout(Activity& act, std::chrono::milliseconds idle, SocketEnd& near, Far& far)
      : state_(std::make_shared<IdleState<Far>>(near.socket().get_executor(), act, idle, near, far)) {
    armIdle(state_);
  }
  ~IdleTimeout() { state_->disarm(); }
  IdleTimeout(const IdleTimeout&) = delete;
  IdleTimeout& operator=(const IdleTimeout&) = delete;
  bool expired() const { return state_->expired; }

 private:
  std::shared_ptr<IdleState<Far>> state_;
};

// One direction of a relay run as a coroutine of its own, while the relay's frame runs the
// other (a parallel group would spawn both, with their frames and cancellation state).
// The body refers to the relay's frame: the relay must join() before it returns, whatever
// happened to its own direction.
class SpawnedDirection {
 public:
  SpawnedDirection(const asio::any_io_executor& ex, awaitable<Leg> body) : done_(ex) {
    asio::co_spawn(ex, std::move(body), [this](std::exception_ptr e, Leg leg) {
      leg_ = e ? Leg::kFailed : leg;
      done_.set();
    });
  }
  SpawnedDirection(const SpawnedDirection&) = delete;
  SpawnedDirection& operator=(const SpawnedDirection&) = delete;

  awaitable<Leg> join() {
    co_await done_.wait();
    co_return leg_;
  }

 private:
  net::Event done_;
  Leg leg_ = Leg::kEof;
};

// stream -> socket: everything the stream queued, in one gathered write, consumed (and the
// peer's window given back) only once written; while it waits for more, the HBONE read
// pass writes for it (DirectWriter).
awaitable<Leg> copyStream(StreamEnd from, SocketEnd to, Flow flow) {
  hbone::H2Stream& stream = from.stream();
  DirectWriter direct(to.socket(), stream, flow);
  Leg leg = Leg::kEof;
  try {
    for (;;) {
      if (stream.resetCode()) {
        leg = Leg::kReadReset;  // the far end reset, or the tunnel died
        break;
      }
      if (stream.hasReceived()) {
        flow.act->touch();
        size_t total = 0;
        auto ec = co_await writeQueued(to.socket(), stream.received(), total);
        if (ec) {
          leg = Leg::kWriteFailed;
          break;
        }
        direct.written(total);
        continue;
      }
      if (stream.receivedEof()) break;
      direct.parked = true;
      co_await stream.recvReady().wait();
      direct.parked = false;
    }
  } catch (...) {
    leg = Leg::kFailed;
  }
  // What is still queued will never be written: its window goes back.
  if (leg != Leg::kEof) stream.discardReceived();
  carry(leg, from, to);
  co_return leg;
}

// The part of a relay its near -> far direction (copySocket) plays besides copying: it arms
// the idle timeout, spawns far -> near, joins it and ends the connection.
template <class Far>
class Lead;

// The far -> near direction of a TCP <-> TCP relay: the same copy, nothing besides.
class Follower {
 public:
  using Result = Leg;
  using Args = Flow;
  Follower(SocketEnd& /*from*/, SocketEnd& /*to*/, Flow flow) : flow_(flow) {}
  Flow flow() const { return flow_; }
  // An exception ends the direction as kFailed (the lead reports it as kInternal).
  awaitable<Leg> finish(Leg leg, SocketEnd& /*from*/, SocketEnd& /*to*/, std::exception_ptr /*error*/) {
    co_return leg;
  }

 private:
  Flow flow_;
};

// socket -> `to` (a socket or a stream), read straight into what `to` prepares (the
// scratch buffer, or the stream's send chain), written out here: no coroutine frame of its
// own, none per message. `Role` is what the direction plays besides (Lead or Follower).
template <class Role, class To>
awaitable<typename Role::Result> copySocket(SocketEnd from, To to, typename Role::Args args) {
  Role role(from, to, args);
  Flow flow = role.flow();
  Leg leg = Leg::kEof;
  net::Drained drained = net::Drained::kNo;  // what the last read left (net::readAvailable)
  std::exception_ptr error;                       // the lead raises it once far -> near has ended
  try {
    for (;;) {
      if (to.wasReset()) {
        leg = Leg::kWriteFailed;
        break;
      }
      size_t space = to.space();
      if (space == 0) {
        co_await to.spaceReady();
        continue;
      }
      boost::system::error_code ec;
      if (drained != net::Drained::kNo) {  // written out here: no coroutine frame per message
        std::tie(ec) = co_await net::asyncReadable(from.socket(), kTuple);
        drained = net::Drained::kNo;
      }
      size_t n = 0;
      if (!ec) {
        asio::mutable_buffer bufs[2];
        size_t count = to.prepare(space, bufs);
        n = net::readAvailable(from.socket(), std::span<const asio::mutable_buffer>(bufs, count), drained, ec);
        if (ec == asio::error::would_block) {
          to.discardPrepared();
          continue;
        }
      }
      FERRY_LOG(kTrace, "relay: tcp read %d bytes: %s", n, ec.message());
      if (ec) {
        to.discardPrepared();
        if (ec == asio::error::eof) break;
        leg = to.wasReset() ? Leg::kWriteFailed  // we aborted the socket: the stream was reset
              : isCut(ec)   ? Leg::kReadReset
                            : Leg::kAborted;
        break;
      }
      flow.act->touch();
      auto left = to.commit(n, ec);
      if (!ec && !left.empty()) ec = co_await to.writeLeft(left);
      if (ec) {
        leg = Leg::kWriteFailed;
        break;
      }
      flow.moved(n);
    }
  } catch (...) {
    error = std::current_exception();
    leg = Leg::kFailed;
  }
  carry(leg, from, to);
  co_return co_await role.finish(leg, from, to, error);
}

awaitable<Leg> copyBack(SocketEnd from, SocketEnd to, Flow flow) { return copySocket<Follower>(from, to, flow); }
awaitable<Leg> copyBack(StreamEnd from, SocketEnd to, Flow flow) { return copyStream(from, to, flow); }

template <class Far>
class Lead {
 public:
  using Result = RelayResult;
  struct Args {
    std::chrono::milliseconds idle;
    ByteCounts* bytes;
  };
  Lead(SocketEnd& near, Far& far, Args args)
      : bytes_(*args.bytes),
        idle_(act_, args.idle, near, far),
        back_(near.socket().get_executor(),
              copyBack(far, near, Flow{&act_, &bytes_.received, bytes_.live_received})) {}
  Lead(const Lead&) = delete;
  Lead& operator=(const Lead&) = delete;

  Flow flow() { return {&act_, &bytes_.sent, bytes_.live_sent}; }

  // Once near -> far ended as `forth` (and was carried to both ends).
  awaitable<RelayResult> finish(Leg forth, SocketEnd& near, Far& far, std::exception_ptr error) {
    Leg back = co_await back_.join();
    if (error) std::rethrow_exception(error);
    // Only when both directions ended with a FIN / END_STREAM and nothing was reset may
    // the sockets close with a FIN: else the connection did not end as both sides meant.
    bool graceful = forth == Leg::kEof && back == Leg::kEof && !near.wasReset() && !far.wasReset();
    near.close(graceful);
    far.close(graceful);
    RelayResult result;
    result.sent = bytes_.sent;
    result.received = bytes_.received;
    if (idle_.expired()) {
      result.reason = CloseReason::kIdleTimeout;  // the timer reset both ends
    } else {
      CloseReason first = reasonOf(forth, near, far);
      result.reason = first != CloseReason::kOk ? first : reasonOf(back, far, near);
    }
    co_return result;
  }

 private:
  Activity act_;
  ByteCounts& bytes_;
  IdleTimeout<Far> idle_;
  SpawnedDirection back_;  // last: its body refers to the members above
};

}  // namespace

awaitable<RelayResult> relayTcp(Tcp::socket& downstream, Tcp::socket& upstream,
                                std::chrono::milliseconds idle, Scratch& scratch, ByteCounts& bytes) {
  return copySocket<Lead<SocketEnd>>(SocketEnd(downstream, CloseReason::kDownstreamReset, scratch),
                                     SocketEnd(upstream, CloseReason::kUpstreamReset, scratch),
                                     {idle, &bytes});
}

awaitable<RelayResult> relayStream(Tcp::socket& tcp, hbone::H2Stream& stream,
                                   std::chrono::milliseconds idle, Scratch& scratch, ByteCounts& bytes) {
  return copySocket<Lead<StreamEnd>>(SocketEnd(tcp, CloseReason::kDownstreamReset, scratch), StreamEnd(stream),
                                     {idle, &bytes});
}

}  // namespace ferry::session
