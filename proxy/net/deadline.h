#pragma once
// An operation raced against a deadline (Asio's `operation || timer`), written once. When
// the deadline comes first the operation is cancelled, and has completed, before this
// returns: nothing of it outlives the caller's frame.
#include <chrono>
#include <optional>
#include <utility>
#include <variant>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace ferry::net {

using Deadline = std::chrono::steady_clock::time_point;

// The result of `op`, or nullopt when `deadline` came first.
template <typename T>
boost::asio::awaitable<std::optional<T>> withDeadline(boost::asio::awaitable<T> op, Deadline deadline) {
  using namespace boost::asio::experimental::awaitable_operators;
  boost::asio::steady_timer timer(co_await boost::asio::this_coro::executor, deadline);
  auto raced = co_await (std::move(op) || timer.async_wait(boost::asio::as_tuple(boost::asio::use_awaitable)));
  if (raced.index() != 0) co_return std::nullopt;
  co_return std::get<0>(std::move(raced));
}

// The same for an operation with no result: false when `deadline` came first.
inline boost::asio::awaitable<bool> withDeadline(boost::asio::awaitable<void> op, Deadline deadline) {
  using namespace boost::asio::experimental::awaitable_operators;
  boost::asio::steady_timer timer(co_await boost::asio::this_coro::executor, deadline);
  auto raced = co_await (std::move(op) || timer.async_wait(boost::asio::as_tuple(boost::asio::use_awaitable)));
  co_return raced.index() == 0;
}

template <typename Op>
auto withTimeout(Op op, std::chrono::steady_clock::duration timeout) {
  return withDeadline(std::move(op), std::chrono::steady_clock::now() + timeout);
}

}  // namespace ferry::net
