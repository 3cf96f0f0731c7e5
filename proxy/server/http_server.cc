#include "proxy/server/http_server.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

#include "absl/strings/str_cat.h"
#include "proxy/common/log.h"

namespace ferry::server {
namespace asio = boost::asio;
namespace http = boost::beast::http;
using namespace boost::asio::experimental::awaitable_operators;
using asio::ip::tcp;

namespace {
constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);
// A scrape or probe is tiny; anything slower than this is a stuck or hostile client.
constexpr auto kRequestTimeout = std::chrono::seconds(5);

asio::awaitable<void> serveOne(tcp::socket socket, const std::map<std::string, HttpServer::QueryHandler>* routes) {
  boost::beast::flat_buffer buffer(8192);
  http::request_parser<http::string_body> parser;
  parser.header_limit(8192);
  parser.body_limit(0);
  asio::steady_timer timer(socket.get_executor());
  timer.expires_after(kRequestTimeout);
  auto read = co_await (http::async_read(socket, buffer, parser, kTuple) || timer.async_wait(kTuple));
  if (read.index() != 0 || std::get<0>(std::get<0>(read))) co_return;
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
  if (req.method() != http::verb::get) {
    res.result(http::status::method_not_allowed);
    res.body() = "only GET is served here\n";
  } else if (it == routes->end()) {
    res.result(http::status::not_found);
    std::string body = "not found; try:";
    for (const auto& [path, h] : *routes) absl::StrAppend(&body, " ", path);
    res.body() = body + "\n";
  } else {
    HttpResponse r = it->second(query);
    res.result(static_cast<unsigned>(r.status));
    res.set(http::field::content_type, r.content_type);
    res.body() = std::move(r.body);
  }
  res.prepare_payload();
  timer.expires_after(kRequestTimeout);
  co_await (http::async_write(socket, res, kTuple) || timer.async_wait(kTuple));
  boost::system::error_code ignored;
  socket.shutdown(tcp::socket::shutdown_both, ignored);
}

asio::awaitable<void> acceptLoop(tcp::acceptor& acceptor, const std::map<std::string, HttpServer::QueryHandler>* routes) {
  for (;;) {
    auto [ec, socket] = co_await acceptor.async_accept(kTuple);
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
    if (ec) {
      asio::steady_timer backoff(acceptor.get_executor(), std::chrono::milliseconds(50));
      co_await backoff.async_wait(kTuple);
      continue;
    }
    asio::co_spawn(acceptor.get_executor(), serveOne(std::move(socket), routes), asio::detached);
  }
}
}  // namespace

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
  asio::co_spawn(io_, acceptLoop(*acceptor_, &routes_), asio::detached);
  return absl::OkStatus();
}

void HttpServer::stop() {
  if (acceptor_) {
    boost::system::error_code ignored;
    acceptor_->close(ignored);
  }
}

}  // namespace ferry::server
