// Istio's TCP metrics (session/istio_metrics.h): the label tuple for each direction, as
// ztunnel reports it, and one series per key however many workers saw it.
#include "proxy/session/istio_metrics.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "proxy/telemetry/metrics.h"

#include "tests/unit/gunzip.h"

namespace ferry::session {
namespace {

config::Config makeConfig() {
  config::Config c;
  c.trust_domain = "cluster.local";
  return c;
}

workloads::Workload workload(std::string name, std::string ns, std::string sa, workloads::TelemetryMeta meta) {
  workloads::Workload w;
  w.name = std::move(name);
  w.namespace_name = workloads::intern(ns);
  w.service_account = workloads::intern(sa);
  w.telemetry = workloads::internTelemetry(std::move(meta));
  return w;
}

// The lines of `metric` in the exposition.
std::vector<std::string> lines(const std::string& text, std::string_view metric) {
  std::vector<std::string> out;
  for (auto line : absl::StrSplit(text, '\n')) {
    if (absl::StartsWith(line, std::string(metric) + "{")) out.emplace_back(line);
  }
  return out;
}

// One sample of the text exposition: its metric, its labels in order (values unescaped), its value.
struct Sample {
  std::string metric;
  std::vector<std::pair<std::string, std::string>> labels;
  std::string value;
  std::string label(std::string_view name) const {
    for (const auto& [n, v] : labels) {
      if (n == name) return v;
    }
    return "<none>";
  }
};
struct Family {
  std::string name, help;
  std::vector<Sample> samples;
};

// Parses the text format strictly, as prometheus-cpp writes it (HELP, TYPE counter, samples
// with every label quoted and escaped); anything else fails the test.
bool consume(std::string_view& s, std::string_view prefix) {
  if (!s.starts_with(prefix)) return false;
  s.remove_prefix(prefix.size());
  return true;
}

std::vector<Family> parse(const std::string& text) {
  std::vector<Family> families;
  for (auto piece : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    std::string_view line(piece.data(), piece.size());
    if (consume(line, "# HELP ")) {
      size_t space = line.find(' ');
      families.push_back({std::string(line.substr(0, space)), std::string(line.substr(space + 1)), {}});
      continue;
    }
    if (consume(line, "# TYPE ")) {
      EXPECT_EQ(line, absl::StrCat(families.back().name, " counter"));
      continue;
    }
    Sample s;
    size_t brace = line.find('{');
    s.metric = line.substr(0, brace);
    EXPECT_EQ(s.metric, families.back().name) << line;
    line.remove_prefix(brace + 1);
    while (true) {
      size_t eq = line.find("=\"");
      if (eq == std::string_view::npos) {
        ADD_FAILURE() << "no label in " << line;
        return families;
      }
      std::string name(line.substr(0, eq)), value;
      size_t i = eq + 2;
      for (; i < line.size() && line[i] != '"'; ++i) {
        if (line[i] != '\\') {
          value.push_back(line[i]);
          continue;
        }
        char escaped = line[++i];
        EXPECT_TRUE(escaped == '\\' || escaped == '"' || escaped == 'n') << line;
        value.push_back(escaped == 'n' ? '\n' : escaped);
      }
      s.labels.emplace_back(std::move(name), std::move(value));
      line.remove_prefix(i + 1);
      if (consume(line, "} ")) break;
      EXPECT_TRUE(consume(line, ",")) << line;
    }
    s.value = line;
    families.back().samples.push_back(std::move(s));
  }
  return families;
}

// The same families as prometheus-cpp's TextSerializer writes them.
std::string reference(const std::vector<Family>& families) {
  return telemetry::renderText([&](telemetry::Exposition& out) {
    for (const Family& f : families) {
      auto family = out.counter(f.name, f.help);
      for (const Sample& s : f.samples) {
        std::vector<telemetry::Label> labels;
        for (const auto& [name, value] : s.labels) labels.push_back({name, value});
        family.add(std::strtod(s.value.c_str(), nullptr), labels);
      }
    }
  });
}

class IstioMetricsTest : public ::testing::Test {
 protected:
  config::Config config_ = makeConfig();
  IstioMetrics metrics_{2, config_};
  workloads::Workload client_ = workload("client-1", "fy-a", "client", {"client", "client-app", "v1"});
  workloads::Workload server_ = workload("server-1", "fy-b", "server", {"server", "server", "latest"});
  std::string text() { return telemetry::textOf(metrics_); }
};

TEST_F(IstioMetricsTest, SourceReporterLabelsBothWorkloadsAndTheServiceCalled) {
  auto& s = metrics_.series(0, TrafficKey(Reporter::kSource, true, workloads::intern("fy-b/server-svc"))
                                   .from(&client_)
                                   .to(&server_));
  s.opened += 3;
  s.closed += 2;
  s.request_bytes += 100;
  s.response_bytes += 7;
  auto t = text();
  auto opened = lines(t, "istio_tcp_connections_opened_total");
  ASSERT_EQ(opened.size(), 1u) << t;
  EXPECT_EQ(opened[0],
            "istio_tcp_connections_opened_total{reporter=\"source\",source_workload=\"client\","
            "source_canonical_service=\"client-app\",source_canonical_revision=\"v1\","
            "source_workload_namespace=\"fy-a\",source_principal=\"spiffe://cluster.local/ns/fy-a/sa/client\","
            "source_app=\"client-app\",source_version=\"v1\",source_cluster=\"Kubernetes\","
            "destination_service=\"server-svc.fy-b.svc.cluster.local\",destination_service_namespace=\"fy-b\","
            "destination_service_name=\"server-svc\",destination_workload=\"server\","
            "destination_canonical_service=\"server\",destination_canonical_revision=\"latest\","
            "destination_workload_namespace=\"fy-b\",destination_principal=\"spiffe://cluster.local/ns/fy-b/sa/server\","
            "destination_app=\"server\",destination_version=\"latest\",destination_cluster=\"Kubernetes\","
            "request_protocol=\"tcp\",response_flags=\"-\",connection_security_policy=\"mutual_tls\"} 3");
  EXPECT_TRUE(absl::EndsWith(lines(t, "istio_tcp_connections_closed_total")[0], "} 2"));
  // received = the request (client -> server), sent = the response, for either reporter.
  EXPECT_TRUE(absl::EndsWith(lines(t, "istio_tcp_received_bytes_total")[0], "} 100"));
  EXPECT_TRUE(absl::EndsWith(lines(t, "istio_tcp_sent_bytes_total")[0], "} 7"));
}

TEST_F(IstioMetricsTest, DestinationReporterOfAnUnknownClientNamesItsPrincipalOnly) {
  TrafficKey key(Reporter::kDestination, true);
  key.to(&server_).source_principal = "spiffe://cluster.local/ns/fy-x/sa/ghost";
  metrics_.series(1, key).opened += 1;
  auto opened = lines(text(), "istio_tcp_connections_opened_total");
  ASSERT_EQ(opened.size(), 1u);
  const std::string& l = opened[0];
  EXPECT_NE(l.find("reporter=\"destination\",source_workload=\"unknown\",source_canonical_service=\"unknown\""),
            std::string::npos)
      << l;
  EXPECT_NE(l.find("source_workload_namespace=\"unknown\",source_principal=\"spiffe://cluster.local/ns/fy-x/sa/ghost\""),
            std::string::npos)
      << l;
  EXPECT_NE(l.find("source_cluster=\"unknown\",destination_service=\"unknown\",destination_service_namespace=\"unknown\""),
            std::string::npos)
      << l;
  EXPECT_NE(l.find("destination_workload=\"server\""), std::string::npos) << l;
}

TEST_F(IstioMetricsTest, PlaintextIsNoneAndPassthroughToAnUnknownDestinationIsUnknown) {
  metrics_.series(0, TrafficKey(Reporter::kDestination, false).from(&client_).to(&server_))
      .opened += 1;
  metrics_.series(0, TrafficKey(Reporter::kSource, false).from(&client_)).opened += 1;
  auto opened = lines(text(), "istio_tcp_connections_opened_total");
  ASSERT_EQ(opened.size(), 2u);
  for (const auto& l : opened) {
    EXPECT_NE(l.find("connection_security_policy=\"none\""), std::string::npos) << l;
    if (l.find("reporter=\"source\"") != std::string::npos) {
      EXPECT_NE(l.find("destination_workload=\"unknown\""), std::string::npos) << l;
      EXPECT_NE(l.find("destination_principal=\"unknown\""), std::string::npos) << l;
    }
  }
}

TEST_F(IstioMetricsTest, OneKeyOnTwoWorkersIsOneSeriesWithTheSum) {
  auto key = TrafficKey(Reporter::kSource, true).from(&client_).to(&server_);
  auto& a = metrics_.series(0, key);
  auto& b = metrics_.series(1, key);
  EXPECT_NE(&a, &b);
  EXPECT_EQ(&a, &metrics_.series(0, key)) << "found again, not made again";
  a.request_bytes += 5;
  b.request_bytes += 6;
  auto received = lines(text(), "istio_tcp_received_bytes_total");
  ASSERT_EQ(received.size(), 1u);
  EXPECT_TRUE(absl::EndsWith(received[0], "} 11")) << received[0];
  EXPECT_EQ(metrics_.size(), 2u);
}

TEST_F(IstioMetricsTest, ASeriesIdleForTheExpiryIsDroppedAndOneInUseNeverIs) {
  // telemetry.series_expiry is 10 min by default: Deployment churn must not grow the series
  // until restart, and a pair with a connection open keeps its series however quiet.
  using std::chrono::minutes;
  const auto t0 = std::chrono::steady_clock::time_point{} + std::chrono::hours(1);
  auto old_version = workload("client-1", "fy-a", "client", {"client", "client-app", "v1"});
  auto new_version = workload("client-9", "fy-a", "client", {"client", "client-app", "v2"});
  auto& gone = metrics_.series(0, TrafficKey(Reporter::kSource, true).from(&old_version).to(&server_));
  gone.opened += 1;
  gone.closed += 1;
  auto& open = metrics_.series(0, TrafficKey(Reporter::kSource, true).from(&new_version).to(&server_));
  open.opened += 1;  // still open
  EXPECT_EQ(metrics_.sweep(0, t0), 0u);
  EXPECT_EQ(metrics_.sweep(0, t0 + minutes(9)), 0u) << "idle for less than the expiry";
  EXPECT_EQ(metrics_.sweep(0, t0 + minutes(10)), 1u);
  EXPECT_EQ(metrics_.size(), 1u);
  auto opened = lines(text(), "istio_tcp_connections_opened_total");
  ASSERT_EQ(opened.size(), 1u);
  EXPECT_TRUE(absl::StrContains(opened[0], "source_version=\"v2\"")) << opened[0];

  // Bytes keep a series: it must be unchanged for the whole expiry.
  open.closed += 1;
  EXPECT_EQ(metrics_.sweep(0, t0 + minutes(11)), 0u);
  open.response_bytes += 7;
  EXPECT_EQ(metrics_.sweep(0, t0 + minutes(21)), 0u) << "its counters moved since the last sweep";
  EXPECT_EQ(metrics_.sweep(0, t0 + minutes(30)), 0u);
  EXPECT_EQ(metrics_.sweep(0, t0 + minutes(31)), 1u);
  EXPECT_EQ(metrics_.size(), 0u);
  // The pair talks again: a new series from zero (Prometheus reads it as a counter reset).
  auto& again = metrics_.series(0, TrafficKey(Reporter::kSource, true).from(&new_version).to(&server_));
  EXPECT_EQ(again.opened.load(), 0u);
  EXPECT_EQ(metrics_.size(), 1u);
}

TEST_F(IstioMetricsTest, AWorkerDroppingItsShareOfAPairNeverLowersTheExportedSum) {
  // A pair carried by two workers: one goes idle and drops its entry while the other still
  // carries the pair. The exported counters must not go down (Prometheus would read a reset
  // and count the other worker's bytes again); the series goes when both have dropped it.
  using std::chrono::minutes;
  const auto t0 = std::chrono::steady_clock::time_point{} + std::chrono::hours(1);
  auto key = TrafficKey(Reporter::kSource, true).from(&client_).to(&server_);
  auto& idle = metrics_.series(0, key);
  idle.opened += 1;
  idle.closed += 1;
  idle.request_bytes += 50;
  auto& busy = metrics_.series(1, key);
  busy.opened += 1;  // open
  busy.request_bytes += 200;
  auto received = [&] {
    auto found = lines(text(), "istio_tcp_received_bytes_total");
    return found.empty() ? std::string("none") : found[0].substr(found[0].rfind(' ') + 1);
  };
  EXPECT_EQ(received(), "250");
  EXPECT_EQ(metrics_.sweep(0, t0), 0u);
  EXPECT_EQ(metrics_.sweep(0, t0 + minutes(10)), 1u);
  EXPECT_EQ(metrics_.size(), 1u);
  EXPECT_EQ(received(), "250") << "worker 0's share is kept while worker 1 carries the pair";
  busy.request_bytes += 1;
  EXPECT_EQ(received(), "251");
  // Worker 0 sees the pair again: its new entry counts on top.
  auto& again = metrics_.series(0, key);
  again.opened += 1;
  again.closed += 1;
  again.request_bytes += 9;
  EXPECT_EQ(received(), "260");
  auto opened = lines(text(), "istio_tcp_connections_opened_total");
  ASSERT_EQ(opened.size(), 1u);
  EXPECT_TRUE(absl::EndsWith(opened[0], "} 3")) << opened[0];
  // Every worker idle for the expiry: the series goes.
  busy.closed += 1;
  EXPECT_EQ(metrics_.sweep(0, t0 + minutes(11)), 0u);
  EXPECT_EQ(metrics_.sweep(1, t0 + minutes(11)), 0u);
  EXPECT_EQ(metrics_.sweep(0, t0 + minutes(21)), 1u);
  EXPECT_EQ(received(), "260") << "worker 1 still holds its entry";
  EXPECT_EQ(metrics_.sweep(1, t0 + minutes(21)), 1u);
  EXPECT_EQ(received(), "none");
}

// Label values with every character the text format escapes, and UTF-8.
class IstioMetricsTextTest : public IstioMetricsTest {
 protected:
  IstioMetricsTextTest() {
    auto& a = metrics_.series(0, TrafficKey(Reporter::kSource, true, workloads::intern("fy-b/server-svc"))
                                     .from(&client_)
                                     .to(&server_));
    a.opened += 3;
    a.request_bytes += (uint64_t{1} << 53) + 1;  // a double rounds it, as prometheus-cpp writes it
    a.response_bytes += 18446744073709551615u;
    // The tricky workload at either end, with others: its labels are written once, then repeated.
    metrics_.series(0, TrafficKey(Reporter::kSource, true, workloads::intern("fy-\"q/svc\\\nü"))
                           .from(&tricky_)
                           .to(&server_))
        .opened += 1;
    metrics_.series(1, TrafficKey(Reporter::kDestination, false).from(&client_).to(&tricky_)).closed += 2;
    metrics_.series(1, TrafficKey(Reporter::kSource, true).from(&tricky_)).opened += 4;
    TrafficKey ghost(Reporter::kDestination, true);
    ghost.to(&server_).source_principal = kGhostPrincipal;
    metrics_.series(1, ghost).response_bytes += 9;
  }

  static constexpr std::string_view kGhostPrincipal = "spiffe://other/ns/a\"b/sa/c\\d\ne✓";
  workloads::Workload tricky_ =
      workload("tricky-1", "fy-ü\"", "sa\\\n", {"wl \"quoted\"", "back\\slash", "new\nline ✓"});
};

TEST_F(IstioMetricsTextTest, TrickyLabelValuesComeBackFromTheTextAsTheyWere) {
  auto families = parse(text());
  ASSERT_EQ(families.size(), 4u);
  ASSERT_EQ(families[0].name, "istio_tcp_connections_opened_total");
  std::vector<const Sample*> from_tricky, from_ghost;
  for (const Sample& s : families[0].samples) {
    EXPECT_EQ(s.labels.size(), 23u) << s.metric;  // as ztunnel reports them
    if (s.label("source_workload") == "wl \"quoted\"") from_tricky.push_back(&s);
    if (s.label("source_principal") == kGhostPrincipal) from_ghost.push_back(&s);
  }
  ASSERT_EQ(from_tricky.size(), 2u);
  for (const Sample* s : from_tricky) {
    EXPECT_EQ(s->label("source_canonical_service"), "back\\slash");
    EXPECT_EQ(s->label("source_app"), "back\\slash");
    EXPECT_EQ(s->label("source_canonical_revision"), "new\nline ✓");
    EXPECT_EQ(s->label("source_version"), "new\nline ✓");
    EXPECT_EQ(s->label("source_workload_namespace"), "fy-ü\"");
    EXPECT_EQ(s->label("source_principal"), "spiffe://cluster.local/ns/fy-ü\"/sa/sa\\\n");
    if (s->label("destination_workload") == "server") {
      EXPECT_EQ(s->label("destination_service"), "svc\\\nü.fy-\"q.svc.cluster.local");
      EXPECT_EQ(s->label("destination_service_namespace"), "fy-\"q");
      EXPECT_EQ(s->label("destination_service_name"), "svc\\\nü");
    } else {
      EXPECT_EQ(s->label("destination_workload"), "unknown");
    }
  }
  ASSERT_EQ(from_ghost.size(), 1u);
  EXPECT_EQ(from_ghost[0]->label("source_workload"), "unknown");
  EXPECT_EQ(from_ghost[0]->label("destination_workload"), "server");
  // The tricky workload as the destination: the same values under the destination's names.
  auto& closed = families[1].samples;
  auto to_tricky = std::find_if(closed.begin(), closed.end(),
                                [](const Sample& s) { return s.label("destination_workload") == "wl \"quoted\""; });
  ASSERT_NE(to_tricky, closed.end());
  EXPECT_EQ(to_tricky->label("destination_principal"), "spiffe://cluster.local/ns/fy-ü\"/sa/sa\\\n");
  EXPECT_EQ(to_tricky->label("destination_version"), "new\nline ✓");
  EXPECT_EQ(to_tricky->value, "2");
}

TEST_F(IstioMetricsTextTest, TheTextIsWhatTextSerializerWritesForTheSameSeries) {
  // Byte for byte: the four families with their HELP and TYPE lines, series, label order,
  // escapes and values as prometheus-cpp writes them, every key in all four families.
  auto t = text();
  auto families = parse(t);
  ASSERT_EQ(families.size(), 4u);
  for (const Family& f : families) EXPECT_EQ(f.samples.size(), 5u) << f.name;
  EXPECT_EQ(t, reference(families));
  auto received = lines(t, "istio_tcp_received_bytes_total");
  EXPECT_TRUE(std::any_of(received.begin(), received.end(),
                          [](const std::string& l) { return absl::EndsWith(l, "} 9007199254740992"); }))
      << t;
}

TEST_F(IstioMetricsTextTest, OtherFamiliesKeepTheirPlaceAroundTheText) {
  telemetry::Registry registry;
  auto before = registry.add([](telemetry::Exposition& out) { out.gauge("fy_before", "Before", 1); });
  auto istio = registry.add([&](telemetry::Exposition& out) { metrics_.collect(out); });
  auto after = registry.add([](telemetry::Exposition& out) { out.gauge("fy_after", "After", 2); });
  EXPECT_EQ(registry.render(), absl::StrCat("# HELP fy_before Before\n# TYPE fy_before gauge\nfy_before 1\n", text(),
                                            "# HELP fy_after After\n# TYPE fy_after gauge\nfy_after 2\n"));
}

TEST_F(IstioMetricsTextTest, AGzipScrapeWritesTheSameTextInPartsWithoutHoldingItWhole) {
  // Many more series than one part holds: a threshold of 1 KiB drains after every few lines.
  for (int i = 0; i < 300; ++i) {
    metrics_.series(i % 2, TrafficKey(Reporter::kSource, true, workloads::intern(absl::StrCat("fy-b/svc-", i)))
                               .from(&client_)
                               .to(&tricky_))
        .opened += static_cast<uint64_t>(i);
  }
  size_t largest_part = 0;
  std::string gz = telemetry::renderGzip(
      [&](telemetry::Exposition& out) {
        ASSERT_TRUE(out.streaming());
        metrics_.collect(out);
        largest_part = std::max(largest_part, out.text(0).size());
      },
      1024);
  // The same lines, families in the same order (the series of a family come in the order of
  // a hash map, which may differ from one scrape to the next).
  auto sorted = [](const std::string& t) {
    std::vector<std::string> all = absl::StrSplit(t, '\n');
    std::vector<std::string> headers;
    for (const auto& l : all) {
      if (absl::StartsWith(l, "# ")) headers.push_back(l);
    }
    std::sort(all.begin(), all.end());
    return std::make_pair(headers, all);
  };
  std::string plain = text();
  std::string unzipped = ::ferry::testing::gunzip(gz);
  EXPECT_EQ(unzipped.size(), plain.size());
  EXPECT_TRUE(sorted(unzipped) == sorted(plain)) << "the same lines as the plain scrape";
  EXPECT_EQ(parse(unzipped).size(), 4u);
  EXPECT_LT(largest_part, 4096u) << "what is left at the end is one part, not the text";
}

TEST_F(IstioMetricsTest, WithNoSeriesTheFamiliesAreStatedEmpty) {
  EXPECT_EQ(text(),
            "# HELP istio_tcp_connections_opened_total The total number of TCP connections opened\n"
            "# TYPE istio_tcp_connections_opened_total counter\n"
            "# HELP istio_tcp_connections_closed_total The total number of TCP connections closed\n"
            "# TYPE istio_tcp_connections_closed_total counter\n"
            "# HELP istio_tcp_sent_bytes_total The size of total bytes sent during response in case of a TCP "
            "connection\n"
            "# TYPE istio_tcp_sent_bytes_total counter\n"
            "# HELP istio_tcp_received_bytes_total The size of total bytes received during request in case of a "
            "TCP connection\n"
            "# TYPE istio_tcp_received_bytes_total counter\n");
}

TEST_F(IstioMetricsTest, PodsOfOneWorkloadShareTheirSeries) {
  auto other_pod = workload("client-2", "fy-a", "client", {"client", "client-app", "v1"});
  auto& a = metrics_.series(0, TrafficKey(Reporter::kSource, false).from(&client_).to(&server_));
  auto& b = metrics_.series(0, TrafficKey(Reporter::kSource, false).from(&other_pod).to(&server_));
  EXPECT_EQ(&a, &b);
}

}  // namespace
}  // namespace ferry::session
