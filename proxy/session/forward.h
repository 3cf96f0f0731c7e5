#pragma once
// A proxied connection past its first phase: the relay over an HBONE stream, plain TCP to
// a destination, and refusing one that is ferryd itself.
#include <memory>

#include <boost/asio/awaitable.hpp>

#include "proxy/common/net.h"
#include "proxy/hbone/h2_connection.h"
#include "proxy/session/context.h"
#include "proxy/session/record.h"

namespace ferry::session {

// What a proxied connection relayed over an HBONE stream holds from its start to its close
// record: the record, the application's socket (the accepted one outbound, the one ferryd
// opened to the workload inbound), its load unit and admission. On the heap, so that once the
// CONNECT phase is over the relay can own it (relayOnStream) and the coroutine that set it up
// ends: an idle connection then holds this, the relay and the stream, no coroutine frame
// (docs/architecture.md, "The relay").
struct LiveConnection {
  LiveConnection(Worker& worker, Direction direction, Tcp::socket socket, LoadUnit load);
  LiveConnection(const LiveConnection&) = delete;
  LiveConnection& operator=(const LiveConnection&) = delete;

  ConnectionRecord record;
  Tcp::socket socket;
  WatchedSocket watched{record, socket};  // after both: it goes first
  LoadUnit load;
  Admitted admitted;  // outbound: the listener's admission, held for the connection's life
  // What the record's pointers need until it is finished (inbound: the tunnel's state,
  // whose rate limiter is the record's warn_limiter).
  std::shared_ptr<const void> keep;
};

// Starts the relay between `conn->socket` and `stream` (established, and watched by the
// record), hands `conn` to it and returns; the record is finished when the relay ends.
void relayOnStream(Worker& worker, std::unique_ptr<LiveConnection> conn, hbone::H2Stream& stream);

// Refuses a connection whose destination is ferryd itself (Shared::self): resets
// `socket`, counts it, finishes `record` as `self_target`.
void refuseSelfTarget(Worker& worker, Tcp::socket& socket, const common::HostPort& destination,
                      ConnectionRecord& record);

// Refuses (refuseSelfTarget) a destination that is ferryd itself; else connects from
// `source` to `destination` and relays `socket` to it as plain TCP; a failed
// connect resets `socket`. Finishes `record` either way.
boost::asio::awaitable<void> forwardTcp(Worker& worker, Tcp::socket& socket,
                                        const common::IpAddress& source,
                                        const common::HostPort& destination,
                                        ConnectionRecord& record);

}  // namespace ferry::session
