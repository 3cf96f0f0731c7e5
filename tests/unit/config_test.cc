#include "proxy/config/config.h"

#include <filesystem>
#include <fstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "tests/support/parse_error.h"

namespace ferry::config {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr char kSource[] = "ferry.yaml";

// The four required keys; each test adds or breaks one thing.
constexpr char kMinimal[] =
    "node: n1\n"
    "trust_domain: cluster.local\n"
    "workloads_file: workloads.yaml\n"
    "cert_dir: certs\n";

absl::StatusOr<Config> parse(std::string_view text, std::string_view base_dir = "") {
  return parseConfig(text, kSource, base_dir);
}

std::string withMinimal(const std::string& extra) { return kMinimal + extra; }

HostPort hp(std::string_view text) { return *common::parseHostPort(text); }

// The error is InvalidArgument and its message starts with "ferry.yaml:<line>: <prefix>".
void expectError(const absl::StatusOr<Config>& result, int line, const std::string& prefix,
                 const std::string& detail = "") {
  ferry::test_support::expectErrorAt(result, kSource, line, prefix, detail);
}

TEST(ConfigTest, ParsesFullFile) {
  auto config = parse(
      "node: n1\n"
      "trust_domain: cluster.local\n"
      "workloads_file: /etc/ferry/workloads.yaml\n"
      "cert_dir: /etc/ferry/certs\n"
      "listen:\n"
      "  outbound: [\"127.0.0.1:25001\", \"[::1]:25001\"]\n"
      "  inbound_plaintext: [\"127.0.0.1:25006\"]\n"
      "  hbone:\n"
      "    - 10.0.0.1:25008\n"
      "  admin: 127.0.0.1:25000\n"
      "  metrics: 0.0.0.0:25020\n"
      "  readiness: 0.0.0.0:25021\n"
      "timeouts: {connect: 3s, handshake: 4s, idle: 2h, drain: 250ms}\n"
      "pool: {max_streams: 50, idle_release: 1m, ping_interval: 5s, ping_timeout: 15s, workers_per_pair: 2}\n"
      "workers: 4\n"
      "log_level: debug\n"
      "transparent: false\n"
      "original_destination: proxy_protocol\n"
      "hbone_port: 25008\n"
      "workloads_poll: 500ms\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->node, "n1");
  EXPECT_EQ(config->trust_domain, "cluster.local");
  EXPECT_EQ(config->workloads_file, "/etc/ferry/workloads.yaml");
  EXPECT_EQ(config->cert_dir, "/etc/ferry/certs");
  EXPECT_EQ(config->listen.outbound, (std::vector{hp("127.0.0.1:25001"), hp("[::1]:25001")}));
  EXPECT_EQ(config->listen.inbound_plaintext, std::vector{hp("127.0.0.1:25006")});
  EXPECT_EQ(config->listen.hbone, std::vector{hp("10.0.0.1:25008")});
  EXPECT_EQ(config->listen.admin, hp("127.0.0.1:25000"));
  EXPECT_EQ(config->listen.metrics, hp("0.0.0.0:25020"));
  EXPECT_EQ(config->listen.readiness, hp("0.0.0.0:25021"));
  EXPECT_EQ(config->timeouts.connect, Millis(3'000));
  EXPECT_EQ(config->timeouts.handshake, Millis(4'000));
  EXPECT_EQ(config->timeouts.idle, Millis(7'200'000));
  EXPECT_EQ(config->timeouts.drain, Millis(250));
  EXPECT_EQ(config->pool.max_streams, 50u);
  EXPECT_EQ(config->pool.idle_release, Millis(60'000));
  EXPECT_EQ(config->pool.ping_interval, Millis(5'000));
  EXPECT_EQ(config->pool.ping_timeout, Millis(15'000));
  EXPECT_EQ(config->pool.workers_per_pair, 2u);
  EXPECT_EQ(config->workers, 4u);
  EXPECT_EQ(config->log_level, common::LogLevel::kDebug);
  EXPECT_FALSE(config->transparent);
  EXPECT_EQ(config->original_destination, OriginalDestination::kProxyProtocol);
  EXPECT_EQ(config->hbone_port, 25008);
  EXPECT_EQ(config->workloads_poll, Millis(500));
}

TEST(ConfigTest, AppliesDefaultsForOptionalKeys) {
  auto config = parse(kMinimal);
  ASSERT_TRUE(config.ok()) << config.status();
  const Config defaults;
  EXPECT_EQ(config->listen.outbound, std::vector{hp("0.0.0.0:15001")});
  EXPECT_EQ(config->listen.inbound_plaintext, std::vector{hp("0.0.0.0:15006")});
  EXPECT_EQ(config->listen.hbone, std::vector{hp("0.0.0.0:15008")});
  EXPECT_EQ(config->listen.admin, hp("127.0.0.1:15000"));
  EXPECT_EQ(config->listen.metrics, hp("0.0.0.0:15020"));
  EXPECT_EQ(config->listen.readiness, hp("0.0.0.0:15021"));
  EXPECT_EQ(config->timeouts.connect, defaults.timeouts.connect);
  EXPECT_EQ(config->timeouts.handshake, defaults.timeouts.handshake);
  EXPECT_EQ(config->timeouts.idle, defaults.timeouts.idle);
  EXPECT_EQ(config->timeouts.drain, defaults.timeouts.drain);
  EXPECT_EQ(config->pool.max_streams, defaults.pool.max_streams);
  EXPECT_EQ(config->pool.idle_release, defaults.pool.idle_release);
  EXPECT_EQ(config->pool.ping_interval, defaults.pool.ping_interval);
  EXPECT_EQ(config->pool.ping_timeout, defaults.pool.ping_timeout);
  EXPECT_EQ(config->pool.workers_per_pair, 4u);
  EXPECT_EQ(config->workers, 0u);
  EXPECT_EQ(config->log_level, common::LogLevel::kInfo);
  EXPECT_TRUE(config->transparent);
  EXPECT_EQ(config->original_destination, OriginalDestination::kSocket);
  EXPECT_EQ(config->hbone_port, 15008);
  EXPECT_EQ(config->workloads_poll, Millis(1'000));
}

TEST(ConfigTest, KeepsDefaultsForListenKeysNotGiven) {
  auto config = parse(withMinimal("listen:\n  admin: 127.0.0.1:9000\n"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->listen.admin, hp("127.0.0.1:9000"));
  EXPECT_EQ(config->listen.outbound, std::vector{hp("0.0.0.0:15001")});
}

TEST(ConfigTest, AcceptsSingleStringForAddressList) {
  auto config = parse(withMinimal("listen:\n  outbound: 127.0.0.1:25001\n"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->listen.outbound, std::vector{hp("127.0.0.1:25001")});
}

TEST(ConfigTest, ResolvesRelativePathsAgainstBaseDir) {
  auto config = parse(kMinimal, "/etc/ferry");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->workloads_file, "/etc/ferry/workloads.yaml");
  EXPECT_EQ(config->cert_dir, "/etc/ferry/certs");
}

TEST(ConfigTest, KeepsAbsolutePathsAsWritten) {
  auto config =
      parse("node: n1\ntrust_domain: td\nworkloads_file: /var/w.yaml\ncert_dir: /var/certs\n",
            "/etc/ferry");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->workloads_file, "/var/w.yaml");
  EXPECT_EQ(config->cert_dir, "/var/certs");
}

TEST(ConfigTest, KeepsRelativePathsWhenNoBaseDir) {
  auto config = parse(kMinimal);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->workloads_file, "workloads.yaml");
  EXPECT_EQ(config->cert_dir, "certs");
}

TEST(ConfigTest, LoadsFileAndResolvesPathsAgainstItsFolder) {
  auto dir = std::filesystem::path(testing::TempDir()) / "config_test_load";
  std::filesystem::create_directories(dir);
  auto path = (dir / "ferry.yaml").string();
  std::ofstream(path) << kMinimal;
  auto config = loadConfigFile(path);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->workloads_file, (dir / "workloads.yaml").lexically_normal().string());
  EXPECT_EQ(config->cert_dir, (dir / "certs").lexically_normal().string());
  std::filesystem::remove_all(dir);
}

TEST(ConfigTest, LoadFileErrorsNamePathAndLine) {
  auto dir = std::filesystem::path(testing::TempDir()) / "config_test_load_error";
  std::filesystem::create_directories(dir);
  auto path = (dir / "ferry.yaml").string();
  std::ofstream(path) << kMinimal << "workers: many\n";
  auto config = loadConfigFile(path);
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(std::string(config.status().message()), StartsWith(path + ":5: workers: "));
  std::filesystem::remove_all(dir);
}

TEST(ConfigTest, ReportsUnreadableFileWithPathAndReason) {
  std::string path = testing::TempDir() + "/config_test_does_not_exist.yaml";
  auto config = loadConfigFile(path);
  ASSERT_FALSE(config.ok());
  std::string message(config.status().message());
  EXPECT_THAT(message, HasSubstr(path));
  EXPECT_THAT(message, HasSubstr("No such file or directory"));
}

class MissingRequiredKeyTest : public testing::TestWithParam<std::string> {};

TEST_P(MissingRequiredKeyTest, RejectsMissingRequiredKey) {
  std::string text;
  for (std::string_view line : {"node: n1\n", "trust_domain: cluster.local\n",
                                "workloads_file: workloads.yaml\n", "cert_dir: certs\n"}) {
    if (!line.starts_with(GetParam() + ":")) text += line;
  }
  text += "workers: 1\n";
  expectError(parse(text), 1, GetParam() + ": required key is missing");
}

INSTANTIATE_TEST_SUITE_P(ConfigTest, MissingRequiredKeyTest,
                         testing::Values("node", "trust_domain", "workloads_file", "cert_dir"),
                         [](const auto& info) { return info.param; });

TEST(ConfigTest, RejectsUnknownTopLevelKeyWithLine) {
  expectError(parse(withMinimal("workres: 2\n")), 5, "workres: unknown key 'workres'",
              "expected one of: node,");
}

TEST(ConfigTest, RejectsUnknownNestedKeyWithLine) {
  expectError(parse(withMinimal("timeouts:\n  connect: 1s\n  conect: 2s\n")), 7,
              "timeouts.conect: unknown key 'conect'");
  expectError(parse(withMinimal("listen:\n  outbund: [\"0.0.0.0:1\"]\n")), 6,
              "listen.outbund: unknown key 'outbund'");
  expectError(parse(withMinimal("pool: {max_stream: 1}\n")), 5, "pool.max_stream: unknown key");
}

TEST(ConfigTest, RejectsDuplicateKeyNamingFirstLine) {
  expectError(parse(withMinimal("workers: 1\nworkers: 2\n")), 6, "workers: duplicate key",
              "line 5");
}

TEST(ConfigTest, RejectsMapWhereScalarExpected) {
  expectError(parse(withMinimal("log_level:\n  level: info\n")), 6,
              "log_level: expected a string, got a map");
}

TEST(ConfigTest, RejectsScalarWhereMapExpected) {
  expectError(parse(withMinimal("timeouts: 10s\n")), 5, "timeouts: expected a map, got a scalar");
}

TEST(ConfigTest, RejectsListWhereSingleAddressExpected) {
  expectError(parse(withMinimal("listen:\n  admin: [\"127.0.0.1:1\"]\n")), 6,
              "listen.admin: expected a string, got a list");
}

TEST(ConfigTest, RejectsAnAdminAddressOtherThanLoopback) {
  for (const char* address : {"0.0.0.0:15000", "[::]:15000", "10.0.0.1:15000"}) {
    expectError(parse(withMinimal(absl::StrCat("listen:\n  admin: \"", address, "\"\n"))), 6,
                absl::StrCat("listen.admin: '", address, "' is not a loopback address (127.0.0.0/8 or ::1)"));
  }
  for (const char* address : {"[::1]:15000", "127.0.2.1:15000"}) {
    EXPECT_TRUE(parse(withMinimal(absl::StrCat("listen:\n  admin: \"", address, "\"\n"))).ok()) << address;
  }
}

TEST(ConfigTest, HandoverIsOffUnlessASocketIsGivenAndItMustBeAnAbsoluteUnixSocketPath) {
  auto none = parse(kMinimal);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->handover.socket, "");
  EXPECT_EQ(none->handover.deadline, Millis(4 * 3'600'000));
  EXPECT_EQ(none->handover.readiness_file, "");
  EXPECT_FALSE(none->handover.wait_for_signal);
  auto set = parse(withMinimal("handover: {socket: /run/ferry/handover.sock, deadline: 30m, readiness_file: /run/p/ready, wait_for_signal: true}\n"));
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->handover.socket, "/run/ferry/handover.sock");
  EXPECT_EQ(set->handover.deadline, Millis(1'800'000));
  EXPECT_EQ(set->handover.readiness_file, "/run/p/ready");
  EXPECT_TRUE(set->handover.wait_for_signal);
  expectError(parse(withMinimal("handover:\n  wait_for_signal: sometimes\n")), 6, "handover.wait_for_signal");
  expectError(parse(withMinimal("handover:\n  readiness_file: ready\n")), 6, "handover.readiness_file", "absolute path");
  expectError(parse(withMinimal("handover:\n  socket: run/handover.sock\n")), 6, "handover.socket", "absolute path");
  expectError(parse(withMinimal("handover:\n  socket: /" + std::string(107, 'x') + "\n")), 6, "handover.socket",
              "longer than 107 bytes");
  expectError(parse(withMinimal("handover:\n  deadline: 0s\n")), 6, "handover.deadline");
  expectError(parse(withMinimal("handover:\n  dedline: 1h\n")), 6, "handover.dedline");
}

TEST(ConfigTest, RejectsEmptyValueForRequiredKey) {
  expectError(parse("node: n1\ntrust_domain:\nworkloads_file: w\ncert_dir: c\n"), 2,
              "trust_domain: expected a string, got an empty value");
}

// --- node from NODE_NAME, workload sources -------------------------------------------

constexpr char kNoNode[] = "trust_domain: cluster.local\nworkloads_file: w.yaml\ncert_dir: certs\n";

TEST(ConfigTest, NodeComesFromNodeNameWhenAbsentOrEmpty) {
  for (std::string text : {std::string(kNoNode), absl::StrCat("node: \"\"\n", kNoNode),
                           absl::StrCat("node:\n", kNoNode)}) {
    auto config = parseConfig(text, kSource, "", "worker-7");
    ASSERT_TRUE(config.ok()) << config.status();
    EXPECT_EQ(config->node, "worker-7");
  }
}

TEST(ConfigTest, NodeWrittenInTheFileWinsOverNodeName) {
  auto config = parseConfig(kMinimal, kSource, "", "worker-7");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->node, "n1");
}

TEST(ConfigTest, RejectsMissingNodeWithoutNodeName) {
  expectError(parse(kNoNode), 1, "node: required key is missing or empty and NODE_NAME is not set");
  expectError(parse(absl::StrCat("node: \"\"\n", kNoNode)), 1, "node: required key is missing or empty");
}

TEST(ConfigTest, RejectsInvalidNodeName) {
  auto config = parseConfig(kNoNode, kSource, "", "Worker_7");
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(std::string(config.status().message()),
              StartsWith("ferry.yaml:1: node: from NODE_NAME: 'Worker_7' is not a valid node name"));
}

TEST(ConfigTest, WorkloadSourceDefaultsToFile) {
  auto config = parse(kMinimal);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->workload_source, WorkloadSourceKind::kFile);
  EXPECT_EQ(config->kubernetes.kubeconfig, "");
  EXPECT_FALSE(config->kubernetes.istio_ambient);
  EXPECT_EQ(config->kubernetes.max_state_age, Millis(300'000));
}

TEST(ConfigTest, KubernetesSourceNeedsNoWorkloadsFile) {
  auto config = parseConfig(
      "trust_domain: td\ncert_dir: /c\nworkload_source: kubernetes\nkubernetes:\n"
      "  kubeconfig: kube/config\n  istio_ambient: true\n  max_state_age: 90s\n  daemonset: ferry-system/ferry\n",
      kSource, "/etc/ferry", "worker-1");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->kubernetes.daemonset_namespace, "ferry-system");
  EXPECT_EQ(config->kubernetes.daemonset_name, "ferry");
  EXPECT_EQ(config->workload_source, WorkloadSourceKind::kKubernetes);
  EXPECT_EQ(config->workloads_file, "");
  EXPECT_EQ(config->kubernetes.kubeconfig, "/etc/ferry/kube/config");
  EXPECT_TRUE(config->kubernetes.istio_ambient);
  EXPECT_EQ(config->kubernetes.max_state_age, Millis(90'000));
}

TEST(ConfigTest, EmptyKubeconfigMeansInCluster) {
  auto config = parse("node: n1\ntrust_domain: td\ncert_dir: c\nworkload_source: kubernetes\n"
                      "kubernetes:\n  kubeconfig: \"\"\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->kubernetes.kubeconfig, "");
}

TEST(ConfigTest, RejectsBadWorkloadSourceSettings) {
  expectError(parse("node: n1\ntrust_domain: td\ncert_dir: c\n"), 1,
              "workloads_file: required key is missing (workload_source is file)");
  expectError(parse(withMinimal("workload_source: k8s\n")), 5, "workload_source: 'k8s' is not one of: file, kubernetes");
  expectError(parse(withMinimal("kubernetes:\n  max_state_age: 500ms\n")), 6,
              "kubernetes.max_state_age: 500ms is shorter than 1s");
  expectError(parse(withMinimal("kubernetes:\n  max_state_age: soon\n")), 6, "kubernetes.max_state_age: ");
  expectError(parse(withMinimal("kubernetes:\n  daemonset: ferry\n")), 6,
              "kubernetes.daemonset: 'ferry' is not <namespace>/<name> of a DaemonSet");
  expectError(parse(withMinimal("kubernetes:\n  daemonset: a/b/c\n")), 6, "kubernetes.daemonset: 'a/b/c' is not <namespace>/<name>");
  expectError(parse(withMinimal("kubernetes:\n  daemonset: Ferry/x\n")), 6, "kubernetes.daemonset: 'Ferry/x' is not <namespace>/<name>");
  expectError(parse(withMinimal("kubernetes:\n  istio_ambient: yes\n")), 6,
              "kubernetes.istio_ambient: 'yes' is not a boolean");
  expectError(parse(withMinimal("kubernetes:\n  namespace: default\n")), 6,
              "kubernetes.namespace: unknown key 'namespace'");
}

TEST(ConfigTest, RejectsTopLevelThatIsNotAMap) {
  expectError(parse("- node\n- n1\n"), 1, "expected a map, got a list");
}

TEST(ConfigTest, RejectsDurationWithoutUnit) {
  expectError(parse(withMinimal("timeouts:\n  handshake: 1s\n  connect: 10\n")), 7,
              "timeouts.connect: '10' is not a duration");
}

TEST(ConfigTest, RejectsZeroDuration) {
  expectError(parse(withMinimal("timeouts: {drain: 0s}\n")), 5,
              "timeouts.drain: '0s' must be greater than zero");
  expectError(parse(withMinimal("workloads_poll: 0ms\n")), 5, "workloads_poll: '0ms' must be");
}

TEST(ConfigTest, RejectsBadListenAddress) {
  expectError(parse(withMinimal("listen:\n  hbone: [\"0.0.0.0:15008\", \"localhost:15008\"]\n")), 6,
              "listen.hbone[1]: 'localhost:15008'");
}

TEST(ConfigTest, RejectsListenPortOutOfRange) {
  expectError(parse(withMinimal("listen:\n  metrics: 0.0.0.0:70000\n")), 6,
              "listen.metrics: '0.0.0.0:70000': port above 65535");
  expectError(parse(withMinimal("listen:\n  metrics: 0.0.0.0:0\n")), 6,
              "listen.metrics: '0.0.0.0:0': port 0");
}

TEST(ConfigTest, RejectsEmptyAddressList) {
  expectError(parse(withMinimal("listen:\n  outbound: []\n")), 6,
              "listen.outbound: needs at least one address");
}

TEST(ConfigTest, RejectsHbonePortOutOfRange) {
  expectError(parse(withMinimal("hbone_port: 65536\n")), 5,
              "hbone_port: must be between 1 and 65535, got 65536");
  expectError(parse(withMinimal("hbone_port: 0\n")), 5, "hbone_port: must be between 1 and 65535");
}

TEST(ConfigTest, RejectsWorkersOutOfRangeOrNotANumber) {
  expectError(parse(withMinimal("workers: 257\n")), 5, "workers: must be between 0 and 256");
  expectError(parse(withMinimal("workers: -1\n")), 5, "workers: must be between 0 and 256");
  expectError(parse(withMinimal("workers: 1.5\n")), 5, "workers: '1.5' is not a whole number");
}

TEST(ConfigTest, RejectsMaxStreamsOutOfRange) {
  expectError(parse(withMinimal("pool:\n  max_streams: 0\n")), 6,
              "pool.max_streams: must be between 1 and 1000");
  expectError(parse(withMinimal("pool:\n  max_streams: 1001\n")), 6,
              "pool.max_streams: must be between 1 and 1000");
}

TEST(ConfigTest, ParsesHboneAbuseLimitsWithSafeDefaults) {
  auto defaults = parse(kMinimal);
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ(defaults->hbone.max_pending_connects, 16u);
  EXPECT_EQ(defaults->hbone.max_premature_resets, 100u);
  auto set = parse(withMinimal("hbone: {max_pending_connects: 4, max_premature_resets: 50}\n"));
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->hbone.max_pending_connects, 4u);
  EXPECT_EQ(set->hbone.max_premature_resets, 50u);
}

TEST(ConfigTest, RejectsHboneAbuseLimitsOutOfRange) {
  expectError(parse(withMinimal("hbone:\n  max_pending_connects: 0\n")), 6,
              "hbone.max_pending_connects: must be between 1 and 1000");
  expectError(parse(withMinimal("hbone:\n  max_premature_resets: 9\n")), 6,
              "hbone.max_premature_resets: must be between 10 and 100000");
  expectError(parse(withMinimal("hbone:\n  max_resets: 9\n")), 6, "hbone.max_resets: unknown key");
}

TEST(ConfigTest, ParsesAccessLogSettingsWithDefaults) {
  auto defaults = parse(kMinimal);
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_TRUE(defaults->access_log.enabled);
  EXPECT_EQ(defaults->access_log.format, AccessLogFormat::kText);
  EXPECT_EQ(defaults->access_log.sample_success, 1.0);
  EXPECT_EQ(defaults->access_log.failures_per_second, 100u);
  EXPECT_EQ(defaults->access_log.failures_burst, 200u);
  auto set = parse(withMinimal(
      "access_log: {enabled: false, format: json, sample_success: 0.25, failures_per_second: 5, failures_burst: 7}\n"));
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_FALSE(set->access_log.enabled);
  EXPECT_EQ(set->access_log.format, AccessLogFormat::kJson);
  EXPECT_EQ(set->access_log.sample_success, 0.25);
  EXPECT_EQ(set->access_log.failures_per_second, 5u);
  EXPECT_EQ(set->access_log.failures_burst, 7u);
  auto none = parse(withMinimal("access_log: {sample_success: 0}\n"));
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->access_log.sample_success, 0.0);
}

TEST(ConfigTest, RejectsInvalidAccessLogSettingsNamingTheKey) {
  const std::pair<const char*, const char*> cases[] = {
      {"format: xml", "access_log.format: 'xml' is not one of: text, json"},
      {"sample_success: 1.5", "access_log.sample_success: '1.5' is not a fraction from 0 to 1"},
      {"sample_success: -0.1", "access_log.sample_success: '-0.1' is not a fraction from 0 to 1"},
      {"sample_success: half", "access_log.sample_success: 'half' is not a fraction from 0 to 1"},
      {"sample_success: nan", "access_log.sample_success: 'nan' is not a fraction"},
      {"failures_per_second: 0", "access_log.failures_per_second: must be between 1 and 1000000"},
      {"failures_burst: 0", "access_log.failures_burst: must be between 1 and 1000000"},
      {"enabled: maybe", "access_log.enabled:"},
      {"path: /var/log/x", "access_log.path: unknown key"},
  };
  for (const auto& [line, error] : cases) {
    SCOPED_TRACE(line);
    expectError(parse(withMinimal(std::string("access_log:\n  ") + line + "\n")), 6, error);
  }
}

TEST(ConfigTest, RejectsWorkersPerPairOutOfRange) {
  expectError(parse(withMinimal("pool:\n  workers_per_pair: 0\n")), 6,
              "pool.workers_per_pair: must be between 1 and 256");
  expectError(parse(withMinimal("pool:\n  workers_per_pair: many\n")), 6,
              "pool.workers_per_pair: 'many' is not a whole number");
}

TEST(ConfigTest, RejectsUnknownLogLevel) {
  expectError(parse(withMinimal("log_level: verbose\n")), 5,
              "log_level: unknown log level 'verbose'");
}

TEST(ConfigTest, RejectsUnknownOriginalDestination) {
  expectError(parse(withMinimal("original_destination: tproxy\n")), 5,
              "original_destination: unknown original_destination 'tproxy'",
              "socket or proxy_protocol");
}

TEST(ConfigTest, RejectsNonBooleanTransparent) {
  expectError(parse(withMinimal("transparent: yes\n")), 5, "transparent: 'yes' is not a boolean");
}

TEST(ConfigTest, RejectsPingTimeoutNotLongerThanInterval) {
  expectError(parse(withMinimal("pool:\n  ping_interval: 10s\n  ping_timeout: 10s\n")), 7,
              "pool.ping_timeout: 10s must be longer than pool.ping_interval (10s)");
  // Only the interval written: the default timeout (20s) is now too short, blame the interval.
  expectError(parse(withMinimal("pool:\n  ping_interval: 30s\n")), 6,
              "pool.ping_interval: 30s must be shorter than pool.ping_timeout (20s, the default)");
}

TEST(ConfigTest, RejectsDuplicateListenAddressAcrossLists) {
  expectError(parse(withMinimal("listen:\n"
                                "  outbound: [\"0.0.0.0:16001\"]\n"
                                "  inbound_plaintext: [\"0.0.0.0:16006\"]\n"
                                "  hbone: [\"0.0.0.0:16008\", \"0.0.0.0:16001\"]\n")),
              8, "listen.hbone[1]: 0.0.0.0:16001 is already used by listen.outbound[0] (line 6)");
}

TEST(ConfigTest, RejectsListenAddressThatClashesWithADefault) {
  expectError(parse(withMinimal("listen:\n  metrics: 0.0.0.0:15001\n")), 6,
              "listen.metrics: 0.0.0.0:15001 is already used by listen.outbound (its default)");
}

TEST(ConfigTest, RejectsBadNodeName) {
  expectError(parse("node: Node_1\ntrust_domain: td\nworkloads_file: w\ncert_dir: c\n"), 1,
              "node: 'Node_1' is not a valid node name");
}

TEST(ConfigTest, RejectsBadTrustDomain) {
  expectError(parse("node: n1\ntrust_domain: Cluster.Local\nworkloads_file: w\ncert_dir: c\n"), 2,
              "trust_domain: 'Cluster.Local' is not a valid SPIFFE trust domain");
  std::string long_domain(256, 'a');
  expectError(parse(absl::StrCat("node: n1\ntrust_domain: ", long_domain,
                                 "\nworkloads_file: w\ncert_dir: c\n")),
              2, "trust_domain: ");
  EXPECT_TRUE(parse(absl::StrCat("node: n1\ntrust_domain: ", std::string(255, 'a'),
                                 "\nworkloads_file: w\ncert_dir: c\n"))
                  .ok());
}

TEST(ConfigTest, ReportsYamlSyntaxErrorWithLine) {
  expectError(parse(withMinimal("listen:\n  outbound: [\"0.0.0.0:1\"\n  admin: x\n")), 7,
              "YAML syntax error: ");
}

TEST(ConfigTest, RejectsEmptyDocument) {
  expectError(parse(""), 1, "the document is empty");
  expectError(parse("# nothing here\n"), 1, "the document is empty");
  expectError(parse("---\n"), 1, "the document is empty");
}

TEST(ConfigTest, RejectsMoreThanOneDocument) {
  expectError(parse(withMinimal("---\nnode: n2\n")), 6, "only one YAML document");
}

// yaml-cpp 0.7 reports this input as an empty document over and over without consuming it:
// loading every document never returned and allocated until memory ran out (found by
// tests/fuzz/config_fuzzer; the input is crash_yaml_parser_no_progress in its corpus).
TEST(ConfigTest, RejectsInputTheYamlParserCannotGetPast) {
  expectError(parse(", su\"a l"), 1, "YAML syntax error: the parser cannot go past this point");
  expectError(parse(withMinimal(", su\"a l")), 5, "YAML syntax error");
}

}  // namespace
}  // namespace ferry::config

namespace ferry::config {
namespace {

constexpr char kMinimalForDatapath[] =
    "node: n1\ntrust_domain: cluster.local\nworkloads_file: w.yaml\ncert_dir: certs\n";

TEST(DatapathConfigTest, IsDisabledByDefault) {
  auto config = parseConfig(kMinimalForDatapath, "f.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_FALSE(config->datapath.enabled);
  EXPECT_EQ(config->datapath.injection, Injection::kAuto);
  EXPECT_EQ(config->datapath.egress_flag, 32u);
  EXPECT_EQ(config->datapath.failure_mode, FailureMode::kClosed);
  EXPECT_TRUE(config->datapath.exempt_node) << "the kubelet's probes pass, as the chart's default";
}

TEST(DatapathConfigTest, ParsesEveryKey) {
  auto config = parseConfig(std::string(kMinimalForDatapath) +
                                "datapath:\n  enabled: true\n  injection: ingress-redirect\n"
                                "  egress_flag: 64\n  proxy_netns: /run/netns/p\n  proxy_interface: veth0\n"
                                "  host_proxy_interface: fy1-px\n  bpffs: /run/ferry/bpffs/n1\n"
                                "  capture: all\n  failure_mode: open\n  mark: 4096\n  exempt_node: false\n",
                            "f.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  const auto& d = config->datapath;
  EXPECT_TRUE(d.enabled);
  EXPECT_EQ(d.injection, Injection::kIngressRedirect);
  EXPECT_EQ(d.egress_flag, 64u);
  EXPECT_EQ(d.proxy_netns, "/run/netns/p");
  EXPECT_EQ(d.proxy_interface, "veth0");
  EXPECT_EQ(d.host_proxy_interface, "fy1-px");
  EXPECT_EQ(d.capture, Capture::kAll);
  EXPECT_EQ(d.failure_mode, FailureMode::kOpen);
  EXPECT_EQ(d.mark, 4096u);
  EXPECT_FALSE(d.exempt_node);
}

TEST(DatapathConfigTest, AutoProxyNetnsNamesTheNodeSideDeviceItCreates) {
  auto config = parseConfig(std::string(kMinimalForDatapath) + "datapath:\n  enabled: true\n  proxy_netns: auto\n",
                            "/etc/ferry/f.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  const auto& d = config->datapath;
  EXPECT_TRUE(d.proxy_netns_auto);
  EXPECT_EQ(d.proxy_netns, "auto") << "not resolved as a path";
  EXPECT_EQ(d.host_proxy_interface, "ferry-proxy");
  EXPECT_EQ(d.proxy_address, "169.254.77.1");
  config = parseConfig(std::string(kMinimalForDatapath) +
                           "datapath:\n  enabled: true\n  proxy_netns: auto\n  host_proxy_interface: fy-px\n"
                           "  proxy_address: 169.254.99.1\n",
                       "f.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->datapath.host_proxy_interface, "fy-px");
  EXPECT_EQ(config->datapath.proxy_address, "169.254.99.1");
}

TEST(DatapathConfigTest, RejectsBadValuesWithKeyAndLine) {
  struct Case {
    const char* yaml;
    const char* expect;
  } cases[] = {
      {"datapath:\n  injection: sideways\n", "f.yaml:6: datapath.injection: 'sideways' is not one of"},
      {"datapath:\n  egress_flag: 3\n", "datapath.egress_flag: must be a single bit"},
      {"datapath:\n  egress_flag: 1\n", "datapath.egress_flag"},
      {"datapath:\n  capture: some\n", "datapath.capture"},
      {"datapath:\n  failure_mode: maybe\n", "datapath.failure_mode"},
      {"datapath:\n  exempt_node: sometimes\n", "datapath.exempt_node"},
      {"datapath:\n  enabled: true\n  host_proxy_interface: fy1-px\n", "proxy_netns is required"},
      {"datapath:\n  enabled: true\n  proxy_netns: /run/netns/p\n", "host_proxy_interface is required"},
      {"datapath:\n  bogus: 1\n", "unknown key 'bogus'"},
      {"datapath:\n  mark: 0\n", "datapath.mark"},
      {"datapath:\n  proxy_address: 169.254.77\n", "f.yaml:6: datapath.proxy_address: '169.254.77' is not an IPv4"},
      {"datapath:\n  proxy_address: 255.255.255.255\n", "datapath.proxy_address"},
  };
  for (const auto& c : cases) {
    auto config = parseConfig(std::string(kMinimalForDatapath) + c.yaml, "f.yaml");
    ASSERT_FALSE(config.ok()) << c.yaml;
    EXPECT_NE(std::string(config.status().message()).find(c.expect), std::string::npos)
        << c.yaml << " -> " << config.status().message();
  }
}

}  // namespace
}  // namespace ferry::config

namespace ferry::config {
namespace {

TEST(IdentityConfigTest, DefaultsToFilesAndParsesTheBuiltInCa) {
  constexpr char kBase[] = "node: n1\ntrust_domain: cluster.local\nworkloads_file: w.yaml\ncert_dir: certs\n";
  auto files = parseConfig(kBase, "f.yaml");
  ASSERT_TRUE(files.ok());
  EXPECT_EQ(files->identity.source, CertSourceKind::kFiles);
  auto ca = parseConfig(std::string(kBase) +
                            "identity: {source: ca, ca_cert: ca/int.pem, ca_key: ca/int.key, leaf_lifetime: 1h}\n",
                        "f.yaml", "/etc/ferry");
  ASSERT_TRUE(ca.ok()) << ca.status();
  EXPECT_EQ(ca->identity.source, CertSourceKind::kCa);
  EXPECT_EQ(ca->identity.ca_cert, "/etc/ferry/ca/int.pem");
  EXPECT_EQ(ca->identity.ca_key, "/etc/ferry/ca/int.key");
  EXPECT_EQ(ca->identity.leaf_lifetime, std::chrono::hours(1));
  for (const char* bad : {"identity: {source: ca, ca_key: k}\n", "identity: {source: ca, ca_cert: c}\n",
                          "identity: {source: vault}\n", "identity: {leaf_lifetime: 0s}\n",
                          "identity: {what: 1}\n"}) {
    auto r = parseConfig(std::string(kBase) + bad, "f.yaml");
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_NE(std::string(r.status().message()).find("f.yaml:5: identity"), std::string::npos)
        << bad << " -> " << r.status().message();
  }
}

TEST(IdentityConfigTest, ClusterCaTakesAddressServerNameTokenAndTimeout) {
  constexpr char kBase[] = "node: n1\ntrust_domain: cluster.local\nworkloads_file: w.yaml\ncert_dir: certs\n";
  auto c = parseConfig(std::string(kBase) +
                           "identity:\n  source: cluster-ca\n  cluster_ca:\n"
                           "    address: ferry-ca.ferry-system.svc:15012\n    token_file: token\n",
                       "f.yaml", "/etc/ferry");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->identity.source, CertSourceKind::kClusterCa);
  EXPECT_EQ(c->identity.cluster_ca.address, "ferry-ca.ferry-system.svc:15012");
  EXPECT_EQ(c->identity.cluster_ca.server_name, "ferry-ca.ferry-system.svc") << "the address's host by default";
  EXPECT_EQ(c->identity.cluster_ca.token_file, "/etc/ferry/token");
  EXPECT_EQ(c->identity.cluster_ca.request_timeout, std::chrono::seconds(10));
  EXPECT_STREQ(identitySourceName(c->identity.source), "cluster-ca");

  auto by_ip = parseConfig(std::string(kBase) +
                               "identity: {source: cluster-ca, cluster_ca: {address: \"[fd00::1]:15012\", "
                               "server_name: ferry-ca.ferry-system.svc, token_file: /t, request_timeout: 3s}}\n",
                           "f.yaml");
  ASSERT_TRUE(by_ip.ok()) << by_ip.status();
  EXPECT_EQ(by_ip->identity.cluster_ca.address, "[fd00::1]:15012");
  EXPECT_EQ(by_ip->identity.cluster_ca.server_name, "ferry-ca.ferry-system.svc");
  EXPECT_EQ(by_ip->identity.cluster_ca.request_timeout, std::chrono::seconds(3));

  struct Bad {
    const char* yaml;
    const char* expect;
  };
  for (const Bad& bad : {
           Bad{"identity: {source: cluster-ca}\n", "f.yaml:5: identity: identity.cluster_ca.address is required"},
           Bad{"identity: {source: cluster-ca, cluster_ca: {address: \"a:1\"}}\n",
               "f.yaml:5: identity.cluster_ca: identity.cluster_ca.token_file is required"},
           Bad{"identity: {source: cluster-ca, cluster_ca: {address: ferry-ca, token_file: /t}}\n",
               "f.yaml:5: identity.cluster_ca.address: 'ferry-ca' is not host:port"},
           Bad{"identity: {source: cluster-ca, cluster_ca: {address: \"ferry-ca:0\", token_file: /t}}\n",
               "f.yaml:5: identity.cluster_ca.address: 'ferry-ca:0': the port must be 1 to 65535"},
           Bad{"identity: {source: cluster-ca, cluster_ca: {address: \"fd00::1:15012\", token_file: /t}}\n",
               "is not host:port"},
           Bad{"identity: {source: cluster-ca, cluster_ca: {address: \"a:1\", token_file: /t, request_timeout: 0s}}\n",
               "f.yaml:5: identity.cluster_ca.request_timeout"},
           Bad{"identity: {source: cluster-ca, cluster_ca: {address: \"a:1\", token_file: /t, server_name: \"\"}}\n",
               "f.yaml:5: identity.cluster_ca.server_name: must not be empty"},
           Bad{"identity: {source: cluster-ca, cluster_ca: {adress: \"a:1\"}}\n", "f.yaml:5: identity.cluster_ca"},
       }) {
    auto r = parseConfig(std::string(kBase) + bad.yaml, "f.yaml");
    ASSERT_FALSE(r.ok()) << bad.yaml;
    EXPECT_NE(std::string(r.status().message()).find(bad.expect), std::string::npos)
        << bad.yaml << " -> " << r.status().message();
  }
}

TEST(IdentityConfigTest, LeafLifetimeHasAMinimumAndWholeSecondsAndPollIntervalParses) {
  constexpr char kBase[] = "node: n1\ntrust_domain: cluster.local\nworkloads_file: w.yaml\ncert_dir: certs\n";
  auto shortest = parseConfig(std::string(kBase) + "identity: {leaf_lifetime: 2s, poll_interval: 50ms}\n", "f.yaml");
  ASSERT_TRUE(shortest.ok()) << shortest.status();
  EXPECT_EQ(shortest->identity.leaf_lifetime, std::chrono::seconds(2));
  EXPECT_EQ(shortest->identity.poll_interval, std::chrono::milliseconds(50));
  EXPECT_EQ(parseConfig(kBase, "f.yaml")->identity.poll_interval, std::chrono::seconds(1));
  for (const char* bad : {"identity: {leaf_lifetime: 1s}\n", "identity: {leaf_lifetime: 2500ms}\n",
                          "identity: {poll_interval: 0s}\n"}) {
    auto r = parseConfig(std::string(kBase) + bad, "f.yaml");
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_NE(std::string(r.status().message()).find("f.yaml:5: identity."), std::string::npos)
        << bad << " -> " << r.status().message();
  }
}

}  // namespace
}  // namespace ferry::config

namespace ferry::config {
namespace {

TEST(ConfigLimitsTest, DefaultsAreTheDocumentedOnes) {
  auto c = parse(kMinimal);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->limits.hbone.max_connections, 4096u);
  EXPECT_EQ(c->limits.hbone.max_connections_per_source, 512u);
  EXPECT_EQ(c->limits.hbone.max_pending, 2048u);
  EXPECT_EQ(c->limits.hbone.max_pending_per_source, 256u);
  EXPECT_EQ(c->limits.descriptor_reserve, 256u);
  EXPECT_EQ(c->limits.trim_after_closes, 32u);
}

TEST(ConfigLimitsTest, ParsesEveryKey) {
  auto c = parse(withMinimal(
      "limits:\n"
      "  hbone: {max_connections: 100, max_connections_per_source: 10, max_pending_handshakes: 50,\n"
      "          max_pending_handshakes_per_source: 5}\n"
      "  outbound: {max_connections: 200}\n"
      "  inbound_plaintext: {max_pending_handshakes_per_source: 7}\n"
      "  descriptor_reserve: 64\n  preallocated_sockets: 0\n  trim_after_closes: 0\n"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->limits.hbone.max_connections, 100u);
  EXPECT_EQ(c->limits.hbone.max_connections_per_source, 10u);
  EXPECT_EQ(c->limits.hbone.max_pending, 50u);
  EXPECT_EQ(c->limits.hbone.max_pending_per_source, 5u);
  // Unwritten limits follow a lower written one down.
  EXPECT_EQ(c->limits.outbound.max_connections, 200u);
  EXPECT_EQ(c->limits.outbound.max_connections_per_source, 200u);
  EXPECT_EQ(c->limits.outbound.max_pending, 200u);
  EXPECT_EQ(c->limits.inbound_plaintext.max_pending_per_source, 7u);
  EXPECT_EQ(c->limits.descriptor_reserve, 64u);
  EXPECT_EQ(c->limits.preallocated_sockets, 0u);
  EXPECT_EQ(c->limits.trim_after_closes, 0u);
  // Which were written: those ferryd keeps when it fits the limits to its memory.
  EXPECT_EQ(c->limits.hbone.written, kWrittenConnections | kWrittenConnectionsPerSource | kWrittenPending |
                                         kWrittenPendingPerSource);
  EXPECT_EQ(c->limits.outbound.written, kWrittenConnections);
  EXPECT_EQ(c->limits.inbound_plaintext.written, kWrittenPendingPerSource);
}

TEST(ConfigLimitsTest, MemoryIsAutoNoneOrASize) {
  auto c = parse(kMinimal);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->limits.memory.source, MemorySetting::Source::kAuto);
  c = parse(withMinimal("limits:\n  memory: 768Mi\n"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->limits.memory, (MemorySetting{MemorySetting::Source::kBytes, uint64_t{768} << 20}));
  c = parse(withMinimal("limits:\n  memory: none\n"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->limits.memory.source, MemorySetting::Source::kNone);
  expectError(parse(withMinimal("limits:\n  memory: 1G\n")), 6, "limits.memory", "'1G' is not auto, none or a size");
  expectError(parse(withMinimal("limits:\n  memory: 0\n")), 6, "limits.memory");
}

TEST(ConfigLimitsTest, ReceiveBufferIsAutoNoneOrASize) {
  auto c = parse(kMinimal);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->limits.receive_buffer.source, MemorySetting::Source::kAuto);
  c = parse(withMinimal("limits:\n  receive_buffer: 64Mi\n"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->limits.receive_buffer, (MemorySetting{MemorySetting::Source::kBytes, uint64_t{64} << 20}));
  c = parse(withMinimal("limits:\n  receive_buffer: none\n"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->limits.receive_buffer.source, MemorySetting::Source::kNone);
  expectError(parse(withMinimal("limits:\n  receive_buffer: lots\n")), 6, "limits.receive_buffer",
              "'lots' is not auto, none or a size");
}

TEST(ConfigLimitsTest, RejectsZeroLimitsAndATinyReserve) {
  expectError(parse(withMinimal("limits:\n  hbone: {max_connections: 0}\n")), 6, "limits.hbone.max_connections");
  expectError(parse(withMinimal("limits:\n  descriptor_reserve: 4\n")), 6, "limits.descriptor_reserve");
}

TEST(ConfigLimitsTest, RejectsAWrittenPartAboveItsWhole) {
  expectError(parse(withMinimal("limits:\n  hbone:\n    max_connections: 10\n    max_connections_per_source: 20\n")), 8,
              "limits.hbone.max_connections_per_source", "above max_connections");
  expectError(parse(withMinimal("limits:\n  outbound: {max_pending_handshakes: 10, max_pending_handshakes_per_source: 11}\n")),
              6, "limits.outbound.max_pending_handshakes_per_source", "above max_pending_handshakes");
}

TEST(ConfigLimitsTest, RejectsUnknownLimitKeys) {
  expectError(parse(withMinimal("limits:\n  hbone: {max_conections: 1}\n")), 6, "limits.hbone.max_conections");
}

// ferry-cni's own API credentials (docs/install.md, "When ferryd is down").
TEST(ConfigTest, TheCniServiceAccountNeedsTheInstallerAndTheApiServer) {
  const std::string k8s = "node: n1\ntrust_domain: cluster.local\ncert_dir: certs\nworkload_source: kubernetes\n"
                          "datapath: {enabled: true, proxy_netns: auto}\n";
  auto good = parse(k8s + "cni: {enabled: true, install: true, service_account: ferry/ferry-cni, node_conf_dir: /etc/cni/net.d}\n");
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(good->cni.service_account, "ferry/ferry-cni");
  EXPECT_EQ(good->cni.nodeConfDir(), "/etc/cni/net.d");
  EXPECT_EQ(good->cni.token_lifetime, Millis{172'800'000});
  auto defaults = parse(k8s + "cni: {enabled: true, install: true, conf_dir: /host/net.d}\n");
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->cni.nodeConfDir(), "/host/net.d") << "the node sees the folder where ferryd does";
  auto error = [&](const std::string& text) {
    auto c = parse(text);
    return c.ok() ? std::string("(accepted)") : std::string(c.status().message());
  };
  EXPECT_THAT(error(k8s + "cni: {enabled: true, install: true, service_account: ferry-cni}\n"),
              testing::HasSubstr("'ferry-cni' is not <namespace>/<serviceaccount>"));
  EXPECT_THAT(error(k8s + "cni: {enabled: true, service_account: ferry/ferry-cni}\n"), testing::HasSubstr("needs install: true"));
  EXPECT_THAT(error(std::string(kMinimal) + "datapath: {enabled: true, proxy_netns: auto}\n" +
                    "cni: {enabled: true, install: true, service_account: ferry/ferry-cni}\n"),
              testing::HasSubstr("needs workload_source: kubernetes"));
  // The endpoint enrols into the datapath: without it ferryd cannot start, and the file is
  // refused where --check-config sees it.
  EXPECT_THAT(error("node: n1\ntrust_domain: cluster.local\ncert_dir: certs\nworkload_source: kubernetes\n"
                    "cni: {enabled: true}\n"),
              testing::HasSubstr("cni: enabled needs the tc datapath (datapath.enabled: true)"));
  EXPECT_THAT(error(k8s + "cni: {enabled: true, install: true, token_lifetime: 5m}\n"),
              testing::HasSubstr("shorter than the API server's minimum, 10m"));
  EXPECT_THAT(error(k8s + "cni: {enabled: true, node_conf_dir: etc/cni}\n"), testing::HasSubstr("must be an absolute path"));
}

}  // namespace
}  // namespace ferry::config
