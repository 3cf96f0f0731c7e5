#pragma once
// A small HTTP/1.1 server (Beast) for the operator endpoints: readiness (15021), metrics
// (15020) and admin (15000). One request per connection; each route names the methods it
// serves (405 otherwise). It runs on the control thread and never touches the data plane:
// a route that needs the workers asks them (routeAsync) and answers when they have.
#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "absl/status/status.h"
#include "proxy/common/net.h"

namespace ferry::server {

enum class HttpMethod { kGet, kPost };
const char* httpMethodName(HttpMethod method);

// Whether an Accept-Encoding value accepts gzip: the token, without ";q=0".
bool acceptsGzip(std::string_view accept_encoding);

struct HttpRequest {
  HttpMethod method = HttpMethod::kGet;
  std::string query;  // after '?', still %-encoded; "" when none
  // Accept-Encoding names gzip (with a q-value above 0): the answer may be compressed.
  bool accepts_gzip = false;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  // Content-Encoding of the body ("gzip"); empty: none.
  std::string content_encoding = {};
  // Runs on the control thread once the answer is written (or could not be): what must
  // happen after the client has its answer (/quitquitquit begins the drain).
  std::function<void()> after_write = nullptr;
};

class HttpServer {
 public:
  using Handler = std::function<HttpResponse()>;
  using QueryHandler = std::function<HttpResponse(const std::string& query)>;
  using RequestHandler = std::function<HttpResponse(const HttpRequest&)>;
  // Called once with the answer, from any thread; the answer is written on the control
  // thread.
  using Reply = std::function<void(HttpResponse)>;
  using AsyncHandler = std::function<void(const HttpRequest&, Reply)>;

  HttpServer(boost::asio::io_context& io, std::string name) : io_(io), name_(std::move(name)) {}

  // GET only.
  void route(std::string path, Handler handler);
  void routeWithQuery(std::string path, QueryHandler handler);
  // The methods listed; another gets 405 with an Allow header.
  void routeRequest(std::string path, std::set<HttpMethod> methods, RequestHandler handler);
  // GET only; the handler replies when it can (the request's connection waits, bounded by
  // kRequestTimeout on the client's side only).
  void routeAsync(std::string path, AsyncHandler handler);

  // Only requests whose Host is an address (an IP literal or `localhost`, with or without a
  // port) are served; others get 403. For the admin endpoint: a page of a name that DNS
  // rebinding pointed at 127.0.0.1 carries that name (docs/security.md, "The admin
  // endpoint"). Whatever this says, every server answers 403 to a POST from a browser
  // (Origin or Sec-Fetch-* present: no tool sends those) and to a POST a page could send
  // without a CORS preflight: one needs the `Ferry-Admin` header or a JSON Content-Type.
  void requireAddressHost() { address_host_only_ = true; }

  // Why a request was answered 403 before its route ran.
  enum class Refusal { kBrowser, kSimplePost, kHost };
  static constexpr size_t kRefusals = 3;
  static const char* refusalName(Refusal r);
  // Requests refused for `r` since start (any thread).
  uint64_t refused(Refusal r) const { return refused_[static_cast<size_t>(r)].load(std::memory_order_relaxed); }

  absl::Status listen(const common::HostPort& addr);
  // Serves on a listening socket received from the running ferryd (a handover).
  absl::Status adopt(int fd);
  // The listening socket's descriptor (-1: none), for the next ferryd.
  int listenerFd() const;
  void stop();

  struct Route {
    std::set<HttpMethod> methods;
    AsyncHandler handler;
  };
  // What the accept loop reads on each request (routes and the Host rule may be set after
  // listen()).
  struct Options {
    const std::map<std::string, Route>* routes = nullptr;
    const bool* address_host_only = nullptr;
    std::array<std::atomic<uint64_t>, kRefusals>* refused = nullptr;
  };

 private:
  boost::asio::io_context& io_;
  std::string name_;
  std::map<std::string, Route> routes_;
  bool address_host_only_ = false;
  std::array<std::atomic<uint64_t>, kRefusals> refused_{};
  std::unique_ptr<boost::asio::ip::tcp::acceptor> acceptor_;
};

}  // namespace ferry::server
