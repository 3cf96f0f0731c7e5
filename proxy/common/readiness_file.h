#pragma once
// This process's readiness as a file, for a probe that must reach this very process
// (docs/operations.md, "Upgrading with the chart"). During a handover two generations of
// ferryd share one readiness listener, so an HTTP probe on it answers for whichever holds it;
// a file in the container's own folder answers for the process beside it.
//
// The file holds one line: "ready", or what the process is doing instead ("starting",
// "not ready: <why>", "draining", "retiring: <...>"). The writer refreshes it (its mtime)
// every kReadinessFileInterval, so a process that hangs or died leaves a stale file.
#include <chrono>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace ferry::common {

inline constexpr std::string_view kReadyLine = "ready";
// How often the writer refreshes the file: a probe's max age is a few of these.
inline constexpr std::chrono::seconds kReadinessFileInterval{1};

// Writes `state` (one line) to `path` when it differs from `*last` (atomically: a probe never
// reads half a line), else only refreshes the file's mtime. `*last` is what the file holds
// afterwards.
absl::Status publishReadiness(const std::string& path, std::string_view state, std::string* last);

struct ReadinessVerdict {
  bool pass = false;
  std::string message;  // the state line, or why the file says nothing (missing, stale)
};

// What a probe of the file concludes at `now`: a file older than `max_age` fails (the process
// stopped refreshing it); else readiness passes on "ready" only and liveness (`live`) on any
// state.
ReadinessVerdict probeReadinessFile(const std::string& path, std::chrono::milliseconds max_age, bool live,
                                    std::chrono::system_clock::time_point now);

}  // namespace ferry::common
