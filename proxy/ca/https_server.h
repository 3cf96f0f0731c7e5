#pragma once
// ferry-ca's HTTPS transport (docs/ferry-ca.md): one coroutine per connection, HTTP/1.1 with
// keep-alive, every wait bounded, the body capped before it is read, a cap on connections.
// What a request means is the Handler's business (proxy/ca/signing_service.h); this file
// only turns bytes into calls and answers into bytes, and refuses what is not HTTP.
//
// The TLS context comes from a provider asked once per connection, so a re-issued serving
// certificate reaches every new connection while open ones keep the old one. A connection
// gets its TLS state (~50 KB) only once its first byte is there and starts a TLS handshake:
// a silent connection costs a descriptor and a coroutine frame. After many connections
// closed, freed heap is handed back to the system (malloc_trim), so a flood's memory does not
// stay.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "proxy/common/net.h"

namespace ferry::telemetry {
class Exposition;
}

namespace ferry::ca {

struct HttpsServerOptions {
  common::HostPort listen;
  // Beyond this many open connections a new one is closed at once (counted): a flood cannot
  // grow memory without bound. Each connection costs a TLS session (~50 KB).
  size_t max_connections = 1024;
  // One remote address may hold at most this many of them, so that one client (a broken or
  // hostile node) cannot take every slot from the others. A node daemon asks for its
  // identities a few at a time; a node starting 100 pods at once waits for a free slot.
  size_t max_connections_per_client = 64;
  // TLS handshake; then the request header, from the first byte awaited to the last.
  std::chrono::milliseconds handshake_timeout{10'000};
  std::chrono::milliseconds header_timeout{10'000};
  // The body, once the header said its length; and writing the answer.
  std::chrono::milliseconds body_timeout{10'000};
  std::chrono::milliseconds write_timeout{10'000};
  // A kept-alive connection waits this long for the next request's first byte.
  std::chrono::milliseconds idle_timeout{60'000};
};

// One request as the transport read it: the header fields the service needs and the body.
struct HttpsCall {
  std::string method;
  std::string target;
  std::string authorization;  // the Authorization header, whole ("Bearer ...")
  std::string content_type;
  std::string body;
  std::string remote;  // "ip:port" of the client
};

struct HttpsAnswer {
  int status = 200;
  std::string body;  // JSON
  int retry_after_seconds = -1;  // a Retry-After header when >= 0
  std::string allow;             // an Allow header when not empty (405)
};

// Why the transport answered without asking the handler (the handler is told, for its
// audit line and counters, through Handler::refused).
enum class TransportRefusal { kTooLarge, kBadRequest };

class HttpsHandler {
 public:
  virtual ~HttpsHandler() = default;
  // Runs on the io thread; may suspend (a TokenReview), never block.
  virtual boost::asio::awaitable<HttpsAnswer> handle(HttpsCall call) = 0;
  // A request refused before it was whole: body over the cap, a header that is not HTTP.
  virtual HttpsAnswer refused(TransportRefusal why, std::string message, const std::string& remote) = 0;
};

class HttpsServer {
 public:
  // The context for the next connection; nullptr refuses it (no serving certificate yet).
  using ContextProvider = std::function<std::shared_ptr<boost::asio::ssl::context>()>;

  HttpsServer(boost::asio::io_context& io, HttpsServerOptions options, ContextProvider contexts,
              HttpsHandler& handler);
  ~HttpsServer();

  absl::Status listen();
  // The bound port (the listen port, or the one the kernel chose for port 0).
  uint16_t port() const;
  // Closes the listener and every open connection.
  void stop();
  // Connections open now (io thread).
  size_t openConnections() const { return open_; }

  // ferry_ca_connections{,_refused_total}, ferry_ca_handshake_failures_total, ... .
  void collect(telemetry::Exposition& out) const;

  struct Connection;

 private:
  boost::asio::awaitable<void> acceptLoop();
  boost::asio::awaitable<void> awaitFirstByte(std::shared_ptr<Connection> connection);
  // The TLS handshake of a connection whose first byte is in, with the serving certificate
  // of the moment; false (counted, not yet closed) when there is none or the handshake failed.
  boost::asio::awaitable<bool> handshake(Connection& connection);
  boost::asio::awaitable<void> serve(std::shared_ptr<Connection> connection);
  bool admit(const std::string& client);
  void release(const std::string& client);

  boost::asio::io_context& io_;
  const HttpsServerOptions options_;
  ContextProvider contexts_;
  HttpsHandler& handler_;
  std::unique_ptr<boost::asio::ip::tcp::acceptor> acceptor_;
  uint16_t port_ = 0;
  bool stopped_ = false;

  // io thread only.
  size_t open_ = 0;
  absl::flat_hash_map<std::string, size_t> per_client_;
  absl::flat_hash_map<Connection*, std::weak_ptr<Connection>> connections_;

  std::atomic<uint64_t> accepted_{0};
  std::atomic<uint64_t> refused_cap_{0};
  std::atomic<uint64_t> refused_client_cap_{0};
  std::atomic<uint64_t> refused_no_cert_{0};
  std::atomic<uint64_t> handshake_failures_{0};
  std::atomic<uint64_t> timeouts_{0};
  std::atomic<uint64_t> trims_{0};
  std::atomic<int64_t> open_gauge_{0};
  size_t closes_since_trim_ = 0;  // io thread only
};

}  // namespace ferry::ca
