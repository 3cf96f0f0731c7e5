#pragma once
// Minimal leveled logger: one line per event on stderr, safe from any thread.
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

}  // namespace ferry::common

// FERRY_LOG(kInfo, "accepted {} from {}", ...) with absl::StrFormat syntax.
#define FERRY_LOG(level, ...)                                                    \
  do {                                                                           \
    if (::ferry::common::logEnabled(::ferry::common::LogLevel::level)) {         \
      ::ferry::common::logLine(::ferry::common::LogLevel::level,                 \
                               ::absl::StrFormat(__VA_ARGS__));                  \
    }                                                                            \
  } while (0)
