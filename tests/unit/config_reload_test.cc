// What a reload of the config file may change (proxy/config/reload.h): the live/restart
// diff of two versions, what applyLive takes, and that the table, /config_dump
// (proxy/config/config_dump.h) and docs/configuration.md cover every key.
#include "proxy/config/reload.h"
#include "proxy/config/config_dump.h"

#include <boost/json.hpp>

#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace ferry::config {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr char kMinimal[] =
    "node: n1\n"
    "trust_domain: cluster.local\n"
    "workloads_file: /w.yaml\n"
    "cert_dir: /certs\n";

// Every key the parser knows, none at its default (a key added to the parser belongs here
// too: TableCoversEveryKey then proves the reload table has it).
constexpr char kEveryKey[] =
    "node: n2\n"
    "trust_domain: example.org\n"
    "workload_source: kubernetes\n"
    "workloads_file: /other.yaml\n"
    "kubernetes: {kubeconfig: /kc, istio_ambient: true, max_state_age: 2m, daemonset: ferry/ferryd}\n"
    "cni: {enabled: true, socket: /run/c.sock, state_dir: /run/c, pod_wait: 1s, install: true, bin_dir: /b,\n"
    "      conf_dir: /c, plugin_binary: /p, failure_policy: open, exclude_namespaces: [a], plugin_timeout: 3s,\n"
    "      node_conf_dir: /etc/cni/net.d, service_account: ferry/ferry-cni, token_lifetime: 24h}\n"
    "policy: {root_namespace: mesh-root, files: [/p.yaml], kubernetes: false}\n"
    "cert_dir: /other-certs\n"
    "listen: {outbound: \"127.0.0.1:1\", inbound_plaintext: \"127.0.0.1:2\", hbone: \"127.0.0.1:3\",\n"
    "         admin: \"127.0.0.1:4\", metrics: \"127.0.0.1:5\", readiness: \"127.0.0.1:6\"}\n"
    "timeouts: {connect: 1s, handshake: 2s, idle: 3s, drain: 4s}\n"
    "handover: {socket: /run/h.sock, deadline: 9m, readiness_file: /run/ready, wait_for_signal: true}\n"
    "pool: {max_streams: 7, idle_release: 1s, ping_interval: 2s, ping_timeout: 3s, workers_per_pair: 2}\n"
    "hbone: {max_pending_connects: 3, max_premature_resets: 30}\n"
    "workers: 3\n"
    "log_level: debug\n"
    "access_log: {enabled: false, format: json, sample_success: 0.5, failures_per_second: 7, failures_burst: 9}\n"
    "telemetry: {cluster_id: east, cluster_domain: example.local, series_expiry: 1h}\n"
    "transparent: false\n"
    "original_destination: proxy_protocol\n"
    "hbone_port: 16008\n"
    "workloads_poll: 5s\n"
    "datapath: {enabled: true, injection: peer-egress, egress_flag: 64, proxy_netns: auto, proxy_address: 169.254.9.1,\n"
    "           proxy_interface: eth1, host_proxy_interface: px, bpffs: /bpf, capture: all, failure_mode: open,\n"
    "           mark: 7, exempt_node: false}\n"
    "identity: {source: ca, ca_cert: /ca.pem, ca_key: /ca.key, leaf_lifetime: 1h, poll_interval: 2s,\n"
    "           cluster_ca: {address: \"ca.example:1\", server_name: ca.other, token_file: /t, request_timeout: 1s}}\n"
    "limits:\n"
    "  hbone: {max_connections: 10, max_connections_per_source: 5, max_pending_handshakes: 4,\n"
    "          max_pending_handshakes_per_source: 2}\n"
    "  outbound: {max_connections: 11}\n"
    "  inbound_plaintext: {max_connections: 12}\n"
    "  descriptor_reserve: 100\n"
    "  preallocated_sockets: 0\n"
    "  trim_after_closes: 0\n"
    "  memory: 512Mi\n"
    "  receive_buffer: 32Mi\n";

Config parse(const std::string& text) {
  auto config = parseConfig(text, "ferry.yaml");
  EXPECT_TRUE(config.ok()) << config.status();
  return config.ok() ? *config : Config{};
}

TEST(ConfigReload, SameFileChangesNothing) {
  auto change = diffConfig(parse(kMinimal), parse(kMinimal));
  EXPECT_TRUE(change.empty());
}

TEST(ConfigReload, SplitsLiveFromRestartKeysInTableOrder) {
  Config running = parse(kMinimal);
  Config next = parse(std::string(kMinimal) +
                      "workers: 4\ntimeouts: {idle: 5m}\nlog_level: debug\n"
                      "listen: {hbone: \"0.0.0.0:16008\"}\nlimits: {outbound: {max_connections: 100}}\n");
  auto change = diffConfig(running, next);
  EXPECT_THAT(change.live, ElementsAre("timeouts.idle", "log_level", "limits.outbound"));
  EXPECT_THAT(change.restart, ElementsAre("listen.hbone", "workers"));
}

TEST(ConfigReload, ApplyLiveTakesLiveKeysAndKeepsRestartKeys) {
  Config running = parse(kMinimal);
  Config next = parse(std::string(kMinimal) +
                      "workers: 4\ntimeouts: {idle: 5m}\npolicy: {files: [/p.yaml], kubernetes: false}\n"
                      "limits: {hbone: {max_connections: 100}, descriptor_reserve: 512}\n");
  applyLive(running, next);
  EXPECT_EQ(running.timeouts.idle, Millis(300'000));
  EXPECT_THAT(running.policy.files, ElementsAre("/p.yaml"));
  EXPECT_EQ(running.limits.hbone.max_connections, 100u);
  EXPECT_EQ(running.workers, 0u);                        // restart: as it runs
  EXPECT_TRUE(running.policy.kubernetes);                // restart
  EXPECT_EQ(running.limits.descriptor_reserve, 256u);    // restart
  // What is left to differ is exactly what waits for a restart.
  auto rest = diffConfig(running, next);
  EXPECT_THAT(rest.live, IsEmpty());
  EXPECT_THAT(rest.restart, ElementsAre("workers", "policy.kubernetes", "limits.descriptor_reserve"));
}

TEST(ConfigReload, KeyHeldInTwoMembersIsReportedOnce) {
  auto change = diffConfig(parse(kMinimal), parse(std::string(kMinimal) + "kubernetes: {daemonset: a/b}\n"));
  EXPECT_THAT(change.restart, ElementsAre("kubernetes.daemonset"));
}

TEST(ConfigReload, TableCoversEveryKey) {
  Config defaults = parse(kMinimal);
  Config every = parse(kEveryKey);
  auto change = diffConfig(defaults, every);
  // A member the table misses would be named "(a key missing from the reload table)".
  for (const auto& key : change.restart) EXPECT_NE(key[0], '(') << key;
  // Every row saw its member change: the fixture sets every key.
  size_t rows = change.live.size() + change.restart.size();
  size_t keys = 0;
  const char* previous = "";
#define FERRY_X(key, how, member)                \
  if (std::string(previous) != key) ++keys;      \
  previous = key;
  FERRY_CONFIG_KEYS(FERRY_X)
#undef FERRY_X
  EXPECT_EQ(rows, keys);
}

// /config_dump writes every row of the table from its member: each key is there, and with
// every key set away from its default, each key's value differs from the defaults' dump.
// Nothing is dumped that has no row (but memory_budget, which is no key).
TEST(ConfigReload, DumpWritesEveryKeyOfTheTableAndNothingElse) {
  namespace json = boost::json;
  const json::value defaults = json::parse(configDumpJson(parse(kMinimal)));
  const json::value every = json::parse(configDumpJson(parse(kEveryKey)));
  auto at = [](const json::value& root, const std::string& key) -> const json::value* {
    const json::value* v = &root;
    for (size_t from = 0;;) {
      size_t dot = key.find('.', from);
      const auto* object = v->if_object();
      if (object == nullptr) return nullptr;
      v = object->if_contains(key.substr(from, dot == std::string::npos ? std::string::npos : dot - from));
      if (v == nullptr || dot == std::string::npos) return v;
      from = dot + 1;
    }
  };
  std::set<std::string> keys;
#define FERRY_X(key, how, member) keys.insert(key);
  FERRY_CONFIG_KEYS(FERRY_X)
#undef FERRY_X
  for (const auto& key : keys) {
    const json::value* d = at(defaults, key);
    const json::value* e = at(every, key);
    ASSERT_NE(d, nullptr) << key << " is missing from /config_dump";
    ASSERT_NE(e, nullptr) << key;
    EXPECT_NE(*d, *e) << key << ": the dump does not follow the file (" << json::serialize(*e) << ")";
  }
  std::vector<std::string> extra;
  auto walk = [&](auto& self, const json::object& object, const std::string& prefix) -> void {
    for (const auto& [name, value] : object) {
      std::string path = prefix.empty() ? std::string(name) : prefix + "." + std::string(name);
      if (keys.contains(path) || path == "memory_budget") continue;
      if (value.is_object()) {
        self(self, value.as_object(), path);
      } else {
        extra.push_back(path);
      }
    }
  };
  walk(walk, every.as_object(), "");
  EXPECT_THAT(extra, IsEmpty()) << "dumped without a row in config/reload.h's table";
  // Values as the file writes them.
  EXPECT_EQ(at(every, "timeouts.connect")->as_string(), "1s");
  EXPECT_EQ(at(every, "datapath.injection")->as_string(), "peer-egress");
  EXPECT_EQ(at(every, "datapath.proxy_netns")->as_string(), "auto");
  EXPECT_EQ(at(every, "kubernetes.daemonset")->as_string(), "ferry/ferryd");
  EXPECT_EQ(at(every, "listen.hbone")->as_array().at(0).as_string(), "127.0.0.1:3");
  EXPECT_EQ(at(every, "limits.memory")->as_int64(), 512 << 20);
  EXPECT_EQ(at(defaults, "limits.memory")->as_string(), "auto");
}

// docs/configuration.md has a reload column, and it says what the table does.
TEST(ConfigReload, DocsSayWhatTheTableDoes) {
  // Compiled in (tests/unit/CMakeLists.txt): ctest's environment carries one variable only.
  std::ifstream in(FERRY_CONFIGURATION_MD);
  ASSERT_TRUE(in) << "docs/configuration.md";
  std::stringstream text;
  text << in.rdbuf();
  const std::string docs = text.str();
  // The rows of `key`: its own, or those of its sub-keys (`limits.hbone.*`, or a section's
  // keys one by one, when the table has one row for the section).
  auto rows = [&](const std::string& key) {
    std::vector<std::string> out;
    for (size_t at = docs.find("\n| `" + key); at != std::string::npos; at = docs.find("\n| `" + key, at + 1)) {
      char next = docs[at + 4 + key.size()];
      if (next == '`' || next == '.') out.push_back(docs.substr(at + 1, docs.find('\n', at + 1) - at - 1));
    }
    return out;
  };
#define FERRY_X(key, how, member)                                                                   \
  {                                                                                                 \
    auto found = rows(key);                                                                         \
    EXPECT_FALSE(found.empty()) << key << " has no row in docs/configuration.md";                   \
    for (const auto& r : found) {                                                                   \
      EXPECT_NE(r.find(Reload::how == Reload::kLive ? " | live | " : " | restart | "), std::string::npos) \
          << key << ": the reload column does not say " << #how << ": " << r;                       \
    }                                                                                               \
  }
  FERRY_CONFIG_KEYS(FERRY_X)
#undef FERRY_X
}

}  // namespace
}  // namespace ferry::config
