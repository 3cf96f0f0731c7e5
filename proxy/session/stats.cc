#include "proxy/session/stats.h"

#include "absl/strings/str_cat.h"
#include "proxy/hbone/h2_errors.h"

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

std::string Stats::renderPrometheus() const {
  std::string out;
#define FERRY_X(name, help)                                                          \
  absl::StrAppend(&out, "# HELP ferry_" #name "_total " help "\n# TYPE ferry_" #name \
                  "_total counter\nferry_" #name "_total ",                          \
                  name.load(std::memory_order_relaxed), "\n");
  FERRY_COUNTERS(FERRY_X)
#undef FERRY_X
  auto per_direction = [&](const char* metric, const char* type, const char* help,
                           auto& arr) {
    absl::StrAppend(&out, "# HELP ", metric, " ", help, "\n# TYPE ", metric, " ", type, "\n");
    for (size_t d = 0; d < static_cast<size_t>(Direction::kCount); ++d) {
      absl::StrAppend(&out, metric, "{direction=\"", directionLabel(static_cast<Direction>(d)),
                      "\"} ", arr[d].load(std::memory_order_relaxed), "\n");
    }
  };
  per_direction("ferry_connections_opened_total", "counter", "Proxied connections accepted",
                opened);
  per_direction("ferry_connections_active", "gauge", "Proxied connections open now", active);
  per_direction("ferry_bytes_sent_total", "counter",
                "Bytes from the accepting side towards the far side", bytes_sent);
  per_direction("ferry_bytes_received_total", "counter",
                "Bytes from the far side back to the accepting side", bytes_received);
  absl::StrAppend(&out,
                  "# HELP ferry_hbone_goaway_sent_total HBONE server connections ended by a GOAWAY "
                  "with an error, by its code\n# TYPE ferry_hbone_goaway_sent_total counter\n");
  for (size_t code = 1; code < kH2ErrorCodes; ++code) {
    absl::StrAppend(&out, "ferry_hbone_goaway_sent_total{code=\"", hbone::h2ErrorName(code), "\"} ",
                    hbone_goaway_sent[code].load(std::memory_order_relaxed), "\n");
  }
  absl::StrAppend(&out,
                  "# HELP ferry_connections_closed_total Proxied connections closed, by reason\n"
                  "# TYPE ferry_connections_closed_total counter\n");
  for (size_t d = 0; d < static_cast<size_t>(Direction::kCount); ++d) {
    for (size_t r = 0; r < static_cast<size_t>(CloseReason::kCount); ++r) {
      auto v = closed[d][r].load(std::memory_order_relaxed);
      absl::StrAppend(&out, "ferry_connections_closed_total{direction=\"",
                      directionLabel(static_cast<Direction>(d)), "\",reason=\"",
                      closeReasonLabel(static_cast<CloseReason>(r)), "\"} ", v, "\n");
    }
  }
  absl::StrAppend(&out,
                  "# HELP ferry_policy_decisions_total Connections judged by authorization policies, by the "
                  "action of the policy that decided (none: no policy matched) and the result\n"
                  "# TYPE ferry_policy_decisions_total counter\n");
  for (Direction d : {Direction::kInbound, Direction::kPlaintext}) {
    for (size_t a = 0; a < static_cast<size_t>(PolicyAction::kCount); ++a) {
      for (size_t result = 0; result < 2; ++result) {
        static const char* kActions[] = {"ALLOW", "DENY", "none"};
        absl::StrAppend(&out, "ferry_policy_decisions_total{direction=\"", directionLabel(d), "\",action=\"",
                        kActions[a], "\",result=\"", result == 0 ? "allow" : "deny", "\"} ",
                        policy_decisions[static_cast<size_t>(d)][a][result].load(std::memory_order_relaxed), "\n");
      }
    }
  }
  absl::StrAppend(&out,
                  "# HELP ferry_svid_rejections_total Peer certificates refused, by the rule that failed\n"
                  "# TYPE ferry_svid_rejections_total counter\n");
  for (Direction d : {Direction::kOutbound, Direction::kInbound}) {
    for (size_t r = 0; r < static_cast<size_t>(identity::SvidRejection::kCount); ++r) {
      absl::StrAppend(&out, "ferry_svid_rejections_total{direction=\"", directionLabel(d), "\",reason=\"",
                      identity::svidRejectionLabel(static_cast<identity::SvidRejection>(r)), "\"} ",
                      rejections(d, static_cast<identity::SvidRejection>(r)), "\n");
    }
  }
  return out;
}

}  // namespace ferry::session
