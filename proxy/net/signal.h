#pragma once
// Wake-up primitives for coroutines that share one io_context (one worker thread).
// Asio has no condition variable; a timer that never expires and is cancelled to wake
// its waiters is the idiomatic stand-in.
#include <chrono>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace ferry::net {

// One waiter; a notify() that arrives before the wait is remembered (level-triggered).
class Signal {
 public:
  explicit Signal(const boost::asio::any_io_executor& ex)
      : timer_(ex, std::chrono::steady_clock::time_point::max()) {}

  void notify() {
    pending_ = true;
    timer_.cancel();
  }

  boost::asio::awaitable<void> wait() {
    if (!pending_) {
      co_await timer_.async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
    }
    pending_ = false;
  }

 private:
  boost::asio::steady_timer timer_;
  bool pending_ = false;
};

// Many waiters, fired once.
class Event {
 public:
  explicit Event(const boost::asio::any_io_executor& ex)
      : timer_(ex, std::chrono::steady_clock::time_point::max()) {}

  void set() {
    set_ = true;
    timer_.cancel();
  }
  bool isSet() const { return set_; }

  boost::asio::awaitable<void> wait() {
    while (!set_) {
      auto [ec] = co_await timer_.async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
      // Cancelled from outside (e.g. the losing side of `||`): stop waiting.
      if (ec && !set_ && (co_await boost::asio::this_coro::cancellation_state).cancelled() !=
                             boost::asio::cancellation_type::none) {
        co_return;
      }
    }
  }

 private:
  boost::asio::steady_timer timer_;
  bool set_ = false;
};

}  // namespace ferry::net
