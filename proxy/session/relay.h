#pragma once
// The byte relay: one relay (relay.cc) between an application socket and a socket
// (relayTcp: passthrough, inbound plaintext) or an HBONE stream (startRelayStream). It keeps
// half-close (FIN <-> END_STREAM / shutdown(SHUT_WR)), carries resets across (TCP RST <->
// RST_STREAM / SO_LINGER 0), stops reading a side whose destination is slow (bounded
// buffers), and ends the connection after `idle` without bytes.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "absl/functional/any_invocable.h"
#include "proxy/hbone/h2_connection.h"
#include "proxy/session/stats.h"

namespace ferry::session {

using Tcp = boost::asio::ip::tcp;

// Per-worker read buffer: sockets wait for readability with no buffer of their own and
// read into this one, so an idle connection holds no data buffer.
struct Scratch {
  std::vector<char> bytes = std::vector<char>(64 * 1024);
};

// Bytes relayed so far, each way. The relay adds to them as bytes go; they belong to the
// connection's record (ConnectionRecord::bytes), so the admin endpoint's /connections reads
// them live, on the worker's thread, at no cost to the relay but an add.
struct ByteCounts {
  uint64_t sent = 0;      // accepted side -> far side
  uint64_t received = 0;  // far side -> accepted side
  // Where the bytes also go as they flow, when set: the Istio byte counters of the
  // connection's series (ConnectionRecord::attribute), so a long connection shows its bytes
  // before it closes. Bumped by this worker only.
  std::atomic<uint64_t>* live_sent = nullptr;
  std::atomic<uint64_t>* live_received = nullptr;
};

struct RelayResult {
  CloseReason reason = CloseReason::kOk;
  uint64_t sent = 0;      // accepted side -> far side
  uint64_t received = 0;  // far side -> accepted side
};

// `downstream` is the accepted socket; `upstream` the one ferryd opened. Both are closed
// (or aborted, to carry a reset) when this returns. `bytes` counts as it goes; the result
// carries its final values.
boost::asio::awaitable<RelayResult> relayTcp(Tcp::socket& downstream, Tcp::socket& upstream,
                                             std::chrono::milliseconds idle, Scratch& scratch,
                                             ByteCounts& bytes);

// What runs when a detached relay has ended (on the socket's executor, after the relay let go
// of its ends): typically it owns them, and frees them.
using RelayDone = absl::AnyInvocable<void(RelayResult)>;

// `tcp` is the application-side socket, `stream` a CONNECT stream that is established
// (200 seen or sent). Starts the relay and returns: nothing waits for it (an idle connection
// holds no coroutine frame). The caller keeps `tcp`, `stream` and `bytes` alive until `done`
// runs, usually by handing them to `done`. The socket is closed or aborted, the stream
// finished or reset, when `done` runs.
void startRelayStream(Tcp::socket& tcp, hbone::H2Stream& stream, std::chrono::milliseconds idle,
                      Scratch& scratch, ByteCounts& bytes, RelayDone done);

}  // namespace ferry::session
