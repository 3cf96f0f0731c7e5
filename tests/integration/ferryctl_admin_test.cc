// `ferryctl status|workloads|certs|connections|config|log-level|explain` (docs/operations.md,
// "ferryctl"): the built binary against n2's admin endpoint (127.0.2.1:15000) of the
// loopback lab, in both output forms (the JSON parsed and its fields checked), and against
// an address where no ferryd runs (exit 4 and what it says).

#include <fstream>
#include <string>
#include <vector>

#include <boost/json.hpp>

#include <gtest/gtest.h>

#include "absl/strings/str_join.h"

#include "proxy/common/log.h"
#include "tests/integration/loopback_lab.h"

namespace ferry::testing {
namespace {

namespace json = boost::json;

constexpr char kN2Admin[] = "127.0.2.1:15000";
// Node n3 runs no ferryd: nothing listens here.
constexpr char kNoFerryd[] = "127.0.4.1:15000";
constexpr uint16_t kAppPort = 8080;

using Outcome = ProgramRun;

json::object parsed(const std::string& text) {
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  EXPECT_FALSE(ec) << text;
  EXPECT_TRUE(v.is_object()) << text;
  return v.is_object() ? v.get_object() : json::object{};
}

class FerryctlAdminTest : public TwoNodeTest {
 protected:
  // The built binary, run to its end; with `env` as its whole environment when given.
  Outcome run(std::vector<std::string> args, std::vector<std::string> env = {}) {
    args.insert(args.begin(), FERRYCTL_BINARY);
    return runProgram(files_.dir(), args, &env);
  }
  // `command` against n2, text and JSON: both exit 0 and say nothing on stderr.
  std::pair<Outcome, json::object> both(const std::vector<std::string>& command) {
    std::vector<std::string> args = command;
    args.insert(args.end(), {"--admin", kN2Admin});
    Outcome text = run(args);
    EXPECT_EQ(text.exit, 0) << text.err;
    EXPECT_EQ(text.err, "");
    args.insert(args.end(), {"-o", "json"});
    Outcome js = run(args);
    EXPECT_EQ(js.exit, 0) << js.err;
    EXPECT_EQ(js.err, "");
    return {text, parsed(js.out)};
  }
};

// Every part of `out` is in it.
void expectParts(const std::string& out, std::initializer_list<std::string> parts) {
  for (const auto& part : parts) EXPECT_NE(out.find(part), std::string::npos) << "'" << part << "' in:\n" << out;
}

TEST_F(FerryctlAdminTest, StatusSaysReadyVersionWorkersConnectionsAndDatapath) {
  auto [text, js] = both({"status"});
  EXPECT_EQ(text.out.rfind("ferryd 0.1.0 on node n2: ready\n", 0), 0u) << text.out;
  expectParts(text.out, {"workers:      2\n", "connections:  0 active\n", "datapath:     disabled\n",
                         "log level:    error\n"});
  EXPECT_EQ(js.at("ready").as_bool(), true);
  EXPECT_EQ(js.at("version").as_string(), "0.1.0");
  EXPECT_EQ(js.at("workers").to_number<int>(), 2);
  EXPECT_EQ(js.at("connections_active").to_number<int>(), 0);
  EXPECT_EQ(js.at("datapath").as_string(), "disabled");
}

TEST_F(FerryctlAdminTest, WorkloadsListsEveryWorkloadAndWhichAreLocal) {
  auto [text, js] = both({"workloads"});
  EXPECT_EQ(text.out.rfind("NAMESPACE/NAME  NODE  IPS         IDENTITY", 0), 0u) << text.out;
  EXPECT_NE(text.out.find("default/s1      n2    127.0.2.10  spiffe://cluster.local/ns/default/sa/server   yes    yes\n"),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("5 workloads, 2 on this node\n"), std::string::npos) << text.out;
  EXPECT_EQ(js.at("count").to_number<int>(), 5);
  EXPECT_EQ(js.at("local").to_number<int>(), 2);
  const auto& list = js.at("workloads").as_array();
  ASSERT_EQ(list.size(), 5u);
  const auto& s1 = list[3].as_object();
  EXPECT_EQ(s1.at("name").as_string(), "s1");
  EXPECT_EQ(s1.at("ips").as_array()[0].as_string(), "127.0.2.10");
  EXPECT_EQ(s1.at("local").as_bool(), true);
  EXPECT_EQ(list[0].as_object().at("local").as_bool(), false);
}

TEST_F(FerryctlAdminTest, CertsShowTheRootsAndTheWorkloadCertificatesWithoutKeys) {
  auto [text, js] = both({"certs"});
  EXPECT_EQ(text.out.rfind("source: files, trust domain cluster.local, ready\n", 0), 0u) << text.out;
  expectParts(text.out, {"\nROOT ", "\nIDENTITY ", "spiffe://cluster.local/ns/default/sa/strict"});
  EXPECT_EQ(text.out.find("PRIVATE"), std::string::npos);
  EXPECT_EQ(js.at("ready").as_bool(), true);
  ASSERT_EQ(js.at("roots").as_array().size(), 1u);
  const auto& held = js.at("certificates").as_array();
  ASSERT_EQ(held.size(), 2u);
  const auto& server = held[0].as_object();
  EXPECT_EQ(server.at("identity").as_string(), "spiffe://cluster.local/ns/default/sa/server");
  EXPECT_FALSE(server.at("serial").as_string().empty());
  EXPECT_FALSE(server.at("not_before").as_string().empty());
  EXPECT_FALSE(server.contains("key"));
  // The serial in the table is the one in the JSON.
  EXPECT_NE(text.out.find(std::string(server.at("serial").as_string())), std::string::npos) << text.out;
}

TEST_F(FerryctlAdminTest, ConnectionsShowTheLiveConnectionWithItsBytes) {
  AppServer app("127.0.2.10", kAppPort, AppServer::echo);
  int fd = connectOutbound("127.0.1.10", "127.0.2.10", kAppPort);
  ASSERT_GE(fd, 0);
  setRecvTimeout(fd, std::chrono::seconds(10));
  std::string out(2048, 'y'), in(2048, '\0');
  ASSERT_TRUE(sendAll(fd, out.data(), out.size()) && recvExact(fd, in.data(), in.size()));

  Outcome text;
  ASSERT_TRUE(waitFor([&] {
    text = run({"connections", "--admin", kN2Admin});
    return text.out.find("2.0 KiB  2.0 KiB") != std::string::npos;
  })) << text.out << text.err;
  EXPECT_EQ(text.out.rfind("DIRECTION  SOURCE", 0), 0u) << text.out;
  EXPECT_NE(text.out.find("inbound    127.0.1.10:"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("127.0.2.10:8080  spiffe://cluster.local/ns/default/sa/client"), std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("\n1 connection open\n"), std::string::npos) << text.out;
  Outcome js = run({"connections", "--admin", kN2Admin, "-o", "json", "--limit", "5"});
  EXPECT_EQ(js.exit, 0) << js.err;
  json::object o = parsed(js.out);
  EXPECT_EQ(o.at("total").to_number<int>(), 1);
  const auto& c = o.at("connections").as_array()[0].as_object();
  EXPECT_EQ(c.at("direction").as_string(), "inbound");
  EXPECT_EQ(c.at("sent_bytes").to_number<int>(), 2048);
  EXPECT_EQ(c.at("received_bytes").to_number<int>(), 2048);
  EXPECT_EQ(run({"connections", "--admin", kN2Admin, "--limit", "0"}).exit, 2);
  ::close(fd);
}

TEST_F(FerryctlAdminTest, ClosedConnectionsAndExplainTellAWorkingConnectionFromAFailedOne) {
  AppServer app("127.0.2.10", kAppPort, AppServer::echo);
  int fd = connectOutbound("127.0.1.10", "127.0.2.10", kAppPort);
  ASSERT_GE(fd, 0);
  setRecvTimeout(fd, std::chrono::seconds(10));
  std::string out(100, 'y'), in(100, '\0');
  ASSERT_TRUE(sendAll(fd, out.data(), out.size()) && recvExact(fd, in.data(), in.size()));
  ::close(fd);
  // The destination's ferryd keeps the inbound leg once it closed.
  Outcome closed;
  ASSERT_TRUE(waitFor([&] {
    closed = run({"connections", "--closed", "--admin", kN2Admin});
    return closed.out.find(" inbound    ok      127.0.1.10:") != std::string::npos;
  })) << closed.out << closed.err;
  EXPECT_EQ(closed.out.rfind("CLOSED    DIRECTION  REASON", 0), 0u) << closed.out;
  EXPECT_NE(closed.out.find("1 connection closed recently (each worker keeps its last 64 failed and 32 successful "
                            "ones); times UTC\n"),
            std::string::npos)
      << closed.out;

  Outcome ok = run({"explain", "--from", "127.0.1.10", "--to", "127.0.2.10:8080", "--admin", kN2Admin});
  EXPECT_EQ(ok.exit, 0) << ok.out << ok.err;
  expectParts(ok.out, {"127.0.1.10 (127.0.1.10) -> 127.0.2.10:8080\n", "source       info",
                       "default/c1 runs on node n1, not on node n2",
                       "destination  ok     default/s1 on node n2: datapath off, identity "
                       "spiffe://cluster.local/ns/default/sa/server, certificate valid until",
                       "mtls         ok     PERMISSIVE", "policy       ok     allowed",
                       "no problem found: ferry carries such a connection"});

  // Nothing listens on 9090: the destination's ferryd cannot connect; explain names it.
  int refused = connectOutbound("127.0.1.10", "127.0.2.10", 9090);
  if (refused >= 0) {
    char byte = 0;
    setRecvTimeout(refused, std::chrono::seconds(10));
    EXPECT_LE(::recv(refused, &byte, 1, 0), 0);
    ::close(refused);
  }
  Outcome failed;
  ASSERT_TRUE(waitFor([&] {
    failed = run({"explain", "--from", "127.0.1.10", "--to", "127.0.2.10:9090", "--admin", kN2Admin, "-o", "json"});
    return failed.exit == 1;
  })) << failed.out << failed.err;
  json::object js = parsed(failed.out);
  EXPECT_NE(std::string(js.at("cause").as_string()).find("the last connection closed with connect_failed"),
            std::string::npos)
      << failed.out;
  EXPECT_EQ(js.at("closed").as_array().at(0).as_object().at("reason").as_string(), "connect_failed");
  EXPECT_EQ(js.at("destination_node").as_object().at("view").as_object().at("node").as_string(), "n2");

  // The source's node alone knows the source, not the destination's policies.
  Outcome from_n1 = run({"explain", "--from", "127.0.1.10", "--to", "127.0.2.10:8080", "--admin", "127.0.1.1:15000"});
  expectParts(from_n1.out, {"source       ok     default/c1 on node n1", "default/s1 runs on node n2: ask "
                                                                                 "with --from NAMESPACE/POD"});
  Outcome down = run({"explain", "--from", "127.0.1.10", "--to", "127.0.2.10:8080", "--admin", kNoFerryd});
  EXPECT_EQ(down.exit, 4) << down.err;
  EXPECT_EQ(down.err.rfind("ferryctl: ferryd is not running at 127.0.4.1:15000", 0), 0u) << down.err;
  for (std::vector<std::string> bad : std::vector<std::vector<std::string>>{
           {"explain", "--from", "127.0.1.10"}, {"explain", "--from", "pod", "--to", "127.0.2.10:8080"},
           {"explain", "--from", "127.0.1.10", "--to", "default/server:8080"},
           {"explain", "--from", "default/c", "--to", "x:1", "--admin", kN2Admin},
           {"explain", "--from", "127.0.1.10", "--to", "127.0.2.10:8080", "--kubeconfig", "k"}}) {
    Outcome usage = run(bad);
    EXPECT_EQ(usage.exit, 2) << absl::StrJoin(bad, " ") << ": " << usage.err;
  }
}

TEST_F(FerryctlAdminTest, ConfigShowsTheConfigurationInForce) {
  auto [text, js] = both({"config"});
  EXPECT_NE(text.out.find("\nlisten.admin  "), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("127.0.2.1:15000\n"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("\ntimeouts.connect  "), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("workloads: 5 (2 on this node); certificates held: 2; policies: 0 (0 refused); "
                          "datapath: disabled\n"),
            std::string::npos)
      << text.out;
  EXPECT_EQ(js.at("config").as_object().at("node").as_string(), "n2");
  EXPECT_EQ(js.at("config").as_object().at("workers").to_number<int>(), 2);
  EXPECT_EQ(js.at("workloads").as_object().at("count").to_number<int>(), 5);
  EXPECT_TRUE(js.at("reload").is_object());
}

TEST_F(FerryctlAdminTest, LogLevelShowsAndSetsTheLevel) {
  auto [shown, js] = both({"log-level"});
  EXPECT_EQ(shown.out, "log level: error\n");
  EXPECT_EQ(js.at("level").as_string(), "error");

  Outcome set = run({"log-level", "debug", "--admin", kN2Admin});
  EXPECT_EQ(set.exit, 0) << set.err;
  EXPECT_EQ(set.out, "log level: debug (was error)\n");
  EXPECT_EQ(common::logLevel(), common::LogLevel::kDebug);
  Outcome set_json = run({"log-level", "warn", "--admin", kN2Admin, "-o", "json"});
  EXPECT_EQ(set_json.exit, 0);
  EXPECT_EQ(parsed(set_json.out).at("previous").as_string(), "debug");
  EXPECT_EQ(common::logLevel(), common::LogLevel::kWarn);

  Outcome bad = run({"log-level", "loud", "--admin", kN2Admin});
  EXPECT_EQ(bad.exit, 2);
  EXPECT_NE(bad.err.find("unknown log level 'loud'"), std::string::npos) << bad.err;
  EXPECT_EQ(common::logLevel(), common::LogLevel::kWarn);
}

TEST_F(FerryctlAdminTest, AdminAddressComesFromFerryAdminWhenNoFlagIsGiven) {
  Outcome status = run({"status"}, {std::string("FERRY_ADMIN=") + kN2Admin});
  EXPECT_EQ(status.exit, 0) << status.err;
  EXPECT_NE(status.out.find("on node n2"), std::string::npos) << status.out;
  // --admin wins over the environment.
  Outcome flag = run({"status", "--admin", kN2Admin}, {std::string("FERRY_ADMIN=") + kNoFerryd});
  EXPECT_EQ(flag.exit, 0) << flag.err;
}

// --node / --pod without a cluster: what is wrong is said, with the usual exit codes (the
// way through a real API server is tests/k8s/ferry_e2e.sh's).
TEST_F(FerryctlAdminTest, NodeAndPodFlagsSayWhatIsWrongWithoutACluster) {
  for (std::vector<std::string> args : std::vector<std::vector<std::string>>{
           {"--pod", "no-slash", "status"}, {"--node", "a", "--pod", "ns/b", "status"}, {"--node", "status"},
           {"--kubeconfig", "x", "status"}, {"--node", "a", "ca", "show", "x"}, {"--node=", "status"}}) {
    Outcome bad = run(args);
    EXPECT_EQ(bad.exit, 2) << absl::StrJoin(args, " ") << ": " << bad.err;
    EXPECT_EQ(bad.out, "");
  }
  Outcome missing = run({"--node", "n1", "--kubeconfig", files_.dir() + "/fy-none.kubeconfig", "status"});
  EXPECT_EQ(missing.exit, 4) << missing.err;
  EXPECT_NE(missing.err.find("fy-none.kubeconfig"), std::string::npos) << missing.err;
  // An API server that is not there (nothing listens on n3's address).
  const std::string kubeconfig = files_.dir() + "/fy-nowhere.kubeconfig";
  std::ofstream(kubeconfig) << "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
                               "clusters: [{name: k, cluster: {server: 'https://127.0.4.1:6443'}}]\n"
                               "users: [{name: u, user: {token: fy-token}}]\n"
                               "contexts: [{name: c, context: {cluster: k, user: u}}]\n";
  Outcome nowhere = run({"--pod", "default/fy-pod", "--kubeconfig", kubeconfig, "status"});
  EXPECT_EQ(nowhere.exit, 4) << nowhere.err;
  EXPECT_NE(nowhere.err.find("refused"), std::string::npos) << nowhere.err;
}

TEST_F(FerryctlAdminTest, EveryCommandSaysFerrydIsNotRunningAndExitsFourWhenNoneAnswers) {
  for (std::vector<std::string> command : std::vector<std::vector<std::string>>{
           {"status"}, {"workloads"}, {"certs"}, {"connections"}, {"config"}, {"log-level"}, {"log-level", "info"},
           {"policy", "list"}}) {
    for (const char* output : {"text", "json"}) {
      auto args = command;
      args.insert(args.end(), {"--admin", kNoFerryd, "-o", output});
      Outcome down = run(args);
      EXPECT_EQ(down.exit, 4) << command[0] << " " << down.err;
      EXPECT_EQ(down.out, "");
      EXPECT_EQ(down.err.rfind("ferryctl: ferryd is not running at 127.0.4.1:15000 (connection refused)", 0), 0u)
          << command[0] << ": " << down.err;
    }
  }
  // A ferryd that ran and stopped: the same.
  ASSERT_EQ(run({"status", "--admin", "127.0.1.1:15000"}).exit, 0);
  n1_.reset();
  Outcome stopped = run({"status", "--admin", "127.0.1.1:15000", "-o", "json"});
  EXPECT_EQ(stopped.exit, 4) << stopped.err;
  EXPECT_EQ(stopped.err, "ferryctl: ferryd is not running at 127.0.1.1:15000 (connection refused); if its "
                         "listen.admin is elsewhere, pass --admin HOST:PORT or set FERRY_ADMIN\n");
  // The default address when nothing says otherwise (unless something runs there on this host).
  if (httpGet("127.0.0.1", 15000, "/status") == 0) {
    Outcome defaulted = run({"status"});
    EXPECT_EQ(defaulted.exit, 4) << defaulted.err;
    EXPECT_NE(defaulted.err.find("ferryd is not running at 127.0.0.1:15000 (connection refused)"), std::string::npos)
        << defaulted.err;
  }
  EXPECT_EQ(run({"status", "--admin", "nowhere"}).exit, 2);
  EXPECT_EQ(run({"status", "extra"}).exit, 2);
}

}  // namespace
}  // namespace ferry::testing
