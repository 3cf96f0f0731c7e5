#include "proxy/k8s/http_stream.h"

#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <boost/beast/websocket/ssl.hpp>
#include <boost/beast/websocket/stream.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "proxy/common/strings.h"

namespace ferry::k8s::internal {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using boost::system::error_code;
using tcp = asio::ip::tcp;

namespace {
constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);
// One read's worth of body: big enough that a LIST page arrives in few reads, small enough
// to sit on the control thread's stack frame without thought.
constexpr size_t kReadChunk = 64 * 1024;
}  // namespace

absl::StatusOr<ServerAddress> parseServerUrl(std::string_view url) {
  ServerAddress out;
  const std::string whole(url);
  if (url.substr(0, 8) != "https://") {
    return absl::InvalidArgumentError(absl::StrCat("API server URL must start with https://: '", whole, "'"));
  }
  url.remove_prefix(8);
  if (!url.empty() && url.back() == '/') url.remove_suffix(1);
  if (url.find('/') != std::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat("API server URL has a path (unsupported): '", whole, "'"));
  }
  std::string_view host = url, port = "443";
  if (!host.empty() && host[0] == '[') {
    host.remove_prefix(1);
    size_t close = host.find(']');
    if (close == std::string_view::npos) return absl::InvalidArgumentError("API server URL: unclosed '['");
    std::string_view rest = host.substr(close + 1);
    host = host.substr(0, close);
    if (!rest.empty()) {
      if (rest[0] != ':') return absl::InvalidArgumentError("API server URL: junk after ']'");
      port = rest.substr(1);
    }
  } else if (size_t colon = host.rfind(':'); colon != std::string_view::npos) {
    port = host.substr(colon + 1);
    host = host.substr(0, colon);
  }
  int port_num = 0;
  if (host.empty() || !absl::SimpleAtoi(common::toAbsl(port), &port_num) || port_num < 1 || port_num > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("API server URL: bad host or port in '", whole, "'"));
  }
  out.host = std::string(host);
  out.port = std::string(port);
  error_code ec;
  asio::ip::make_address(out.host, ec);
  out.host_is_ip = !ec;
  return out;
}

bool isTimeout(const error_code& ec) { return ec == beast::error::timeout; }

struct HttpStream::Impl {
  Impl(asio::io_context& io, asio::ssl::context& tls, const ServerAddress& s)
      : resolver(io), stream(io, tls), server(s) {}
  tcp::resolver resolver;
  beast::ssl_stream<beast::tcp_stream> stream;
  ServerAddress server;
  beast::flat_buffer buffer;
  http::response_parser<http::buffer_body> parser;
  char body[kReadChunk];
};

HttpStream::HttpStream(asio::io_context& io, asio::ssl::context& tls, const ServerAddress& server)
    : impl_(std::make_unique<Impl>(io, tls, server)) {
  // A watch body has no bound of its own; limits on events are enforced above this layer.
  impl_->parser.body_limit(boost::none);
  impl_->parser.header_limit(64 * 1024);
}

HttpStream::~HttpStream() = default;

asio::awaitable<error_code> HttpStream::connect(std::chrono::milliseconds timeout) {
  Impl& s = *impl_;
  auto& tcp_layer = beast::get_lowest_layer(s.stream);
  tcp_layer.expires_after(timeout);
  auto [rerr, endpoints] = co_await s.resolver.async_resolve(s.server.host, s.server.port, kTuple);
  if (rerr) co_return rerr;
  auto [cerr, ep] = co_await tcp_layer.async_connect(endpoints, kTuple);
  if (cerr) co_return cerr;
  SSL* ssl = s.stream.native_handle();
  // The server's certificate must carry the host we dialled: its DNS name (and SNI), or the
  // IP literal as an IP SAN (the in-cluster address is the kubernetes Service's ClusterIP),
  // or the name we were told it carries.
  if (!s.server.verify_name.empty()) {
    SSL_set_tlsext_host_name(ssl, s.server.verify_name.c_str());
    SSL_set1_host(ssl, s.server.verify_name.c_str());
  } else if (s.server.host_is_ip) {
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), s.server.host.c_str());
  } else {
    SSL_set_tlsext_host_name(ssl, s.server.host.c_str());
    SSL_set1_host(ssl, s.server.host.c_str());
  }
  auto [herr] = co_await s.stream.async_handshake(asio::ssl::stream_base::client, kTuple);
  co_return herr;
}

std::string HttpStream::hostHeader() const {
  const ServerAddress& a = impl_->server;
  return a.host_is_ip && a.host.find(':') != std::string::npos ? absl::StrCat("[", a.host, "]:", a.port)
                                                               : absl::StrCat(a.host, ":", a.port);
}

asio::awaitable<HttpStream::Channels> HttpStream::channels(const Request& request, std::chrono::milliseconds timeout) {
  Impl& s = *impl_;
  Channels out;
  const auto until = std::chrono::steady_clock::now() + timeout;
  if ((out.ec = co_await connect(timeout))) co_return out;
  websocket::stream<beast::ssl_stream<beast::tcp_stream>&> ws(s.stream);
  // The WebSocket's own timers from here (beast's rule: not both).
  beast::get_lowest_layer(s.stream).expires_never();
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
  websocket::stream_base::timeout limits{left, left, false};
  ws.set_option(limits);
  ws.set_option(websocket::stream_base::decorator([&request](websocket::request_type& req) {
    req.set(http::field::user_agent, request.user_agent);
    req.set(http::field::sec_websocket_protocol, "v4.channel.k8s.io");
    if (!request.bearer.empty()) req.set(http::field::authorization, absl::StrCat("Bearer ", request.bearer));
  }));
  websocket::response_type response;
  auto [werr] = co_await ws.async_handshake(response, hostHeader(), request.target, kTuple);
  if (werr) {
    if (werr == websocket::error::upgrade_declined) {
      out.refused_status = response.result_int();
      out.refused_body = response.body();
    }
    out.ec = werr;
    co_return out;
  }
  beast::flat_buffer buffer;
  for (;;) {
    auto [rerr, n] = co_await ws.async_read(buffer, kTuple);
    // The server sends the status (channel 3) last and closes: once it is here, how the
    // connection ends (a close frame, or a reset before beast could answer it) says nothing.
    if (rerr == websocket::error::closed || (rerr && !out.status.empty())) break;
    if (rerr) {
      out.ec = rerr;
      co_return out;
    }
    std::string_view message(static_cast<const char*>(buffer.data().data()), buffer.size());
    if (!message.empty()) {
      std::string_view bytes = message.substr(1);
      switch (message[0]) {
        case 1: out.out.append(bytes); break;
        case 2: out.err.append(bytes); break;
        case 3: out.status.append(bytes); break;
        default: break;  // stdin (0) never comes back; resize (4) is ours to send
      }
    }
    buffer.consume(buffer.size());
    if (std::chrono::steady_clock::now() > until) {
      out.ec = beast::error::timeout;
      co_return out;
    }
  }
  co_return out;
}

asio::awaitable<error_code> HttpStream::open(const Request& request, std::chrono::milliseconds timeout) {
  Impl& s = *impl_;
  if (auto err = co_await connect(timeout)) co_return err;
  http::verb verb = http::string_to_verb(request.method);
  if (verb != http::verb::get && verb != http::verb::post && verb != http::verb::put) {
    co_return make_error_code(boost::system::errc::invalid_argument);
  }
  http::request<http::string_body> req{verb, request.target, 11};
  req.set(http::field::host, hostHeader());
  req.set(http::field::user_agent, request.user_agent);
  req.set(http::field::accept, "application/json");
  if (!request.bearer.empty()) req.set(http::field::authorization, absl::StrCat("Bearer ", request.bearer));
  if (req.method() != http::verb::get) {
    req.set(http::field::content_type, request.content_type);
    req.body() = request.body;
    req.prepare_payload();
  }
  auto [werr, wn] = co_await http::async_write(s.stream, req, kTuple);
  if (werr) co_return werr;
  auto [hderr, hn] = co_await http::async_read_header(s.stream, s.buffer, s.parser, kTuple);
  co_return hderr;
}

int HttpStream::status() const { return impl_->parser.get().result_int(); }

int HttpStream::retryAfterSeconds() const {
  auto it = impl_->parser.get().find(http::field::retry_after);
  if (it == impl_->parser.get().end()) return -1;
  int seconds = -1;
  absl::string_view v(it->value().data(), it->value().size());
  if (!absl::SimpleAtoi(v, &seconds) || seconds < 0) return -1;
  return seconds;
}

asio::awaitable<std::pair<error_code, std::string_view>> HttpStream::readSome(std::chrono::milliseconds deadline) {
  Impl& s = *impl_;
  if (s.parser.is_done()) co_return std::pair{error_code{}, std::string_view{}};
  beast::get_lowest_layer(s.stream).expires_after(deadline);
  for (;;) {
    s.parser.get().body().data = s.body;
    s.parser.get().body().size = sizeof(s.body);
    auto [err, n] = co_await http::async_read_some(s.stream, s.buffer, s.parser, kTuple);
    if (err == http::error::need_buffer) err = {};
    if (err) co_return std::pair{err, std::string_view{}};
    size_t got = sizeof(s.body) - s.parser.get().body().size;
    if (got > 0) co_return std::pair{error_code{}, std::string_view(s.body, got)};
    // Header-only progress (a chunk header, a chunk extension): read on, unless done.
    if (s.parser.is_done()) co_return std::pair{error_code{}, std::string_view{}};
  }
}

asio::awaitable<error_code> HttpStream::readAll(std::string& out, size_t limit, std::chrono::milliseconds deadline) {
  for (;;) {
    auto [err, piece] = co_await readSome(deadline);
    if (err) co_return err;
    if (piece.empty()) co_return error_code{};
    if (out.size() + piece.size() > limit) co_return make_error_code(boost::system::errc::file_too_large);
    out.append(piece);
  }
}

void HttpStream::close() {
  error_code ignored;
  beast::get_lowest_layer(impl_->stream).socket().close(ignored);
}

}  // namespace ferry::k8s::internal
