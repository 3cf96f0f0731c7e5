#include "proxy/session/access_log.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "proxy/common/json_text.h"
#include "proxy/session/record.h"

namespace ferry::session {

const char* policyVerdictLabel(PolicyVerdict v) {
  switch (v) {
    case PolicyVerdict::kAllowed: return "allowed";
    case PolicyVerdict::kDenied: return "denied";
    case PolicyVerdict::kNotJudged: break;
  }
  return nullptr;
}

void AccessLogSettings::set(const config::AccessLog& settings) {
  std::lock_guard lock(mu_);
  settings_ = settings;
  generation_.fetch_add(1, std::memory_order_release);
}

config::AccessLog AccessLogSettings::get() const {
  std::lock_guard lock(mu_);
  return settings_;
}

SuccessSampler::SuccessSampler(double fraction)
    : per_million_(static_cast<uint32_t>(std::lround(std::clamp(fraction, 0.0, 1.0) * kOne))) {}

bool SuccessSampler::sample() {
  accumulated_ += per_million_;
  if (accumulated_ < kOne) return false;
  accumulated_ -= kOne;
  return true;
}

namespace {
// One token per 1/rate seconds.
std::chrono::nanoseconds failureInterval(const config::AccessLog& s) {
  return std::chrono::nanoseconds(std::chrono::seconds(1)) / std::max<uint32_t>(1, s.failures_per_second);
}
}  // namespace

AccessLogger::AccessLogger(const AccessLogSettings& settings)
    : source_(settings),
      generation_(settings.generation()),
      current_(settings.get()),
      sampler_(current_.sample_success),
      failures_(current_.failures_burst, failureInterval(current_)) {}

void AccessLogger::refresh() {
  generation_ = source_.generation();
  current_ = source_.get();
  sampler_ = SuccessSampler(current_.sample_success);
  failures_ = common::LogLimiter(current_.failures_burst, failureInterval(current_));
}

AccessLogger::Admit AccessLogger::admit(bool success, std::chrono::steady_clock::time_point now) {
  if (source_.generation() != generation_) refresh();
  if (!current_.enabled) return Admit::kOff;
  if (success) return sampler_.sample() ? Admit::kWrite : Admit::kSampledOut;
  return failures_.allow(now) ? Admit::kWrite : Admit::kRateLimited;
}

namespace {
std::string workloadName(const workloads::WorkloadPtr& w) { return w ? w->displayName() : std::string(); }
}  // namespace

std::string formatAccessText(const ConnectionRecord& r, const AccessEntry& e) {
  const std::string& peer = r.peer_identity.empty() ? std::string("-") : r.peer_identity;
  std::string line = absl::StrFormat(
      "access direction=%s src=%s dst=%s peer=%s reason=%s sent=%u received=%u duration_ms=%d",
      directionLabel(r.direction()), r.src, r.dst, peer, closeReasonLabel(e.reason), r.requestBytes(),
      r.responseBytes(), e.duration.count());
  if (!r.policy.empty()) absl::StrAppend(&line, " policy=\"", r.policy, "\"");
  if (!r.detail.empty()) absl::StrAppend(&line, " detail=\"", r.detail, "\"");
  // After everything the line had before (what scripts match stays where it was).
  auto field = [&line](std::string_view name, const std::string& value) {
    if (!value.empty()) absl::StrAppend(&line, " ", common::toAbsl(name), "=", value);
  };
  field("src_workload", workloadName(r.source_workload));
  field("src_principal", r.source_principal);
  field("dst_workload", workloadName(r.destination_workload));
  field("dst_principal", r.destination_principal);
  return line;
}

std::string formatAccessJson(const ConnectionRecord& r, const AccessEntry& e) {
  std::string out;
  out.reserve(512);
  bool first = true;
  auto key = [&](std::string_view name) {
    out += first ? "{\"" : ",\"";
    first = false;
    out += name;
    out += "\":";
  };
  // A string, or null when empty (unknown, not applicable).
  auto text = [&](std::string_view name, std::string_view value) {
    key(name);
    if (value.empty()) {
      out += "null";
    } else {
      common::appendJsonString(out, value);
    }
  };
  auto number = [&](std::string_view name, uint64_t value) {
    key(name);
    absl::StrAppend(&out, value);
  };
  const char* verdict = policyVerdictLabel(r.policy_verdict);
  text("timestamp", common::formatTimestamp(e.time));
  text("direction", directionLabel(r.direction()));
  text("source_address", r.src);
  text("destination_address", r.dst);
  text("source_workload", workloadName(r.source_workload));
  text("source_principal", r.source_principal);
  text("destination_workload", workloadName(r.destination_workload));
  text("destination_principal", r.destination_principal);
  text("peer", r.peer_identity);
  number("bytes_sent", r.requestBytes());
  number("bytes_received", r.responseBytes());
  number("duration_ms", static_cast<uint64_t>(e.duration.count()));
  text("reason", closeReasonLabel(e.reason));
  text("policy_verdict", verdict == nullptr ? "" : verdict);
  text("policy", r.policy);
  text("detail", r.detail);
  out += "}";
  return out;
}

}  // namespace ferry::session
