// The metrics registry (proxy/telemetry): what a collector states is what /metrics shows,
// in the text format Prometheus parses.
#include "proxy/telemetry/metrics.h"

#include <gtest/gtest.h>

namespace ferry::telemetry {
namespace {

TEST(Registry, RendersEachFamilyWithHelpTypeAndLabelledSamples) {
  Registry registry;
  auto part = registry.add([](Exposition& out) {
    out.counter("fy_things_total", "Things, by kind").add(2, {{"kind", "a"}}).add(3, {{"kind", "b\"q"}});
    out.gauge("fy_level", "A level", 1.5);
  });
  EXPECT_EQ(registry.render(),
            "# HELP fy_things_total Things, by kind\n"
            "# TYPE fy_things_total counter\n"
            "fy_things_total{kind=\"a\"} 2\n"
            "fy_things_total{kind=\"b\\\"q\"} 3\n"
            "# HELP fy_level A level\n"
            "# TYPE fy_level gauge\n"
            "fy_level 1.5\n");
}

TEST(Registry, AnUnregisteredPartStatesNothing) {
  Registry registry;
  {
    auto part = registry.add([](Exposition& out) { out.gauge("fy_gone", "Gone soon", 1); });
    EXPECT_NE(registry.render().find("fy_gone 1\n"), std::string::npos);
  }
  EXPECT_EQ(registry.render(), "");
}

TEST(Registry, LargeCountersKeepEveryDigit) {
  // Byte counters are compared exactly by tests and dashboards: 2^52 + 1 must not round.
  std::string text = renderText([](Exposition& out) { out.counter("fy_bytes_total", "Bytes", 4503599627370497.0); });
  EXPECT_NE(text.find("fy_bytes_total 4503599627370497\n"), std::string::npos) << text;
}

TEST(Registry, HistogramsAreCumulativeWithSumAndCount) {
  common::DurationHistogram h({0.001, 0.01});
  h.observe(std::chrono::microseconds(300));
  h.observe(std::chrono::milliseconds(5));
  h.observe(std::chrono::seconds(2));
  std::string text = renderText([&](Exposition& out) { out.histogram("fy_apply_seconds", "Apply").add(h, {{"resource", "pods"}}); });
  EXPECT_NE(text.find("# TYPE fy_apply_seconds histogram\n"
                      "fy_apply_seconds_count{resource=\"pods\"} 3\n"
                      "fy_apply_seconds_sum{resource=\"pods\"} 2.0053\n"
                      "fy_apply_seconds_bucket{resource=\"pods\",le=\"0.001\"} 1\n"
                      "fy_apply_seconds_bucket{resource=\"pods\",le=\"0.01\"} 2\n"
                      "fy_apply_seconds_bucket{resource=\"pods\",le=\"+Inf\"} 3\n"),
            std::string::npos)
      << text;
}

}  // namespace
}  // namespace ferry::telemetry
