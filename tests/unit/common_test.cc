#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>

#include "proxy/common/duration.h"
#include "proxy/common/file.h"
#include "proxy/common/histogram.h"
#include "proxy/common/json_text.h"
#include "proxy/common/log.h"
#include "proxy/common/net.h"
#include "proxy/common/readiness_file.h"
#include "tests/support/temp_dir.h"

namespace ferry::common {
namespace {

TEST(LogLimiter, LetsABurstThroughThenCountsWhatItSuppresses) {
  // An interval no test run reaches: no refill happens while it runs.
  LogLimiter limiter(3, std::chrono::hours(1));
  EXPECT_TRUE(limiter.allow());
  EXPECT_TRUE(limiter.allow());
  EXPECT_TRUE(limiter.allow());
  EXPECT_FALSE(limiter.allow());
  EXPECT_FALSE(limiter.allow());
  EXPECT_EQ(limiter.suppressed(), 2u);
}

TEST(LogLimiter, RefillsOnePerInterval) {
  LogLimiter limiter(1, std::chrono::milliseconds(1));
  EXPECT_TRUE(limiter.allow());
  EXPECT_FALSE(limiter.allow());
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(2);
  while (std::chrono::steady_clock::now() < until) {
  }
  EXPECT_TRUE(limiter.allow());
  EXPECT_EQ(limiter.suppressed(), 1u);
}

TEST(LogLimiter, RefillsAtTheConfiguredRateKeepingTheRemainder) {
  // 1,000 a second, asked every 1.5 ms for a second: 1,000 let through (plus the burst of
  // one), not one per call rounded down (667).
  LogLimiter limiter(1, std::chrono::milliseconds(1));
  auto t = std::chrono::steady_clock::now();
  int allowed = 0;
  for (int i = 0; i < 667; ++i, t += std::chrono::microseconds(1500)) allowed += limiter.allow(t) ? 1 : 0;
  EXPECT_GE(allowed, 665);
  EXPECT_LE(allowed, 668);
}

std::string jsonString(std::string_view text) {
  std::string out;
  appendJsonString(out, text);
  return out;
}

// What a JSON parser reads back from appendJsonString's output.
std::string parsedBack(std::string_view text) {
  boost::system::error_code ec;
  auto value = boost::json::parse(jsonString(text), ec);
  EXPECT_FALSE(ec) << jsonString(text) << ": " << ec.message();
  return ec ? "" : std::string(value.as_string());
}

TEST(JsonString, EscapesQuotesBackslashesAndControlCharacters) {
  EXPECT_EQ(jsonString("plain"), "\"plain\"");
  EXPECT_EQ(jsonString("say \"hi\" \\ bye"), "\"say \\\"hi\\\" \\\\ bye\"");
  EXPECT_EQ(jsonString("a\nb\rc\td\be\ff"), "\"a\\nb\\rc\\td\\be\\ff\"");
  EXPECT_EQ(jsonString(std::string_view("\0\x01\x1f\x7f", 4)), "\"\\u0000\\u0001\\u001f\\u007f\"");
  std::string all;
  for (int c = 0; c < 0x80; ++c) all.push_back(static_cast<char>(c));
  EXPECT_EQ(parsedBack(all), all);
}

TEST(JsonString, KeepsValidUtf8AndReplacesInvalidBytes) {
  EXPECT_EQ(jsonString("na\xc3\xafve \xe2\x82\xac \xf0\x9f\x9a\xa2"), "\"na\xc3\xafve \xe2\x82\xac \xf0\x9f\x9a\xa2\"");
  EXPECT_EQ(parsedBack("\xf0\x9f\x9a\xa2"), "\xf0\x9f\x9a\xa2");
  // A lone continuation byte, a truncated sequence, an overlong '/', a surrogate, 0xff.
  EXPECT_EQ(jsonString("a\x80" "b"), "\"a\\ufffdb\"");
  EXPECT_EQ(jsonString("\xe2\x82"), "\"\\ufffd\\ufffd\"");
  EXPECT_EQ(jsonString("\xc0\xaf"), "\"\\ufffd\\ufffd\"");
  EXPECT_EQ(jsonString("\xed\xa0\x80"), "\"\\ufffd\\ufffd\\ufffd\"");
  EXPECT_EQ(jsonString("\xff"), "\"\\ufffd\"");
  EXPECT_EQ(parsedBack("x\xffy"), "x\xef\xbf\xbdy");
  // Line and paragraph separators: valid JSON either way, escaped for JavaScript readers.
  EXPECT_EQ(jsonString("\xe2\x80\xa8\xe2\x80\xa9"), "\"\\u2028\\u2029\"");
  EXPECT_EQ(parsedBack("\xe2\x80\xa8"), "\xe2\x80\xa8");
}

TEST(DurationHistogram, CountsEachObservationInItsBucketCumulatively) {
  DurationHistogram h({0.001, 0.01});
  h.observe(std::chrono::microseconds(300));
  h.observe(std::chrono::milliseconds(1));  // on a bound: that bucket (le is "<=")
  h.observe(std::chrono::milliseconds(5));
  h.observe(std::chrono::seconds(2));
  h.observe(std::chrono::nanoseconds(-1));  // a clock step backwards counts as zero
  auto snap = h.snapshot();
  EXPECT_EQ(snap.bounds, (std::vector<double>{0.001, 0.01}));
  EXPECT_EQ(snap.cumulative, (std::vector<uint64_t>{3, 4}));
  EXPECT_EQ(snap.count, 5u);
  EXPECT_DOUBLE_EQ(snap.sum_seconds, 2.0063);
  EXPECT_EQ(h.count(), 5u);
}

TEST(HostPort, ParsesIpv4AndBracketedIpv6) {
  auto a = parseHostPort("10.0.0.1:80");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->port, 80);
  EXPECT_EQ(a->ip.to_string(), "10.0.0.1");
  auto b = parseHostPort("[fd00::1]:443");
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(b->ip.is_v6());
  EXPECT_EQ(formatHostPort(*b), "[fd00::1]:443");
}

TEST(HostPort, RejectsMalformedInput) {
  for (const char* bad : {"", "10.0.0.1", "10.0.0.1:", ":80", "10.0.0.1:0", "10.0.0.1:65536",
                          "10.0.0.1:8o", "fd00::1:80", "[fd00::1]80", "[10.0.0.1]:80", "host:80",
                          "10.0.0.1:+80", "10.0.0.1:123456", "[fe80::1%eth0]:80"}) {
    EXPECT_FALSE(parseHostPort(bad).ok()) << bad;
  }
  EXPECT_TRUE(parseHostPort("10.0.0.1:0", /*allow_zero_port=*/true).ok());
}

TEST(Duration, ParsesUnitsAndRejectsBareNumbers) {
  EXPECT_EQ(*parseDuration("250ms"), Millis(250));
  EXPECT_EQ(*parseDuration("10s"), Millis(10000));
  EXPECT_EQ(*parseDuration("5m"), Millis(300000));
  EXPECT_EQ(*parseDuration("24h"), Millis(86400000));
  for (const char* bad : {"", "10", "s", "-1s", "1.5s", "10 s", "1d", "9999999999s"}) {
    EXPECT_FALSE(parseDuration(bad).ok()) << bad;
  }
  EXPECT_EQ(formatDuration(Millis(300000)), "5m");
  EXPECT_EQ(formatDuration(Millis(1500)), "1500ms");
}

}  // namespace
}  // namespace ferry::common

// The readiness file (common/readiness_file.h): what a Kubernetes exec probe of one ferryd
// generation concludes, read back as the kubelet's `ferryctl probe` would.
class ReadinessFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(dir_.ok());
    path_ = dir_.file("ready");
  }
  static std::chrono::system_clock::time_point mtimeOf(const std::string& path) {
    struct stat st {};
    EXPECT_EQ(::stat(path.c_str(), &st), 0);
    return std::chrono::system_clock::time_point(std::chrono::duration_cast<std::chrono::system_clock::duration>(
        std::chrono::seconds(st.st_mtim.tv_sec) + std::chrono::nanoseconds(st.st_mtim.tv_nsec)));
  }
  ferry::test_support::TempDir dir_{"readiness"};
  std::string path_;
  std::string last_;
  static constexpr std::chrono::milliseconds kMaxAge{10'000};
};

TEST_F(ReadinessFileTest, PassesOnlyAFreshFileThatSaysReady) {
  ASSERT_TRUE(ferry::common::publishReadiness(path_, "ready", &last_).ok());
  auto now = mtimeOf(path_);
  auto verdict = ferry::common::probeReadinessFile(path_, kMaxAge, false, now + std::chrono::seconds(9));
  EXPECT_TRUE(verdict.pass);
  EXPECT_EQ(verdict.message, "ready");
  verdict = ferry::common::probeReadinessFile(path_, kMaxAge, false, now + std::chrono::seconds(11));
  EXPECT_FALSE(verdict.pass) << "a ferryd that stopped refreshing its file is not ready";
  EXPECT_NE(verdict.message.find("stale: "), std::string::npos) << verdict.message;
  EXPECT_NE(verdict.message.find("it said: ready"), std::string::npos) << verdict.message;
}

TEST_F(ReadinessFileTest, AnyOtherStateFailsReadinessAndPassesLiveness) {
  const std::string retiring = "retiring: ferryd pid 42 serves; this one carries 7 connections until they end";
  ASSERT_TRUE(ferry::common::publishReadiness(path_, retiring, &last_).ok());
  auto now = mtimeOf(path_);
  auto ready = ferry::common::probeReadinessFile(path_, kMaxAge, false, now);
  EXPECT_FALSE(ready.pass);
  EXPECT_EQ(ready.message, retiring);
  auto live = ferry::common::probeReadinessFile(path_, kMaxAge, true, now);
  EXPECT_TRUE(live.pass);
  live = ferry::common::probeReadinessFile(path_, kMaxAge, true, now + std::chrono::seconds(11));
  EXPECT_FALSE(live.pass) << "a stale file is a ferryd that hangs: not alive";
}

TEST_F(ReadinessFileTest, AMissingOrEmptyFileFailsAndSaysWhy) {
  auto verdict = ferry::common::probeReadinessFile(path_, kMaxAge, true, std::chrono::system_clock::now());
  EXPECT_FALSE(verdict.pass);
  EXPECT_EQ(verdict.message, "no readiness file " + path_ + ": ferryd has not started or has exited");
  { std::ofstream(path_) << ""; }
  verdict = ferry::common::probeReadinessFile(path_, kMaxAge, true, std::chrono::system_clock::now());
  EXPECT_FALSE(verdict.pass);
  EXPECT_EQ(verdict.message, path_ + " is empty");
}

TEST_F(ReadinessFileTest, RewritesOnAChangeAndOnlyRefreshesTheSameState) {
  ASSERT_TRUE(ferry::common::publishReadiness(path_, "starting", &last_).ok());
  struct stat first {};
  ASSERT_EQ(::stat(path_.c_str(), &first), 0);
  // Back-date the file: a refresh must move its mtime forward without a new inode.
  timespec old[2] = {{1, 0}, {1, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, path_.c_str(), old, 0), 0);
  ASSERT_TRUE(ferry::common::publishReadiness(path_, "starting", &last_).ok());
  struct stat touched {};
  ASSERT_EQ(::stat(path_.c_str(), &touched), 0);
  EXPECT_EQ(touched.st_ino, first.st_ino) << "the same state is not written again";
  EXPECT_GT(touched.st_mtim.tv_sec, 1);
  ASSERT_TRUE(ferry::common::publishReadiness(path_, "ready", &last_).ok());
  EXPECT_EQ(last_, "ready");
  auto text = ferry::common::readFile(path_);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "ready\n");
  // Removed under it: the next refresh writes it again.
  ASSERT_EQ(::unlink(path_.c_str()), 0);
  ASSERT_TRUE(ferry::common::publishReadiness(path_, "ready", &last_).ok());
  EXPECT_EQ(*ferry::common::readFile(path_), "ready\n");
}
