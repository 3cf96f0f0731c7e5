// Istio's TCP metrics (session/istio_metrics.h): the label tuple for each direction, as
// ztunnel reports it, and one series per key however many workers saw it.
#include "proxy/session/istio_metrics.h"

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "proxy/telemetry/metrics.h"

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

TEST_F(IstioMetricsTest, PodsOfOneWorkloadShareTheirSeries) {
  auto other_pod = workload("client-2", "fy-a", "client", {"client", "client-app", "v1"});
  auto& a = metrics_.series(0, TrafficKey(Reporter::kSource, false).from(&client_).to(&server_));
  auto& b = metrics_.series(0, TrafficKey(Reporter::kSource, false).from(&other_pod).to(&server_));
  EXPECT_EQ(&a, &b);
}

}  // namespace
}  // namespace ferry::session
