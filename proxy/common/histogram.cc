#include "proxy/common/histogram.h"

#include <algorithm>

namespace ferry::common {

DurationHistogram::DurationHistogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), buckets_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  for (double b : bounds_) bounds_ns_.push_back(static_cast<int64_t>(b * 1e9));
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i].store(0, std::memory_order_relaxed);
}

void DurationHistogram::observe(std::chrono::nanoseconds d) {
  int64_t ns = d.count() < 0 ? 0 : d.count();
  size_t i = 0;
  while (i < bounds_ns_.size() && ns > bounds_ns_[i]) ++i;  // ~16 bounds: a scan beats a search
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  sum_ns_.fetch_add(static_cast<uint64_t>(ns), std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
}

DurationHistogram::Snapshot DurationHistogram::snapshot() const {
  Snapshot out;
  out.bounds = bounds_;
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += buckets_[i].load(std::memory_order_relaxed);
    out.cumulative.push_back(cumulative);
  }
  // The +Inf bucket is the count; read last so that no bucket exceeds it.
  out.count = std::max(count_.load(std::memory_order_relaxed),
                       cumulative + buckets_[bounds_.size()].load(std::memory_order_relaxed));
  out.sum_seconds = static_cast<double>(sum_ns_.load(std::memory_order_relaxed)) / 1e9;
  return out;
}

}  // namespace ferry::common
