#include "proxy/server/http_server.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include <optional>
#include <vector>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proxy/common/log.h"
#include "proxy/net/deadline.h"

namespace ferry::server {
namespace asio = boost::asio;
namespace http = boost::beast::http;
using asio::ip::tcp;

namespace {
constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);
// A scrape or probe is tiny; anything slower than this is a stuck or hostile client.
constexpr auto kRequestTimeout = std::chrono::seconds(5);
// Requests carry their arguments in the query; a POST body is read and ignored, and one
// larger than this is no request for these endpoints.
constexpr size_t kMaxBody = 1024;

using Routes = std::map<std::string, HttpServer::Route>;

std::optional<HttpMethod> methodOf(http::verb verb) {
  switch (verb) {
    case http::verb::get: return HttpMethod::kGet;
    case http::verb::post: return HttpMethod::kPost;
    default: return std::nullopt;
  }
}

std::string allowed(const std::set<HttpMethod>& methods) {
  std::vector<const char*> names;
  for (auto m : methods) names.push_back(httpMethodName(m));
  return absl::StrJoin(names, ", ");
}

// Runs the route's handler; its answer, which may come from another thread (a worker), is
// posted to `ex`, which resumes the waiting coroutine there, never inline. An initiation
// for async_initiate (a plain function, not a coroutine of its own).
auto askRoute(const HttpServer::Route& route, const HttpRequest& request, asio::any_io_executor ex) {
  return [&route, &request, ex](auto handler) {
    auto shared = std::make_shared<decltype(handler)>(std::move(handler));
    route.handler(request, [shared, ex](HttpResponse response) {
      asio::post(ex, [shared, response = std::move(response)]() mutable { (*shared)(std::move(response)); });
    });
  };
}

// The Host header names an address: an IP literal ([v6] bracketed) or localhost, with or
// without a port. A name is what a DNS-rebinding page sends (its own name, now resolving
// to 127.0.0.1); ferryctl, curl to an address, kubectl port-forward and probes send these.
bool hostIsAnAddress(std::string_view host) {
  std::string_view name = host;
  if (!name.empty() && name.front() == '[') {
    auto close = name.find(']');
    if (close == std::string_view::npos) return false;
    std::string_view rest = name.substr(close + 1);
    if (!rest.empty() && (rest.front() != ':' || rest.size() == 1)) return false;
    name = name.substr(1, close - 1);
    return common::parseIp(std::string(name)).ok();
  }
  if (auto colon = name.find(':'); colon != std::string_view::npos) {
    std::string_view port = name.substr(colon + 1);
    if (port.empty() || port.find_first_not_of("0123456789") != std::string_view::npos) return false;
    name = name.substr(0, colon);
  }
  return absl::AsciiStrToLower(std::string(name)) == "localhost" || common::parseIp(std::string(name)).ok();
}

// A POST a web page can make a browser send without a CORS preflight is "simple": its
// Content-Type is text/plain, a form's or none, and it carries no header of its own. One with
// `Ferry-Admin` (any value) or a JSON Content-Type would need the preflight, which nothing
// here answers, so a browser never sends it cross-origin (the Fetch standard's CORS rules).
bool nonSimplePost(const http::request<http::string_body>& req) {
  if (req.find("Ferry-Admin") != req.end()) return true;
  auto type = req.find(http::field::content_type);
  if (type == req.end()) return false;
  std::string value = absl::AsciiStrToLower(std::string(type->value()));
  return value == "application/json" || value.rfind("application/json;", 0) == 0;
}

struct Refused {
  HttpServer::Refusal why;
  std::string text;
};

// Why a request is refused before its route runs, if it is.
std::optional<Refused> refusal(const http::request<http::string_body>& req, bool address_host_only) {
  if (req.method() == http::verb::post) {
    for (const char* header : {"Origin", "Sec-Fetch-Site", "Sec-Fetch-Mode"}) {
      if (req.find(header) != req.end()) {
        return Refused{HttpServer::Refusal::kBrowser,
                       absl::StrCat("a POST carrying ", header, " (a browser's) is refused: use ferryctl or curl\n")};
      }
    }
    if (!nonSimplePost(req)) {
      return Refused{HttpServer::Refusal::kSimplePost,
                     "a POST needs the header 'Ferry-Admin: 1' (or Content-Type: application/json), which a web page "
                     "cannot send without asking first: use ferryctl, or curl -H 'Ferry-Admin: 1'\n"};
    }
  }
  if (address_host_only) {
    auto host = req.find(http::field::host);
    std::string_view value = host == req.end() ? std::string_view() : std::string_view(host->value());
    if (!hostIsAnAddress(value)) {
      return Refused{HttpServer::Refusal::kHost,
                     absl::StrCat("Host '", absl::CHexEscape(std::string(value.substr(0, 64))),
                                  "' is not an address: this endpoint answers requests to its address only\n")};
    }
  }
  return std::nullopt;
}

}  // namespace

bool acceptsGzip(std::string_view accept_encoding) {
  auto trim = [](std::string_view v) {
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
    while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
    return v;
  };
  while (!accept_encoding.empty()) {
    size_t comma = accept_encoding.find(',');
    std::string_view item = trim(accept_encoding.substr(0, comma));
    accept_encoding = comma == std::string_view::npos ? std::string_view() : accept_encoding.substr(comma + 1);
    std::string_view coding = trim(item.substr(0, item.find(';')));
    if (!absl::EqualsIgnoreCase(absl::string_view(coding.data(), coding.size()), "gzip") && coding != "*") continue;
    if (size_t q = item.find("q="); q != std::string_view::npos) {
      std::string_view value = trim(item.substr(q + 2));
      double weight = 1;
      if (!absl::SimpleAtod(absl::string_view(value.data(), value.size()), &weight) || weight <= 0) return false;
    }
    return true;
  }
  return false;
}

namespace {

asio::awaitable<void> serveOne(tcp::socket socket, const HttpServer::Options options) {
  const Routes* routes = options.routes;
  boost::beast::flat_buffer buffer(8192);
  http::request_parser<http::string_body> parser;
  parser.header_limit(8192);
  parser.body_limit(kMaxBody);
  auto read = co_await net::withTimeout(http::async_read(socket, buffer, parser, kTuple), kRequestTimeout);
  if (!read || std::get<0>(*read)) co_return;
  auto& req = parser.get();
  http::response<http::string_body> res;
  res.version(11);
  res.keep_alive(false);
  std::string target(req.target());
  std::string query;
  if (auto q = target.find('?'); q != std::string::npos) {
    query = target.substr(q + 1);
    target.resize(q);
  }
  auto it = routes->find(target);
  auto method = methodOf(req.method());
  std::function<void()> after_write;
  if (auto refused = refusal(req, *options.address_host_only)) {
    (*options.refused)[static_cast<size_t>(refused->why)].fetch_add(1, std::memory_order_relaxed);
    res.result(http::status::forbidden);
    res.body() = std::move(refused->text);
  } else if (it == routes->end()) {
    res.result(http::status::not_found);
    std::string body = "not found; try:";
    for (const auto& [path, r] : *routes) absl::StrAppend(&body, " ", path);
    res.body() = body + "\n";
  } else if (!method || it->second.methods.count(*method) == 0) {
    res.result(http::status::method_not_allowed);
    res.set(http::field::allow, allowed(it->second.methods));
    res.body() = absl::StrCat(target, " serves ", allowed(it->second.methods), ", not ",
                              std::string(req.method_string()), "\n");
  } else {
    auto accept = req[http::field::accept_encoding];
    HttpRequest request{*method, std::move(query), acceptsGzip(std::string_view(accept.data(), accept.size()))};
    HttpResponse r = co_await asio::async_initiate<const asio::use_awaitable_t<>, void(HttpResponse)>(
        askRoute(it->second, request, socket.get_executor()), asio::use_awaitable);
    res.result(static_cast<unsigned>(r.status));
    res.set(http::field::content_type, r.content_type);
    if (!r.content_encoding.empty()) res.set(http::field::content_encoding, r.content_encoding);
    res.body() = std::move(r.body);
    after_write = std::move(r.after_write);
  }
  res.prepare_payload();
  co_await net::withTimeout(http::async_write(socket, res, kTuple), kRequestTimeout);
  boost::system::error_code ignored;
  socket.shutdown(tcp::socket::shutdown_both, ignored);
  if (after_write) after_write();
}

asio::awaitable<void> acceptLoop(tcp::acceptor& acceptor, const HttpServer::Options options) {
  for (;;) {
    auto [ec, socket] = co_await acceptor.async_accept(kTuple);
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
    if (ec) {
      asio::steady_timer backoff(acceptor.get_executor(), std::chrono::milliseconds(50));
      co_await backoff.async_wait(kTuple);
      continue;
    }
    asio::co_spawn(acceptor.get_executor(), serveOne(std::move(socket), options), asio::detached);
  }
}
}  // namespace

const char* httpMethodName(HttpMethod method) {
  switch (method) {
    case HttpMethod::kGet: return "GET";
    case HttpMethod::kPost: return "POST";
  }
  return "?";
}

const char* HttpServer::refusalName(Refusal r) {
  switch (r) {
    case Refusal::kBrowser: return "browser";
    case Refusal::kSimplePost: return "simple_post";
    case Refusal::kHost: return "host";
  }
  return "?";
}

void HttpServer::route(std::string path, Handler handler) {
  routeRequest(std::move(path), {HttpMethod::kGet},
               [handler = std::move(handler)](const HttpRequest&) { return handler(); });
}

void HttpServer::routeWithQuery(std::string path, QueryHandler handler) {
  routeRequest(std::move(path), {HttpMethod::kGet},
               [handler = std::move(handler)](const HttpRequest& request) { return handler(request.query); });
}

void HttpServer::routeRequest(std::string path, std::set<HttpMethod> methods, RequestHandler handler) {
  routes_[std::move(path)] = Route{std::move(methods), [handler = std::move(handler)](const HttpRequest& request,
                                                                                      Reply reply) {
                                     reply(handler(request));
                                   }};
}

void HttpServer::routeAsync(std::string path, AsyncHandler handler) {
  routes_[std::move(path)] = Route{{HttpMethod::kGet}, std::move(handler)};
}

absl::Status HttpServer::listen(const common::HostPort& addr) {
  tcp::endpoint ep(addr.ip, addr.port);
  auto acceptor = std::make_unique<tcp::acceptor>(io_);
  boost::system::error_code ec;
  acceptor->open(ep.protocol(), ec);
  if (!ec) acceptor->set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor->bind(ep, ec);
  if (!ec) acceptor->listen(64, ec);
  if (ec) {
    return absl::UnavailableError(absl::StrCat(name_, " listener on ",
                                               common::formatHostPort(addr), ": ", ec.message()));
  }
  acceptor_ = std::move(acceptor);
  asio::co_spawn(io_, acceptLoop(*acceptor_, Options{&routes_, &address_host_only_, &refused_}), asio::detached);
  return absl::OkStatus();
}

absl::Status HttpServer::adopt(int fd) {
  auto acceptor = std::make_unique<tcp::acceptor>(io_);
  boost::system::error_code ec;
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(name_, " listener handed over: ", std::strerror(errno)));
  }
  acceptor->assign(ss.ss_family == AF_INET6 ? tcp::v6() : tcp::v4(), fd, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat(name_, " listener handed over: ", ec.message()));
  acceptor_ = std::move(acceptor);
  asio::co_spawn(io_, acceptLoop(*acceptor_, Options{&routes_, &address_host_only_, &refused_}), asio::detached);
  return absl::OkStatus();
}

int HttpServer::listenerFd() const { return acceptor_ && acceptor_->is_open() ? acceptor_->native_handle() : -1; }

void HttpServer::stop() {
  if (acceptor_) {
    boost::system::error_code ignored;
    acceptor_->close(ignored);
  }
}

}  // namespace ferry::server
