#pragma once
// Wake-up primitives for coroutines that share one io_context (one worker thread).
// Asio has no condition variable; a timer that never expires and is cancelled to wake
// its waiters is the idiomatic stand-in.
#include <chrono>
#include <utility>

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

  // The same wait for a completion handler (the relay's, which is no coroutine): take()
  // says whether a notify() came since the last take() (and forgets it); if not,
  // asyncWait(h) runs `h()` through the executor at the next notify(), or when the Signal
  // is destroyed: the owner of `h` must keep the Signal alive for as long as it waits.
  // After the wake-up the notify() is still remembered, for the next take().
  bool take() { return std::exchange(pending_, false); }
  template <typename Handler>
  void asyncWait(Handler handler) {
    timer_.async_wait([handler = std::move(handler)](const boost::system::error_code&) mutable { handler(); });
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
