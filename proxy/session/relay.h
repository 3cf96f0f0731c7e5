#pragma once
// Byte relays: TCP <-> TCP (passthrough, inbound plaintext) and TCP <-> HBONE stream.
// Both keep half-close (FIN <-> END_STREAM / shutdown(SHUT_WR)), carry resets across
// (TCP RST <-> RST_STREAM / SO_LINGER 0), stop reading a side whose destination is slow
// (bounded buffers), and end the connection after `idle` without bytes.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "proxy/hbone/h2_connection.h"
#include "proxy/session/stats.h"

namespace ferry::session {

using Tcp = boost::asio::ip::tcp;

// Per-worker read buffer: sockets wait for readability with no buffer of their own and
// read into this one, so an idle connection holds no data buffer.
struct Scratch {
  std::vector<char> bytes = std::vector<char>(64 * 1024);
};

// Where a relay also adds its bytes as they flow (the Istio byte counters: a long connection
// shows its bytes before it closes), besides its result. Null: nowhere.
struct LiveBytes {
  std::atomic<uint64_t>* sent = nullptr;      // as RelayResult::sent
  std::atomic<uint64_t>* received = nullptr;  // as RelayResult::received
};

struct RelayResult {
  CloseReason reason = CloseReason::kOk;
  uint64_t sent = 0;      // accepted side -> far side
  uint64_t received = 0;  // far side -> accepted side
};

// `downstream` is the accepted socket; `upstream` the one ferryd opened. Both are closed
// (or aborted, to carry a reset) when this returns.
boost::asio::awaitable<RelayResult> relayTcp(Tcp::socket& downstream, Tcp::socket& upstream,
                                             std::chrono::milliseconds idle, Scratch& scratch,
                                             LiveBytes live = {});

// `tcp` is the application-side socket, `stream` a CONNECT stream that is established
// (200 seen or sent). The socket is closed or aborted when this returns; the stream is
// finished or reset.
boost::asio::awaitable<RelayResult> relayStream(Tcp::socket& tcp, hbone::H2Stream& stream,
                                                std::chrono::milliseconds idle,
                                                Scratch& scratch, LiveBytes live = {});

}  // namespace ferry::session
