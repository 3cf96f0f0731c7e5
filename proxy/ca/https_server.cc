#include "proxy/ca/https_server.h"

#include <malloc.h>
#include <sys/socket.h>

#include <optional>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>

#include "absl/strings/str_cat.h"
#include "proxy/ca/protocol.h"
#include "proxy/net/socket_io.h"
#include "proxy/common/log.h"
#include "proxy/telemetry/metrics.h"

namespace ferry::ca {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::ip::tcp;
using boost::system::error_code;

namespace {
constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);
// A request header of ferry's client is ~1.5 KB (the bearer token is most of it); a
// projected token can reach ~2 KB with long names. Twice that leaves room; more is no client
// of ours.
constexpr uint32_t kMaxHeaderBytes = 8 * 1024;
// After accept errors (out of descriptors, most likely): a short pause instead of a spin.
constexpr auto kAcceptBackoff = std::chrono::milliseconds(50);
// The listen backlog: connections the kernel holds while the io thread is busy signing.
constexpr int kBacklog = 1024;
// When freed heap goes back to the system (HttpsServer::release).
constexpr size_t kTrimAfterCloses = 512;
constexpr size_t kTrimWhenIdleAfter = 16;
// The first byte of a TLS handshake record (RFC 8446 §5.1).
constexpr uint8_t kTlsHandshakeRecord = 0x16;

using Stream = beast::ssl_stream<beast::tcp_stream>;

std::string remoteOf(const tcp::socket& socket) {
  error_code ec;
  auto ep = socket.remote_endpoint(ec);
  if (ec) return "unknown";
  return common::formatHostPort(common::canonicalIp(ep.address()), ep.port());
}

std::string clientOf(const tcp::socket& socket) {
  error_code ec;
  auto ep = socket.remote_endpoint(ec);
  if (ec) return "unknown";
  return common::canonicalIp(ep.address()).to_string();
}

bool isTimeout(const error_code& ec) { return ec == beast::error::timeout; }

// The parser's own errors (bad method, bad field, ...) but not the peer leaving early.
bool isMalformed(const error_code& ec) {
  return ec.category() == error_code(http::error::bad_method).category() && ec != http::error::end_of_stream &&
         ec != http::error::partial_message;
}

// A body declared too large is read and dropped up to this size before the 413 is sent: a
// client that is still sending when the socket closes gets a reset instead of the answer.
constexpr uint64_t kDrainLimit = 1u << 20;

// Reads and drops the `left` bytes of a body that will not be served (or until an error).
asio::awaitable<void> dropBody(Stream& stream, uint64_t left) {
  char scratch[4096];
  while (left > 0) {
    auto [derr, dn] = co_await stream.async_read_some(
        asio::buffer(scratch, std::min<uint64_t>(left, sizeof(scratch))), kTuple);
    if (derr) break;
    left -= dn;
  }
}

// The answer to a request that could not be read: too large, or not HTTP/1.1; nothing when
// the read failed otherwise (the peer left, or was too slow).
std::optional<HttpsAnswer> refusedAsRead(HttpsHandler& handler, const error_code& ec, const std::string& remote) {
  if (ec == http::error::body_limit) {
    return handler.refused(TransportRefusal::kTooLarge, absl::StrCat("the body is over ", kMaxRequestBytes, " bytes"),
                           remote);
  }
  if (ec == http::error::header_limit) {
    return handler.refused(TransportRefusal::kBadRequest,
                           absl::StrCat("the request header is over ", kMaxHeaderBytes, " bytes"), remote);
  }
  if (isMalformed(ec)) {
    return handler.refused(TransportRefusal::kBadRequest, absl::StrCat("not an HTTP/1.1 request: ", ec.message()),
                           remote);
  }
  return std::nullopt;
}

// What the handler is given of a request read whole (its body moved out).
HttpsCall callOf(http::request<http::string_body>& req, const std::string& remote) {
  HttpsCall call;
  call.method = std::string(req.method_string());
  call.target = std::string(req.target());
  call.authorization = std::string(req[http::field::authorization]);
  call.content_type = std::string(req[http::field::content_type]);
  call.body = std::move(req.body());
  call.remote = remote;
  return call;
}

// The HTTP/1.1 response carrying `answer` (its body moved out).
http::response<http::string_body> responseOf(HttpsAnswer& answer, bool keep_alive) {
  http::response<http::string_body> res{static_cast<http::status>(answer.status), 11};
  res.set(http::field::content_type, "application/json");
  if (answer.retry_after_seconds >= 0) res.set(http::field::retry_after, std::to_string(answer.retry_after_seconds));
  if (!answer.allow.empty()) res.set(http::field::allow, answer.allow);
  res.keep_alive(keep_alive);
  res.body() = std::move(answer.body);
  res.prepare_payload();
  return res;
}

}  // namespace

struct HttpsServer::Connection {
  explicit Connection(tcp::socket socket) : raw(std::move(socket)) {}
  // The socket until its first byte; then the TLS stream over it (TLS state only from there).
  tcp::socket raw;
  std::optional<Stream> stream;
  std::shared_ptr<asio::ssl::context> tls_keep;  // the context outlives the stream using it
  std::string client;
  std::string remote;
  std::chrono::steady_clock::time_point deadline;  // of the handshake, from accept
  void close() {
    error_code ignored;
    if (stream) {
      beast::get_lowest_layer(*stream).socket().close(ignored);
    } else {
      raw.close(ignored);
    }
  }
};

HttpsServer::HttpsServer(asio::io_context& io, HttpsServerOptions options, ContextProvider contexts,
                         HttpsHandler& handler)
    : io_(io), options_(std::move(options)), contexts_(std::move(contexts)), handler_(handler) {}

HttpsServer::~HttpsServer() { stop(); }

absl::Status HttpsServer::listen() {
  tcp::endpoint ep(options_.listen.ip, options_.listen.port);
  auto acceptor = std::make_unique<tcp::acceptor>(io_);
  error_code ec;
  acceptor->open(ep.protocol(), ec);
  if (!ec) acceptor->set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor->bind(ep, ec);
  if (!ec) acceptor->listen(kBacklog, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("ferry-ca: cannot listen on ", common::formatHostPort(options_.listen), ": ", ec.message()));
  }
  port_ = acceptor->local_endpoint(ec).port();
  acceptor_ = std::move(acceptor);
  // The reactor's per-socket states for as many connections as may be open, made now so that
  // a flood leaves no heap behind that malloc_trim cannot give back.
  net::warmSocketStates(io_, options_.max_connections + 1);
  stopped_ = false;
  asio::co_spawn(io_, acceptLoop(), asio::detached);
  return absl::OkStatus();
}

uint16_t HttpsServer::port() const { return port_; }

void HttpsServer::stop() {
  stopped_ = true;
  if (acceptor_) {
    error_code ignored;
    acceptor_->close(ignored);
  }
  for (auto& [raw, weak] : connections_) {
    if (auto c = weak.lock()) c->close();
  }
}

bool HttpsServer::admit(const std::string& client) {
  if (open_ >= options_.max_connections) {
    refused_cap_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  size_t& mine = per_client_[client];
  if (mine >= options_.max_connections_per_client) {
    if (mine == 0) per_client_.erase(client);
    refused_client_cap_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  ++mine;
  ++open_;
  open_gauge_.store(static_cast<int64_t>(open_), std::memory_order_relaxed);
  return true;
}

void HttpsServer::release(const std::string& client) {
  --open_;
  open_gauge_.store(static_cast<int64_t>(open_), std::memory_order_relaxed);
  auto it = per_client_.find(client);
  if (it != per_client_.end() && --it->second == 0) per_client_.erase(it);
  // glibc keeps freed heap for reuse; after a flood that would be the flood's size for good.
  // A trim costs about a millisecond: after every kTrimAfterCloses closes, or once the
  // server is idle again after some.
  ++closes_since_trim_;
  if (closes_since_trim_ >= kTrimAfterCloses || (open_ == 0 && closes_since_trim_ >= kTrimWhenIdleAfter)) {
    closes_since_trim_ = 0;
    ::malloc_trim(0);
    trims_.fetch_add(1, std::memory_order_relaxed);
  }
}

asio::awaitable<void> HttpsServer::acceptLoop() {
  // The acceptor lives as long as the server; stop() closes it and this loop ends.
  tcp::acceptor& acceptor = *acceptor_;
  common::LogLimiter refusal_log{5, std::chrono::seconds(10)};
  for (;;) {
    auto [ec, socket] = co_await acceptor.async_accept(kTuple);
    if (stopped_ || ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
    if (ec) {
      asio::steady_timer backoff(io_, kAcceptBackoff);
      co_await backoff.async_wait(kTuple);
      continue;
    }
    accepted_.fetch_add(1, std::memory_order_relaxed);
    std::string client = clientOf(socket);
    if (!admit(client)) {
      // Closed before the handshake: the client sees a reset and retries with back-off.
      if (refusal_log.allow()) FERRY_LOG(kWarn, "ferry-ca: refusing a connection from %s: connection cap reached", client);
      continue;
    }
    auto connection = std::make_shared<Connection>(std::move(socket));
    connection->client = std::move(client);
    connection->remote = remoteOf(connection->raw);
    connections_[connection.get()] = connection;
    asio::co_spawn(io_, awaitFirstByte(std::move(connection)), asio::detached);
  }
}

// The first byte, within the handshake timeout, before any TLS state is made: a small frame
// of its own, so that a silent connection does not hold serve()'s (a few KB: the parser, the
// buffers), nor leave it behind as heap that cannot go back to the system.
asio::awaitable<void> HttpsServer::awaitFirstByte(std::shared_ptr<Connection> c) {
  c->deadline = std::chrono::steady_clock::now() + options_.handshake_timeout;
  asio::steady_timer deadline(io_, c->deadline);
  deadline.async_wait([c](const error_code& ec) {
    if (!ec) {
      error_code ignored;
      c->raw.cancel(ignored);
    }
  });
  auto [werr] = co_await c->raw.async_wait(tcp::socket::wait_read, kTuple);
  deadline.cancel();
  uint8_t first = 0;
  ssize_t n = werr ? -1 : ::recv(c->raw.native_handle(), &first, 1, MSG_PEEK | MSG_DONTWAIT);
  if (werr || n != 1 || first != kTlsHandshakeRecord || stopped_) {
    if (werr == asio::error::operation_aborted && !stopped_) timeouts_.fetch_add(1, std::memory_order_relaxed);
    handshake_failures_.fetch_add(1, std::memory_order_relaxed);
    c->close();
    connections_.erase(c.get());
    release(c->client);
    co_return;
  }
  asio::co_spawn(io_, serve(std::move(c)), asio::detached);
}

asio::awaitable<bool> HttpsServer::handshake(Connection& c) {
  std::shared_ptr<asio::ssl::context> tls = contexts_ ? contexts_() : nullptr;
  if (tls == nullptr) {
    refused_no_cert_.fetch_add(1, std::memory_order_relaxed);
    co_return false;
  }
  c.stream.emplace(std::move(c.raw), *tls);
  c.tls_keep = std::move(tls);
  beast::get_lowest_layer(*c.stream).expires_at(c.deadline);
  auto [herr] = co_await c.stream->async_handshake(asio::ssl::stream_base::server, kTuple);
  if (herr) {
    if (isTimeout(herr)) timeouts_.fetch_add(1, std::memory_order_relaxed);
    handshake_failures_.fetch_add(1, std::memory_order_relaxed);
    FERRY_LOG(kDebug, "ferry-ca: TLS handshake with %s failed: %s", c.remote, herr.message());
    co_return false;
  }
  co_return true;
}

asio::awaitable<void> HttpsServer::serve(std::shared_ptr<Connection> c) {
  const HttpsServerOptions& o = options_;
  auto finish = [this, &c] {
    connections_.erase(c.get());
    release(c->client);
  };
  if (!co_await handshake(*c)) {
    c->close();
    co_return finish();
  }
  auto& tcp_layer = beast::get_lowest_layer(*c->stream);
  beast::flat_buffer buffer(kMaxHeaderBytes);
  for (bool first = true; !stopped_; first = false) {
    http::request_parser<http::string_body> parser;
    parser.header_limit(kMaxHeaderBytes);
    parser.body_limit(kMaxRequestBytes);
    // A kept-alive connection may wait for its next request, but a header once begun must
    // arrive whole within header_timeout (a slow drip of bytes holds no slot for long).
    if (!first && buffer.size() == 0) {
      tcp_layer.expires_after(o.idle_timeout);
      auto [perr, n] = co_await c->stream->async_read_some(buffer.prepare(kMaxHeaderBytes), kTuple);
      if (perr) {
        if (isTimeout(perr)) timeouts_.fetch_add(1, std::memory_order_relaxed);
        break;
      }
      buffer.commit(n);
    }
    tcp_layer.expires_after(o.header_timeout);
    auto [rerr, rn] = co_await http::async_read_header(*c->stream, buffer, parser, kTuple);
    std::optional<HttpsAnswer> answer;
    if (!rerr) {
      // The declared length is checked before a byte of body is read.
      auto length = parser.content_length();
      if (length && *length > kMaxRequestBytes) {
        if (*length <= kDrainLimit) {
          tcp_layer.expires_after(o.body_timeout);
          co_await dropBody(*c->stream, *length - std::min<uint64_t>(*length, buffer.size()));
        }
        answer = handler_.refused(TransportRefusal::kTooLarge,
                                  absl::StrCat("the body is ", *length, " bytes; at most ", kMaxRequestBytes),
                                  c->remote);
      } else {
        tcp_layer.expires_after(o.body_timeout);
        std::tie(rerr, rn) = co_await http::async_read(*c->stream, buffer, parser, kTuple);
      }
    }
    if (rerr) {
      answer = refusedAsRead(handler_, rerr, c->remote);
      if (!answer) {
        // The peer left, or was too slow: no one to answer.
        if (isTimeout(rerr)) timeouts_.fetch_add(1, std::memory_order_relaxed);
        break;
      }
    }
    bool keep_alive = false;
    if (!answer) {
      auto& req = parser.get();
      keep_alive = req.keep_alive();
      answer = co_await handler_.handle(callOf(req, c->remote));
    }
    http::response<http::string_body> res = responseOf(*answer, keep_alive && !stopped_);
    tcp_layer.expires_after(o.write_timeout);
    auto [werr, wn] = co_await http::async_write(*c->stream, res, kTuple);
    if (werr || !res.keep_alive()) break;
  }
  if (!stopped_) {
    // close_notify, bounded: a peer that does not read must not hold the slot.
    tcp_layer.expires_after(o.write_timeout);
    co_await c->stream->async_shutdown(kTuple);
  }
  c->close();
  finish();
}

void HttpsServer::collect(telemetry::Exposition& out) const {
  out.gauge("ferry_ca_connections", "Open connections to the signing port",
            static_cast<double>(open_gauge_.load(std::memory_order_relaxed)));
  out.counter("ferry_ca_connections_total", "Connections accepted on the signing port",
              static_cast<double>(accepted_.load(std::memory_order_relaxed)));
  out.counter("ferry_ca_connections_refused_total", "Connections closed at accept, by reason")
      .add(static_cast<double>(refused_cap_.load(std::memory_order_relaxed)), {{"reason", "max_connections"}})
      .add(static_cast<double>(refused_client_cap_.load(std::memory_order_relaxed)),
           {{"reason", "max_connections_per_client"}})
      .add(static_cast<double>(refused_no_cert_.load(std::memory_order_relaxed)), {{"reason", "no_serving_cert"}});
  out.counter("ferry_ca_handshake_failures_total", "TLS handshakes on the signing port that failed",
              static_cast<double>(handshake_failures_.load(std::memory_order_relaxed)));
  out.counter("ferry_ca_timeouts_total", "Connections closed because a handshake, header, body or idle wait timed out",
              static_cast<double>(timeouts_.load(std::memory_order_relaxed)));
  out.counter("ferry_ca_memory_trims_total", "Times freed heap was handed back to the system after connections closed",
              static_cast<double>(trims_.load(std::memory_order_relaxed)));
}

}  // namespace ferry::ca
