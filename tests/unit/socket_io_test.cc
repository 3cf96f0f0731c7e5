// net/socket_io: the drained-read rule and the readiness wait that relies on it, on a
// loopback TCP pair driven by one thread.
#include <chrono>
#include <optional>
#include <string>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <gtest/gtest.h>

#include "proxy/net/socket_io.h"

namespace ferry::net {
namespace {
namespace asio = boost::asio;
using Tcp = asio::ip::tcp;
using namespace std::chrono_literals;

class SocketIoTest : public ::testing::TestWithParam<bool> {
 protected:
  // The parameter: TCP_INQ on the listener (inherited by the accepted socket) or not.
  void SetUp() override {
    Tcp::acceptor acceptor(ctx_, Tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    if (inq()) enableReceiveQueueCount(acceptor.native_handle());
    client_.connect(acceptor.local_endpoint());
    acceptor.accept(server_);
    server_.non_blocking(true);
  }
  bool inq() const { return GetParam(); }
  // What a read that emptied the socket reports.
  Drained emptied() const { return inq() ? Drained::kEmpty : Drained::kShort; }

  // Runs the io_context until `done` holds or `limit` passes; a pending timer keeps the
  // reactor waiting in epoll_wait meanwhile.
  template <typename Pred>
  bool runUntil(Pred done, std::chrono::milliseconds limit = 2000ms) {
    asio::steady_timer keep(ctx_, limit);
    keep.async_wait([](const boost::system::error_code&) {});
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (!done() && std::chrono::steady_clock::now() < deadline) {
      ctx_.restart();
      ctx_.run_one_for(10ms);
    }
    keep.cancel();
    ctx_.restart();
    ctx_.poll();
    return done();
  }

  // Lets the reactor take whatever readiness there is while nothing waits on the socket.
  void spinReactor() {
    asio::steady_timer t(ctx_, 20ms);
    bool fired = false;
    t.async_wait([&](const boost::system::error_code&) { fired = true; });
    ctx_.restart();
    while (!fired) ctx_.run_one();
  }

  void send(const std::string& s) { asio::write(client_, asio::buffer(s)); }

  std::string read(Drained& drained, boost::system::error_code& ec, size_t room = 64) {
    char buf[64];
    asio::mutable_buffer b = asio::buffer(buf, room);
    size_t n = readAvailable(server_, std::span<const asio::mutable_buffer>(&b, 1), drained, ec);
    return std::string(buf, n);
  }
  std::string readAll(Drained& drained) {
    boost::system::error_code ec;
    std::string s = read(drained, ec);
    if (ec && ec != asio::error::would_block) ADD_FAILURE() << ec.message();
    return s;
  }

  // Starts the wait the last read calls for and returns where its result lands.
  std::optional<boost::system::error_code>& wait(Drained /*last*/) {
    result_.reset();
    asyncReadable(server_, [this](const boost::system::error_code& ec) { result_ = ec; });
    return result_;
  }

  // Starts waits as the relays do until one stays queued: a wait may complete with nothing
  // to read (a fresh socket, or an edge the reactor took while nothing waited), and the
  // caller's read then says EAGAIN and it waits again. Counts those in spurious_.
  std::optional<boost::system::error_code>& quietWait(Drained& drained) {
    for (int i = 0; i < 10; ++i) {
      auto& r = wait(drained);
      if (!runUntil([&] { return r.has_value(); }, 30ms)) return r;
      ++spurious_;
      boost::system::error_code ec;
      EXPECT_EQ(read(drained, ec), "");
      EXPECT_EQ(ec, asio::error::would_block);
    }
    ADD_FAILURE() << "the wait keeps completing with nothing to read";
    return result_;
  }

  asio::io_context ctx_{1};
  int spurious_ = 0;
  Tcp::socket client_{ctx_};
  Tcp::socket server_{ctx_};
  std::optional<boost::system::error_code> result_;
};

TEST_P(SocketIoTest, ReadSaysWhatIsLeft) {
  send("abcdef");
  ASSERT_TRUE(runUntil([&] { return server_.available() == 6; }));
  Drained drained = Drained::kNo;
  boost::system::error_code ec;
  EXPECT_EQ(read(drained, ec, 4), "abcd");
  EXPECT_EQ(drained, Drained::kNo);  // the buffer filled: there may be more
  EXPECT_EQ(read(drained, ec), "ef");
  EXPECT_EQ(drained, emptied());
  EXPECT_EQ(read(drained, ec), "");
  EXPECT_EQ(ec, asio::error::would_block);
  EXPECT_EQ(drained, Drained::kEmpty);  // EAGAIN is exact with or without the count
}

// The last bytes and the FIN arrive together: a short read leaves the end of the stream
// to be read, and no readiness event will announce it again.
TEST_P(SocketIoTest, FinBehindTheLastBytesIsNotCalledEmpty) {
  send("bye");
  client_.shutdown(Tcp::socket::shutdown_send);
  ASSERT_TRUE(runUntil([&] { return server_.available() == 3; }));
  Drained drained = Drained::kNo;
  boost::system::error_code ec;
  EXPECT_EQ(read(drained, ec), "bye");
  // With the count the kernel says the FIN is still there; without it, only a re-arming
  // wait is allowed.
  EXPECT_EQ(drained, inq() ? Drained::kNo : Drained::kShort);
  if (drained != Drained::kNo) {
    auto& r = wait(drained);
    ASSERT_TRUE(runUntil([&] { return r.has_value(); }, 500ms)) << "the end of stream was lost";
  }
  read(drained, ec);
  EXPECT_EQ(ec, asio::error::eof);
}

TEST_P(SocketIoTest, WaitOnAnEmptySocketCompletesOnlyWhenBytesArrive) {
  Drained drained = Drained::kNo;
  EXPECT_EQ(readAll(drained), "");
  ASSERT_EQ(drained, Drained::kEmpty);
  for (std::string msg : {"one", "two", "three"}) {
    auto& r = quietWait(drained);
    send(msg);
    ASSERT_TRUE(runUntil([&] { return r.has_value(); })) << "bytes arrived, the wait did not end";
    EXPECT_FALSE(*r);
    EXPECT_EQ(readAll(drained), msg);
    EXPECT_EQ(drained, emptied());
  }
  // Only the fresh socket's first wait (the reactor's flag starts set) finds nothing.
  EXPECT_LE(spurious_, 1);
}

// The case a plain async_wait pays an epoll_ctl for: the reactor took the socket's edge
// while nothing waited (the bytes arrived after the read that emptied it). The next wait
// must complete at once, or it would sleep until the peer sent more.
TEST_P(SocketIoTest, ReadinessTakenWhileNothingWaitedIsNotLost) {
  Drained drained = Drained::kNo;
  readAll(drained);
  auto& first = wait(drained);
  send("x");
  ASSERT_TRUE(runUntil([&] { return first.has_value(); }));
  EXPECT_EQ(readAll(drained), "x");
  ASSERT_EQ(drained, emptied());

  send("late");
  spinReactor();  // epoll_wait reports the edge; no operation is queued for it
  auto& r = wait(drained);
  ASSERT_TRUE(runUntil([&] { return r.has_value(); }, 500ms)) << "readiness was lost";
  EXPECT_FALSE(*r);
  EXPECT_EQ(readAll(drained), "late");
}

TEST_P(SocketIoTest, PeerCloseEndsTheWaitAndTheReadSaysEof) {
  Drained drained = Drained::kNo;
  readAll(drained);
  auto& r = wait(drained);
  client_.close();
  ASSERT_TRUE(runUntil([&] { return r.has_value(); }));
  EXPECT_FALSE(*r);
  boost::system::error_code ec;
  read(drained, ec);
  EXPECT_EQ(ec, asio::error::eof);
}

TEST_P(SocketIoTest, ClosingTheSocketAbortsTheWait) {
  Drained drained = Drained::kNo;
  readAll(drained);
  auto& r = quietWait(drained);
  server_.close();
  ASSERT_TRUE(runUntil([&] { return r.has_value(); }));
  EXPECT_EQ(*r, asio::error::operation_aborted);
}

TEST_P(SocketIoTest, CancellationSlotAbortsOnlyThisWait) {
  Drained drained = Drained::kNo;
  readAll(drained);
  quietWait(drained);  // the fresh socket's first wait
  server_.cancel();
  ASSERT_TRUE(runUntil([&] { return result_.has_value(); }));
  asio::cancellation_signal signal;
  std::optional<boost::system::error_code> r;
  asyncReadable(server_, asio::bind_cancellation_slot(signal.slot(), [&](const boost::system::error_code& ec) { r = ec; }));
  EXPECT_FALSE(runUntil([&] { return r.has_value(); }, 30ms));
  signal.emit(asio::cancellation_type::terminal);
  ASSERT_TRUE(runUntil([&] { return r.has_value(); }));
  EXPECT_EQ(*r, asio::error::operation_aborted);
  // The socket still works: a new wait sees new bytes.
  send("after");
  auto& again = wait(drained);
  ASSERT_TRUE(runUntil([&] { return again.has_value(); }));
  EXPECT_FALSE(*again);
  EXPECT_EQ(readAll(drained), "after");
}

INSTANTIATE_TEST_SUITE_P(ReceiveQueueCount, SocketIoTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? std::string("TcpInq") : std::string("ShortReadRule");
                         });

}  // namespace
}  // namespace ferry::net
