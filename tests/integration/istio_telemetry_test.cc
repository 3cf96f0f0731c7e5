// Istio's TCP metrics on two ferryd instances (loopback lab): after known traffic, both
// reporters count exactly the connections and bytes the applications exchanged, per source
// and destination workload; and the whole /metrics exposition passes `promtool check
// metrics`.
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tests/integration/loopback_lab.h"

namespace ferry::testing {
namespace {

constexpr uint16_t kAppPort = 8080;
constexpr size_t kRequest = 1000;
constexpr size_t kResponse = 777;

// Reads the request until the client's FIN, then answers kResponse bytes.
void answerAfterRequest(int fd) {
  std::string request;
  if (!recvAll(fd, request)) return;
  std::string response(kResponse, 'r');
  sendAll(fd, response.data(), response.size());
}

// One connection from `src` to `dst`: kRequest bytes, FIN, the whole response.
bool exchange(const std::string& src, const std::string& dst, bool plaintext = false) {
  int fd = plaintext ? connectCaptured(src, "127.0.2.1", 15006, dst, kAppPort) : connectOutbound(src, dst, kAppPort);
  if (fd < 0) return false;
  setRecvTimeout(fd, std::chrono::seconds(10));
  std::string request(kRequest, 'q');
  bool ok = sendAll(fd, request.data(), request.size()) && ::shutdown(fd, SHUT_WR) == 0;
  std::string response;
  ok = ok && recvAll(fd, response) && response.size() == kResponse;
  ::close(fd);
  return ok;
}

// The sum of `metric`'s series whose labels include every one of `labels` (`name="value"`).
double sumOf(Node& node, std::string_view metric, const std::vector<std::string>& labels) {
  double sum = 0;
  for (absl::string_view line : absl::StrSplit(node.server().renderMetrics(), '\n')) {
    if (!absl::StartsWith(line, std::string(metric) + "{")) continue;
    bool all = true;
    for (const auto& l : labels) all = all && absl::StrContains(line, l);
    if (all) sum += std::strtod(std::string(line.substr(line.rfind(' ') + 1)).c_str(), nullptr);
  }
  return sum;
}

class IstioMetricsTest : public TwoNodeTest {};

TEST_F(IstioMetricsTest, BothReportersCountExactConnectionsAndBytesPerWorkload) {
  AppServer app("127.0.2.10", kAppPort, answerAfterRequest);
  constexpr int kConnections = 3;
  for (int i = 0; i < kConnections; ++i) ASSERT_TRUE(exchange("127.0.1.10", "127.0.2.10")) << i;
  // c1 (sa client) -> s1 (sa server, app: server): the lab's workloads file has no
  // workload_name, so the workload is the pod's name; s1's app label is its canonical name.
  const std::vector<std::string> pair = {
      "source_workload=\"c1\"", "source_workload_namespace=\"default\"",
      "source_principal=\"spiffe://cluster.local/ns/default/sa/client\"", "destination_workload=\"s1\"",
      "destination_app=\"server\"", "destination_canonical_service=\"server\"",
      "destination_principal=\"spiffe://cluster.local/ns/default/sa/server\"",
      "connection_security_policy=\"mutual_tls\"", "request_protocol=\"tcp\""};
  for (auto [node, reporter] : {std::pair{n1_.get(), "source"}, std::pair{n2_.get(), "destination"}}) {
    auto labels = pair;
    labels.push_back(absl::StrCat("reporter=\"", reporter, "\""));
    // The close is counted just after the application saw its EOF.
    EXPECT_TRUE(waitFor([&] { return sumOf(*node, "istio_tcp_connections_closed_total", labels) == kConnections; }))
        << reporter;
    EXPECT_EQ(sumOf(*node, "istio_tcp_connections_opened_total", labels), kConnections) << reporter;
    EXPECT_EQ(sumOf(*node, "istio_tcp_received_bytes_total", labels), kConnections * kRequest) << reporter;
    EXPECT_EQ(sumOf(*node, "istio_tcp_sent_bytes_total", labels), kConnections * kResponse) << reporter;
    // Nothing else was reported by that node.
    EXPECT_EQ(sumOf(*node, "istio_tcp_connections_opened_total", {}), kConnections) << reporter;
  }
}

TEST_F(IstioMetricsTest, PlaintextIsReportedByTheDestinationAsNone) {
  AppServer app("127.0.2.10", kAppPort, answerAfterRequest);
  ASSERT_TRUE(exchange("127.0.1.11", "127.0.2.10", /*plaintext=*/true));
  const std::vector<std::string> labels = {"reporter=\"destination\"", "source_workload=\"c2\"",
                                           "destination_workload=\"s1\"", "connection_security_policy=\"none\""};
  EXPECT_TRUE(waitFor([&] { return sumOf(*n2_, "istio_tcp_connections_closed_total", labels) == 1; }));
  EXPECT_EQ(sumOf(*n2_, "istio_tcp_received_bytes_total", labels), kRequest);
  EXPECT_EQ(sumOf(*n2_, "istio_tcp_sent_bytes_total", labels), kResponse);
}

TEST_F(IstioMetricsTest, BytesOfAnOpenConnectionShowBeforeItCloses) {
  AppServer app("127.0.2.10", kAppPort, AppServer::echo);
  int fd = connectOutbound("127.0.1.10", "127.0.2.10", kAppPort);
  ASSERT_GE(fd, 0);
  std::string msg(4096, 'x'), back(msg.size(), '\0');
  ASSERT_TRUE(sendAll(fd, msg.data(), msg.size()));
  ASSERT_TRUE(recvExact(fd, back.data(), back.size()));
  const std::vector<std::string> labels = {"source_workload=\"c1\"", "destination_workload=\"s1\""};
  for (Node* node : {n1_.get(), n2_.get()}) {
    EXPECT_TRUE(waitFor([&] {
      return sumOf(*node, "istio_tcp_received_bytes_total", labels) == msg.size() &&
             sumOf(*node, "istio_tcp_sent_bytes_total", labels) == msg.size();
    }));
    EXPECT_EQ(sumOf(*node, "istio_tcp_connections_opened_total", labels), 1);
    EXPECT_EQ(sumOf(*node, "istio_tcp_connections_closed_total", labels), 0);
  }
  ::close(fd);
}

// telemetry.series_expiry: a pair's series goes once it has been idle that long, on both
// reporters, and comes back from zero when the pair talks again.
TEST(IstioSeriesExpiryTest, AnIdlePairsSeriesIsDroppedAndComesBackFromZero) {
  LabFiles files;
  Node n1(files, "n1", "telemetry: {series_expiry: 1s}\n");
  Node n2(files, "n2", "telemetry: {series_expiry: 1s}\n");
  ASSERT_TRUE(n1.ok() && n2.ok());
  AppServer app("127.0.2.10", kAppPort, answerAfterRequest);
  ASSERT_TRUE(exchange("127.0.1.10", "127.0.2.10"));
  const std::vector<std::string> pair = {"source_workload=\"c1\"", "destination_workload=\"s1\""};
  for (Node* node : {&n1, &n2}) {
    EXPECT_TRUE(waitFor([&] { return sumOf(*node, "istio_tcp_connections_closed_total", pair) == 1; }));
    EXPECT_GE(node->metric("ferry_istio_series"), 1);
  }
  // Swept every half second: gone between 1 and 1.5 s after the close.
  for (Node* node : {&n1, &n2}) {
    EXPECT_TRUE(waitFor([&] { return node->metric("ferry_istio_series") == 0; }, std::chrono::seconds(5)))
        << node->metric("ferry_istio_series");
    EXPECT_EQ(sumOf(*node, "istio_tcp_connections_opened_total", pair), 0) << "the series is not exposed";
    EXPECT_GE(node->metric("ferry_istio_series_dropped_total"), 1);
  }
  ASSERT_TRUE(exchange("127.0.1.10", "127.0.2.10"));
  EXPECT_TRUE(waitFor([&] { return sumOf(n2, "istio_tcp_connections_closed_total", pair) == 1; }))
      << "counted from zero again";
  EXPECT_EQ(sumOf(n2, "istio_tcp_received_bytes_total", pair), kRequest);
}

// The exposition served on /metrics, after traffic, passes promtool's parser and linter.
TEST_F(IstioMetricsTest, ExpositionPassesPromtoolCheckMetrics) {
  if (!std::filesystem::exists("/usr/bin/promtool")) GTEST_SKIP() << "promtool not installed (Debian: prometheus)";
  AppServer app("127.0.2.10", kAppPort, answerAfterRequest);
  ASSERT_TRUE(exchange("127.0.1.10", "127.0.2.10"));
  for (const char* ip : {"127.0.1.1", "127.0.2.1"}) {
    std::string body;
    ASSERT_EQ(httpGet(ip, 15020, "/metrics", &body), 200) << ip;
    auto path = std::filesystem::temp_directory_path() / absl::StrCat("fy-metrics-", ::getpid(), ".txt");
    std::ofstream(path) << body;
    std::string command = absl::StrCat("/usr/bin/promtool check metrics < ", path.string(), " 2>&1");
    FILE* p = ::popen(command.c_str(), "r");
    ASSERT_NE(p, nullptr);
    std::string output;
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof(buf), p)) > 0;) output.append(buf, n);
    int status = ::pclose(p);
    std::filesystem::remove(path);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0 && output.empty())
        << ip << ": promtool check metrics said:\n" << output;
  }
}

// What a scraper that accepts gzip gets (Prometheus always asks for it): curl --compressed,
// a real client, sees Content-Encoding: gzip and, unpacked, the same Istio series as a plain
// scrape, which promtool parses.
TEST_F(IstioMetricsTest, AGzipScrapeIsTheSameExpositionCompressed) {
  AppServer app("127.0.2.10", kAppPort, answerAfterRequest);
  ASSERT_TRUE(exchange("127.0.1.10", "127.0.2.10"));
  auto run = [](const std::string& command) {
    FILE* p = ::popen(command.c_str(), "r");
    std::string output;
    if (p == nullptr) return output;
    char buf[65536];
    for (size_t n; (n = std::fread(buf, 1, sizeof(buf), p)) > 0;) output.append(buf, n);
    ::pclose(p);
    return output;
  };
  auto istioLines = [](const std::string& text) {
    std::vector<std::string> out;
    for (absl::string_view line : absl::StrSplit(text, '\n')) {
      if (absl::StartsWith(line, "istio_tcp_")) out.emplace_back(line.data(), line.size());
    }
    std::sort(out.begin(), out.end());
    return out;
  };
  std::string headers = run("curl -s --compressed -o /dev/null -D - http://127.0.2.1:15020/metrics");
  EXPECT_NE(absl::AsciiStrToLower(headers).find("content-encoding: gzip"), std::string::npos) << headers;
  std::string zipped = run("curl -s --compressed http://127.0.2.1:15020/metrics");
  std::string plain;
  ASSERT_EQ(httpGet("127.0.2.1", 15020, "/metrics", &plain), 200);
  EXPECT_EQ(plain.find("\x1f\x8b"), std::string::npos) << "no Accept-Encoding: the text as it is";
  auto zipped_lines = istioLines(zipped);
  EXPECT_FALSE(zipped_lines.empty()) << zipped.substr(0, 200);
  EXPECT_EQ(zipped_lines, istioLines(plain));
}

}  // namespace
}  // namespace ferry::testing
