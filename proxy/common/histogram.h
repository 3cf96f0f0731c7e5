#pragma once
// A Prometheus histogram of durations, cheap enough to observe on every watch event: fixed
// bucket bounds, relaxed atomic counters, no lock. One thread observes, any thread renders
// (/metrics); a scrape may see a count one observation ahead of the sum, as Prometheus
// clients allow.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::common {

class DurationHistogram {
 public:
  // Upper bounds in seconds, ascending (the `le` labels); +Inf is implicit.
  explicit DurationHistogram(std::vector<double> bounds);

  void observe(std::chrono::nanoseconds d);

  // Appends `<name>_bucket{<labels>,le="..."}` (cumulative), `<name>_sum` and `<name>_count`
  // lines; `labels` is `key="value",...` or empty. The HELP/TYPE lines are the caller's.
  void render(std::string& out, std::string_view name, std::string_view labels) const;

  uint64_t count() const { return count_.load(std::memory_order_relaxed); }

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> bounds_ns_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // per bucket (not cumulative); last: +Inf
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> sum_ns_{0};
};

}  // namespace ferry::common
