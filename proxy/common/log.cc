#include "proxy/common/log.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>

namespace ferry::common {
namespace {
std::atomic<LogLevel> gLevel{LogLevel::kInfo};
std::mutex gMutex;
LogSink gSink;  // guarded by gMutex
}  // namespace

absl::StatusOr<LogLevel> parseLogLevel(std::string_view name) {
  if (name == "trace") return LogLevel::kTrace;
  if (name == "debug") return LogLevel::kDebug;
  if (name == "info") return LogLevel::kInfo;
  if (name == "warn") return LogLevel::kWarn;
  if (name == "error") return LogLevel::kError;
  if (name == "off") return LogLevel::kOff;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown log level '", toAbsl(name), "' (expected trace, debug, info, warn, error or off)"));
}

std::string_view logLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kTrace: return "trace";
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarn: return "warn";
    case LogLevel::kError: return "error";
    case LogLevel::kOff: return "off";
  }
  return "?";
}

bool LogLimiter::allow(std::chrono::steady_clock::time_point now) {
  if (interval_.count() > 0 && tokens_ < burst_) {
    auto earned = (now - last_refill_) / interval_;
    if (earned > 0) {
      tokens_ = static_cast<uint32_t>(std::min<int64_t>(burst_, tokens_ + earned));
      // What was earned is spent from the clock, the remainder kept: at 1,000 a second
      // with a call every 1.5 ms, the limit still lets 1,000 through, not 667.
      last_refill_ = tokens_ < burst_ ? last_refill_ + earned * interval_ : now;
    }
  } else if (tokens_ >= burst_) {
    last_refill_ = now;
  }
  if (tokens_ == 0) {
    ++suppressed_;
    return false;
  }
  --tokens_;
  return true;
}

void setLogLevel(LogLevel level) { gLevel.store(level, std::memory_order_relaxed); }
LogLevel logLevel() { return gLevel.load(std::memory_order_relaxed); }
bool logEnabled(LogLevel level) { return level >= gLevel.load(std::memory_order_relaxed); }

void setLogSink(LogSink sink) {
  std::lock_guard lock(gMutex);
  gSink = std::move(sink);
}

namespace {
// Under gMutex.
void emit(std::string_view line) {
  if (gSink) {
    gSink(line);
    return;
  }
  std::fprintf(stderr, "%.*s\n", static_cast<int>(line.size()), line.data());
}
}  // namespace

void writeRawLine(std::string_view line) {
  std::lock_guard lock(gMutex);
  emit(line);
}

std::string formatTimestamp(std::chrono::system_clock::time_point t) {
  auto secs = std::chrono::system_clock::to_time_t(t);
  auto micros = std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count() % 1000000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
  return absl::StrFormat("%s.%06dZ", stamp, micros);
}

void logLine(LogLevel level, std::string_view message) {
  // Formatted before the lock: the lock covers only the write.
  std::string line = absl::StrFormat("%s %-5s %s", formatTimestamp(std::chrono::system_clock::now()),
                                     toAbsl(logLevelName(level)), toAbsl(message));
  std::lock_guard lock(gMutex);
  emit(line);
}

}  // namespace ferry::common
