// The admin endpoint (docs/operations.md, "Endpoints") of the loopback lab's ferryd:
// live connections with their bytes (gathered from the workers), the log level changed at
// run time, /quitquitquit draining, the JSON of /status and /config_dump, and the listener
// bound to loopback only.
#include <arpa/inet.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

#include "proxy/config/config.h"
#include "proxy/config/reload.h"
#include "tests/integration/loopback_lab.h"

namespace ferry::testing {
namespace {

namespace json = boost::json;

constexpr uint16_t kAppPort = 8080;

struct Answer {
  int status = 0;
  std::string head, body;
};

// One HTTP/1.1 request to n1's or n2's admin endpoint (127.0.N.1:15000).
// `headers`: lines to send instead of the Host header ferryctl sends (the node's address).
Answer admin(const std::string& node_ip, const std::string& method, const std::string& target,
             const std::string& headers = "") {
  Answer out;
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(15000);
  ::inet_pton(AF_INET, node_ip.c_str(), &a.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return out;
  }
  // By default what ferryctl sends: an address in Host, and Ferry-Admin on a POST.
  std::string request = method + " " + target + " HTTP/1.1\r\n" +
                        (headers.empty() ? "Host: " + node_ip + ":15000\r\n" + (method == "POST" ? "Ferry-Admin: 1\r\n" : "")
                                         : headers) +
                        "Content-Length: 0\r\nConnection: close\r\n\r\n";
  std::string response;
  setRecvTimeout(fd, std::chrono::seconds(10));
  bool ok = sendAll(fd, request.data(), request.size()) && recvAll(fd, response);
  ::close(fd);
  if (!ok || response.compare(0, 5, "HTTP/") != 0) return out;
  out.status = std::atoi(response.c_str() + 9);
  auto end = response.find("\r\n\r\n");
  out.head = response.substr(0, end);
  out.body = end == std::string::npos ? "" : response.substr(end + 4);
  return out;
}

json::object parsed(const Answer& a) {
  boost::system::error_code ec;
  json::value v = json::parse(a.body, ec);
  EXPECT_FALSE(ec) << a.body;
  EXPECT_TRUE(v.is_object()) << a.body;
  return v.is_object() ? v.get_object() : json::object{};
}

// An echoed round trip of `size` bytes on `fd`.
bool echo(int fd, size_t size) {
  std::string out(size, 'x'), in(size, '\0');
  return sendAll(fd, out.data(), out.size()) && recvExact(fd, in.data(), in.size()) && in == out;
}

using AdminApiTest = TwoNodeTest;

// The one live connection `node_ip`'s ferryd lists, once its bytes back to the client reach
// `received`.
json::object waitForConnection(const std::string& node_ip, uint64_t received) {
  json::object out;
  bool seen = waitFor([&] {
    out = parsed(admin(node_ip, "GET", "/connections"));
    const auto* list = out.if_contains("connections");
    return list != nullptr && list->as_array().size() == 1 &&
           list->as_array()[0].as_object().at("received_bytes").to_number<uint64_t>() == received;
  });
  EXPECT_TRUE(seen) << json::serialize(out);
  return seen ? out.at("connections").as_array()[0].as_object() : json::object{};
}

TEST_F(AdminApiTest, ConnectionsShowsALiveConnectionWithItsPeerAndBytesOnBothNodes) {
  AppServer app("127.0.2.10", kAppPort, AppServer::echo);
  int fd = connectOutbound("127.0.1.10", "127.0.2.10", kAppPort);
  ASSERT_GE(fd, 0);
  setRecvTimeout(fd, std::chrono::seconds(10));
  ASSERT_TRUE(echo(fd, 1000));
  ASSERT_TRUE(echo(fd, 234));

  json::object c = waitForConnection("127.0.1.1", 1234);
  ASSERT_FALSE(c.empty());
  EXPECT_EQ(c.at("direction").as_string(), "outbound");
  EXPECT_EQ(std::string(c.at("source").as_string()).rfind("127.0.1.10:", 0), 0u) << c;
  EXPECT_EQ(c.at("destination").as_string(), "127.0.2.10:8080");
  EXPECT_EQ(c.at("peer_identity").as_string(), "spiffe://cluster.local/ns/default/sa/server");
  EXPECT_EQ(c.at("sent_bytes").to_number<uint64_t>(), 1234u);
  EXPECT_GE(c.at("age_ms").to_number<int64_t>(), 0);
  json::object all = parsed(admin("127.0.1.1", "GET", "/connections"));
  EXPECT_EQ(all.at("total").to_number<int>(), 1);
  EXPECT_EQ(all.at("omitted").to_number<int>(), 0);

  // n2 sees it inbound: the client's bytes are what it sent to the workload.
  json::object ic = waitForConnection("127.0.2.1", 1234);
  ASSERT_FALSE(ic.empty());
  EXPECT_EQ(ic.at("direction").as_string(), "inbound");
  EXPECT_EQ(ic.at("sent_bytes").to_number<uint64_t>(), 1234u);
  EXPECT_EQ(ic.at("peer_identity").as_string(), "spiffe://cluster.local/ns/default/sa/client");
  EXPECT_EQ(ic.at("destination").as_string(), "127.0.2.10:8080");

  // More bytes: the same connection's counters grow while it lives.
  ASSERT_TRUE(echo(fd, 4000));
  EXPECT_EQ(waitForConnection("127.0.1.1", 5234).at("sent_bytes").to_number<uint64_t>(), 5234u);

  ::close(fd);
  ASSERT_TRUE(waitFor([&] { return parsed(admin("127.0.1.1", "GET", "/connections")).at("total").to_number<int>() == 0; }));
}

TEST_F(AdminApiTest, ConnectionsAreBoundedByLimitAndSayHowManyWereLeftOut) {
  AppServer app("127.0.2.10", kAppPort, AppServer::echo);
  std::vector<int> fds;
  for (int i = 0; i < 3; ++i) {
    int fd = connectOutbound("127.0.1.10", "127.0.2.10", kAppPort);
    ASSERT_GE(fd, 0);
    setRecvTimeout(fd, std::chrono::seconds(10));
    ASSERT_TRUE(echo(fd, 10));
    fds.push_back(fd);
  }
  json::object out = parsed(admin("127.0.1.1", "GET", "/connections?limit=2"));
  EXPECT_EQ(out.at("total").to_number<int>(), 3);
  EXPECT_EQ(out.at("shown").to_number<int>(), 2);
  EXPECT_EQ(out.at("omitted").to_number<int>(), 1);
  EXPECT_EQ(out.at("connections").as_array().size(), 2u);
  // The oldest first.
  const auto& list = out.at("connections").as_array();
  EXPECT_GE(list[0].as_object().at("age_ms").to_number<int64_t>(), list[1].as_object().at("age_ms").to_number<int64_t>());

  Answer bad = admin("127.0.1.1", "GET", "/connections?limit=lots");
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(parsed(bad).at("error").as_string(), "limit: 'lots' is not a number from 1 to 100000");
  for (int fd : fds) ::close(fd);
}

TEST_F(AdminApiTest, LoggingShowsTheLevelAndPostChangesItAtRunTime) {
  Answer get = admin("127.0.2.1", "GET", "/logging");
  EXPECT_EQ(get.status, 200);
  EXPECT_EQ(parsed(get).at("level").as_string(), "error");

  Answer post = admin("127.0.2.1", "POST", "/logging?level=debug");
  EXPECT_EQ(post.status, 200) << post.body;
  EXPECT_EQ(parsed(post).at("level").as_string(), "debug");
  EXPECT_EQ(parsed(post).at("previous").as_string(), "error");
  EXPECT_EQ(common::logLevel(), common::LogLevel::kDebug);
  EXPECT_EQ(parsed(admin("127.0.2.1", "GET", "/logging")).at("level").as_string(), "debug");

  Answer bad = admin("127.0.2.1", "POST", "/logging?level=loud");
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(parsed(bad).at("error").as_string(),
            "level: unknown log level 'loud' (expected trace, debug, info, warn, error or off)");
  Answer missing = admin("127.0.2.1", "POST", "/logging");
  EXPECT_EQ(missing.status, 400);
  EXPECT_EQ(parsed(missing).at("error").as_string(), "POST /logging needs ?level=trace|debug|info|warn|error|off");
  EXPECT_EQ(common::logLevel(), common::LogLevel::kDebug) << "a refused change changes nothing";

  EXPECT_EQ(admin("127.0.2.1", "POST", "/logging?level=warn").status, 200);
  EXPECT_EQ(common::logLevel(), common::LogLevel::kWarn);
  // Other methods are named in the refusal.
  Answer put = admin("127.0.2.1", "PUT", "/logging?level=info");
  EXPECT_EQ(put.status, 405);
  EXPECT_NE(put.head.find("Allow: GET, POST"), std::string::npos) << put.head;
}

TEST_F(AdminApiTest, QuitQuitQuitIsPostOnlyAndDrainsBeforeExiting) {
  Answer get = admin("127.0.1.1", "GET", "/quitquitquit");
  EXPECT_EQ(get.status, 405);
  EXPECT_NE(get.head.find("Allow: POST"), std::string::npos) << get.head;
  EXPECT_EQ(get.body, "/quitquitquit serves POST, not GET\n");
  EXPECT_EQ(httpGet("127.0.1.1", 15021, "/healthz/ready"), 200) << "a GET stops nothing";

  AppServer app("127.0.2.10", kAppPort, AppServer::echo);
  int fd = connectOutbound("127.0.1.10", "127.0.2.10", kAppPort);
  ASSERT_GE(fd, 0);
  setRecvTimeout(fd, std::chrono::seconds(10));
  ASSERT_TRUE(echo(fd, 100));

  Answer quit = admin("127.0.1.1", "POST", "/quitquitquit");
  EXPECT_EQ(quit.status, 200);
  json::object body = parsed(quit);
  EXPECT_EQ(body.at("draining").as_bool(), true);
  EXPECT_EQ(body.at("connections_active").to_number<int>(), 1);
  // Draining: readiness says so, the live connection still works.
  std::string ready;
  ASSERT_TRUE(waitFor([&] { return httpGet("127.0.1.1", 15021, "/healthz/ready", &ready) == 503; }));
  EXPECT_EQ(ready, "draining\n");
  EXPECT_TRUE(echo(fd, 100));
  // Its last connection closed, ferryd stops: nothing answers any more.
  ::close(fd);
  EXPECT_TRUE(waitFor([&] { return admin("127.0.1.1", "GET", "/status").status == 0; }));
  EXPECT_EQ(httpGet("127.0.1.1", 15021, "/healthz/ready"), 0);
}

TEST_F(AdminApiTest, BrowsersCannotPostAndRebindingNamesAreRefused) {
  // What a page elsewhere can make a browser on the node send: a "simple" cross-origin POST
  // (no preflight), with its Origin and Sec-Fetch-* headers.
  Answer cross = admin("127.0.1.1", "POST", "/quitquitquit",
                       "Host: 127.0.1.1:15000\r\nOrigin: http://evil.example\r\nContent-Type: text/plain\r\n");
  EXPECT_EQ(cross.status, 403);
  EXPECT_EQ(cross.body, "a POST carrying Origin (a browser's) is refused: use ferryctl or curl\n");
  Answer fetch = admin("127.0.1.1", "POST", "/logging?level=off", "Host: 127.0.1.1\r\nSec-Fetch-Site: same-origin\r\n");
  EXPECT_EQ(fetch.status, 403);
  // DNS rebinding: the attacker's name, now resolving to the node, is in Host; GETs too (the
  // pages show ferryd's state).
  for (const char* host : {"evil.example:15000", "127.0.1.1.nip.io", "", "[::1", "127.0.1.1:x"}) {
    Answer rebound = admin("127.0.1.1", "GET", "/status", absl::StrCat("Host: ", host, "\r\n"));
    EXPECT_EQ(rebound.status, 403) << host;
    EXPECT_NE(rebound.body.find("is not an address"), std::string::npos) << rebound.body;
  }
  EXPECT_EQ(admin("127.0.1.1", "GET", "/status", "Connection: close\r\n").status, 403) << "no Host at all";
  // A simple POST (text/plain, a form's, or no type; no header of its own) is what a page can
  // send without a preflight, also from a browser that sends no Origin: refused. What needs
  // the preflight passes: Ferry-Admin, or a JSON type.
  for (const char* type : {"Content-Type: text/plain\r\n", "Content-Type: application/x-www-form-urlencoded\r\n", ""}) {
    Answer simple = admin("127.0.1.1", "POST", "/logging?level=off", absl::StrCat("Host: 127.0.1.1\r\n", type));
    EXPECT_EQ(simple.status, 403) << type;
    EXPECT_EQ(simple.body,
              "a POST needs the header 'Ferry-Admin: 1' (or Content-Type: application/json), which a web page cannot "
              "send without asking first: use ferryctl, or curl -H 'Ferry-Admin: 1'\n");
  }
  EXPECT_EQ(admin("127.0.1.1", "POST", "/logging?level=info", "Host: 127.0.1.1\r\nContent-Type: application/json\r\n").status,
            200);
  EXPECT_EQ(admin("127.0.1.1", "POST", "/logging?level=info", "Host: 127.0.1.1\r\nFerry-Admin: yes\r\n").status, 200);
  // Each refusal counted by its reason: 2 browsers, 3 simple POSTs, 6 Hosts.
  std::string metrics;
  ASSERT_EQ(httpGet("127.0.1.1", 15020, "/metrics", &metrics), 200);
  EXPECT_NE(metrics.find("ferry_admin_requests_refused_total{reason=\"browser\"} 2"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("ferry_admin_requests_refused_total{reason=\"simple_post\"} 3"), std::string::npos);
  EXPECT_NE(metrics.find("ferry_admin_requests_refused_total{reason=\"host\"} 6"), std::string::npos);
  // What tools send: an address or localhost, with or without a port.
  for (const char* host : {"127.0.1.1", "127.0.1.1:15000", "localhost:15000", "LOCALHOST", "[::1]:15000"}) {
    EXPECT_EQ(admin("127.0.1.1", "GET", "/status", absl::StrCat("Host: ", host, "\r\n")).status, 200) << host;
  }
  // Still running and serving: nothing of the refused requests took effect.
  Answer level = admin("127.0.1.1", "GET", "/logging");
  EXPECT_EQ(level.status, 200);
  EXPECT_EQ(level.body.find("\"off\""), std::string::npos) << level.body;
  EXPECT_EQ(httpGet("127.0.1.1", 15021, "/healthz/ready"), 200);
}

TEST_F(AdminApiTest, StatusAndConfigDumpAreJsonWithTheLiveStateAndNoKeys) {
  json::object status = parsed(admin("127.0.2.1", "GET", "/status"));
  EXPECT_EQ(status.at("ready").as_bool(), true);
  EXPECT_EQ(status.at("draining").as_bool(), false);
  EXPECT_EQ(status.at("node").as_string(), "n2");
  EXPECT_EQ(status.at("version").as_string(), "0.1.0");
  EXPECT_EQ(status.at("workers").to_number<int>(), 2);
  EXPECT_EQ(status.at("connections_active").to_number<int>(), 0);
  EXPECT_EQ(status.at("datapath").as_string(), "disabled");
  EXPECT_GE(status.at("uptime_seconds").to_number<int64_t>(), 0);

  Answer dump = admin("127.0.2.1", "GET", "/config_dump");
  ASSERT_EQ(dump.status, 200);
  EXPECT_NE(dump.head.find("Content-Type: application/json"), std::string::npos) << dump.head;
  EXPECT_EQ(dump.body.find("PRIVATE KEY"), std::string::npos);
  json::object d = parsed(dump);
  const auto& config = d.at("config").as_object();
  EXPECT_EQ(config.at("node").as_string(), "n2");
  EXPECT_EQ(config.at("trust_domain").as_string(), "cluster.local");
  EXPECT_EQ(config.at("listen").as_object().at("admin").as_string(), "127.0.2.1:15000");
  EXPECT_EQ(config.at("timeouts").as_object().at("connect").as_string(), "10s");
  EXPECT_EQ(config.at("original_destination").as_string(), "proxy_protocol");
  EXPECT_EQ(d.at("runtime").as_object().at("log_level").as_string(), "error");
  EXPECT_EQ(d.at("workloads").as_object().at("count").to_number<int>(), 5);
  EXPECT_EQ(d.at("workloads").as_object().at("local").to_number<int>(), 2);
  const auto& certs = d.at("certificates").as_object();
  EXPECT_EQ(certs.at("source").as_string(), "files");
  ASSERT_EQ(certs.at("roots").as_array().size(), 1u);
  EXPECT_FALSE(certs.at("roots").as_array()[0].as_object().at("serial").as_string().empty());
  // n2's local workloads: s1 (sa server) and s2 (sa strict).
  const auto& held = certs.at("certificates").as_array();
  ASSERT_EQ(held.size(), 2u) << json::serialize(certs);
  EXPECT_EQ(held[0].as_object().at("identity").as_string(), "spiffe://cluster.local/ns/default/sa/server");
  EXPECT_EQ(held[1].as_object().at("identity").as_string(), "spiffe://cluster.local/ns/default/sa/strict");
  EXPECT_EQ(held[0].as_object().at("uri_sans").as_array()[0].as_string(), "spiffe://cluster.local/ns/default/sa/server");
  EXPECT_FALSE(held[0].as_object().at("not_after").as_string().empty());
  EXPECT_TRUE(d.at("policies").as_object().contains("policies"));
  EXPECT_EQ(d.at("datapath").as_object().at("enabled").as_bool(), false);
  EXPECT_EQ(d.at("reload").as_object().at("applied").to_number<int>(), 0);
  // Every key of the configuration (reload.h's table, which its own test ties to Config) is
  // in the dump, at its dotted path: the dump cannot drift from the keys again.
#define FERRY_KEY_NAME(name, kind, member) name,
  for (std::string key : {FERRY_CONFIG_KEYS(FERRY_KEY_NAME)}) {
#undef FERRY_KEY_NAME
    const json::object* at = &config;
    std::string walked;
    for (const std::string& part : std::vector<std::string>(absl::StrSplit(key, '.'))) {
      walked = walked.empty() ? part : absl::StrCat(walked, ".", part);
      const json::value* next = at == nullptr ? nullptr : at->if_contains(part);
      ASSERT_NE(next, nullptr) << "/config_dump has no " << walked << " (key " << key << ")";
      at = next->if_object();
    }
  }

  // The text pages scripts read stay text; their JSON is asked for.
  std::string text;
  ASSERT_EQ(httpGet("127.0.2.1", 15000, "/workloads", &text), 200);
  EXPECT_NE(text.find("default/s1 node=n2 ips=127.0.2.10 identity=spiffe://cluster.local/ns/default/sa/server "
                      "hbone=true local\n"),
            std::string::npos)
      << text;
  json::object workloads = parsed(admin("127.0.2.1", "GET", "/workloads?format=json"));
  EXPECT_EQ(workloads.at("count").to_number<int>(), 5);
  EXPECT_EQ(workloads.at("workloads").as_array()[0].as_object().at("name").as_string(), "b1");  // sorted
  ASSERT_EQ(httpGet("127.0.2.1", 15000, "/datapath", &text), 200);
  EXPECT_EQ(text, "datapath: disabled\n");
  Answer bad = admin("127.0.2.1", "GET", "/certs?format=yaml");
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(parsed(bad).at("error").as_string(), "format: 'yaml' is not served (text or json)");
}

// This process's listeners on port 15000 (both nodes' admin endpoints) are bound to loopback
// addresses, and a configuration asking for another address is refused.
TEST_F(AdminApiTest, AdminListenerIsBoundToLoopbackOnly) {
  // The sockets of this process, by inode (/proc/net/tcp lists the whole netns).
  std::set<std::string> mine;
  for (const auto& fd : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    auto target = std::filesystem::read_symlink(fd.path(), ec).string();
    if (!ec && target.rfind("socket:[", 0) == 0) mine.insert(target.substr(8, target.size() - 9));
  }
  auto listeners = [&](const char* table) {
    std::vector<std::string> out;  // local addresses, hex
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >> inode;
      auto colon = local.find(':');
      if (state == "0A" && local.substr(colon + 1) == "3A98" && mine.count(inode) != 0) {
        out.push_back(local.substr(0, colon));
      }
    }
    return out;
  };
  auto v4 = listeners("/proc/self/net/tcp");
  ASSERT_EQ(v4.size(), 2u);
  // Little-endian hex: 127.0.N.1 reads 0100N07F.
  for (const auto& address : v4) EXPECT_EQ(address.substr(6), "7F") << address;
  EXPECT_TRUE(listeners("/proc/self/net/tcp6").empty());

  std::string yaml = files_.configYaml("n1");
  yaml.replace(yaml.find("admin: 127.0.1.1:15000"), std::string("admin: 127.0.1.1:15000").size(), "admin: 0.0.0.0:15000");
  auto refused = config::parseConfig(yaml, "n1.yaml");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("listen.admin: '0.0.0.0:15000' is not a loopback address"),
            std::string::npos)
      << refused.status();
}

}  // namespace
}  // namespace ferry::testing
