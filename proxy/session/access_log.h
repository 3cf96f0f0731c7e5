#pragma once
// The access log (docs/operations.md, "Access log"): one record per proxied connection at
// close, as text or JSON, through the process logger. Which records are written is decided
// per worker, without locks: successes are sampled (counter-based, exact), failures are
// rate-limited; the settings can be swapped while workers run.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

#include "proxy/common/log.h"
#include "proxy/config/config.h"
#include "proxy/session/stats.h"

namespace ferry::session {

class ConnectionRecord;

// Whether authorization policies judged a connection (inbound, inbound plaintext), and how.
enum class PolicyVerdict { kNotJudged, kAllowed, kDenied };
const char* policyVerdictLabel(PolicyVerdict v);  // nullptr when not judged

// The access-log settings in force. set() is the live-reload hook (any thread); each
// worker notices the new generation at its next record and reads them once.
class AccessLogSettings {
 public:
  explicit AccessLogSettings(config::AccessLog initial = {}) : settings_(initial) {}
  void set(const config::AccessLog& settings);
  config::AccessLog get() const;
  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }

 private:
  // A mutex, not std::atomic<std::shared_ptr>: see workloads/registry.cc. Workers take it
  // only after a change (one acquire load per record otherwise).
  mutable std::mutex mu_;
  config::AccessLog settings_;
  std::atomic<uint64_t> generation_{0};
};

// Which successful connections are written: exactly `fraction` of them, evenly spaced and
// without randomness (an accumulator of parts per million: at 0.25 the 4th, 8th, 12th...),
// so that a test knows which records to expect and a low rate still writes regularly.
class SuccessSampler {
 public:
  static constexpr uint32_t kOne = 1'000'000;
  explicit SuccessSampler(double fraction = 1.0);
  bool sample();

 private:
  uint32_t per_million_;
  uint32_t accumulated_ = 0;
};

// Which of a worker's records are written. Worker thread only.
class AccessLogger {
 public:
  explicit AccessLogger(const AccessLogSettings& settings);
  AccessLogger(const AccessLogger&) = delete;
  AccessLogger& operator=(const AccessLogger&) = delete;

  enum class Admit { kWrite, kOff, kSampledOut, kRateLimited };
  // For a record of a connection that ended ok (`success`) or not, at `now`.
  Admit admit(bool success, std::chrono::steady_clock::time_point now);
  // The settings read at the last admit().
  const config::AccessLog& settings() const { return current_; }

 private:
  void refresh();
  const AccessLogSettings& source_;
  uint64_t generation_;
  config::AccessLog current_;
  SuccessSampler sampler_;
  common::LogLimiter failures_;
};

// What a record says besides the ConnectionRecord's own fields (its direction, addresses,
// parties and bytes).
struct AccessEntry {
  CloseReason reason;
  std::chrono::milliseconds duration{0};
  std::chrono::system_clock::time_point time;  // of the close
};

// "access direction=... src=... ..." (the logger adds time and level).
std::string formatAccessText(const ConnectionRecord& record, const AccessEntry& entry);
// One JSON object, no newline.
std::string formatAccessJson(const ConnectionRecord& record, const AccessEntry& entry);

}  // namespace ferry::session
