// The metrics registry (proxy/telemetry): what a collector states is what /metrics shows,
// in the text format Prometheus parses.
#include "proxy/telemetry/metrics.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "proxy/telemetry/text_format.h"
#include "tests/unit/gunzip.h"

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

// Label values and counts that the text format treats specially: escapes, UTF-8, the
// integers a double holds exactly and those it rounds.
const std::vector<std::string> kTrickyValues = {"plain", "", "q\"uote", "back\\slash", "new\nline",
                                                "\\\"\n", "ünïcödé ✓", "a=\"b\",c"};
const std::vector<uint64_t> kTrickyCounts = {0,
                                             1,
                                             4503599627370497,     // 2^52 + 1
                                             9007199254740992,     // 2^53
                                             9007199254740993,     // 2^53 + 1: rounds
                                             9999999999999999,     // 16 digits
                                             10000000000000000,    // 17 digits: exponent
                                             1234567890123456789,  // rounds, exponent
                                             std::numeric_limits<uint64_t>::max()};

template <typename Out>
void writeTricky(Out& out) {
  counterHeader(out, "fy_tricky_total", "Tricky values");
  for (size_t i = 0; i < kTrickyCounts.size(); ++i) {
    out.raw("fy_tricky_total{kind=\"");
    out.escaped(kTrickyValues[i % kTrickyValues.size()]);
    out.raw("\",n=\"");
    out.escaped(std::to_string(i));
    out.raw("\"} ");
    out.number(kTrickyCounts[i]);
    out.raw("\n");
  }
}

TEST(TextFormat, WritesTheBytesTextSerializerWritesForTheSameSamples) {
  // The reference: the same samples stated through prometheus-cpp's data model.
  std::string reference = renderText([](Exposition& out) {
    auto family = out.counter("fy_tricky_total", "Tricky values");
    for (size_t i = 0; i < kTrickyCounts.size(); ++i) {
      family.add(static_cast<double>(kTrickyCounts[i]),
                 {{"kind", kTrickyValues[i % kTrickyValues.size()]}, {"n", std::to_string(i)}});
    }
  });
  std::string text;
  TextWriter writer(text);
  writeTricky(writer);
  EXPECT_EQ(text, reference);
  TextSize size;
  writeTricky(size);
  EXPECT_EQ(size.size(), text.size()) << "TextSize counts what TextWriter writes";
}

TEST(TextFormat, RepeatCopiesTextWrittenBefore) {
  std::string text = "ab";
  TextWriter writer(text);
  writer.raw("cd");
  writer.repeat(1, 2);
  EXPECT_EQ(text, "abcdbc");
  EXPECT_EQ(writer.size(), 6u);
}

TEST(Registry, TextACollectorWritesKeepsItsPlaceAmongTheFamilies) {
  Registry registry;
  auto first = registry.add([](Exposition& out) { out.gauge("fy_before", "Before", 1); });
  auto writer = registry.add([](Exposition& out) {
    out.gauge("fy_stated", "Stated", 2);
    std::string& text = out.text(64);
    text += "# HELP fy_written Written\n# TYPE fy_written gauge\nfy_written 3\n";
    out.gauge("fy_after_written", "After", 4);
  });
  auto last = registry.add([](Exposition& out) { out.gauge("fy_last", "Last", 5); });
  EXPECT_EQ(registry.render(),
            "# HELP fy_before Before\n# TYPE fy_before gauge\nfy_before 1\n"
            "# HELP fy_stated Stated\n# TYPE fy_stated gauge\nfy_stated 2\n"
            "# HELP fy_written Written\n# TYPE fy_written gauge\nfy_written 3\n"
            "# HELP fy_after_written After\n# TYPE fy_after_written gauge\nfy_after_written 4\n"
            "# HELP fy_last Last\n# TYPE fy_last gauge\nfy_last 5\n");
}

TEST(Registry, AGzipScrapeIsTheSameTextCompressedInPartsAsItIsWritten) {
  size_t drains = 0;
  Registry::Collector before = [](Exposition& out) { out.gauge("fy_before", "Before", 1); };
  Registry::Collector writer = [&drains](Exposition& out) {
    std::string& text = out.text(0);
    for (int i = 0; i < 200; ++i) {
      text += "fy_written{i=\"" + std::to_string(i) + "\"} 3\n";
      size_t size = text.size();
      out.drain();
      if (out.streaming() && text.size() < size) ++drains;
    }
    out.gauge("fy_after_written", "After", 4);
  };
  Registry registry;
  auto first = registry.add(before);
  auto second = registry.add(writer);
  std::string plain = registry.render();
  EXPECT_EQ(drains, 0u) << "a plain scrape is never drained";
  // A small threshold: the text goes out in many parts, the families stated after it too.
  std::string gz = renderGzip(
      [&](Exposition& out) {
        before(out);
        writer(out);
      },
      512);
  EXPECT_EQ(::ferry::testing::gunzip(gz), plain);
  EXPECT_GE(drains, 5u) << "compressed in parts (about 4 KiB of text, 512-byte parts), never whole";
  EXPECT_LT(gz.size(), plain.size() / 4) << "the repeated text shrinks";
  EXPECT_EQ(::ferry::testing::gunzip(registry.renderGzip()), plain);
  EXPECT_EQ(::ferry::testing::gunzip(renderGzip([](Exposition&) {})), "") << "an empty scrape is a valid stream";
}

}  // namespace
}  // namespace ferry::telemetry
