#pragma once
// Minimal leveled logger: one line per event on stderr, safe from any thread.
#include <chrono>
#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "proxy/common/strings.h"

namespace ferry::common {

enum class LogLevel { kTrace = 0, kDebug, kInfo, kWarn, kError, kOff };

absl::StatusOr<LogLevel> parseLogLevel(std::string_view name);
std::string_view logLevelName(LogLevel level);
void setLogLevel(LogLevel level);
LogLevel logLevel();
bool logEnabled(LogLevel level);
void logLine(LogLevel level, std::string_view message);

// Rate limit for the lines one source (a connection) may write: `burst` at once, then one
// per `interval`. A client that makes every one of its streams fail must not turn that into
// megabytes of log; what is not written is counted (the events still reach the metrics).
// One thread only, like the connection it belongs to.
class LogLimiter {
 public:
  LogLimiter(uint32_t burst, std::chrono::milliseconds interval)
      : burst_(burst), interval_(interval), tokens_(burst) {}
  // True: write the line. False: it was counted as suppressed.
  bool allow();
  uint64_t suppressed() const { return suppressed_; }

 private:
  uint32_t burst_;
  std::chrono::milliseconds interval_;
  uint32_t tokens_;
  std::chrono::steady_clock::time_point last_refill_ = std::chrono::steady_clock::now();
  uint64_t suppressed_ = 0;
};

}  // namespace ferry::common

// FERRY_LOG(kInfo, "accepted {} from {}", ...) with absl::StrFormat syntax.
#define FERRY_LOG(level, ...)                                                    \
  do {                                                                           \
    if (::ferry::common::logEnabled(::ferry::common::LogLevel::level)) {         \
      ::ferry::common::logLine(::ferry::common::LogLevel::level,                 \
                               ::absl::StrFormat(__VA_ARGS__));                  \
    }                                                                            \
  } while (0)
