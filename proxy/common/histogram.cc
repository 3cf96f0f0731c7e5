#include "proxy/common/histogram.h"

#include "absl/strings/str_cat.h"
#include "proxy/common/strings.h"

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

void DurationHistogram::render(std::string& out, std::string_view name_std, std::string_view labels_std) const {
  absl::string_view name = toAbsl(name_std), labels = toAbsl(labels_std);
  absl::string_view sep = labels.empty() ? "" : ",";
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += buckets_[i].load(std::memory_order_relaxed);
    std::string le = i < bounds_.size() ? absl::StrCat(bounds_[i]) : "+Inf";
    absl::StrAppend(&out, name, "_bucket{", labels, sep, "le=\"", le, "\"} ", cumulative, "\n");
  }
  std::string braces = labels.empty() ? "" : absl::StrCat("{", labels, "}");
  absl::StrAppend(&out, name, "_sum", braces, " ", static_cast<double>(sum_ns_.load(std::memory_order_relaxed)) / 1e9,
                  "\n", name, "_count", braces, " ", count_.load(std::memory_order_relaxed), "\n");
}

}  // namespace ferry::common
