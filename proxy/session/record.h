#pragma once
// The record of one proxied connection: one close counter, one access-log line, one slot
// of the worker's recent closes, its Istio series; and what the drain deadline resets.
#include <array>
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "proxy/common/log.h"
#include "proxy/session/context.h"

namespace ferry::session {

// One per proxied connection: counts it open on construction, and on finish() records
// the close reason, bytes and an access-log line.
class ConnectionRecord {
 public:
  ConnectionRecord(Worker& worker, Direction direction);
  ~ConnectionRecord();
  ConnectionRecord(const ConnectionRecord&) = delete;
  ConnectionRecord& operator=(const ConnectionRecord&) = delete;

  std::string src;
  std::string dst;
  std::string peer_identity;
  // Who is on each side: the registry's workload when the address is a known one (null
  // otherwise), held until the record is written; and the SPIFFE ID each side has over
  // mTLS (empty on a leg without it: passthrough, plaintext). Outbound, the source's is
  // the one ferryd presents for it and the destination's the one the server must prove;
  // inbound, the client's proven one and the local workload's. Access-log fields and
  // metric labels.
  workloads::WorkloadPtr source_workload;
  workloads::WorkloadPtr destination_workload;
  std::string source_principal;
  std::string destination_principal;
  std::string detail;  // why it failed, for the log
  // The authorization decision, for the log ("allowed by ALLOW policy shop/x rule 0").
  std::string policy;
  // Whether authorization policies judged the connection, and what they said (reauthorize
  // turns an allowed one into denied).
  PolicyVerdict policy_verdict = PolicyVerdict::kNotJudged;
  // What the connection was authorized on (inbound, inbound plaintext): judged again when
  // the policies or the workloads change (Worker::reauthorize).
  std::optional<policy::Request> subject;
  // Relayed so far, live (the relay adds to them on this worker's thread; /connections
  // reads them there; finish() records them). In the relay's orientation: see
  // requestBytes() / responseBytes().
  ByteCounts bytes;
  // Rate limit for this record's access line when it is a warning (the streams of one HBONE
  // connection share one); nullptr = always written. Must outlive finish().
  common::LogLimiter* warn_limiter = nullptr;
  // Records the close with the bytes relayed so far (`bytes`). After the drain deadline
  // reset the connection, the reason is `shutdown` whatever `reason` says (the relay only
  // saw its sockets closed).
  void finish(CloseReason reason);
  // Client -> server and server -> client so far. The relay's accepted side is the
  // client's, except on inbound HBONE, which relays the workload's socket against the
  // stream.
  Direction direction() const { return direction_; }
  uint64_t requestBytes() const { return relaysServerSide() ? bytes.received : bytes.sent; }
  uint64_t responseBytes() const { return relaysServerSide() ? bytes.sent : bytes.received; }

  // Counts the connection opened in Istio's TCP metrics (closed at finish(), its bytes as
  // the relay moves them), labelled from source_workload, destination_workload and, with no
  // source workload, source_principal as they are now. Once, on the record's worker, when
  // both ends are known.
  void attribute(Reporter reporter, bool mutual_tls, workloads::InternedString service = {});

  // What the drain deadline resets (Worker::abortLive): the connection's sockets while
  // they are in scope (WatchedSocket) and its CONNECT stream.
  void watchStream(std::shared_ptr<hbone::H2Stream> stream) { stream_ = std::move(stream); }
  // Resets the connection (RST_STREAM to the HBONE peer, RST to the sockets); it is then
  // recorded as `reason` whatever its coroutines saw (kShutdown, kPolicyRevoked).
  void abort(CloseReason reason);

 private:
  friend class WatchedSocket;
  friend class Worker;
  bool relaysServerSide() const { return direction_ == Direction::kInbound; }
  // Writes this record, closed for `reason`, into a slot of the worker's recent closes.
  void keep(ClosedConnection& slot, CloseReason reason, std::chrono::milliseconds duration,
            std::chrono::system_clock::time_point time) const;
  Worker& worker_;
  Direction direction_;
  std::chrono::steady_clock::time_point start_;
  bool finished_ = false;
  std::optional<CloseReason> aborted_;
  // Links in the worker's list of live records.
  ConnectionRecord* prev_ = nullptr;
  ConnectionRecord* next_ = nullptr;
  std::array<Tcp::socket*, 2> sockets_{};
  TrafficSeries* istio_ = nullptr;
  std::shared_ptr<hbone::H2Stream> stream_;
};

// Lets the drain deadline reach `socket` for as long as this lives (declare it after the
// socket: it must go first).
class WatchedSocket {
 public:
  WatchedSocket(ConnectionRecord& record, Tcp::socket& socket);
  ~WatchedSocket();
  WatchedSocket(const WatchedSocket&) = delete;
  WatchedSocket& operator=(const WatchedSocket&) = delete;

 private:
  ConnectionRecord& record_;
  Tcp::socket* socket_;
};

}  // namespace ferry::session
