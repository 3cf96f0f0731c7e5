#pragma once
// A Prometheus histogram of durations, cheap enough to observe on every watch event: fixed
// bucket bounds, relaxed atomic counters, no lock. One thread observes, any thread renders
// (/metrics); a scrape may see a count one observation ahead of the sum, as Prometheus
// clients allow.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

namespace ferry::common {

class DurationHistogram {
 public:
  // Upper bounds in seconds, ascending (the `le` labels); +Inf is implicit.
  explicit DurationHistogram(std::vector<double> bounds);

  void observe(std::chrono::nanoseconds d);

  // What a scrape states (proxy/telemetry serializes it): cumulative counts per bound.
  struct Snapshot {
    std::vector<double> bounds;
    std::vector<uint64_t> cumulative;  // one per bound
    uint64_t count = 0;
    double sum_seconds = 0;
  };
  Snapshot snapshot() const;

  uint64_t count() const { return count_.load(std::memory_order_relaxed); }

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> bounds_ns_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // per bucket (not cumulative); last: +Inf
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> sum_ns_{0};
};

}  // namespace ferry::common
