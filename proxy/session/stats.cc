#include "proxy/session/stats.h"

#include "proxy/hbone/h2_errors.h"
#include "proxy/telemetry/metrics.h"

namespace ferry::session {

const char* closeReasonLabel(CloseReason r) {
  switch (r) {
#define FERRY_X(name, label, help) \
  case CloseReason::name:          \
    return label;
    FERRY_CLOSE_REASONS(FERRY_X)
#undef FERRY_X
    case CloseReason::kCount:
      break;
  }
  return "unknown";
}

const char* directionLabel(Direction d) {
  switch (d) {
    case Direction::kOutbound: return "outbound";
    case Direction::kInbound: return "inbound";
    case Direction::kPlaintext: return "inbound_plaintext";
    case Direction::kCount: break;
  }
  return "unknown";
}

void Stats::recordClose(Direction d, CloseReason r, uint64_t sent, uint64_t received) {
  auto di = static_cast<size_t>(d);
  closed[di][static_cast<size_t>(r)].fetch_add(1, std::memory_order_relaxed);
  active[di].fetch_sub(1, std::memory_order_relaxed);
  bytes_sent[di].fetch_add(sent, std::memory_order_relaxed);
  bytes_received[di].fetch_add(received, std::memory_order_relaxed);
}

void Stats::recordRejection(Direction d, identity::SvidRejection r) {
  svid_rejections[static_cast<size_t>(d)][static_cast<size_t>(r)].fetch_add(1, std::memory_order_relaxed);
}

uint64_t Stats::rejections(Direction d, identity::SvidRejection r) const {
  return svid_rejections[static_cast<size_t>(d)][static_cast<size_t>(r)].load(std::memory_order_relaxed);
}

void Stats::recordDecision(Direction d, PolicyAction action, bool allowed) {
  policy_decisions[static_cast<size_t>(d)][static_cast<size_t>(action)][allowed ? 0 : 1].fetch_add(
      1, std::memory_order_relaxed);
}

void Stats::recordGoaway(uint32_t error_code) {
  if (error_code < kH2ErrorCodes) hbone_goaway_sent[error_code].fetch_add(1, std::memory_order_relaxed);
}

void Stats::collect(telemetry::Exposition& out) const {
#define FERRY_X(name, help) out.counter("ferry_" #name "_total", help, name.load(std::memory_order_relaxed));
  FERRY_COUNTERS(FERRY_X)
#undef FERRY_X
  auto per_direction = [&](telemetry::Family family, auto& arr) {
    for (size_t d = 0; d < static_cast<size_t>(Direction::kCount); ++d) {
      family.add(static_cast<double>(arr[d].load(std::memory_order_relaxed)),
                 {{"direction", directionLabel(static_cast<Direction>(d))}});
    }
  };
  per_direction(out.counter("ferry_connections_opened_total", "Proxied connections accepted"), opened);
  per_direction(out.gauge("ferry_connections_active", "Proxied connections open now"), active);
  per_direction(out.counter("ferry_bytes_sent_total", "Bytes from the accepting side towards the far side"),
                bytes_sent);
  per_direction(out.counter("ferry_bytes_received_total", "Bytes from the far side back to the accepting side"),
                bytes_received);
  auto goaway = out.counter("ferry_hbone_goaway_sent_total",
                            "HBONE server connections ended by a GOAWAY with an error, by its code");
  for (size_t code = 1; code < kH2ErrorCodes; ++code) {
    goaway.add(static_cast<double>(hbone_goaway_sent[code].load(std::memory_order_relaxed)),
               {{"code", hbone::h2ErrorName(code)}});
  }
  auto closes = out.counter("ferry_connections_closed_total", "Proxied connections closed, by reason");
  for (size_t d = 0; d < static_cast<size_t>(Direction::kCount); ++d) {
    for (size_t r = 0; r < static_cast<size_t>(CloseReason::kCount); ++r) {
      closes.add(static_cast<double>(closed[d][r].load(std::memory_order_relaxed)),
                 {{"direction", directionLabel(static_cast<Direction>(d))},
                  {"reason", closeReasonLabel(static_cast<CloseReason>(r))}});
    }
  }
  auto decisions = out.counter("ferry_policy_decisions_total",
                               "Connections judged by authorization policies, by the action of the policy that "
                               "decided (none: no policy matched) and the result");
  for (Direction d : {Direction::kInbound, Direction::kPlaintext}) {
    for (size_t a = 0; a < static_cast<size_t>(PolicyAction::kCount); ++a) {
      for (size_t result = 0; result < 2; ++result) {
        static const char* kActions[] = {"ALLOW", "DENY", "none"};
        decisions.add(static_cast<double>(
                          policy_decisions[static_cast<size_t>(d)][a][result].load(std::memory_order_relaxed)),
                      {{"direction", directionLabel(d)},
                       {"action", kActions[a]},
                       {"result", result == 0 ? "allow" : "deny"}});
      }
    }
  }
  auto rejected = out.counter("ferry_svid_rejections_total", "Peer certificates refused, by the rule that failed");
  for (Direction d : {Direction::kOutbound, Direction::kInbound}) {
    for (size_t r = 0; r < static_cast<size_t>(identity::SvidRejection::kCount); ++r) {
      rejected.add(static_cast<double>(rejections(d, static_cast<identity::SvidRejection>(r))),
                   {{"direction", directionLabel(d)},
                    {"reason", identity::svidRejectionLabel(static_cast<identity::SvidRejection>(r))}});
    }
  }
}

}  // namespace ferry::session
