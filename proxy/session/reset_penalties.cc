#include "proxy/session/reset_penalties.h"

#include <algorithm>

namespace ferry::session {

// Budget::until_ is written only by penalize(), which holds both the registry's lock and the
// budget's: it may be read under either.

bool ResetPenalties::Budget::take(Clock::time_point now) {
  std::lock_guard lock(mu_);
  if (now >= until_) return true;
  double elapsed = std::chrono::duration<double>(now - refilled_).count();
  refilled_ = now;
  // At most one second's worth banked: a burst never exceeds the per-connection limit.
  tokens_ = std::min(rate_, tokens_ + std::max(0.0, elapsed) * rate_);
  if (tokens_ < 1) return false;
  tokens_ -= 1;
  return true;
}

bool ResetPenalties::penalize(const std::string& identity, uint32_t rate, Clock::time_point now) {
  std::lock_guard lock(mu_);
  auto [it, added] = by_identity_.try_emplace(identity);
  if (added) it->second = std::make_shared<Budget>();
  Budget& b = *it->second;
  bool fresh;
  {
    std::lock_guard budget_lock(b.mu_);
    fresh = now >= b.until_;
    if (fresh) {
      b.tokens_ = 0;
      b.refilled_ = now;
    }
    b.rate_ = std::max<uint32_t>(rate, 1);
    b.until_ = now + kPenalty;
  }
  if (by_identity_.size() > kMaxIdentities) forgetExpired(now);
  while (by_identity_.size() > kMaxIdentities) {
    auto first = std::min_element(by_identity_.begin(), by_identity_.end(), [](const auto& a, const auto& b) {
      return a.second->until_ < b.second->until_;
    });
    by_identity_.erase(first);
  }
  size_.store(by_identity_.size(), std::memory_order_release);
  return fresh;
}

std::shared_ptr<ResetPenalties::Budget> ResetPenalties::budgetOf(const std::string& identity, Clock::time_point now) {
  if (size_.load(std::memory_order_acquire) == 0) return nullptr;
  std::lock_guard lock(mu_);
  auto it = by_identity_.find(identity);
  if (it == by_identity_.end()) return nullptr;
  if (now < it->second->until_) return it->second;
  by_identity_.erase(it);
  size_.store(by_identity_.size(), std::memory_order_release);
  return nullptr;
}

size_t ResetPenalties::penalized(Clock::time_point now) const {
  if (size_.load(std::memory_order_acquire) == 0) return 0;
  std::lock_guard lock(mu_);
  size_t n = 0;
  for (const auto& [_, budget] : by_identity_) n += now < budget->until_ ? 1 : 0;
  return n;
}

void ResetPenalties::forgetExpired(Clock::time_point now) {
  for (auto it = by_identity_.begin(); it != by_identity_.end();) {
    auto here = it++;
    if (now >= here->second->until_) by_identity_.erase(here);
  }
}

}  // namespace ferry::session
