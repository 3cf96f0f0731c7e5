#pragma once
// Minimal leveled logger: one line per event on stderr, safe from any thread.
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
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
// RFC 3339 in UTC with microseconds, as every line starts: 2026-12-02T01:40:00.123456Z.
std::string formatTimestamp(std::chrono::system_clock::time_point t);
// Writes `line` as it is, without timestamp and level: for lines in a format of their own
// (JSON access records). Same stream, same lock as logLine.
void writeRawLine(std::string_view line);
// Where finished lines go: stderr, unless a sink is set (tests read the lines through
// one; an empty function restores stderr). Called with the whole line, newline excluded,
// one line at a time.
using LogSink = std::function<void(std::string_view line)>;
void setLogSink(LogSink sink);

// Rate limit for the lines one source (a connection, a worker's failure records) may write:
// `burst` at once, then one per `interval`. A client that makes every one of its streams
// fail must not turn that into megabytes of log; what is not written is counted (the events
// still reach the metrics). One thread only, like the connection it belongs to.
class LogLimiter {
 public:
  LogLimiter(uint32_t burst, std::chrono::nanoseconds interval)
      : burst_(burst), interval_(interval), tokens_(burst) {}
  // True: write the line. False: it was counted as suppressed.
  bool allow() { return allow(std::chrono::steady_clock::now()); }
  // The same at `now` (tests step time themselves; never earlier than the last call).
  bool allow(std::chrono::steady_clock::time_point now);
  uint64_t suppressed() const { return suppressed_; }

 private:
  uint32_t burst_;
  std::chrono::nanoseconds interval_;
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
