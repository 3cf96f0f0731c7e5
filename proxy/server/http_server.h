#pragma once
// A small HTTP/1.1 server (Beast) for the operator endpoints: readiness (15021), metrics
// (15020) and admin (15000). GET only, one request per connection; it runs on the control
// thread and never touches the data plane.
#include <functional>
#include <map>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "absl/status/status.h"
#include "proxy/common/net.h"

namespace ferry::server {

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

class HttpServer {
 public:
  using Handler = std::function<HttpResponse()>;
  // Gets the request's query string (after '?', still %-encoded; "" when none).
  using QueryHandler = std::function<HttpResponse(const std::string& query)>;
  HttpServer(boost::asio::io_context& io, std::string name) : io_(io), name_(std::move(name)) {}

  void route(std::string path, Handler handler) {
    routes_[std::move(path)] = [handler = std::move(handler)](const std::string&) { return handler(); };
  }
  void routeWithQuery(std::string path, QueryHandler handler) { routes_[std::move(path)] = std::move(handler); }
  absl::Status listen(const common::HostPort& addr);
  void stop();

 private:
  boost::asio::io_context& io_;
  std::string name_;
  std::map<std::string, QueryHandler> routes_;
  std::unique_ptr<boost::asio::ip::tcp::acceptor> acceptor_;
};

}  // namespace ferry::server
