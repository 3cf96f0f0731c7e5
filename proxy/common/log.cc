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

bool LogLimiter::allow() {
  auto now = std::chrono::steady_clock::now();
  if (interval_.count() > 0 && tokens_ < burst_) {
    auto earned = (now - last_refill_) / interval_;
    if (earned > 0) {
      tokens_ = static_cast<uint32_t>(std::min<int64_t>(burst_, tokens_ + earned));
      last_refill_ = now;
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

void logLine(LogLevel level, std::string_view message) {
  auto now = std::chrono::system_clock::now();
  auto secs = std::chrono::system_clock::to_time_t(now);
  auto micros = std::chrono::duration_cast<std::chrono::microseconds>(
                    now.time_since_epoch()).count() % 1000000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
  std::lock_guard lock(gMutex);
  std::fprintf(stderr, "%s.%06ldZ %-5s %.*s\n", stamp, static_cast<long>(micros),
               std::string(logLevelName(level)).c_str(), static_cast<int>(message.size()),
               message.data());
}

}  // namespace ferry::common
