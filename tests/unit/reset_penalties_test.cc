// The connect budget of an identity closed for rapid reset (proxy/session/reset_penalties.h):
// empty when the penalty begins, refilled at the rate, never more than a second's worth,
// over after kPenalty and renewed by each close; other identities untouched.
#include "proxy/session/reset_penalties.h"

#include <gtest/gtest.h>

namespace ferry::session {
namespace {

using Clock = ResetPenalties::Clock;
using std::chrono::milliseconds;

TEST(ResetPenalties, APenalizedIdentitySharesABudgetOfRateConnectsASecond) {
  ResetPenalties p;
  const auto t0 = Clock::time_point{} + std::chrono::hours(1);
  EXPECT_EQ(p.budgetOf("spiffe://cluster.local/ns/a/sa/x", t0), nullptr) << "nobody penalized: no budget";
  EXPECT_TRUE(p.penalize("spiffe://cluster.local/ns/a/sa/x", 16, t0));
  auto budget = p.budgetOf("spiffe://cluster.local/ns/a/sa/x", t0);
  ASSERT_NE(budget, nullptr);
  EXPECT_EQ(p.budgetOf("spiffe://cluster.local/ns/a/sa/y", t0), nullptr) << "another identity is not touched";
  EXPECT_FALSE(budget->take(t0)) << "empty when the penalty begins";
  // 16 a second: one token every 62.5 ms.
  EXPECT_FALSE(budget->take(t0 + milliseconds(60)));
  EXPECT_TRUE(budget->take(t0 + milliseconds(63)));
  EXPECT_FALSE(budget->take(t0 + milliseconds(64)));
  // Ten seconds idle bank one second's worth, not ten.
  const auto later = t0 + std::chrono::seconds(10);
  int taken = 0;
  while (budget->take(later)) ++taken;
  EXPECT_EQ(taken, 16);
  // A second close renews the penalty without refilling the budget.
  EXPECT_FALSE(p.penalize("spiffe://cluster.local/ns/a/sa/x", 16, later)) << "already penalized: said once";
  EXPECT_FALSE(budget->take(later));
  // Over after kPenalty from the last close: every connect goes, and the identity is forgotten.
  const auto over = later + ResetPenalties::kPenalty;
  EXPECT_TRUE(budget->take(over));
  EXPECT_EQ(p.budgetOf("spiffe://cluster.local/ns/a/sa/x", over), nullptr);
  EXPECT_EQ(p.penalized(over), 0u);
}

TEST(ResetPenalties, AtMostKMaxIdentitiesAreRememberedTheEarliestToEndGoFirst) {
  ResetPenalties p;
  const auto t0 = Clock::time_point{} + std::chrono::hours(1);
  for (size_t i = 0; i <= ResetPenalties::kMaxIdentities; ++i) {
    p.penalize("id-" + std::to_string(i), 16, t0 + milliseconds(i));
  }
  const auto now = t0 + milliseconds(ResetPenalties::kMaxIdentities + 1);
  EXPECT_EQ(p.penalized(now), ResetPenalties::kMaxIdentities);
  EXPECT_EQ(p.budgetOf("id-0", now), nullptr) << "the penalty ending first was forgotten";
  EXPECT_NE(p.budgetOf("id-" + std::to_string(ResetPenalties::kMaxIdentities), now), nullptr);
}

}  // namespace
}  // namespace ferry::session
