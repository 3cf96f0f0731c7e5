#pragma once
// One HTTP/1.1 request over its own TLS connection, with the response body read piece by
// piece, as a watch needs. Beast undoes the chunked framing; what comes out of readSome() is
// body bytes cut wherever the network cut them. Used by proxy/k8s (the API server) and
// proxy/ca (ferry-ca, whose clients dial an address that is not the name they verify).
#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/system/error_code.hpp>

#include "absl/status/statusor.h"

namespace ferry::k8s::internal {

struct ServerAddress {
  std::string host;  // without brackets
  std::string port;
  bool host_is_ip = false;
  // The DNS name the server's certificate must carry (and the SNI) when it differs from
  // `host`: a Service dialled by its ClusterIP where there is no cluster DNS. Empty: `host`.
  std::string verify_name;
};
// "https://host[:port]" (default port 443), "https://[v6]:port". Paths are refused: ferry
// does not support API servers behind a path prefix.
absl::StatusOr<ServerAddress> parseServerUrl(std::string_view url);

// True for the error a deadline of open() / readSome() ends with.
bool isTimeout(const boost::system::error_code& ec);

class HttpStream {
 public:
  HttpStream(boost::asio::io_context& io, boost::asio::ssl::context& tls, const ServerAddress& server);
  ~HttpStream();

  struct Request {
    std::string method = "GET";  // GET, POST or PUT (anything else fails open())
    std::string target;
    std::string bearer;          // Authorization: Bearer, when not empty
    std::string user_agent;
    std::string body;            // sent with POST and PUT as `content_type`
    std::string content_type = "application/json";
  };
  // Connects, verifies the server's certificate against the CA and the host (name or IP, or
  // verify_name), sends the request and reads the response header, all within `timeout`.
  boost::asio::awaitable<boost::system::error_code> open(const Request& request, std::chrono::milliseconds timeout);
  int status() const;
  // Retry-After in seconds (the only form the API server sends), or -1.
  int retryAfterSeconds() const;

  // The next piece of body, waiting at most `deadline` for it. An empty piece with no error
  // means the body is complete (for a watch: the server's timeoutSeconds ended it).
  boost::asio::awaitable<std::pair<boost::system::error_code, std::string_view>> readSome(
      std::chrono::milliseconds deadline);
  // The whole body, refused beyond `limit` bytes.
  boost::asio::awaitable<boost::system::error_code> readAll(std::string& out, size_t limit,
                                                            std::chrono::milliseconds deadline);
  // Closes the socket at once (an in-flight read completes with operation_aborted).
  void close();

  // A WebSocket in place of a request: the exec subresource's streams, as kubectl exec reads
  // them with the v4.channel.k8s.io protocol (every message: one byte naming the channel,
  // then its bytes). Connects as open() does, sends the upgrade with `request`'s target,
  // bearer and user agent, and collects each channel until the server closes, all within
  // `timeout`. `refused_status`: the HTTP status when the server refused the upgrade.
  struct Channels {
    boost::system::error_code ec;
    int refused_status = 0;
    std::string refused_body;  // the refusal's body (a metav1.Status in JSON)
    std::string out, err, status;  // channels 1, 2 and 3 (a metav1.Status in JSON)
  };
  boost::asio::awaitable<Channels> channels(const Request& request, std::chrono::milliseconds timeout);

 private:
  // Resolves, connects and completes the TLS handshake, verifying the server as open() says.
  boost::asio::awaitable<boost::system::error_code> connect(std::chrono::milliseconds timeout);
  std::string hostHeader() const;

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ferry::k8s::internal
