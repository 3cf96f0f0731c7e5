#pragma once
// One HBONE connection: HTTP/2 (nghttp2) over a TLS stream, carrying one CONNECT stream per
// proxied TCP connection. Everything here runs on the io_context of one worker thread, so
// nothing is locked. Data flow and backpressure:
//   TCP -> peer: the relay appends to H2Stream::pending (bounded by kStreamSendBuffer);
//                nghttp2 pulls it through a deferred data provider as the peer's window allows.
//   peer -> TCP: DATA lands in H2Stream::received; the window is only given back
//                (nghttp2_session_consume) after the bytes were written to the TCP socket, so
//                the peer's sender stops when our application reads slowly. What every
//                connection holds so is bounded together by a ReceiveBudget
//                (receive_budget.h): past it, a connection holding some stops reading.
// TLS: net::dialMtls / acceptMtls do the handshake; after it, the connection drives the
// same SSL object through a net::TlsChannel (TLS over buffer chains: several records per
// read(), a whole write batch per writev()).
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>

#include "proxy/net/buffer_chain.h"
#include "proxy/net/tls_channel.h"
#include "proxy/hbone/h2_errors.h"
#include "proxy/hbone/receive_budget.h"
#include "proxy/net/signal.h"

struct nghttp2_session;

namespace ferry::hbone {

using Tcp = boost::asio::ip::tcp;
using net::TlsStream;

// How much TCP->peer data one stream may queue before the relay stops reading its socket.
inline constexpr size_t kStreamSendBuffer = 256 * 1024;
// HTTP/2 settings: ztunnel's values, so that throughput matches (docs/architecture.md,
// "HTTP/2 settings").
inline constexpr int32_t kStreamWindow = 4 * 1024 * 1024;
inline constexpr int32_t kConnectionWindow = 16 * 1024 * 1024;
inline constexpr uint32_t kMaxFrameSize = 1024 * 1024;
inline constexpr uint32_t kServerMaxConcurrentStreams = 100;
// Header list caps: a CONNECT with ztunnel's headers needs well under 1 KiB. 16 KiB both
// ways (ztunnel's client value; its server allows 64 KiB) bounds HPACK work and memory per
// request against CONTINUATION and header floods; a larger request resets that stream.
inline constexpr uint32_t kClientMaxHeaderList = 16 * 1024;
inline constexpr uint32_t kServerMaxHeaderList = 16 * 1024;
// Past the list cap a header block is still decoded (the HPACK table must stay in step) but
// not kept; past this one it is a flood (a block spread over CONTINUATION frames, or an
// indexing bomb) and the connection ends with GOAWAY(ENHANCE_YOUR_CALM).
inline constexpr uint32_t kMaxHeaderBlock = 64 * 1024;

// HTTP/2 error codes we use (RFC 9113 §7).
inline constexpr uint32_t kH2NoError = 0x0;
inline constexpr uint32_t kH2ProtocolError = 0x1;
inline constexpr uint32_t kH2InternalError = 0x2;
inline constexpr uint32_t kH2RefusedStream = 0x7;
inline constexpr uint32_t kH2Cancel = 0x8;
inline constexpr uint32_t kH2ConnectError = 0xa;
inline constexpr uint32_t kH2EnhanceYourCalm = 0xb;

// How long a connection that sent a GOAWAY with an error waits for the peer to take it
// before it closes anyway: a peer that floods us and reads nothing must not hold the
// connection (and its buffers) until the keepalive gives up.
inline constexpr std::chrono::milliseconds kGoawayGrace{1'000};

struct Header {
  std::string name;
  std::string value;
};

class H2Connection;
class H2Stream;

// Lets the reader of a stream take received DATA straight from the connection's read pass,
// while its own loop is parked on recvReady(): waking that loop through the scheduler costs
// a scheduler round (and an extra epoll_wait) per message. The connection calls it outside
// of nghttp2's callbacks, once per batch of decrypted records, while it carries this one
// stream; what the sink leaves in received() wakes recvReady() as before.
class ReceiveSink {
 public:
  virtual void onReceived(H2Stream& stream) = 0;

 protected:
  ~ReceiveSink() = default;
};

class H2Stream {
 public:
  H2Stream(H2Connection& conn, const boost::asio::any_io_executor& ex);
  ~H2Stream();
  H2Stream(const H2Stream&) = delete;
  H2Stream& operator=(const H2Stream&) = delete;

  int32_t id() const { return id_; }

  // --- TCP -> peer ---
  // Bytes the relay may still queue.
  size_t sendSpace() const;
  void send(const char* data, size_t size);
  // Zero-copy variant of send(): read into the buffers pending().prepare() gives, then
  // call sent(n) with what was read.
  net::BufferChain& pending() { return pending_; }
  void sent(size_t size);
  // END_STREAM once everything queued has been sent (TCP FIN from the application).
  void sendEof();
  // RST_STREAM with `error_code` (e.g. kH2ConnectError when the TCP side was reset).
  void reset(uint32_t error_code);

  // --- peer -> TCP ---
  // Data received and not yet written out. The writer gathers from received() and, once
  // bytes are written, consume()s them there and reports them with consumed() (which gives
  // the peer its window back).
  net::BufferChain& received() { return received_; }
  bool hasReceived() const { return !received_.empty(); }
  void consumed(size_t size);
  // Drops what was received but will never be written out (the stream was reset, the
  // application socket failed) and gives its flow-control window back: without this the
  // connection-level window shrinks by those bytes for good, and once a few resets have
  // eaten the connection window every stream on the HBONE connection stalls.
  void discardReceived();
  bool receivedEof() const { return remote_eof_ && received_.empty(); }
  // nullptr to stop; the sink must outlive its registration.
  void setReceiveSink(ReceiveSink* sink) { sink_ = sink; }

  // Set when the stream ended abnormally: RST_STREAM from the peer (its code) or the
  // connection died (kH2InternalError).
  std::optional<uint32_t> resetCode() const { return reset_; }
  bool closed() const { return closed_; }

  // Request (server side) or response (client side) headers, complete once headersDone().
  bool headersDone() const { return headers_done_; }
  const std::vector<Header>& headers() const { return headers_; }
  // The value of a header, "" if absent.
  std::string header(std::string_view name) const;
  // Frees the headers once they have been read: a proxied connection may live for hours.
  void releaseHeaders() { std::vector<Header>().swap(headers_); }
  // Client side: the :status of the response, 0 until known.
  int status() const { return status_; }

  // Server side: answer the request. 200 keeps the stream open for data; anything else
  // ends it.
  void respond(int status, const std::vector<Header>& extra = {});
  bool responded() const { return responded_; }

  // Called once, synchronously, when the stream is reset (by the peer, by us, or because
  // the connection died): lets the owner cancel work started for it at once, such as an
  // upstream connect. nullptr to stop; what it captures must outlive its registration.
  void setAbortHandler(std::function<void()> handler) { on_abort_ = std::move(handler); }

  // Wakes the relay's TCP->peer loop: buffer space freed, stream ended.
  net::Signal& sendReady() { return send_signal_; }
  // Wakes the relay's peer->TCP loop: data, END_STREAM, reset, headers.
  net::Signal& recvReady() { return recv_signal_; }

  uint64_t bytesSent() const { return bytes_sent_; }
  uint64_t bytesReceived() const { return bytes_received_; }

 private:
  friend class H2Connection;
  friend struct H2Callbacks;
  void notifyAll() {
    send_signal_.notify();
    recv_signal_.notify();
  }
  // Records the first reset and runs the abort handler.
  void markReset(uint32_t code);

  H2Connection& conn_;
  std::shared_ptr<H2Connection> keep_alive_;  // the connection outlives its streams
  int32_t id_ = -1;
  net::BufferChain pending_;
  bool local_eof_ = false;
  bool deferred_ = false;
  net::BufferChain received_;
  size_t held_ = 0;  // received and not yet consumed(): counted in the connection's held_
  ReceiveSink* sink_ = nullptr;
  bool touched_ = false;  // in H2Connection::touched_
  bool remote_eof_ = false;
  std::optional<uint32_t> reset_;
  bool closed_ = false;
  bool headers_done_ = false;
  size_t header_bytes_ = 0;
  bool headers_too_large_ = false;
  std::vector<Header> headers_;
  int status_ = 0;
  bool responded_ = false;
  bool premature_ = false;  // server: the client reset it before it was answered
  std::function<void()> on_abort_;
  uint64_t bytes_sent_ = 0;
  uint64_t bytes_received_ = 0;
  net::Signal send_signal_;
  net::Signal recv_signal_;
};

struct H2Options {
  std::chrono::milliseconds ping_interval{10'000};
  std::chrono::milliseconds ping_timeout{20'000};
  // Close (GOAWAY) after this long without streams. 0 = never. Clients release pooled
  // connections; servers reclaim connections a client keeps open but never uses.
  std::chrono::milliseconds idle_release{0};
  // Cap on streams we open on a client connection (the pool's limit).
  uint32_t max_streams = 100;
  // Server: GOAWAY(ENHANCE_YOUR_CALM) once the client reset this many streams before they
  // were answered and those are at least half of the streams that ended, per window of
  // 10x this many ended streams (config hbone.max_premature_resets). 0 = no limit.
  uint32_t max_premature_resets = 0;
  // Shared by every connection of the process; null: no bound but the windows.
  std::shared_ptr<ReceiveBudget> receive_budget;
};

class H2Connection : public std::enable_shared_from_this<H2Connection> {
 public:
  enum class Role { kClient, kServer };
  using RequestHandler = std::function<void(std::shared_ptr<H2Stream>)>;
  using CloseHandler = std::function<void(H2Connection&)>;

  // `tls` must have completed its handshake with ALPN h2.
  static std::shared_ptr<H2Connection> create(Role role, std::unique_ptr<TlsStream> tls,
                                              H2Options options);
  ~H2Connection();
  H2Connection(const H2Connection&) = delete;
  H2Connection& operator=(const H2Connection&) = delete;

  // Server: called for every complete request (headers received). The handler owns the
  // stream's fate: it must respond() or reset() it.
  void setRequestHandler(RequestHandler handler) { on_request_ = std::move(handler); }
  void setCloseHandler(CloseHandler handler) { on_close_ = std::move(handler); }

  // Sends the SETTINGS preface and starts the read, write and keepalive loops.
  void start();

  // Client: opens a CONNECT stream with these headers (pseudo-headers first). Data flows
  // after the caller sees status() == 200. Returns nullptr if no stream can be opened
  // (connection closing, stream ids exhausted).
  std::shared_ptr<H2Stream> openStream(const std::vector<Header>& headers);

  // The frame layer alone, without a socket or TLS: what start(), the read loop and the
  // write loop do with plaintext. tests/fuzz/hbone_server_fuzzer.cc drives a server
  // connection through these (never start()ed), so that it explores frames, not handshakes.
  //   startFrames(): queues the SETTINGS preface (start() without its loops);
  //   receiveFrames(): one read pass of decrypted bytes; false once the connection ends;
  //   sendFrames(): what the session has queued (one write batch), empty when nothing;
  //                 valid until the next call.
  void startFrames();
  bool receiveFrames(const uint8_t* data, size_t size);
  std::span<const uint8_t> sendFrames();

  // Sends GOAWAY and closes once in-flight streams ended; no new streams are accepted.
  void drain();
  // Server: GOAWAY with the highest stream id (RFC 9113 §6.8, the graceful shutdown's first
  // step) and no second one: the client opens no more streams here, and every stream it has
  // opened, in flight or not, is still served (a handover to the next ferryd).
  void noticeShutdown();
  // Closes now; every open stream ends with a reset.
  void close(std::string_view why);
  // Connection error (RFC 9113 §5.4.1): no more frames are read, GOAWAY with `error_code`
  // is sent, and the connection closes as soon as it is out (kGoawayGrace at most);
  // every open stream ends with a reset.
  void terminate(uint32_t error_code, std::string_view why);
  // The error code of the GOAWAY this end sent or queued for a connection error (ours or
  // one nghttp2 detected), if any.
  std::optional<uint32_t> goawayError() const { return goaway_error_; }

  bool usable() const { return !closing_ && !dead_; }
  bool dead() const { return dead_; }
  size_t activeStreams() const { return streams_.size(); }
  // How many more streams this client connection takes (pool limit and peer's setting).
  size_t streamCapacity() const;
  const std::string& closeReason() const { return close_reason_; }
  // Bytes received on this connection's streams and not yet written out.
  uint64_t heldReceived() const { return held_; }
  // Reading stopped by the receive budget (H2Options::receive_budget).
  bool readPaused() const { return read_paused_; }
  // Server: closed by the rapid reset rule (H2Options::max_premature_resets), not by
  // another ENHANCE_YOUR_CALM (nghttp2's PING, SETTINGS or CONTINUATION flood limits).
  bool closedForRapidReset() const { return rapid_reset_; }
  // The connection's TCP socket under TLS (tests write raw bytes to it).
  Tcp::socket& socket() { return tls_.socket(); }
  const boost::asio::any_io_executor& executor() const { return executor_; }

 private:
  friend class H2Stream;
  H2Connection(Role role, std::unique_ptr<TlsStream> tls, H2Options options);

  boost::asio::awaitable<void> readLoop();
  boost::asio::awaitable<void> writeLoop();
  boost::asio::awaitable<void> keepaliveLoop();
  // Wakes the write loop.
  void kick() { write_signal_.notify(); }
  // Sends what nghttp2 has queued now, from the caller, when the write loop is parked and we
  // are not inside nghttp2; else kick(). Saves the scheduler round (and the epoll_wait that
  // comes with it) a kick() costs per message. Must be the caller's last use of the
  // connection: a write error fails it, and that may drop the last reference to it.
  void flushNow();
  // For a stream's events: flushNow() while this connection carries one stream, else kick(),
  // so that the frames of many busy streams leave together in one write batch (the write
  // loop runs after every ready handler) instead of one writev per stream event.
  void flush() {
    if (streams_.size() > 1) {
      kick();
    } else {
      flushNow();
    }
  }
  // nghttp2_session_mem_send into one batch, through SSL_write into the channel. False after
  // fail(); `produced` is the number of frame bytes.
  bool produce(size_t& produced);
  // The frame steps of the loops (see startFrames()): the SETTINGS preface; plaintext into
  // nghttp2 (false once the connection ends); the end of a read pass; nghttp2's queued frames
  // into the thread's write batch (false after fail()).
  void submitSettings();
  bool feed(const uint8_t* data, size_t size);
  void endReadPass();
  bool collectFrames();
  enum class Drain { kDone, kBlocked, kFailed };
  // Writes the channel's ciphertext while the socket takes it (kFailed after fail()).
  Drain drainTls();
  // Hands DATA that arrived in this read pass to the streams' sinks, wakes the rest.
  void deliverReceived();
  void fail(std::string_view why);
  void streamClosed(int32_t id, uint32_t error_code);
  void countPrematureReset(bool premature);
  void closeAfterGoaway();
  void consume(int32_t stream_id, size_t size);
  // Received bytes a stream keeps (DATA) and lets go (written out, discarded, destroyed).
  void hold(H2Stream& stream, size_t size);
  void release(H2Stream& stream, size_t size);
  // The read loop's wait while the receive budget is exceeded and this connection holds
  // bytes: until it holds none, the total is back under the budget, or the connection died.
  boost::asio::awaitable<void> pauseReading();
  void resume(H2Stream& stream);
  bool submitData(H2Stream& stream, int status, const std::vector<Header>& extra, bool with_body);

  friend struct H2Callbacks;  // nghttp2 callbacks, defined in the .cc

  // drainTls() until the channel's ciphertext is out, waiting for writability. False after
  // fail().
  boost::asio::awaitable<bool> flushTls();

  Role role_;
  net::TlsChannel tls_;  // owns the SSL object, the socket and the ciphertext chains
  H2Options options_;
  boost::asio::any_io_executor executor_;
  nghttp2_session* session_ = nullptr;
  std::vector<std::pair<int32_t, std::shared_ptr<H2Stream>>> streams_;
  std::vector<std::shared_ptr<H2Stream>> touched_;  // got DATA in this read pass, have a sink
  RequestHandler on_request_;
  CloseHandler on_close_;
  net::Signal write_signal_;
  boost::asio::steady_timer keepalive_timer_;
  std::chrono::steady_clock::time_point last_read_;
  std::chrono::steady_clock::time_point idle_since_;
  bool closing_ = false;  // GOAWAY sent or received: no new streams
  bool dead_ = false;
  bool started_ = false;
  bool in_session_ = false;     // inside nghttp2_session_mem_recv/mem_send (and callbacks)
  bool writer_parked_ = false;  // the write loop waits on write_signal_
  bool data_moved_ = false;     // DATA sent or received since the last keepalive tick
  bool terminating_ = false;    // terminate(): GOAWAY with an error queued, reading stopped
  std::chrono::steady_clock::time_point terminate_deadline_;
  std::optional<uint32_t> goaway_error_;
  bool rapid_reset_ = false;  // closedForRapidReset()
  uint64_t held_ = 0;          // heldReceived()
  bool read_paused_ = false;   // readPaused(): the read loop waits on pause_timer_
  boost::asio::steady_timer pause_timer_;
  // Premature resets (H2Options::max_premature_resets) in the current window.
  uint32_t window_resets_ = 0;
  uint32_t window_ended_ = 0;
  std::string close_reason_;

  std::shared_ptr<H2Stream> findStream(int32_t id) const;
  void eraseStream(int32_t id);
};

}  // namespace ferry::hbone
