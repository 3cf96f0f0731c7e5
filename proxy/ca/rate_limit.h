#pragma once
// Step 5 of docs/ferry-ca.md "Node authorization": each node has a token bucket, so that one
// compromised or looping node daemon cannot keep the CA busy signing for everyone else.
#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace ferry::ca {

// Kubernetes supports clusters of up to 5,000 nodes; buckets beyond this many are swept of
// the idle (full) ones, so names that never come back cannot grow the map for ever.
inline constexpr size_t kMaxTrackedNodes = 8192;

class NodeRateLimiter {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  // `rate_per_second` tokens are added per second up to `burst`; each signature takes one.
  // Refused unless rate > 0 and burst >= 1 (the error names the flag values).
  static absl::StatusOr<std::unique_ptr<NodeRateLimiter>> create(double rate_per_second, double burst,
                                                                 size_t max_tracked = kMaxTrackedNodes);

  struct Verdict {
    bool allowed = false;
    // When refused: the wait until the next token, rounded up to whole seconds (>= 1), for
    // Retry-After.
    std::chrono::seconds retry_after{0};
  };
  // Thread-safe. Takes a token of `node`'s bucket at `now` (the caller's steady clock; tests
  // pass their own times, never earlier than the last call's).
  Verdict take(std::string_view node, TimePoint now);
  // Buckets held now (for tests and a gauge).
  size_t tracked() const;

 private:
  NodeRateLimiter(double rate_per_second, double burst, size_t max_tracked)
      : rate_(rate_per_second), burst_(burst), max_tracked_(max_tracked), sweep_above_(max_tracked) {}
  struct Bucket {
    double tokens = 0;
    TimePoint updated;
  };
  // Drops the buckets that are full again at `now`. Callers hold mu_.
  void sweep(TimePoint now);

  const double rate_;
  const double burst_;
  const size_t max_tracked_;
  mutable std::mutex mu_;
  size_t sweep_above_;  // the next sweep runs when the map grows beyond this
  absl::flat_hash_map<std::string, Bucket> buckets_;
};

}  // namespace ferry::ca
