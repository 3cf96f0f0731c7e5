// Upgrades and restarts that drop nothing (docs/operations.md, "Upgrades and restarts"):
// real ferryd processes for both nodes hand their listeners to the next generation while
// long-lived connections echo and new ones keep coming; a successor that fails after taking
// the listeners leaves the running ferryd serving.
#include <signal.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "proxy/common/readiness_file.h"
#include "proxy/identity/ca.h"
#include "proxy/server/handover.h"
#include "tests/integration/loopback_lab.h"

namespace ferry::testing {
namespace {

constexpr uint16_t kAppPort = 8080;
constexpr const char* kClientPod = "127.0.1.10";  // c1 on n1
constexpr const char* kServerPod = "127.0.2.10";  // s1 on n2

std::string nodeIp(const std::string& node) { return node == "n1" ? "127.0.1.1" : "127.0.2.1"; }

// The pid of the ferryd that answers on `node`'s admin port (/status; 0 when none answers).
int servingPid(const std::string& node) {
  std::string body;
  if (httpGet(nodeIp(node), 15000, "/status", &body) != 200) return 0;
  auto pos = body.find("\"pid\":");
  return pos == std::string::npos ? 0 : std::atoi(body.c_str() + pos + 6);
}

// A metric of the ferryd that answers on `node`'s metrics port (-1 when none answers).
double metricOf(const std::string& node, const std::string& series) {
  std::string body;
  if (httpGet(nodeIp(node), 15020, "/metrics", &body) != 200) return -1;
  auto pos = body.find("\n" + series + " ");
  if (pos == std::string::npos) return -1;
  return std::strtod(body.c_str() + pos + series.size() + 2, nullptr);
}

class HandoverTest : public ::testing::Test {
 protected:
  std::string extra(const std::string& node, const std::string& tag, const std::string& more = "") const {
    return "handover: {socket: " + files_.dir() + "/" + node + "-handover.sock, deadline: 2m, readiness_file: " +
           readinessFile(node, tag) + more + "}\nlog_level: info\n";
  }
  // Each generation's own (a container's folder in Kubernetes).
  std::string readinessFile(const std::string& node, const std::string& tag) const {
    return files_.dir() + "/" + node + "-" + tag + ".ready";
  }
  common::ReadinessVerdict probe(const std::string& node, const std::string& tag, bool live = false) const {
    return common::probeReadinessFile(readinessFile(node, tag), std::chrono::seconds(10), live,
                                      std::chrono::system_clock::now());
  }
  std::unique_ptr<FerrydProcess> start(const std::string& node, const std::string& tag) {
    return std::make_unique<FerrydProcess>(FERRYD_BINARY, files_, node, extra(node, tag), tag);
  }
  static bool bothNodesReady() {
    return waitFor([] { return httpGet("127.0.1.1", 15021, "/healthz/ready") == 200 &&
                               httpGet("127.0.2.1", 15021, "/healthz/ready") == 200; });
  }
  // The next generation of `node` took over: true once only it answers on the node's admin
  // port (a ferryd answers there once its start-up is done; the one it took over from
  // stops accepting then), false when it exited first.
  static bool servesAfter(const std::string& node, FerrydProcess& next) {
    return waitFor([&] { return servingPid(node) == next.pid() || next.waitExit(std::chrono::milliseconds(0)) != -1; },
                   std::chrono::seconds(20)) &&
           next.running() && servingPid(node) == next.pid();
  }

  LabFiles files_;
};

// One long-lived connection through both nodes: a distinct pattern each round, echoed back.
struct LongLived {
  int fd = -1;
  int index = 0;
  int round = 0;
  bool roundTrip() {
    std::string out = "long-lived " + std::to_string(index) + " round " + std::to_string(round++) + "\n";
    std::string back(out.size(), '\0');
    return sendAll(fd, out.data(), out.size()) && recvExact(fd, back.data(), back.size()) && back == out;
  }
};

// New connections one after another until stopped: each connects, sends 100 bytes and reads
// them back. Counts the failures and keeps the longest one.
struct NewConnections {
  std::atomic<bool> stop{false};
  std::atomic<int> done{0}, failed{0};
  std::atomic<int64_t> longest_us{0};
  std::string first_failure;  // written by the thread, read after finish()
  std::thread thread;
  void start() {
    thread = std::thread([this] {
      std::string out(100, 'n');
      while (!stop.load()) {
        auto t0 = std::chrono::steady_clock::now();
        int fd = connectOutbound(kClientPod, kServerPod, kAppPort);
        bool ok = fd >= 0;
        const char* step = "connect";
        if (ok) {
          setRecvTimeout(fd, std::chrono::seconds(10));
          std::string back(out.size(), '\0');
          step = "send";
          ok = sendAll(fd, out.data(), out.size());
          step = "echo";
          ok = ok && recvExact(fd, back.data(), back.size()) && back == out;
          ::close(fd);
        }
        if (!ok && first_failure.empty()) first_failure = std::string(step) + ": " + std::strerror(errno);
        auto us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count();
        int64_t seen = longest_us.load();
        while (us > seen && !longest_us.compare_exchange_weak(seen, us)) {
        }
        (ok ? done : failed).fetch_add(1);
      }
    });
  }
  void finish() {
    stop = true;
    if (thread.joinable()) thread.join();
  }
  ~NewConnections() { finish(); }
};

TEST_F(HandoverTest, UpgradesOfBothNodesCarryEveryConnectionAndLoseNoNewOne) {
  AppServer app(kServerPod, kAppPort, AppServer::echo);
  std::vector<std::unique_ptr<FerrydProcess>> n1, n2;  // generations, oldest first
  n1.push_back(start("n1", "gen0"));
  n2.push_back(start("n2", "gen0"));
  ASSERT_TRUE(bothNodesReady())
      << n1[0]->log() << n2[0]->log();

  constexpr int kLongLived = 20;
  std::vector<LongLived> long_lived(kLongLived);
  for (int i = 0; i < kLongLived; ++i) {
    long_lived[i].index = i;
    long_lived[i].fd = connectOutbound(kClientPod, kServerPod, kAppPort);
    ASSERT_GE(long_lived[i].fd, 0);
    setRecvTimeout(long_lived[i].fd, std::chrono::seconds(10));
    ASSERT_TRUE(long_lived[i].roundTrip());
  }
  auto everyLongLivedEchoes = [&] {
    int bad = 0;
    for (auto& l : long_lived) bad += !l.roundTrip();
    return bad;
  };

  NewConnections fresh;
  fresh.start();
  ASSERT_TRUE(waitFor([&] { return fresh.done.load() >= 20; }));

  // n2, then n1, then both at once; the long-lived connections stay on the first generation.
  const std::vector<std::vector<std::string>> upgrades = {{"n2"}, {"n1"}, {"n1", "n2"}};
  int generation = 0;
  for (const auto& nodes : upgrades) {
    ++generation;
    for (const auto& node : nodes) {
      auto& gens = node == "n1" ? n1 : n2;
      gens.push_back(start(node, "gen" + std::to_string(generation)));
    }
    for (const auto& node : nodes) {
      auto& gens = node == "n1" ? n1 : n2;
      ASSERT_TRUE(servesAfter(node, *gens.back())) << gens.back()->log() << gens[gens.size() - 2]->log();
    }
    int done = fresh.done.load();
    ASSERT_TRUE(waitFor([&] { return fresh.done.load() >= done + 20; })) << "new connections after the upgrade";
    EXPECT_EQ(everyLongLivedEchoes(), 0) << "after upgrading " << nodes.back();
  }
  // A retiring generation ignores SIGTERM (a pod's, once its successor is ready).
  n2[0]->signal(SIGTERM);
  EXPECT_EQ(n2[0]->waitExit(std::chrono::milliseconds(500)), -1) << n2[0]->log();
  EXPECT_EQ(everyLongLivedEchoes(), 0) << "after SIGTERM to the retiring generation";
  // Each generation's readiness file answers for it, while one readiness listener serves both.
  auto retiring = probe("n2", "gen0");
  EXPECT_FALSE(retiring.pass);
  EXPECT_EQ(retiring.message.rfind("retiring: ferryd pid " + std::to_string(n2[1]->pid()) + " serves; this one carries ", 0),
            0u) << retiring.message;
  EXPECT_TRUE(probe("n2", "gen0", /*live=*/true).pass);
  EXPECT_TRUE(waitFor([&] { return probe("n2", "gen3").pass; })) << probe("n2", "gen3").message;

  fresh.finish();
  if (fresh.failed.load() != 0) {
    // What the ferryds said about it: every line but the successful connections' records.
    for (auto* gens : {&n1, &n2}) {
      for (auto& g : *gens) {
        std::string log = g->log();
        std::istringstream lines(log);
        for (std::string line; std::getline(lines, line);) {
          if (line.find("reason=ok") == std::string::npos) std::printf("pid %d: %s\n", g->pid(), line.c_str());
        }
      }
    }
  }
  EXPECT_EQ(fresh.failed.load(), 0) << "of " << fresh.done.load() + fresh.failed.load() << " new connections; the first "
                                    << fresh.first_failure;
  std::printf("handover: %d new connections across 4 handovers per node pair, %d failed, longest %.1f ms\n",
              fresh.done.load(), fresh.failed.load(), fresh.longest_us.load() / 1000.0);
  RecordProperty("longest_new_connection_us", std::to_string(fresh.longest_us.load()));

  // The generations between the first and the last carried only short connections: they
  // have exited. The first exits once its long-lived connections close.
  for (auto* gens : {&n1, &n2}) {
    EXPECT_EQ((*gens)[1]->waitExit(std::chrono::seconds(20)), 0) << (*gens)[1]->log();
    EXPECT_TRUE((*gens)[0]->running());
  }
  for (auto& l : long_lived) ::close(l.fd);
  for (auto* gens : {&n1, &n2}) {
    EXPECT_EQ((*gens)[0]->waitExit(std::chrono::seconds(20)), 0) << (*gens)[0]->log();
    EXPECT_TRUE(gens->back()->running()) << gens->back()->log();
  }
  EXPECT_TRUE(waitFor([] { return metricOf("n2", "ferry_handover_previous_generation_pid") == 0; }));
  EXPECT_EQ(probe("n2", "gen0", /*live=*/true).message,
            "no readiness file " + readinessFile("n2", "gen0") + ": ferryd has not started or has exited")
      << "a generation that exited takes its readiness file with it";
  EXPECT_EQ(metricOf("n2", "ferry_handovers_total{result=\"taken\"}"), 1);
}

TEST_F(HandoverTest, ASuccessorThatDiesAfterTakingTheListenersLeavesTheRunningOneServing) {
  AppServer app(kServerPod, kAppPort, AppServer::echo);
  auto n1 = start("n1", "gen0");
  auto n2 = start("n2", "gen0");
  ASSERT_TRUE(bothNodesReady())
      << n1->log() << n2->log();
  {
    // The successor's side of the protocol, ending where a new ferryd that crashed would:
    // it holds every listener, and goes without saying ready.
    auto taken = server::handover::takeOver(files_.dir() + "/n2-handover.sock", std::chrono::seconds(5));
    ASSERT_TRUE(taken.ok()) << taken.status();
    ASSERT_TRUE(taken->has_value()) << n2->log();
    EXPECT_EQ((*taken)->old_pid, n2->pid());
    size_t hbone = 0;
    for (const auto& s : (*taken)->sockets) hbone += s.role == server::handover::Role::kHbone;
    EXPECT_EQ(hbone, 2u * 2u) << "two workers, two pod addresses on n2";
  }
  ASSERT_TRUE(waitFor([] { return metricOf("n2", "ferry_handovers_total{result=\"failed\"}") == 1; })) << n2->log();
  for (int i = 0; i < 20; ++i) {
    int fd = connectOutbound(kClientPod, kServerPod, kAppPort);
    ASSERT_GE(fd, 0);
    setRecvTimeout(fd, std::chrono::seconds(10));
    char back[3];
    EXPECT_TRUE(sendAll(fd, "abc", 3) && recvExact(fd, back, 3)) << "connection " << i << "\n" << n2->log();
    ::close(fd);
  }
  // A real next generation still takes over afterwards.
  auto next = start("n2", "gen1");
  EXPECT_TRUE(servesAfter("n2", *next)) << next->log() << n2->log();
  EXPECT_EQ(n2->waitExit(std::chrono::seconds(20)), 0) << n2->log();
}

// Version skew on a node (docs/operations.md, "Before an upgrade"): a ferryd that speaks
// another handover protocol version gets nothing, from either side. A successor's hello of
// version 2 is refused and the running ferryd goes on serving; a new ferryd offered the
// sockets in version 2 exits 1 without binding anything.
TEST_F(HandoverTest, AnotherHandoverProtocolVersionIsRefusedAndNothingIsDropped) {
  namespace ho = server::handover;
  auto unixSocket = [](const std::string& path, bool listen) {
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
    int rc = listen ? ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) | ::listen(fd, 1)
                    : ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    EXPECT_EQ(rc, 0) << path << ": " << std::strerror(errno);
    return fd;
  };
  auto soon = [] { return std::chrono::steady_clock::now() + std::chrono::seconds(5); };

  // 1. The running side is the older one: a version-2 "ferryd" asks n2 for its sockets.
  AppServer app(kServerPod, kAppPort, AppServer::echo);
  auto n1 = start("n1", "gen0");
  auto n2 = start("n2", "gen0");
  ASSERT_TRUE(bothNodesReady()) << n1->log() << n2->log();
  {
    int link = unixSocket(files_.dir() + "/n2-handover.sock", false);
    ho::Message hello;
    hello.type = ho::Message::Type::kHello;
    hello.version = 2;
    hello.pid = ::getpid();
    hello.name = "fy-handover-v2";
    ASSERT_TRUE(ho::sendMessage(link, hello, soon()).ok());
    ho::FrameReader reader;
    auto offer = ho::receiveMessage(link, reader, soon());
    EXPECT_FALSE(offer.ok()) << "no sockets for another protocol version";
    ::close(link);
  }
  EXPECT_TRUE(waitFor([&] { return n2->log().find("handover protocol version 2 (this ferryd speaks 1)") !=
                                   std::string::npos; }))
      << n2->log();
  EXPECT_EQ(servingPid("n2"), n2->pid());
  EXPECT_EQ(metricOf("n2", "ferry_handovers_total{result=\"given\"}"), 0);
  int fd = connectOutbound(kClientPod, kServerPod, kAppPort);
  ASSERT_GE(fd, 0);
  setRecvTimeout(fd, std::chrono::seconds(10));
  char back[3];
  EXPECT_TRUE(sendAll(fd, "abc", 3) && recvExact(fd, back, 3)) << "n2 still serves";
  ::close(fd);

  // 2. The new side is the older one: a version-2 "ferryd" runs on the node's handover
  // socket and offers its sockets in version 2.
  const std::string path = files_.dir() + "/fy-v2-handover.sock";
  int listener = unixSocket(path, true);
  std::thread old_side([&] {
    pollfd p{listener, POLLIN, 0};
    if (::poll(&p, 1, 20000) != 1) return;
    int link = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    ho::FrameReader reader;
    if (ho::receiveMessage(link, reader, soon()).ok()) {
      ho::Message offer;
      offer.type = ho::Message::Type::kOffer;
      offer.version = 2;
      offer.pid = ::getpid();
      ho::sendMessage(link, offer, soon()).IgnoreError();
    }
    ::close(link);
  });
  FerrydProcess next(FERRYD_BINARY, files_, "n2",
                     "handover: {socket: " + path + ", readiness_file: " + readinessFile("n2", "v2") + "}\n", "v2");
  EXPECT_EQ(next.waitExit(std::chrono::seconds(20)), 1) << next.log();
  old_side.join();
  ::close(listener);
  EXPECT_NE(next.log().find("handover protocol version 2 (this ferryd speaks 1)"), std::string::npos) << next.log();
  EXPECT_EQ(servingPid("n2"), n2->pid()) << "the new one bound nothing";
}

// A successor accepts nothing before it is ready: here its CA is missing (identity.source ca),
// as a Kubernetes source that has not listed yet would keep it waiting. The running ferryd
// serves every new connection meanwhile; once the CA appears the successor takes over.
TEST_F(HandoverTest, ASuccessorAcceptsNothingUntilItIsReadyAndThenTakesOver) {
  AppServer app(kServerPod, kAppPort, AppServer::echo);
  auto n1 = start("n1", "gen0");
  auto n2 = start("n2", "gen0");
  ASSERT_TRUE(bothNodesReady())
      << n1->log() << n2->log();
  const std::string ca_cert = files_.caDir() + "/n2-next-ca.pem", ca_key = files_.caDir() + "/n2-next-ca.key";
  auto next = std::make_unique<FerrydProcess>(
      FERRYD_BINARY, files_, "n2",
      extra("n2", "gen1") + "identity: {source: ca, ca_cert: " + ca_cert + ", ca_key: " + ca_key + ", poll_interval: 50ms}\n",
      "gen1");
  ASSERT_TRUE(waitFor([&] { return probe("n2", "gen1").message.rfind("starting (not ready: ", 0) == 0; }))
      << probe("n2", "gen1").message << next->log();
  auto echo = [](int i) {
    int fd = connectOutbound(kClientPod, kServerPod, kAppPort);
    if (fd < 0) return false;
    setRecvTimeout(fd, std::chrono::seconds(10));
    std::string out = "waiting " + std::to_string(i), back(out.size(), '\0');
    bool ok = sendAll(fd, out.data(), out.size()) && recvExact(fd, back.data(), back.size()) && back == out;
    ::close(fd);
    return ok;
  };
  for (int i = 0; i < 20; ++i) EXPECT_TRUE(echo(i)) << "connection " << i << " while the successor waits\n" << n2->log();
  EXPECT_TRUE(probe("n2", "gen0").pass) << probe("n2", "gen0").message;
  EXPECT_EQ(next->log().find("direction=inbound"), std::string::npos) << "the waiting successor accepted a connection";
  EXPECT_NE(next->log().find("serves until this one is ready"), std::string::npos) << next->log();
  // The CA appears: the successor becomes ready and takes over.
  auto root = identity::CertificateAuthority::load(files_.caDir() + "/ca.pem", files_.caDir() + "/ca.key");
  ASSERT_TRUE(root.ok()) << root.status();
  auto inter = root->issueIntermediate(std::chrono::hours(1));
  ASSERT_TRUE(inter.ok()) << inter.status();
  ASSERT_TRUE(inter->writePem(ca_cert, ca_key).ok());
  EXPECT_TRUE(servesAfter("n2", *next)) << next->log() << n2->log();
  EXPECT_TRUE(waitFor([&] { return probe("n2", "gen1").pass; })) << probe("n2", "gen1").message;
  EXPECT_EQ(n2->waitExit(std::chrono::seconds(20)), 0) << n2->log();
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(echo(100 + i)) << "connection " << i << " after the takeover\n" << next->log();
  EXPECT_NE(next->log().find("direction=inbound"), std::string::npos) << next->log();
}

// In a container a ferryd that exits is restarted by the kubelet, and the restarted one would
// take the node back: with handover.wait_for_signal a retired ferryd that holds nothing waits
// for SIGTERM (the deletion of its pod) and only then exits.
TEST_F(HandoverTest, ARetiredFerrydThatMustWaitForItsSignalExitsOnlyAtSigterm) {
  AppServer app(kServerPod, kAppPort, AppServer::echo);
  auto n1 = start("n1", "gen0");
  auto n2 = std::make_unique<FerrydProcess>(FERRYD_BINARY, files_, "n2",
                                            extra("n2", "gen0", ", wait_for_signal: true"), "gen0");
  ASSERT_TRUE(bothNodesReady()) << n1->log() << n2->log();
  auto next = start("n2", "gen1");
  ASSERT_TRUE(servesAfter("n2", *next)) << next->log() << n2->log();
  // It holds nothing: it says so and stays.
  ASSERT_TRUE(waitFor([&] { return probe("n2", "gen0").message.find("holds nothing and exits at SIGTERM") != std::string::npos; }))
      << probe("n2", "gen0").message << n2->log();
  EXPECT_TRUE(n2->running());
  EXPECT_TRUE(probe("n2", "gen0", /*live=*/true).pass) << "alive: the kubelet must not restart it";
  n2->signal(SIGTERM);
  EXPECT_EQ(n2->waitExit(std::chrono::seconds(10)), 0) << n2->log();
  EXPECT_TRUE(next->running());
  EXPECT_TRUE(probe("n2", "gen1").pass) << probe("n2", "gen1").message;
}

}  // namespace
}  // namespace ferry::testing
