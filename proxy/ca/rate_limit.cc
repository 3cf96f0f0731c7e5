#include "proxy/ca/rate_limit.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "proxy/common/strings.h"

namespace ferry::ca {

absl::StatusOr<std::unique_ptr<NodeRateLimiter>> NodeRateLimiter::create(double rate_per_second, double burst,
                                                                         size_t max_tracked) {
  // NaN fails both comparisons, so it is refused too.
  if (!(rate_per_second > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("node rate must be positive, not ", rate_per_second));
  }
  if (!(burst >= 1)) {
    return absl::InvalidArgumentError(absl::StrCat("node burst must be at least 1, not ", burst));
  }
  return std::unique_ptr<NodeRateLimiter>(new NodeRateLimiter(rate_per_second, burst, std::max<size_t>(max_tracked, 1)));
}

NodeRateLimiter::Verdict NodeRateLimiter::take(std::string_view node, TimePoint now) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = buckets_.find(common::toAbsl(node));
  bool inserted = it == buckets_.end();
  if (inserted) it = buckets_.emplace(std::string(node), Bucket{}).first;
  Bucket& bucket = it->second;
  if (inserted) {
    bucket.tokens = burst_;  // a node not seen (or idle long enough to be swept) starts full
  } else if (now > bucket.updated) {
    double elapsed = std::chrono::duration<double>(now - bucket.updated).count();
    bucket.tokens = std::min(burst_, bucket.tokens + elapsed * rate_);
  }
  bucket.updated = std::max(bucket.updated, now);
  Verdict verdict;
  if (bucket.tokens >= 1) {
    bucket.tokens -= 1;
    verdict.allowed = true;
  } else {
    double wait = (1 - bucket.tokens) / rate_;
    verdict.retry_after = std::chrono::seconds(std::max<int64_t>(1, static_cast<int64_t>(std::ceil(wait))));
  }
  if (buckets_.size() > sweep_above_) sweep(now);
  return verdict;
}

void NodeRateLimiter::sweep(TimePoint now) {
  for (auto it = buckets_.begin(); it != buckets_.end();) {
    double elapsed = std::chrono::duration<double>(now - it->second.updated).count();
    if (it->second.tokens + elapsed * rate_ >= burst_) {
      buckets_.erase(it++);  // full again: forgetting it changes no answer
    } else {
      ++it;
    }
  }
  // Every bucket left is busy: sweep again only when the map has doubled, so that a cluster
  // with more busy nodes than the bound costs amortised O(1) per call, not a sweep each.
  sweep_above_ = std::max(max_tracked_, 2 * buckets_.size());
}

size_t NodeRateLimiter::tracked() const {
  std::lock_guard<std::mutex> lock(mu_);
  return buckets_.size();
}

}  // namespace ferry::ca
