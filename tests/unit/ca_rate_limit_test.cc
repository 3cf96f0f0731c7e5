// NodeRateLimiter: per-node token buckets under times the test chooses (no sleeping).
#include <cmath>
#include <string>

#include "gtest/gtest.h"
#include "proxy/ca/rate_limit.h"

namespace ferry::ca {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

const NodeRateLimiter::TimePoint kStart{seconds(1000)};

std::unique_ptr<NodeRateLimiter> limiter(double rate, double burst, size_t max_tracked = kMaxTrackedNodes) {
  auto l = NodeRateLimiter::create(rate, burst, max_tracked);
  EXPECT_TRUE(l.ok()) << l.status();
  return l.ok() ? *std::move(l) : nullptr;
}

TEST(CaRateLimitTest, AllowsABurstThenRefusesWithTheWaitForTheNextToken) {
  auto l = limiter(/*rate=*/0.5, /*burst=*/3);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(l->take("fy-node", kStart).allowed) << i;
  auto refused = l->take("fy-node", kStart);
  EXPECT_FALSE(refused.allowed);
  EXPECT_EQ(refused.retry_after, seconds(2)) << "one token per 2 s";
  auto later = l->take("fy-node", kStart + milliseconds(500));
  EXPECT_FALSE(later.allowed);
  EXPECT_EQ(later.retry_after, seconds(2)) << "1.5 s left, rounded up";
  EXPECT_TRUE(l->take("fy-node", kStart + seconds(2)).allowed);
}

TEST(CaRateLimitTest, RetryAfterIsAtLeastOneSecond) {
  auto l = limiter(/*rate=*/100, /*burst=*/1);
  EXPECT_TRUE(l->take("fy-node", kStart).allowed);
  auto refused = l->take("fy-node", kStart);
  EXPECT_FALSE(refused.allowed);
  EXPECT_EQ(refused.retry_after, seconds(1)) << "10 ms is said as 1 s: Retry-After counts whole seconds";
}

TEST(CaRateLimitTest, EachNodeHasItsOwnBucket) {
  auto l = limiter(/*rate=*/1, /*burst=*/1);
  EXPECT_TRUE(l->take("fy-node-a", kStart).allowed);
  EXPECT_FALSE(l->take("fy-node-a", kStart).allowed);
  EXPECT_TRUE(l->take("fy-node-b", kStart).allowed) << "a busy node does not starve another";
}

TEST(CaRateLimitTest, RefillsAtTheRateUpToTheBurstOnly) {
  auto l = limiter(/*rate=*/1, /*burst=*/2);
  EXPECT_TRUE(l->take("fy-node", kStart).allowed);
  EXPECT_TRUE(l->take("fy-node", kStart).allowed);
  // An hour idle earns two tokens, not 3,600.
  auto later = kStart + std::chrono::hours(1);
  EXPECT_TRUE(l->take("fy-node", later).allowed);
  EXPECT_TRUE(l->take("fy-node", later).allowed);
  EXPECT_FALSE(l->take("fy-node", later).allowed);
}

TEST(CaRateLimitTest, TimeGoingBackwardsEarnsNothing) {
  auto l = limiter(/*rate=*/1, /*burst=*/1);
  EXPECT_TRUE(l->take("fy-node", kStart).allowed);
  EXPECT_FALSE(l->take("fy-node", kStart - seconds(10)).allowed);
}

TEST(CaRateLimitTest, DropsIdleFullBucketsWhenTheMapOutgrowsItsBound) {
  auto l = limiter(/*rate=*/1, /*burst=*/1, /*max_tracked=*/4);
  for (int i = 0; i < 4; ++i) l->take("idle-" + std::to_string(i), kStart);
  EXPECT_EQ(l->tracked(), 4u);
  // Ten seconds on, the four are full again; the fifth node pushes the map over its bound.
  auto later = kStart + seconds(10);
  EXPECT_TRUE(l->take("busy", later).allowed);
  EXPECT_EQ(l->tracked(), 1u) << "only the bucket that is not full stays";
  EXPECT_FALSE(l->take("busy", later).allowed) << "a swept map still limits the busy node";
}

TEST(CaRateLimitTest, KeepsBusyBucketsWhenSweeping) {
  auto l = limiter(/*rate=*/1, /*burst=*/1, /*max_tracked=*/2);
  for (int i = 0; i < 3; ++i) l->take("busy-" + std::to_string(i), kStart);
  EXPECT_EQ(l->tracked(), 3u) << "none was full again, so none may be forgotten";
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(l->take("busy-" + std::to_string(i), kStart).allowed) << i;
}

TEST(CaRateLimitTest, RefusesNonPositiveRateAndBurstBelowOne) {
  EXPECT_FALSE(NodeRateLimiter::create(0, 5).ok());
  EXPECT_FALSE(NodeRateLimiter::create(-1, 5).ok());
  EXPECT_FALSE(NodeRateLimiter::create(1, 0.5).ok());
  EXPECT_FALSE(NodeRateLimiter::create(std::nan(""), 5).ok());
}

}  // namespace
}  // namespace ferry::ca
