// The end of a connection as the application sees it when ferryd stops: a drain that
// reaches its deadline or a ferryd killed with SIGKILL resets every connection it carried
// (never a FIN that looks like a complete reply), a graceful end still gives a FIN with
// every byte; readiness says `draining` during a drain; a peer ferryd that is down is
// named at once. And ferryd never connects to itself (issue 12, findings 4 and 5).
#include <arpa/inet.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "proxy/session/proxy_protocol.h"
#include "tests/integration/loopback_lab.h"

namespace ferry::testing {
namespace {

using session::CloseReason;
using session::Direction;

constexpr uint16_t kAppPort = 8080;
constexpr const char* kClientPod = "127.0.1.10";   // c1 on n1
constexpr const char* kServerPod = "127.0.2.10";   // s1 on n2
constexpr const char* kNonMesh = "127.0.3.10";     // no workload: passthrough

// What the next recv on `fd` says: bytes, 0 for a FIN, or -errno (a receive timeout shows
// as -EAGAIN).
ssize_t recvResult(int fd, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  setRecvTimeout(fd, timeout);
  char buf[4096];
  ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
  return n < 0 ? -errno : n;
}

// A server that sends the first part of a reply and then waits for the client to end:
// an unframed protocol, where a FIN would mean "that was all". Records how its side ended.
struct PartialReplyServer {
  static constexpr size_t kPart = 1000;
  std::atomic<int> ended_by_reset{0};
  std::atomic<int> ended_by_fin{0};
  AppServer::Behaviour behaviour() {
    return [this](int fd) {
      std::string part(kPart, 'p');
      sendAll(fd, part.data(), part.size());
      char buf[4096];
      for (;;) {
        ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
        if (n > 0) continue;
        if (n == 0) ++ended_by_fin;
        else if (errno == ECONNRESET) ++ended_by_reset;
        return;
      }
    };
  }
};

// Opens a connection from c1 to `dst`:8080 and reads the first part of the reply.
int openPartial(const std::string& dst) {
  int fd = connectOutbound(kClientPod, dst, kAppPort);
  if (fd < 0) return -1;
  std::string part(PartialReplyServer::kPart, '\0');
  setRecvTimeout(fd, std::chrono::seconds(10));
  if (!recvExact(fd, part.data(), part.size())) {
    ::close(fd);
    return -1;
  }
  return fd;
}

size_t openDescriptors() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

class LifecycleTest : public LoopbackNodesTest {};

TEST_F(LifecycleTest, DrainDeadlineResetsLiveConnectionsMidReplyAndCountsThemShutdown) {
  startNodes("timeouts: {drain: 1s}\n");
  PartialReplyServer mesh_app, plain_app;
  AppServer mesh(kServerPod, kAppPort, mesh_app.behaviour());
  AppServer plain(kNonMesh, kAppPort, plain_app.behaviour());
  int tunnelled = openPartial(kServerPod);
  int passed = openPartial(kNonMesh);
  ASSERT_GE(tunnelled, 0);
  ASSERT_GE(passed, 0);

  n1_->server().shutdown();
  // Both connections are mid-reply when the deadline passes: each must see a reset.
  EXPECT_EQ(recvResult(tunnelled), -ECONNRESET) << "tunnelled connection";
  EXPECT_EQ(recvResult(passed), -ECONNRESET) << "passthrough connection";
  ::close(tunnelled);
  ::close(passed);

  EXPECT_TRUE(waitFor([&] { return n1_->closed(Direction::kOutbound, CloseReason::kShutdown) == 2; }))
      << n1_->closed(Direction::kOutbound, CloseReason::kShutdown);
  EXPECT_EQ(n1_->closed(Direction::kOutbound, CloseReason::kInternal), 0u);
  // The far ends are reset too (RST_STREAM to n2, a RST on the passthrough leg).
  EXPECT_TRUE(waitFor([&] { return mesh_app.ended_by_reset.load() == 1 && plain_app.ended_by_reset.load() == 1; }));
  EXPECT_EQ(mesh_app.ended_by_fin.load() + plain_app.ended_by_fin.load(), 0);
}

TEST_F(LifecycleTest, ReadinessAnswers503DrainingWhileDraining) {
  startNodes("timeouts: {drain: 2s}\n");
  PartialReplyServer app;
  AppServer server(kServerPod, kAppPort, app.behaviour());
  int fd = openPartial(kServerPod);  // keeps the drain from ending at once
  ASSERT_GE(fd, 0);
  std::string body;
  ASSERT_EQ(httpGet("127.0.1.1", 15021, "/healthz/ready", &body), 200);
  n1_->server().shutdown();
  int status = 0;
  EXPECT_TRUE(waitFor([&] {
    status = httpGet("127.0.1.1", 15021, "/healthz/ready", &body);
    return status == 503;
  }, std::chrono::seconds(1))) << "status " << status << " (0: the probe was refused)";
  EXPECT_EQ(body, "draining\n");
  EXPECT_EQ(n1_->metric("ferry_ready"), 0);
  ::close(fd);
}

TEST_F(LifecycleTest, GracefulEndStillGivesTheApplicationAFinAndEveryByte) {
  startNodes();
  std::atomic<int> server_saw_fin{0};
  auto echo_then_fin = [&](int fd) {
    char buf[64 * 1024];
    for (;;) {
      ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n == 0) ++server_saw_fin;
      if (n <= 0) break;
      if (!sendAll(fd, buf, static_cast<size_t>(n))) break;
    }
    ::shutdown(fd, SHUT_WR);
  };
  AppServer mesh(kServerPod, kAppPort, echo_then_fin);
  AppServer plain(kNonMesh, kAppPort, echo_then_fin);
  std::string payload(1 << 20, 'x');
  for (const char* dst : {kServerPod, kNonMesh}) {
    int fd = connectOutbound(kClientPod, dst, kAppPort);
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(sendAll(fd, payload.data(), payload.size()));
    ::shutdown(fd, SHUT_WR);
    std::string back;
    setRecvTimeout(fd, std::chrono::seconds(10));
    EXPECT_TRUE(recvAll(fd, back)) << dst << ": " << strerror(errno);
    EXPECT_EQ(back.size(), payload.size()) << dst;
    ::close(fd);
  }
  EXPECT_EQ(server_saw_fin.load(), 2);
  EXPECT_TRUE(waitFor([&] { return n1_->closed(Direction::kOutbound, CloseReason::kOk) == 2; }));
}

TEST_F(LifecycleTest, PeerFerrydDownFailsAtOnceWithAReasonNamingThePeer) {
  // n2's ferryd is not running: nothing listens on s1's HBONE port, the connect is refused.
  ::testing::internal::CaptureStderr();
  n1_ = std::make_unique<Node>(files_, "n1", "log_level: warn\n");
  ASSERT_TRUE(n1_->ok());
  auto start = Clock::now();
  int fd = connectOutbound(kClientPod, kServerPod, kAppPort);
  ASSERT_GE(fd, 0);
  ssize_t result = recvResult(fd);
  auto took = Clock::now() - start;
  ASSERT_TRUE(waitFor([&] { return n1_->closed(Direction::kOutbound, CloseReason::kConnectFailed) == 1; }));
  n1_.reset();
  std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(result, -ECONNRESET);
  // The connect timeout is 10 s; a refusal must not wait for it.
  EXPECT_LT(took, std::chrono::seconds(2));
  EXPECT_NE(log.find("ferryd on node n2 (127.0.2.10:15008"), std::string::npos) << log;
  EXPECT_NE(log.find("refused"), std::string::npos) << log;
  EXPECT_EQ(log.find("NetworkPolicy"), std::string::npos) << "a refusal is not a policy drop: " << log;
  ::close(fd);
}

// n1's listeners in the lab: outbound, inbound plaintext, admin, metrics, readiness on
// 127.0.1.1, HBONE on each of its pods' addresses.
const std::vector<std::pair<std::string, uint16_t>> kN1Listeners = {
    {"127.0.1.1", 15001}, {"127.0.1.1", 15006}, {"127.0.1.1", 15000}, {"127.0.1.1", 15020},
    {"127.0.1.1", 15021}, {"127.0.1.10", 15008}, {"127.0.1.11", 15008}};

TEST_F(LifecycleTest, OutboundToAnyOfFerrydsOwnListenersIsRefusedWithoutConnectingToIt) {
  startNodes();
  uint64_t plaintext_before = n1_->stats().opened[static_cast<size_t>(Direction::kPlaintext)].load();
  for (const auto& [ip, port] : kN1Listeners) {
    int fd = connectOutbound(kClientPod, ip, port);
    ASSERT_GE(fd, 0);
    // Nothing more is sent: a send racing the reset would take its error, and the recv
    // would then see a closed socket (0) instead.
    EXPECT_EQ(recvResult(fd), -ECONNRESET) << ip << ":" << port;
    ::close(fd);
  }
  size_t n = kN1Listeners.size();
  EXPECT_TRUE(waitFor([&] { return n1_->stats().self_target_refused.load() == n; }));
  // The close is recorded just after the refusal is counted (and the reset sent).
  EXPECT_TRUE(waitFor([&] { return n1_->closed(Direction::kOutbound, CloseReason::kSelfTarget) == n; }))
      << n1_->closed(Direction::kOutbound, CloseReason::kSelfTarget);
  // ferryd accepted nothing more than the attacker's own connections.
  EXPECT_EQ(n1_->stats().opened[static_cast<size_t>(Direction::kOutbound)].load(), n);
  EXPECT_EQ(n1_->stats().opened[static_cast<size_t>(Direction::kPlaintext)].load(), plaintext_before);
  EXPECT_EQ(n1_->stats().passthrough_connections.load(), 0u);
  EXPECT_EQ(n1_->stats().hbone_connections_accepted.load() + n1_->stats().hbone_handshake_failures.load(), 0u);
  EXPECT_EQ(n1_->metric("ferry_self_target_refused_total"), static_cast<double>(n));
  EXPECT_TRUE(n1_->server().ready());
}

TEST_F(LifecycleTest, NestedProxyHeadersNamingFerrydDoNotConsumeDescriptors) {
  startNodes();
  size_t before = openDescriptors();
  // Each connection carries 600 PROXY headers, each naming n1's own outbound listener: on
  // the old code every header was one more pair of descriptors.
  constexpr int kAttackers = 10;
  constexpr int kDepth = 600;
  std::vector<int> fds;
  for (int i = 0; i < kAttackers; ++i) {
    int fd = connectOutbound(kClientPod, "127.0.1.1", 15001);
    ASSERT_GE(fd, 0);
    std::string nested;
    for (int d = 0; d < kDepth; ++d) {
      auto h = session::encodeProxyV2({boost::asio::ip::make_address(kClientPod), 40000},
                                      {boost::asio::ip::make_address("127.0.1.1"), 15001});
      nested.append(reinterpret_cast<const char*>(h.data()), h.size());
    }
    sendAll(fd, nested.data(), nested.size());
    fds.push_back(fd);
  }
  waitFor([&] { return n1_->stats().self_target_refused.load() == kAttackers; }, std::chrono::seconds(3));
  // Measured while the attackers still hold their connections.
  size_t during = openDescriptors();
  EXPECT_EQ(n1_->stats().self_target_refused.load(), static_cast<uint64_t>(kAttackers));
  EXPECT_LT(during, before + 2 * kAttackers + 20) << "before " << before << ", during " << during;
  for (int fd : fds) ::close(fd);
  EXPECT_EQ(n1_->stats().opened[static_cast<size_t>(Direction::kOutbound)].load(),
            static_cast<uint64_t>(kAttackers));
  // The node still serves.
  AppServer app(kServerPod, kAppPort, AppServer::echo);
  int fd = connectOutbound(kClientPod, kServerPod, kAppPort);
  ASSERT_GE(fd, 0);
  char back[2];
  ASSERT_TRUE(sendAll(fd, "ok", 2));
  EXPECT_TRUE(recvExact(fd, back, 2));
  ::close(fd);
}

// A real ferryd process (the built binary) for node n1, killed with SIGKILL while it
// carries a tunnelled and a passed-through connection.
TEST_F(LifecycleTest, KilledFerrydResetsEveryConnectionItCarried) {
  n2_ = std::make_unique<Node>(files_, "n2");
  ASSERT_TRUE(n2_->ok());
  FerrydProcess n1(FERRYD_BINARY, files_, "n1");
  ASSERT_TRUE(n1.running());
  ASSERT_TRUE(waitFor([] { return httpGet("127.0.1.1", 15021, "/healthz/ready") == 200; }))
      << n1.log();
  PartialReplyServer mesh_app, plain_app;
  AppServer mesh(kServerPod, kAppPort, mesh_app.behaviour());
  AppServer plain(kNonMesh, kAppPort, plain_app.behaviour());
  int tunnelled = openPartial(kServerPod);
  int passed = openPartial(kNonMesh);
  ASSERT_GE(tunnelled, 0) << n1.log();
  ASSERT_GE(passed, 0) << n1.log();

  n1.kill();
  EXPECT_EQ(recvResult(tunnelled), -ECONNRESET) << "tunnelled connection (accepted by the killed ferryd)";
  EXPECT_EQ(recvResult(passed), -ECONNRESET) << "passthrough connection (accepted by the killed ferryd)";
  ::close(tunnelled);
  ::close(passed);
  // The passthrough's upstream leg was ferryd's own socket: the server is reset too; the
  // tunnel's far end is reset by n2 when the tunnel dies.
  EXPECT_TRUE(waitFor([&] { return plain_app.ended_by_reset.load() == 1 && mesh_app.ended_by_reset.load() == 1; }))
      << "plain: reset " << plain_app.ended_by_reset.load() << " fin " << plain_app.ended_by_fin.load()
      << "; mesh: reset " << mesh_app.ended_by_reset.load() << " fin " << mesh_app.ended_by_fin.load();
}

// `ferryd --check-config` refuses what ferryd's start refuses (it builds through the same
// builders): a policy file that does not parse as a whole, and cni.enabled without the
// datapath; it names the setting. What may appear later is a warning.
TEST_F(LifecycleTest, CheckConfigRefusesWhatTheStartWouldRefuse) {
  auto check = [&](const std::string& extra, std::string* out) {
    std::string path = files_.dir() + "/check.yaml";
    writeFile(path, files_.configYaml("n1", extra));
    ProgramRun run = runProgram(files_.dir(), {FERRYD_BINARY, "--check-config", path});
    *out = run.out + run.err;
    return run.exit;
  };
  std::string out;
  EXPECT_EQ(check("", &out), 0) << out;
  writeFile(files_.dir() + "/bad-policy.yaml", "apiVersion: security.istio.io/v1\nkind: [unclosed\n");
  EXPECT_EQ(check("policy: {files: [" + files_.dir() + "/bad-policy.yaml]}\n", &out), 1) << out;
  EXPECT_NE(out.find("policy.files:"), std::string::npos) << out;
  EXPECT_NE(out.find("bad-policy.yaml"), std::string::npos) << out;
  EXPECT_EQ(check("cni: {enabled: true}\n", &out), 1) << out;
  EXPECT_NE(out.find("cni: enabled needs the tc datapath (datapath.enabled: true)"), std::string::npos) << out;
  // CA material that is not there yet is no start-up error: the identity runtime's own
  // reason, as /healthz/ready would give it, is a warning and the check passes.
  const std::string ca_cert = files_.dir() + "/not-yet/ca.pem";
  EXPECT_EQ(check("identity: {source: ca, ca_cert: " + ca_cert + ", ca_key: " + files_.dir() + "/not-yet/ca.key}\n",
                  &out),
            0)
      << out;
  EXPECT_NE(out.find("warning: "), std::string::npos) << out;
  EXPECT_NE(out.find(ca_cert), std::string::npos) << out;
  EXPECT_NE(out.find("OK (node n1"), std::string::npos) << out;
}

}  // namespace
}  // namespace ferry::testing
