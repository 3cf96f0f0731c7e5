#include "proxy/hbone/h2_connection.h"

#include <nghttp2/nghttp2.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <span>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/write.hpp>

#include "absl/strings/str_cat.h"
#include "proxy/common/log.h"

#include "proxy/net/socket_io.h"

namespace ferry::hbone {
namespace asio = boost::asio;
using asio::awaitable;
using asio::use_awaitable;
using Clock = std::chrono::steady_clock;

namespace {
// One TLS write gathers up to this many bytes of frames: several 16 KiB records per syscall.
constexpr size_t kWriteBatch = 128 * 1024;
// Ciphertext one read() may bring in: several records per syscall.
constexpr size_t kSocketRead = 128 * 1024;
// A connection whose reading the receive budget stopped looks at the process's total this
// often (its own bytes written out wake it at once): a wake-up from the other workers'
// writes would cost a cross-thread post per write.
constexpr auto kPauseRecheck = std::chrono::milliseconds(20);
// Plaintext out of SSL_read, handed to nghttp2 at once: one buffer per worker thread, as
// nothing waits between the two (an idle connection holds no read buffer).
constexpr size_t kPlainBuffer = 64 * 1024;
thread_local std::array<uint8_t, kPlainBuffer> t_plain;
// Frames of one write batch on their way into SSL_write: per worker thread as well, since
// SSL_write has consumed them before the writer waits for anything. It grows without
// zero-filling: DATA is copied straight into the room extend() makes, where
// std::vector::resize would first write zeros over every byte sent (about 1 % of ferryd's
// CPU under iperf3).
class FrameBatch {
 public:
  // Room for `n` more bytes, valid until the next extend() or append().
  uint8_t* extend(size_t n) {
    if (size_ + n > capacity_) grow(size_ + n);
    uint8_t* at = data_.get() + size_;
    size_ += n;
    return at;
  }
  void append(const uint8_t* p, size_t n) { std::memcpy(extend(n), p, n); }
  void clear() { size_ = 0; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const uint8_t* data() const { return data_.get(); }

 private:
  void grow(size_t need) {
    // A batch stops after the frame that crosses kWriteBatch (DATA frames are 16 KiB at most).
    size_t capacity = std::max({need, capacity_ * 2, kWriteBatch + 32 * 1024});
    auto bigger = std::make_unique_for_overwrite<uint8_t[]>(capacity);
    if (size_ > 0) std::memcpy(bigger.get(), data_.get(), size_);
    data_ = std::move(bigger);
    capacity_ = capacity;
  }
  std::unique_ptr<uint8_t[]> data_;
  size_t size_ = 0;
  size_t capacity_ = 0;
};
thread_local FrameBatch t_batch;

// The GOAWAY a fatal error of nghttp2_session_mem_recv() deserves, and why. nghttp2 sends
// no GOAWAY for these itself: it only reports them (errors it does answer, such as a bad
// frame, a bad HPACK block or a window overflow, come back as success with their GOAWAY
// already queued).
std::pair<uint32_t, const char*> goawayFor(ssize_t rv) {
  switch (rv) {
    case NGHTTP2_ERR_FLOODED:
      // More frames that demand an answer (PING, SETTINGS) than we keep answers queued for,
      // CVE-2019-9512 / -9515.
      return {kH2EnhanceYourCalm, "flood of frames that demand an answer (PING or SETTINGS)"};
    case NGHTTP2_ERR_TOO_MANY_CONTINUATIONS:
      // A header block split over more frames than any real client needs: our limit, not a
      // protocol violation, hence "calm" rather than PROTOCOL_ERROR (CVE-2024-27316 family).
      return {kH2EnhanceYourCalm, "header block in more CONTINUATION frames than allowed"};
    case NGHTTP2_ERR_BAD_CLIENT_MAGIC:
      return {kH2ProtocolError, "no HTTP/2 client preface"};
    default:
      return {kH2InternalError, nghttp2_strerror(static_cast<int>(rv))};
  }
}

nghttp2_nv makeNv(const Header& h) {
  return nghttp2_nv{reinterpret_cast<uint8_t*>(const_cast<char*>(h.name.data())),
                    reinterpret_cast<uint8_t*>(const_cast<char*>(h.value.data())), h.name.size(),
                    h.value.size(), NGHTTP2_NV_FLAG_NONE};
}
}  // namespace

// --- nghttp2 callbacks -------------------------------------------------------------------
struct H2Callbacks {

static int onBeginHeaders(nghttp2_session*, const nghttp2_frame* frame, void* user) {
  auto* self = static_cast<H2Connection*>(user);
  if (self->role_ != H2Connection::Role::kServer || frame->hd.type != NGHTTP2_HEADERS ||
      frame->headers.cat != NGHTTP2_HCAT_REQUEST) {
    return 0;
  }
  if (self->closing_) {
    nghttp2_submit_rst_stream(self->session_, NGHTTP2_FLAG_NONE, frame->hd.stream_id,
                              NGHTTP2_REFUSED_STREAM);
    return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  }
  auto stream = std::make_shared<H2Stream>(*self, self->executor_);
  stream->id_ = frame->hd.stream_id;
  stream->keep_alive_ = self->shared_from_this();
  self->streams_.emplace_back(stream->id_, stream);
  nghttp2_session_set_stream_user_data(self->session_, stream->id_, stream.get());
  return 0;
}

static int onHeader(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name,
                    size_t namelen, const uint8_t* value, size_t valuelen, uint8_t, void* user) {
  auto* self = static_cast<H2Connection*>(user);
  if (frame->hd.type != NGHTTP2_HEADERS) return 0;
  auto stream = self->findStream(frame->hd.stream_id);
  if (!stream || stream->headers_done_) return 0;  // trailers are ignored
  stream->header_bytes_ += namelen + valuelen + 32;  // RFC 9113 §6.5.2's size
  if (stream->header_bytes_ > kMaxHeaderBlock) {
    self->terminate(kH2EnhanceYourCalm, absl::StrCat("protocol error from peer: header block over ",
                                                     kMaxHeaderBlock / 1024, " KiB"));
    return NGHTTP2_ERR_CALLBACK_FAILURE;
  }
  uint32_t cap = self->role_ == H2Connection::Role::kServer ? kServerMaxHeaderList : kClientMaxHeaderList;
  if (stream->header_bytes_ > cap) {
    // Answered when the block is complete (onFrameRecv); decoding goes on meanwhile, so that
    // the rest of the block is counted against kMaxHeaderBlock.
    stream->headers_too_large_ = true;
    std::vector<Header>().swap(stream->headers_);
    return 0;
  }
  if (stream->headers_too_large_) return 0;
  std::string n(reinterpret_cast<const char*>(name), namelen);
  std::string v(reinterpret_cast<const char*>(value), valuelen);
  if (self->role_ == H2Connection::Role::kClient && n == ":status") {
    int status = 0;
    for (char c : v) status = status * 10 + (c - '0');
    stream->status_ = status;
  }
  stream->headers_.push_back(Header{std::move(n), std::move(v)});
  return 0;
}

static int onFrameRecv(nghttp2_session*, const nghttp2_frame* frame, void* user) {
  auto* self = static_cast<H2Connection*>(user);
  switch (frame->hd.type) {
    case NGHTTP2_RST_STREAM: {
      // A request we were still working on (connecting upstream) that the client gave up:
      // the raw material of rapid reset (streamClosed() counts it).
      if (self->role_ != H2Connection::Role::kServer) return 0;
      auto stream = self->findStream(frame->hd.stream_id);
      if (stream && stream->headers_done_ && !stream->responded_) stream->premature_ = true;
      return 0;
    }
    case NGHTTP2_GOAWAY:
      self->closing_ = true;
      return 0;
    case NGHTTP2_HEADERS: {
      auto stream = self->findStream(frame->hd.stream_id);
      if (!stream) return 0;
      bool first = !stream->headers_done_;
      stream->headers_done_ = true;
      if (first && stream->headers_too_large_) {
        // This stream only: a server answers 431 (RFC 6585), a client gives the response up.
        if (self->role_ == H2Connection::Role::kServer) {
          stream->respond(431);
        } else {
          stream->reset(kH2InternalError);
        }
        return 0;
      }
      if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) stream->remote_eof_ = true;
      stream->recv_signal_.notify();
      if (first && self->role_ == H2Connection::Role::kServer && self->on_request_) self->on_request_(stream);
      return 0;
    }
    case NGHTTP2_DATA: {
      if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) {
        if (auto stream = self->findStream(frame->hd.stream_id)) {
          stream->remote_eof_ = true;
          stream->recv_signal_.notify();
        }
      }
      return 0;
    }
    default:
      return 0;
  }
}

static int onDataChunk(nghttp2_session*, uint8_t, int32_t stream_id, const uint8_t* data,
                              size_t len, void* user) {
  auto* self = static_cast<H2Connection*>(user);
  auto stream = self->findStream(stream_id);
  if (!stream || stream->reset_) {
    // Nobody will write these bytes out: return the window at once.
    nghttp2_session_consume(self->session_, stream_id, len);
    return 0;
  }
  stream->received_.append(reinterpret_cast<const char*>(data), len);
  self->hold(*stream, len);
  stream->bytes_received_ += len;
  self->data_moved_ = true;
  if (stream->sink_ == nullptr) {
    stream->recv_signal_.notify();
  } else if (!stream->touched_) {
    stream->touched_ = true;  // delivered after this read pass (deliverReceived)
    self->touched_.push_back(std::move(stream));
  }
  return 0;
}

// After an error answer (HEADERS with END_STREAM) the request side may still be open: tell
// the client to stop sending (RFC 9113 §8.1). Queued any earlier, the RST_STREAM would
// make nghttp2 drop the answer itself.
static int onFrameSend(nghttp2_session*, const nghttp2_frame* frame, void* user) {
  auto* self = static_cast<H2Connection*>(user);
  if (frame->hd.type == NGHTTP2_GOAWAY && frame->goaway.error_code != NGHTTP2_NO_ERROR) {
    // Ours (terminate()) or one nghttp2 sent for a violation it detected itself.
    if (!self->goaway_error_) self->goaway_error_ = frame->goaway.error_code;
    if (self->close_reason_.empty()) {
      self->close_reason_ = absl::StrCat(
          "protocol error from peer: ",
          absl::string_view(reinterpret_cast<const char*>(frame->goaway.opaque_data),
                            frame->goaway.opaque_data_len));
    }
    self->closing_ = true;
    if (!self->terminating_) {  // nghttp2's own: it too gets kGoawayGrace to leave
      self->terminating_ = true;
      self->terminate_deadline_ = Clock::now() + kGoawayGrace;
      self->keepalive_timer_.cancel();
    }
    return 0;
  }
  if (self->role_ != H2Connection::Role::kServer || frame->hd.type != NGHTTP2_HEADERS ||
      !(frame->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
    return 0;
  }
  auto stream = self->findStream(frame->hd.stream_id);
  if (stream && !stream->remote_eof_) {
    nghttp2_submit_rst_stream(self->session_, NGHTTP2_FLAG_NONE, frame->hd.stream_id,
                              NGHTTP2_NO_ERROR);
  }
  return 0;
}

static int onStreamClose(nghttp2_session*, int32_t stream_id, uint32_t error_code,
                                void* user) {
  static_cast<H2Connection*>(user)->streamClosed(stream_id, error_code);
  return 0;
}

// DATA leaves without nghttp2's own copy: readData only says how much (NO_COPY) and
// sendData appends the frame header and the bytes, straight from the stream's send
// chain, to the write batch that goes into SSL_write.
static ssize_t readData(nghttp2_session*, int32_t, uint8_t*, size_t length,
                        uint32_t* data_flags, nghttp2_data_source* source, void*) {
  auto* stream = static_cast<H2Stream*>(source->ptr);
  if (stream->pending_.empty()) {
    if (stream->local_eof_) {
      *data_flags |= NGHTTP2_DATA_FLAG_EOF;
      return 0;
    }
    stream->deferred_ = true;
    return NGHTTP2_ERR_DEFERRED;
  }
  size_t n = std::min(length, stream->pending_.size());
  *data_flags |= NGHTTP2_DATA_FLAG_NO_COPY;
  if (n == stream->pending_.size() && stream->local_eof_) *data_flags |= NGHTTP2_DATA_FLAG_EOF;
  return static_cast<long>(n);
}

static int sendData(nghttp2_session*, nghttp2_frame*, const uint8_t* framehd, size_t length,
                    nghttp2_data_source* source, void* user) {
  auto* stream = static_cast<H2Stream*>(source->ptr);
  auto& out = t_batch;
  out.append(framehd, 9);  // we never pad
  stream->pending_.copyOut(reinterpret_cast<char*>(out.extend(length)), length);
  stream->bytes_sent_ += length;
  static_cast<H2Connection*>(user)->data_moved_ = true;
  stream->send_signal_.notify();
  // A full batch goes to SSL_write before nghttp2 packs more (mem_send returns now).
  return out.size() >= kWriteBatch ? NGHTTP2_ERR_PAUSE : 0;
}

};

// ---------------------------------------------------------------------------------------
// H2Stream

H2Stream::H2Stream(H2Connection& conn, const asio::any_io_executor& ex)
    : conn_(conn), send_signal_(ex), recv_signal_(ex) {}

// What it still holds leaves the budget with it (keep_alive_ outlives this body).
H2Stream::~H2Stream() {
  if (held_ > 0) conn_.release(*this, held_);
}

size_t H2Stream::sendSpace() const {
  size_t queued = pending_.size();
  return queued >= kStreamSendBuffer ? 0 : kStreamSendBuffer - queued;
}

void H2Stream::send(const char* data, size_t size) {
  if (closed_ || reset_ || local_eof_) return;
  pending_.append(data, size);
  conn_.resume(*this);
}

void H2Stream::sent(size_t size) {
  if (closed_ || reset_ || local_eof_) {
    pending_.commit(0);
    return;
  }
  pending_.commit(size);
  conn_.resume(*this);  // last: may flush, and a failed flush may free the connection
}

void H2Stream::sendEof() {
  if (closed_ || reset_ || local_eof_) return;
  local_eof_ = true;
  conn_.resume(*this);
}

void H2Stream::reset(uint32_t error_code) {
  if (closed_ || reset_) return;
  if (id_ > 0 && conn_.session_ && !conn_.dead_) {
    nghttp2_submit_rst_stream(conn_.session_, NGHTTP2_FLAG_NONE, id_, error_code);
    conn_.kick();
  }
  markReset(error_code);
  notifyAll();
}

void H2Stream::markReset(uint32_t code) {
  if (reset_) return;
  reset_ = code;
  if (on_abort_) {
    auto abort = std::move(on_abort_);
    on_abort_ = nullptr;
    abort();
  }
}

void H2Stream::consumed(size_t size) {
  if (size == 0) return;
  conn_.release(*this, size);
  conn_.consume(id_, size);  // last: may flush, and a failed flush may end the connection
}

void H2Stream::discardReceived() {
  size_t n = received_.size();
  if (n == 0) return;
  received_.clear();
  consumed(n);
}

std::string H2Stream::header(std::string_view name) const {
  for (const auto& h : headers_) {
    if (h.name == name) return h.value;
  }
  return "";
}

void H2Stream::respond(int status, const std::vector<Header>& extra) {
  if (responded_ || closed_ || reset_ || conn_.dead_) return;
  responded_ = true;
  conn_.submitData(*this, status, extra, status == 200);
}

// ---------------------------------------------------------------------------------------
// H2Connection

std::shared_ptr<H2Connection> H2Connection::create(Role role, std::unique_ptr<TlsStream> tls,
                                                   H2Options options) {
  return std::shared_ptr<H2Connection>(new H2Connection(role, std::move(tls), options));
}

H2Connection::H2Connection(Role role, std::unique_ptr<TlsStream> tls, H2Options options)
    : role_(role),
      tls_(std::move(tls)),
      options_(options),
      executor_(tls_.socket().get_executor()),
      write_signal_(executor_),
      keepalive_timer_(executor_),
      pause_timer_(executor_) {
  nghttp2_session_callbacks* cbs = nullptr;
  nghttp2_session_callbacks_new(&cbs);
  nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, &H2Callbacks::onBeginHeaders);
  nghttp2_session_callbacks_set_on_header_callback(cbs, &H2Callbacks::onHeader);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, &H2Callbacks::onFrameRecv);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, &H2Callbacks::onDataChunk);
  nghttp2_session_callbacks_set_on_stream_close_callback(cbs, &H2Callbacks::onStreamClose);
  nghttp2_session_callbacks_set_on_frame_send_callback(cbs, &H2Callbacks::onFrameSend);
  nghttp2_session_callbacks_set_send_data_callback(cbs, &H2Callbacks::sendData);

  nghttp2_option* opt = nullptr;
  nghttp2_option_new(&opt);
  // Window updates follow what was written to the application socket (backpressure).
  nghttp2_option_set_no_auto_window_update(opt, 1);
  // A peer may not flood us with SETTINGS or with frames that demand an ACK (CVE-2019-9515,
  // -9512); these are nghttp2's defaults written down so that they cannot silently change.
  nghttp2_option_set_max_settings(opt, 32);
  nghttp2_option_set_max_outbound_ack(opt, 1000);
  nghttp2_option_set_max_continuations(opt, 8);
  // Rapid reset (CVE-2023-44487): GOAWAY after a burst of 1000 resets, 33/s sustained.
  nghttp2_option_set_stream_reset_rate_limit(opt, 1000, 33);
  if (role_ == H2Connection::Role::kServer) {
    nghttp2_session_server_new2(&session_, cbs, this, opt);
  } else {
    nghttp2_option_set_peer_max_concurrent_streams(opt, options_.max_streams);
    nghttp2_session_client_new2(&session_, cbs, this, opt);
  }
  nghttp2_option_del(opt);
  nghttp2_session_callbacks_del(cbs);
  last_read_ = idle_since_ = Clock::now();
}

H2Connection::~H2Connection() {
  if (session_) nghttp2_session_del(session_);
}

void H2Connection::submitSettings() {
  std::vector<nghttp2_settings_entry> settings = {
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, static_cast<uint32_t>(kStreamWindow)},
      {NGHTTP2_SETTINGS_MAX_FRAME_SIZE, kMaxFrameSize},
      {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
  };
  if (role_ == H2Connection::Role::kServer) {
    settings.push_back({NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, kServerMaxConcurrentStreams});
    settings.push_back({NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, kServerMaxHeaderList});
  } else {
    settings.push_back({NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, kClientMaxHeaderList});
  }
  nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings.data(), settings.size());
  nghttp2_session_set_local_window_size(session_, NGHTTP2_FLAG_NONE, 0, kConnectionWindow);
}

void H2Connection::startFrames() {
  if (started_) return;
  started_ = true;
  submitSettings();
}

bool H2Connection::receiveFrames(const uint8_t* data, size_t size) {
  bool open = feed(data, size);
  if (open) endReadPass();
  return open && !dead_;
}

std::span<const uint8_t> H2Connection::sendFrames() {
  if (dead_ || !collectFrames()) return {};
  return {t_batch.data(), t_batch.size()};
}

void H2Connection::start() {
  if (started_) return;
  started_ = true;
  submitSettings();
  auto self = shared_from_this();
  auto log_exception = [self](std::exception_ptr e) {
    if (!e) return;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      self->fail(absl::StrCat("internal error: ", ex.what()));
    }
  };
  asio::co_spawn(executor_, readLoop(), log_exception);
  asio::co_spawn(executor_, writeLoop(), log_exception);
  asio::co_spawn(executor_, keepaliveLoop(), log_exception);
}

std::shared_ptr<H2Stream> H2Connection::findStream(int32_t id) const {
  for (const auto& [sid, s] : streams_) {
    if (sid == id) return s;
  }
  return nullptr;
}

void H2Connection::eraseStream(int32_t id) {
  auto it = std::find_if(streams_.begin(), streams_.end(),
                         [id](const auto& p) { return p.first == id; });
  if (it == streams_.end()) return;
  std::swap(*it, streams_.back());
  streams_.pop_back();
  if (streams_.empty()) idle_since_ = Clock::now();
}

size_t H2Connection::streamCapacity() const {
  if (!usable()) return 0;
  uint32_t peer = nghttp2_session_get_remote_settings(session_,
                                                      NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS);
  size_t limit = std::min<size_t>(options_.max_streams, peer);
  return streams_.size() >= limit ? 0 : limit - streams_.size();
}

std::shared_ptr<H2Stream> H2Connection::openStream(const std::vector<Header>& headers) {
  if (role_ != H2Connection::Role::kClient || !usable()) return nullptr;
  auto stream = std::make_shared<H2Stream>(*this, executor_);
  std::vector<nghttp2_nv> nva;
  nva.reserve(headers.size());
  for (const auto& h : headers) nva.push_back(makeNv(h));
  nghttp2_data_provider provider{};
  provider.source.ptr = stream.get();
  provider.read_callback = &H2Callbacks::readData;
  int32_t id = nghttp2_submit_request(session_, nullptr, nva.data(), nva.size(), &provider,
                                      stream.get());
  if (id < 0) {
    FERRY_LOG(kDebug, "hbone: cannot open stream: %s", nghttp2_strerror(id));
    if (id == NGHTTP2_ERR_STREAM_ID_NOT_AVAILABLE) closing_ = true;
    return nullptr;
  }
  stream->id_ = id;
  stream->keep_alive_ = shared_from_this();
  streams_.emplace_back(id, stream);
  flush();
  return stream;
}

bool H2Connection::submitData(H2Stream& stream, int status, const std::vector<Header>& extra,
                              bool with_body) {
  std::string status_text = std::to_string(status);
  std::vector<nghttp2_nv> nva;
  Header status_header{":status", status_text};
  nva.push_back(makeNv(status_header));
  for (const auto& h : extra) nva.push_back(makeNv(h));
  nghttp2_data_provider provider{};
  provider.source.ptr = &stream;
  provider.read_callback = &H2Callbacks::readData;
  int rv = nghttp2_submit_response(session_, stream.id_, nva.data(), nva.size(),
                                   with_body ? &provider : nullptr);
  if (rv != 0) {
    FERRY_LOG(kDebug, "hbone: cannot respond on stream %d: %s", stream.id_, nghttp2_strerror(rv));
    return false;
  }
  flush();
  return true;
}

void H2Connection::resume(H2Stream& stream) {
  if (stream.deferred_ && session_ && !dead_ && stream.id_ > 0) {
    stream.deferred_ = false;
    nghttp2_session_resume_data(session_, stream.id_);
  }
  flush();
}

void H2Connection::hold(H2Stream& stream, size_t size) {
  stream.held_ += size;
  held_ += size;
  if (options_.receive_budget) options_.receive_budget->add(size);
}

void H2Connection::release(H2Stream& stream, size_t size) {
  size = std::min(size, stream.held_);
  stream.held_ -= size;
  held_ -= size;
  if (options_.receive_budget) options_.receive_budget->release(size);
  if (held_ == 0 && read_paused_) pause_timer_.cancel();
}

awaitable<void> H2Connection::pauseReading() {
  auto self = shared_from_this();
  auto& budget = *options_.receive_budget;
  budget.countPause();
  read_paused_ = true;
  FERRY_LOG(kDebug, "hbone: receive budget of %llu bytes exceeded; connection holding %llu stops reading",
            static_cast<unsigned long long>(budget.limit()), static_cast<unsigned long long>(held_));
  while (!dead_ && held_ > 0 && budget.exceeded()) {
    pause_timer_.expires_after(kPauseRecheck);
    co_await pause_timer_.async_wait(asio::as_tuple(use_awaitable));  // cancelled by release()
  }
  read_paused_ = false;
  // The peer was not silent: we did not listen (keepaliveLoop).
  last_read_ = Clock::now();
}

void H2Connection::consume(int32_t stream_id, size_t size) {
  if (dead_) return;
  if (stream_id > 0 && nghttp2_session_find_stream(session_, stream_id) != nullptr) {
    nghttp2_session_consume(session_, stream_id, size);
  } else {
    nghttp2_session_consume_connection(session_, size);
  }
  // Most consumes owe the peer no WINDOW_UPDATE yet (nghttp2 sends one per half window).
  if (nghttp2_session_want_write(session_)) flush();
}

void H2Connection::flushNow() {
  if (dead_) return;
  if (in_session_ || !writer_parked_) {
    kick();
    return;
  }
  auto self = shared_from_this();  // fail() below may drop every other reference
  size_t produced = 0;
  if (!produce(produced)) return;
  switch (drainTls()) {
    case Drain::kFailed:
      return;
    case Drain::kBlocked:
      kick();  // the write loop waits for the socket
      return;
    case Drain::kDone:
      break;
  }
  // More than one batch, or the write loop's end-of-connection checks may apply now.
  if (closing_ || streams_.empty() || nghttp2_session_want_write(session_)) kick();
}

void H2Connection::deliverReceived() {
  if (touched_.empty()) return;
  auto touched = std::move(touched_);
  touched_.clear();
  // As with flush(): with several streams, waking their relays lets this read loop take in
  // what else has arrived first, so each relay writes more per writev (writing from here
  // per read pass cost about 10 % of 4-stream iperf3 throughput).
  bool direct = streams_.size() == 1;
  for (auto& stream : touched) {
    stream->touched_ = false;
    if (direct && stream->sink_ != nullptr && !stream->reset_ && !dead_) {
      stream->sink_->onReceived(*stream);
    }
    if (stream->hasReceived()) stream->recv_signal_.notify();
  }
  touched.clear();
  if (touched_.empty()) touched_.swap(touched);  // keep the capacity
}

void H2Connection::drain() {
  if (dead_ || closing_) return;
  closing_ = true;
  if (role_ == H2Connection::Role::kServer) {
    nghttp2_submit_shutdown_notice(session_);
  }
  nghttp2_submit_goaway(session_, NGHTTP2_FLAG_NONE,
                        nghttp2_session_get_last_proc_stream_id(session_), NGHTTP2_NO_ERROR,
                        nullptr, 0);
  kick();
}

void H2Connection::noticeShutdown() {
  if (dead_ || closing_ || role_ != Role::kServer) return;
  nghttp2_submit_shutdown_notice(session_);
  kick();
}

const char* h2ErrorName(uint32_t code) {
  static constexpr const char* kNames[] = {
      "no_error",           "protocol_error",      "internal_error",  "flow_control_error",
      "settings_timeout",   "stream_closed",       "frame_size_error", "refused_stream",
      "cancel",             "compression_error",   "connect_error",   "enhance_your_calm",
      "inadequate_security", "http_1_1_required"};
  return code < std::size(kNames) ? kNames[code] : "unknown";
}

void H2Connection::close(std::string_view why) { fail(why); }

void H2Connection::terminate(uint32_t error_code, std::string_view why) {
  if (dead_ || terminating_) return;
  terminating_ = true;
  closing_ = true;
  goaway_error_ = error_code;
  close_reason_ = std::string(why);
  FERRY_LOG(kDebug, "hbone: connection error %s: %s", h2ErrorName(error_code), why);
  // Queues GOAWAY(last stream, error_code); once it is sent nghttp2 neither reads nor writes
  // anything else, and the write loop closes the connection.
  int rv = nghttp2_session_terminate_session(session_, error_code);
  if (rv != 0) {
    fail(absl::StrCat(common::toAbsl(why), " (no GOAWAY: ", nghttp2_strerror(rv), ")"));
    return;
  }
  terminate_deadline_ = Clock::now() + kGoawayGrace;
  keepalive_timer_.cancel();  // it now waits for terminate_deadline_
  kick();
}

void H2Connection::fail(std::string_view why) {
  if (dead_) return;
  dead_ = true;
  closing_ = true;
  close_reason_ = std::string(why);
  FERRY_LOG(kDebug, "hbone: connection closed: %s", why);
  boost::system::error_code ignored;
  if (streams_.empty()) {
    // ferryd's sockets are armed with SO_LINGER {1, 0} so that a crash resets them
    // (net::closeGracefully); a tunnel that carries nothing any more ends with a FIN.
    // One that still carries streams keeps the reset: they did not end.
    tls_.socket().set_option(boost::asio::socket_base::linger(false, 0), ignored);
  }
  tls_.socket().shutdown(Tcp::socket::shutdown_both, ignored);
  tls_.socket().close(ignored);
  keepalive_timer_.cancel();
  pause_timer_.cancel();
  write_signal_.notify();
  auto streams = std::move(streams_);
  streams_.clear();
  for (auto& s : touched_) s->touched_ = false;
  touched_.clear();  // they hold the connection (keep_alive_)
  // The streams keep their keep_alive_: their owners may still call them, and a stream
  // refers to its connection.
  for (auto& [id, s] : streams) {
    s->closed_ = true;
    if (!s->reset_ && !(s->remote_eof_ && s->local_eof_ && s->pending_.empty())) {
      s->markReset(kH2InternalError);
    }
    s->notifyAll();
  }
  if (on_close_) {
    auto cb = std::move(on_close_);
    cb(*this);
  }
}

void H2Connection::streamClosed(int32_t id, uint32_t error_code) {
  auto stream = findStream(id);
  if (!stream) return;
  stream->closed_ = true;
  // A stream that closes without both END_STREAMs ended abnormally.
  if (!stream->reset_ && (error_code != NGHTTP2_NO_ERROR || !stream->remote_eof_)) {
    stream->markReset(error_code == NGHTTP2_NO_ERROR ? kH2Cancel : error_code);
  }
  stream->notifyAll();
  eraseStream(id);  // the stream keeps its keep_alive_ (see fail())
  countPrematureReset(stream->premature_);
}

// Rapid reset (CVE-2023-44487): each request costs us an upstream connect, each reset costs
// the client one frame. Envoy's rule: a client whose resets of unanswered streams are at
// least half of its ended streams, once there are enough of them, is abusing us. Counted
// per window of ended streams, so that a long-lived connection's history neither excuses
// nor condemns it.
void H2Connection::countPrematureReset(bool premature) {
  uint32_t limit = options_.max_premature_resets;
  if (role_ != H2Connection::Role::kServer || limit == 0 || terminating_) return;
  ++window_ended_;
  if (premature) ++window_resets_;
  if (premature && window_resets_ >= limit && window_resets_ * 2 >= window_ended_) {
    rapid_reset_ = true;
    terminate(kH2EnhanceYourCalm,
              absl::StrCat("rapid reset: the client reset ", window_resets_, " of ", window_ended_,
                           " streams before they were answered"));
    return;
  }
  if (window_ended_ >= 10 * limit) window_ended_ = window_resets_ = 0;
}

awaitable<void> H2Connection::readLoop() {
  auto self = shared_from_this();
  auto& socket = tls_.socket();
  boost::system::error_code ignored;
  socket.non_blocking(true, ignored);
  net::Drained drained = net::Drained::kNo;  // what the last read left (readAvailable)
  while (!dead_) {
    // Decrypt every complete record buffered, feeding nghttp2 as we go.
    bool any = false;
    for (;;) {
      std::string error;
      int n = tls_.decrypt(t_plain.data(), t_plain.size(), error);
      if (n == 0) break;
      if (n < 0) {
        fail(error);
        co_return;
      }
      any = true;
      if (!feed(t_plain.data(), static_cast<size_t>(n))) co_return;
    }
    if (any) {
      endReadPass();
      if (dead_) co_return;
    }
    // SETTINGS and PING acknowledgements, WINDOW_UPDATEs, records SSL_read produced itself
    // (a KeyUpdate answer, an alert).
    if (tls_.hasCiphertextOut() || nghttp2_session_want_write(session_)) flushNow();
    if (dead_) co_return;
    // Past the process's receive budget: a connection that holds unwritten bytes waits for
    // its application; the others read one record at a time.
    size_t read_size = kSocketRead;
    if (options_.receive_budget && options_.receive_budget->exceeded()) {
      if (held_ > 0) {
        co_await pauseReading();
        if (dead_) co_return;
      }
      if (options_.receive_budget->exceeded()) read_size = kPressuredRead;
    }
    if (drained != net::Drained::kNo) {
      auto [wec] = co_await net::asyncReadable(socket, asio::as_tuple(use_awaitable));
      if (wec && !dead_) {
        fail(absl::StrCat("read: ", wec.message()));
        co_return;
      }
      if (dead_) co_return;
    }
    // More ciphertext: straight into the chain's blocks, several records per read().
    boost::system::error_code ec;
    tls_.readCiphertext(read_size, drained, ec);
    if (ec == asio::error::would_block) continue;
    if (ec) {
      // A close without close_notify is how HTTP/2 peers usually leave: not an error.
      fail(ec == asio::error::eof ? std::string("peer closed the connection")
                                  : absl::StrCat("read: ", ec.message()));
      co_return;
    }
    last_read_ = Clock::now();
  }
}

// Plaintext from SSL_read into nghttp2. False when the read loop must stop: a protocol
// error (the writer closes the connection once the GOAWAY is out) or the connection died.
bool H2Connection::feed(const uint8_t* data, size_t size) {
  in_session_ = true;
  ssize_t rv = nghttp2_session_mem_recv(session_, data, size);
  in_session_ = false;
  if (rv < 0) {
    auto [code, what] = goawayFor(rv);
    terminate(code, absl::StrCat("protocol error from peer: ", what));
    return false;  // the writer closes the connection once the GOAWAY is out
  }
  // Nothing more is read after a connection error, ours or nghttp2's (a GOAWAY with an
  // error went out or is queued).
  return !(dead_ || terminating_ || goaway_error_);
}

void H2Connection::endReadPass() {
  if (nghttp2_session_get_remote_settings(session_, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS) == 0) {
    // Peer allows no streams: treat as draining.
    if (role_ == H2Connection::Role::kClient) closing_ = true;
  }
  // Written out by the streams' sinks where they can, in one gathered write each.
  deliverReceived();
  if (dead_) return;
  // The write loop's end-of-connection checks (GOAWAY seen, last stream closed).
  if (closing_) kick();
}

bool H2Connection::collectFrames() {
  auto& out = t_batch;
  out.clear();
  in_session_ = true;
  while (out.size() < kWriteBatch) {
    const uint8_t* data = nullptr;
    ssize_t n = nghttp2_session_mem_send(session_, &data);
    if (n < 0) {
      in_session_ = false;
      fail(absl::StrCat("http2: ", nghttp2_strerror(static_cast<int>(n))));
      return false;
    }
    if (n == 0) break;
    out.append(data, static_cast<size_t>(n));
  }
  in_session_ = false;
  return true;
}

bool H2Connection::produce(size_t& produced) {
  if (!collectFrames()) return false;
  auto& out = t_batch;
  produced = out.size();
  if (out.empty()) return true;
  std::string error;
  if (!tls_.encrypt(out.data(), out.size(), error)) {
    fail(error);
    return false;
  }
  return true;
}

H2Connection::Drain H2Connection::drainTls() {
  if (dead_) return Drain::kFailed;
  boost::system::error_code ec;
  switch (tls_.drain(ec)) {
    case net::TlsChannel::Drain::kDone:
      return Drain::kDone;
    case net::TlsChannel::Drain::kBlocked:
      return Drain::kBlocked;
    case net::TlsChannel::Drain::kFailed:
      break;
  }
  fail(absl::StrCat("write: ", ec.message()));
  return Drain::kFailed;
}

// Sends everything SSL_write queued in the channel: one writev of the queued blocks while the
// socket takes them, waiting for writability otherwise.
awaitable<bool> H2Connection::flushTls() {
  auto& socket = tls_.socket();
  for (;;) {
    switch (drainTls()) {
      case Drain::kDone:
        co_return true;
      case Drain::kFailed:
        co_return false;
      case Drain::kBlocked:
        break;
    }
    auto [wec] = co_await socket.async_wait(Tcp::socket::wait_write, asio::as_tuple(use_awaitable));
    if (dead_) co_return false;
    if (wec) {
      fail(absl::StrCat("write: ", wec.message()));
      co_return false;
    }
  }
}

awaitable<void> H2Connection::writeLoop() {
  auto self = shared_from_this();
  while (!dead_) {
    size_t produced = 0;
    if (!produce(produced)) co_return;
    if (tls_.hasCiphertextOut() && !co_await flushTls()) co_return;
    if (produced > 0) continue;  // nghttp2 may have more than one batch
    if (!nghttp2_session_want_read(session_) && !nghttp2_session_want_write(session_)) {
      // After a GOAWAY with an error (nghttp2 stops both once it is sent): close at once,
      // whatever streams are still open.
      if (goaway_error_) {
        closeAfterGoaway();
        co_return;
      }
      fail(closing_ ? "closed after GOAWAY" : "session finished");
      co_return;
    }
    if (closing_ && streams_.empty() && !nghttp2_session_want_write(session_)) {
      // Drained: GOAWAY sent (or protocol error), nothing in flight.
      boost::system::error_code ignored;
      tls_.socket().shutdown(Tcp::socket::shutdown_send, ignored);
      fail(close_reason_.empty() ? "drained" : close_reason_);
      co_return;
    }
    // Parked: flush() may now write from its caller.
    writer_parked_ = true;
    co_await write_signal_.wait();
    writer_parked_ = false;
  }
}

// The GOAWAY is in the socket: FIN after it, then close. Bytes the peer sent that we will
// never read are dropped first (bounded), else close() answers them with a RST that may
// overtake the GOAWAY on a real network.
void H2Connection::closeAfterGoaway() {
  auto& socket = tls_.socket();
  boost::system::error_code ignored;
  // The GOAWAY ends the streams for the peer, so this close is an orderly one: disarm the
  // reset-on-close (SO_LINGER {1, 0}, net::closeGracefully), which would discard a
  // GOAWAY still in the send queue (a full peer window, on a real network) with the FIN.
  socket.set_option(boost::asio::socket_base::linger(false, 0), ignored);
  socket.shutdown(Tcp::socket::shutdown_send, ignored);
  for (int i = 0; i < 16; ++i) {
    boost::system::error_code ec;
    size_t n = socket.read_some(asio::buffer(t_plain), ec);
    if (ec || n == 0) break;
  }
  fail(close_reason_.empty() ? std::string("closed after GOAWAY") : close_reason_);
}

awaitable<void> H2Connection::keepaliveLoop() {
  auto self = shared_from_this();
  while (!dead_) {
    if (terminating_) {
      // terminate(): the GOAWAY has kGoawayGrace to leave.
      keepalive_timer_.expires_at(terminate_deadline_);
      co_await keepalive_timer_.async_wait(asio::as_tuple(use_awaitable));
      if (dead_) co_return;
      if (Clock::now() >= terminate_deadline_) {
        fail(absl::StrCat(close_reason_, " (the peer did not take the GOAWAY in time)"));
        co_return;
      }
      continue;
    }
    keepalive_timer_.expires_after(options_.ping_interval);
    co_await keepalive_timer_.async_wait(asio::as_tuple(use_awaitable));  // cancelled on close
    if (dead_) co_return;
    if (terminating_) continue;
    auto now = Clock::now();
    if (!read_paused_ && now - last_read_ >= options_.ping_timeout) {
      fail("peer silent for longer than the ping timeout");
      co_return;
    }
    if (options_.idle_release.count() > 0 && streams_.empty() &&
        now - idle_since_ >= options_.idle_release) {
      FERRY_LOG(kDebug, "hbone: releasing idle %s connection",
                role_ == H2Connection::Role::kClient ? "pool" : "server");
      drain();
      continue;
    }
    // No DATA either way for a whole interval: give OpenSSL's record buffers back (it
    // allocates them again with the next record; it keeps them if they hold anything).
    if (!data_moved_) tls_.releaseBuffers();
    data_moved_ = false;
    nghttp2_submit_ping(session_, NGHTTP2_FLAG_NONE, nullptr);
    kick();
  }
}

}  // namespace ferry::hbone
