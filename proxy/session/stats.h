#pragma once
// Every counter ferryd exports, declared once (X-macros), stated into the metrics registry
// (proxy/telemetry) at scrape time. Counters are process-wide atomics: workers bump them, the control
// thread reads them.
#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "proxy/identity/svid.h"

namespace ferry::telemetry {
class Exposition;
}  // namespace ferry::telemetry

namespace ferry::session {

// Why a proxied connection ended: one per connection, one counter, one access-log field.
#define FERRY_CLOSE_REASONS(X)                                                             \
  X(kOk, "ok", "both sides finished cleanly")                                              \
  X(kIdleTimeout, "idle_timeout", "no bytes either way for timeouts.idle")                 \
  X(kConnectTimeout, "connect_timeout", "connecting to the next hop timed out")            \
  X(kConnectFailed, "connect_failed", "the next hop refused or was unreachable")           \
  X(kDownstreamReset, "downstream_reset", "the accepted side sent a TCP RST")              \
  X(kUpstreamReset, "upstream_reset", "the upstream side sent a TCP RST")                  \
  X(kPeerReset, "peer_reset", "the HBONE peer reset the stream or connection")             \
  X(kTunnelRefused, "tunnel_refused", "the HBONE server answered CONNECT with an error")   \
  X(kHandshakeFailed, "handshake_failed", "TLS handshake or peer identity check failed")   \
  X(kNoCertificate, "no_certificate", "no certificate for the identity to present")        \
  X(kUnknownSource, "unknown_source", "the source is not a local workload")                \
  X(kBadRequest, "bad_request", "CONNECT rejected by validation (400/503)")                \
  X(kDenied, "denied", "the client identity does not own its source IP (401)")             \
  X(kPolicyDenied, "policy_denied", "an authorization policy denied it (401 on HBONE, a reset on plaintext)")\
  X(kPolicyRevoked, "policy_revoked", "a policy change denied the open connection, which was closed")\
  X(kStrictPlaintext, "strict_plaintext", "plaintext to a workload port whose mTLS mode is STRICT was refused")\
  X(kBadProxyHeader, "bad_proxy_header", "PROXY protocol header missing or invalid")       \
  X(kSelfTarget, "self_target", "the destination is ferryd itself (a listener or address)")\
  X(kShutdown, "shutdown", "ferryd was shutting down")                                     \
  X(kInternal, "internal", "an internal error; see the log")

enum class CloseReason {
#define FERRY_X(name, label, help) name,
  FERRY_CLOSE_REASONS(FERRY_X)
#undef FERRY_X
  kCount
};
const char* closeReasonLabel(CloseReason r);

// Which listener a connection came in on.
enum class Direction { kOutbound, kInbound, kPlaintext, kCount };
const char* directionLabel(Direction d);

#define FERRY_COUNTERS(X)                                                                  \
  X(hbone_connections_opened, "HBONE client connections opened (TLS handshakes as client)")\
  X(hbone_connections_closed, "HBONE client connections closed (idle release, GOAWAY, errors)")\
  X(hbone_connections_accepted, "HBONE server connections that completed the handshake")   \
  X(hbone_handshake_failures, "HBONE handshakes that failed, both roles")                  \
  X(hbone_streams_opened, "CONNECT streams opened as client")                              \
  X(hbone_streams_retried, "CONNECT streams the server refused unprocessed (REFUSED_STREAM, e.g. after its GOAWAY), opened again on another connection") \
  X(hbone_streams_accepted, "CONNECT streams answered 200 as server")                      \
  X(hbone_streams_rejected, "CONNECT streams answered with an error status")               \
  X(passthrough_connections, "outbound connections to non-mesh destinations, passed as TCP")\
  X(workloads_reloads, "successful reloads of the workloads file")                         \
  X(workloads_reload_failures, "workloads file reloads rejected (old state kept)")         \
  X(worker_handoffs, "accepted connections moved to a less loaded worker before a byte was read")\
  X(self_target_refused, "connections refused because their destination is ferryd itself (one of its listeners or addresses)")\
  X(identity_spoofing_denied, "CONNECT streams answered 401: the client identity does not own the tunnel's source IP")\
  X(hbone_streams_reset_unanswered, "CONNECT streams the client reset before they were answered (upstream connect cancelled or never started)")\
  X(hbone_connect_waits, "CONNECT streams that waited for one of the connection's hbone.max_pending_connects upstream connects")\
  X(hbone_streams_penalized, "CONNECT streams answered 503: their identity's connection was closed for rapid reset within 30 s and its shared connect budget was empty")\
  X(log_lines_suppressed, "warning lines a per-connection log rate limit did not write (their events are still counted)")\
  X(access_log_sampled_out, "access records of successful connections access_log.sample_success left out")\
  X(access_log_failures_suppressed, "access records of failed connections a worker's access_log.failures_per_second limit did not write (still counted in connections_closed)")\
  X(hbone_connections_drained_source_left, "pooled HBONE client connections drained because their source pod left the mesh or this node")\
  X(policy_audit_matches, "connections an AUDIT (or istio.io/dry-run) authorization policy matched (logged, never enforced)")

struct Stats {
#define FERRY_X(name, help) std::atomic<uint64_t> name{0};
  FERRY_COUNTERS(FERRY_X)
#undef FERRY_X
  // connections_closed{direction, reason}
  std::array<std::array<std::atomic<uint64_t>, static_cast<size_t>(CloseReason::kCount)>,
             static_cast<size_t>(Direction::kCount)>
      closed{};
  std::array<std::atomic<uint64_t>, static_cast<size_t>(Direction::kCount)> opened{};
  std::array<std::atomic<int64_t>, static_cast<size_t>(Direction::kCount)> active{};
  std::array<std::atomic<uint64_t>, static_cast<size_t>(Direction::kCount)> bytes_sent{};
  std::array<std::atomic<uint64_t>, static_cast<size_t>(Direction::kCount)> bytes_received{};
  // svid_rejections{direction, reason}: peer certificates refused, by the rule they broke.
  // Outbound: the HBONE server's certificate; inbound: the HBONE client's.
  std::array<std::array<std::atomic<uint64_t>, static_cast<size_t>(identity::SvidRejection::kCount)>,
             static_cast<size_t>(Direction::kCount)>
      svid_rejections{};

  // hbone_goaway_sent{code}: HBONE server connections closed with a GOAWAY carrying an
  // error (RFC 9113 §7 codes 0x1..0xd; index = code).
  static constexpr size_t kH2ErrorCodes = 14;
  std::array<std::atomic<uint64_t>, kH2ErrorCodes> hbone_goaway_sent{};

  // policy_decisions{direction, action, result}: inbound and inbound_plaintext connections
  // judged by authorization policies; action is that of the policy that decided, or none
  // (no policy matched: allowed when no ALLOW policy applies, else denied).
  enum class PolicyAction { kAllow, kDeny, kNone, kCount };
  std::array<std::array<std::array<std::atomic<uint64_t>, 2>, static_cast<size_t>(PolicyAction::kCount)>,
             static_cast<size_t>(Direction::kCount)>
      policy_decisions{};
  void recordDecision(Direction d, PolicyAction action, bool allowed);

  void recordClose(Direction d, CloseReason r, uint64_t sent, uint64_t received);
  void recordGoaway(uint32_t error_code);
  void recordRejection(Direction d, identity::SvidRejection r);
  uint64_t rejections(Direction d, identity::SvidRejection r) const;
  // Everything above, stated into the metrics registry at scrape time.
  void collect(telemetry::Exposition& out) const;
};

}  // namespace ferry::session
