// Which access records a worker writes: the off-switch, counter-based sampling of
// successes, the failure rate limit, and settings swapped while it runs.
#include <gtest/gtest.h>

#include "proxy/session/access_log.h"

namespace ferry::session {
namespace {

using Admit = AccessLogger::Admit;
using Clock = std::chrono::steady_clock;

config::AccessLog settings(double sample_success, uint32_t per_second = 100, uint32_t burst = 200) {
  config::AccessLog s;
  s.sample_success = sample_success;
  s.failures_per_second = per_second;
  s.failures_burst = burst;
  return s;
}

// Which of the first `n` successes a sampler at `fraction` writes (1-based).
std::vector<int> sampled(double fraction, int n) {
  SuccessSampler sampler(fraction);
  std::vector<int> out;
  for (int i = 1; i <= n; ++i) {
    if (sampler.sample()) out.push_back(i);
  }
  return out;
}

TEST(SuccessSampler, WritesExactlyTheFractionEvenlySpaced) {
  EXPECT_EQ(sampled(1.0, 5), (std::vector<int>{1, 2, 3, 4, 5}));
  EXPECT_EQ(sampled(0.0, 5), std::vector<int>{});
  EXPECT_EQ(sampled(0.25, 12), (std::vector<int>{4, 8, 12}));
  EXPECT_EQ(sampled(0.5, 6), (std::vector<int>{2, 4, 6}));
  EXPECT_EQ(sampled(0.001, 10'000).size(), 10u);
  EXPECT_EQ(sampled(0.3, 1'000).size(), 300u);
  EXPECT_EQ(sampled(0.999999, 1'000'000).size(), 999'999u);
}

TEST(AccessLogger, OffSwitchWritesNothingAndCountsNothingAsDropped) {
  auto off = settings(1.0);
  off.enabled = false;
  AccessLogSettings source(off);
  AccessLogger logger(source);
  auto now = Clock::now();
  EXPECT_EQ(logger.admit(true, now), Admit::kOff);
  EXPECT_EQ(logger.admit(false, now), Admit::kOff);
}

TEST(AccessLogger, SamplesSuccessesButNeverFailures) {
  AccessLogSettings source(settings(0.5));
  AccessLogger logger(source);
  auto now = Clock::now();
  EXPECT_EQ(logger.admit(true, now), Admit::kSampledOut);
  EXPECT_EQ(logger.admit(false, now), Admit::kWrite);
  EXPECT_EQ(logger.admit(true, now), Admit::kWrite);
  EXPECT_EQ(logger.admit(true, now), Admit::kSampledOut);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(logger.admit(false, now), Admit::kWrite);
  EXPECT_EQ(logger.admit(true, now), Admit::kWrite);
}

TEST(AccessLogger, RateLimitsFailuresToTheBurstThenThePerSecondRate) {
  AccessLogSettings source(settings(1.0, /*per_second=*/10, /*burst=*/3));
  AccessLogger logger(source);
  auto t = Clock::now();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(logger.admit(false, t), Admit::kWrite) << i;
  EXPECT_EQ(logger.admit(false, t), Admit::kRateLimited);
  // Successes are not held back by the failures' limit.
  EXPECT_EQ(logger.admit(true, t), Admit::kWrite);
  // One token per 100 ms.
  t += std::chrono::milliseconds(100);
  EXPECT_EQ(logger.admit(false, t), Admit::kWrite);
  EXPECT_EQ(logger.admit(false, t), Admit::kRateLimited);
  // A second later: ten earned, capped at the burst.
  t += std::chrono::seconds(1);
  int written = 0;
  for (int i = 0; i < 10; ++i) written += logger.admit(false, t) == Admit::kWrite ? 1 : 0;
  EXPECT_EQ(written, 3);
}

TEST(AccessLogger, PicksUpNewSettingsAtTheNextRecord) {
  AccessLogSettings source(settings(1.0));
  AccessLogger logger(source);
  auto now = Clock::now();
  EXPECT_EQ(logger.admit(true, now), Admit::kWrite);
  EXPECT_EQ(logger.settings().format, config::AccessLogFormat::kText);
  auto json = settings(0.0);
  json.format = config::AccessLogFormat::kJson;
  source.set(json);  // the reload hook
  EXPECT_EQ(logger.admit(true, now), Admit::kSampledOut);
  EXPECT_EQ(logger.settings().format, config::AccessLogFormat::kJson);
  auto off = json;
  off.enabled = false;
  source.set(off);
  EXPECT_EQ(logger.admit(false, now), Admit::kOff);
}

}  // namespace
}  // namespace ferry::session
