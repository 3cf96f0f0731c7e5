#pragma once
// asyncReadable: wait until a drained TCP socket has something to read, without the
// epoll_ctl() that Asio's async_wait(wait_read) makes on every call.
//
// Asio registers every socket with epoll once, edge-triggered, for reading. Its
// async_wait() is a non-speculative operation, and the reactor re-arms the descriptor
// (EPOLL_CTL_MOD) for each one so that readiness which arrived before the wait is not
// missed. The relays and the HBONE read loop wait only after a read found the socket
// empty, so the re-arm is one system call per message spent on the case the reactor
// already tracks: every edge it takes from epoll_wait() while no read waits sets the
// descriptor's "try speculatively" flag, which the reactor clears only when an operation
// reports it exhausted the descriptor.
//
// This wait is that operation. It always reports "exhausted", and when the last read
// showed the socket empty (Drained::kEmpty: the kernel's TCP_INQ count was 0, or the read
// said EAGAIN; see readAvailable) it is started speculatively:
//   - flag clear (no edge since the last wait completed): queued, no system call; the
//     next edge completes it;
//   - flag set (an edge was taken while nothing waited): completes at once, and the
//     caller's read finds the bytes (or says EAGAIN, and the caller waits again).
// Readiness is therefore never lost, and a steady request/response pass costs
// epoll_wait + recvmsg + sendmsg. A short read alone does not show the socket is empty:
// a FIN that came in with the last bytes is still to be read and raises no new event, so
// after any other read result (Drained::kShort) the wait re-arms the descriptor as
// async_wait does.
//
// Requirements: the caller reads the socket itself after each completion (readAvailable)
// before waiting again, and no other Asio read operation is started on the socket after
// a completed wait unless the socket was read first (it could otherwise be queued
// without trying, behind bytes that are already there). Completion: void(error_code);
// operation_aborted when the socket is closed or cancelled, or the operation's
// cancellation slot fires.
//
// Built on Asio 1.26's reactor internals (boost/asio/detail), which Debian 12's
// Boost 1.81 pins; tests/unit/socket_io_test.cc checks the behaviour.
#include <type_traits>
#include <utility>

#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/detail/bind_handler.hpp>
#include <boost/asio/detail/fenced_block.hpp>
#include <boost/asio/detail/handler_alloc_helpers.hpp>
#include <boost/asio/detail/handler_cont_helpers.hpp>
#include <boost/asio/detail/handler_work.hpp>
#include <boost/asio/detail/memory.hpp>
#include <boost/asio/detail/reactor.hpp>
#include <boost/asio/detail/reactor_op.hpp>
#include <boost/asio/detail/socket_ops.hpp>
#include <boost/asio/execution/context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/query.hpp>

#include "proxy/hbone/socket_io.h"

namespace ferry::hbone {
namespace readable_detail {
namespace ad = boost::asio::detail;

// The socket's reactor state (descriptor, flags, per-descriptor data): a protected member
// of basic_socket, reached through a derived class without one (the member pointer is
// taken in the derived class's scope, and is one of the base).
struct SocketAccess : boost::asio::ip::tcp::socket {
  static auto& impl(boost::asio::ip::tcp::socket& s) {
    return (s.*(&SocketAccess::impl_)).get_implementation();
  }
};

// Per-operation cancellation (as Asio's own socket operations register it).
class Cancellation {
 public:
  Cancellation(ad::reactor* r, ad::reactor::per_descriptor_data* d, int fd)
      : reactor_(r), data_(d), fd_(fd) {}
  void operator()(boost::asio::cancellation_type_t type) {
    if (!!(type & (boost::asio::cancellation_type::terminal | boost::asio::cancellation_type::partial |
                   boost::asio::cancellation_type::total))) {
      reactor_->cancel_ops_by_key(fd_, *data_, ad::reactor::read_op, this);
    }
  }

 private:
  ad::reactor* reactor_;
  ad::reactor::per_descriptor_data* data_;
  int fd_;
};

// Asio's reactive_wait_op, except that performing it reports the descriptor exhausted.
template <typename Handler, typename IoExecutor>
class ReadableOp : public ad::reactor_op {
 public:
  BOOST_ASIO_DEFINE_HANDLER_PTR(ReadableOp);

  ReadableOp(Handler& handler, const IoExecutor& io_ex)
      : ad::reactor_op(boost::system::error_code(), &ReadableOp::doPerform, &ReadableOp::doComplete),
        handler_(std::move(handler)),
        work_(handler_, io_ex) {}

  static status doPerform(ad::reactor_op*) { return done_and_exhausted; }

  static void doComplete(void* owner, ad::operation* base, const boost::system::error_code&,
                         std::size_t) {
    auto* o = static_cast<ReadableOp*>(base);
    ptr p = {ad::addressof(o->handler_), o, o};
    ad::handler_work<Handler, IoExecutor> w(std::move(o->work_));
    // The handler leaves the operation's memory before the upcall (Asio's rule: the
    // memory may belong to a sub-object of the handler).
    ad::binder1<Handler, boost::system::error_code> handler(o->handler_, o->ec_);
    p.h = ad::addressof(handler.handler_);
    p.reset();
    if (owner) {
      ad::fenced_block b(ad::fenced_block::half);
      w.complete(handler, handler.handler_);
    }
  }

 private:
  Handler handler_;
  ad::handler_work<Handler, IoExecutor> work_;
};

struct Initiate {
  template <typename Handler>
  void operator()(Handler&& h, boost::asio::ip::tcp::socket* socket, Drained last) const {
    using H = std::decay_t<Handler>;
    using IoExecutor = boost::asio::ip::tcp::socket::executor_type;
    using Op = ReadableOp<H, IoExecutor>;
    H handler(std::forward<Handler>(h));
    auto& impl = SocketAccess::impl(*socket);
    auto& reactor = boost::asio::use_service<ad::reactor>(
        boost::asio::query(socket->get_executor(), boost::asio::execution::context));
    bool is_continuation = boost_asio_handler_cont_helpers::is_continuation(handler);
    auto slot = boost::asio::get_associated_cancellation_slot(handler);
    typename Op::ptr p = {ad::addressof(handler), Op::ptr::allocate(handler), nullptr};
    p.p = new (p.v) Op(handler, socket->get_executor());
    if (slot.is_connected()) {
      p.p->cancellation_key_ =
          &slot.template emplace<Cancellation>(&reactor, &impl.reactor_data_, impl.socket_);
    }
    if ((impl.state_ & ad::socket_ops::non_blocking) ||
        ad::socket_ops::set_internal_non_blocking(impl.socket_, impl.state_, true, p.p->ec_)) {
      // Not speculative: the reactor re-arms the descriptor (EPOLL_CTL_MOD), which reports
      // readiness that is already there, as async_wait does.
      reactor.start_op(ad::reactor::read_op, impl.socket_, impl.reactor_data_, p.p, is_continuation,
                       /*allow_speculative=*/last == Drained::kEmpty);
    } else {
      reactor.post_immediate_completion(p.p, is_continuation);
    }
    p.v = p.p = nullptr;
  }
};

}  // namespace readable_detail

// `last`: what the read before this wait said (readAvailable). Only kEmpty skips the
// re-arm; callers wait only after kEmpty or kShort.
template <typename Token>
auto asyncReadable(boost::asio::ip::tcp::socket& socket, Drained last, Token&& token) {
  return boost::asio::async_initiate<Token, void(boost::system::error_code)>(
      readable_detail::Initiate{}, token, &socket, last);
}

}  // namespace ferry::hbone
