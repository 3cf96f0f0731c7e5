#pragma once
// Durations in config files: "250ms", "10s", "5m", "1h", "24h". Bare numbers are rejected
// so that a unit is never guessed.
#include <chrono>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace ferry::common {

using Millis = std::chrono::milliseconds;

absl::StatusOr<Millis> parseDuration(std::string_view text);
std::string formatDuration(Millis d);

}  // namespace ferry::common
