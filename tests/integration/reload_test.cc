// Live reload of the config file (docs/configuration.md, "Reloading"): on SIGHUP and on a
// change of the file, live keys apply with connections open and none dropped, a file that
// does not load changes nothing and says why (log, metric, status), and keys bound at start
// are reported as waiting for a restart while the live keys of the same version apply.
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "proxy/common/log.h"
#include "tests/integration/loopback_lab.h"

namespace ferry::testing {
namespace {

using session::CloseReason;
using session::Direction;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr uint16_t kAppPort = 8080;
constexpr char kClient[] = "127.0.1.10";  // c1 on n1
constexpr char kOther[] = "127.0.1.11";   // c2 on n1
constexpr char kServer[] = "127.0.2.10";  // s1 on n2
// Only a signal reads the file again in the SIGHUP tests (the file check runs with the
// workloads poll).
constexpr char kNoPoll[] = "workloads_poll: 1h\n";

// A distinct message per connection and round, sent and expected back byte-exact.
bool echo(int fd, const std::string& message) {
  setRecvTimeout(fd, std::chrono::seconds(10));
  std::string back(message.size(), '\0');
  return sendAll(fd, message.data(), message.size()) && recvExact(fd, back.data(), back.size()) && back == message;
}

int echoAll(const std::vector<int>& fds, const std::string& round) {
  int good = 0;
  for (size_t i = 0; i < fds.size(); ++i) {
    if (echo(fds[i], round + " connection " + std::to_string(i) + std::string(200 + i, 'x'))) ++good;
  }
  return good;
}

// A new connection from `src` to s1 is reset before a byte comes back (refused at accept,
// or denied by a policy).
bool refused(const std::string& src) {
  int fd = connectOutbound(src, kServer, kAppPort);
  if (fd < 0) return true;  // reset while the PROXY header was sent
  setRecvTimeout(fd, std::chrono::seconds(10));
  char byte = 0;
  ssize_t n = ::recv(fd, &byte, 1, 0);
  bool reset = n < 0 && errno == ECONNRESET;
  ::close(fd);
  return reset;
}

class ReloadTest : public LoopbackNodesTest {
 protected:
  // The log level is the process's: both nodes are given the same one.
  void startNodes(const std::string& n1_extra, const std::string& log_level = "error",
                  const std::string& n2_extra = "") {
    std::string level = "log_level: " + log_level + "\n";
    LoopbackNodesTest::startNodes(n1_extra + level, n2_extra + level);
  }
  void TearDown() override {
    for (int fd : fds_) ::close(fd);
    LoopbackNodesTest::TearDown();
  }
  void rewriteN1(const std::string& extra) { writeFile(n1_->configPath(), files_.configYaml("n1", extra)); }
  // Both in-process ferryds take the signal; n2's file is unchanged.
  static void sighup() { ::kill(::getpid(), SIGHUP); }
  void open(int count, const std::string& src = kClient) {
    for (int i = 0; i < count; ++i) {
      int fd = connectOutbound(src, kServer, kAppPort);
      ASSERT_GE(fd, 0) << "connection " << i;
      fds_.push_back(fd);
    }
  }
  server::ReloadStatus status() { return n1_->server().reloadStatus(); }

  std::vector<int> fds_;
};

TEST_F(ReloadTest, ValidChangeAppliesOnSighupWithHundredConnectionsOpenAndNoneDropped) {
  startNodes(kNoPoll);
  AppServer app(kServer, kAppPort, AppServer::echo);
  open(100);
  ASSERT_EQ(echoAll(fds_, "before"), 100);
  ASSERT_FALSE(common::logEnabled(common::LogLevel::kWarn));

  // The new version: outbound connections capped at the 100 now open, and a chattier log.
  rewriteN1(std::string(kNoPoll) + "log_level: warn\nlimits: {outbound: {max_connections: 100}}\n");
  sighup();
  ASSERT_TRUE(waitFor([&] { return status().generation == 1; })) << status().error;

  EXPECT_EQ(status().last_result, "applied");
  EXPECT_THAT(status().last_applied_keys, ElementsAre("log_level", "limits.outbound"));
  EXPECT_TRUE(status().restart_required_keys.empty());
  EXPECT_EQ(n1_->metric("ferry_config_reloads_total{result=\"applied\"}"), 1);
  EXPECT_EQ(n1_->metric("ferry_config_generation"), 1);
  EXPECT_EQ(n1_->metric("ferry_config_last_reload_success"), 1);
  auto last_success = std::chrono::duration_cast<std::chrono::seconds>(status().last_success.time_since_epoch());
  EXPECT_EQ(n1_->metric("ferry_config_last_reload_success_timestamp_seconds"), last_success.count());
  // Not one of the 100 was dropped: each still echoes, byte-exact.
  EXPECT_EQ(echoAll(fds_, "after"), 100);
  EXPECT_EQ(app.accepted(), 100u);
  // The new values are in force: the log level at once, the limit for the next connection
  // (from another pod, so that the listener's limit, not the per-source one, refuses it).
  EXPECT_TRUE(common::logEnabled(common::LogLevel::kWarn));
  EXPECT_TRUE(refused(kOther));
  EXPECT_EQ(n1_->metric("ferry_admission_refused_total{listener=\"outbound\",reason=\"connections\"}"), 1);
  uint64_t closed = 0;
  for (auto reason = 0; reason < static_cast<int>(CloseReason::kCount); ++reason) {
    closed += n1_->closed(Direction::kOutbound, static_cast<CloseReason>(reason));
  }
  EXPECT_EQ(closed, 0u) << "a connection open across the reload was closed";

  // One closes: a place is free again for the next.
  ::close(fds_.back());
  fds_.pop_back();
  ASSERT_TRUE(waitFor([&] { return n1_->metric("ferry_admitted_connections{listener=\"outbound\"}") == 99; }));
  open(1, kOther);
  EXPECT_EQ(echoAll(fds_, "last"), 100);
}

TEST_F(ReloadTest, NewIdleTimeoutTakesNewConnectionsAndOpenOnesKeepTheirs) {
  startNodes(kNoPoll);
  AppServer app(kServer, kAppPort, AppServer::echo);
  open(10);
  ASSERT_EQ(echoAll(fds_, "before"), 10);
  rewriteN1(std::string(kNoPoll) + "timeouts: {idle: 1s}\n");
  sighup();
  ASSERT_TRUE(waitFor([&] { return status().generation == 1; })) << status().error;
  EXPECT_THAT(status().last_applied_keys, ElementsAre("timeouts.idle"));

  // A connection opened after the reload is closed by the new idle timeout...
  int fresh = connectOutbound(kOther, kServer, kAppPort);
  ASSERT_GE(fresh, 0);
  ASSERT_TRUE(echo(fresh, "fresh"));
  EXPECT_TRUE(waitFor([&] { return n1_->closed(Direction::kOutbound, CloseReason::kIdleTimeout) == 1; }));
  ::close(fresh);
  // ...while the ten opened before it, idle for longer, keep the timeout they started with.
  EXPECT_EQ(echoAll(fds_, "after"), 10);
  EXPECT_EQ(n1_->closed(Direction::kOutbound, CloseReason::kIdleTimeout), 1u);
}

TEST_F(ReloadTest, InvalidFileChangesNothingAndSaysWhy) {
  startNodes("");  // the rejection is logged as an error
  AppServer app(kServer, kAppPort, AppServer::echo);
  ::testing::internal::CaptureStderr();
  // A limit that would refuse the second connection, beside a key that does not parse:
  // noticed as a change of the file (no signal), refused as a whole.
  rewriteN1("limits: {outbound: {max_connections: 1}}\ntimeouts: {idle: 5}\n");
  bool rejected = waitFor([&] { return status().rejected == 1; });
  std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(rejected);

  auto s = status();
  EXPECT_EQ(s.last_result, "rejected");
  EXPECT_EQ(s.generation, 0u);
  EXPECT_THAT(s.error, HasSubstr("n1.yaml:"));
  EXPECT_THAT(s.error, HasSubstr("timeouts.idle"));
  EXPECT_THAT(log, HasSubstr("config: reload refused, nothing changed"));
  EXPECT_THAT(log, HasSubstr("timeouts.idle"));
  EXPECT_EQ(n1_->metric("ferry_config_reloads_total{result=\"rejected\"}"), 1);
  EXPECT_EQ(n1_->metric("ferry_config_last_reload_success"), 0);
  // The limit of the refused version is not in force.
  open(2);
  EXPECT_EQ(echoAll(fds_, "unchanged"), 2);

  // The file fixed: it applies, and the status and gauge say so.
  rewriteN1("limits: {outbound: {max_connections: 2}}\n");
  ASSERT_TRUE(waitFor([&] { return status().generation == 1; })) << status().error;
  EXPECT_EQ(status().last_result, "applied");
  EXPECT_EQ(status().error, "");
  EXPECT_EQ(n1_->metric("ferry_config_last_reload_success"), 1);
  EXPECT_TRUE(refused(kOther));
  EXPECT_EQ(echoAll(fds_, "still"), 2);
}

TEST_F(ReloadTest, RestartKeysAreReportedAndLiveKeysOfTheSameVersionApply) {
  startNodes(kNoPoll, "warn");
  AppServer app(kServer, kAppPort, AppServer::echo);
  ::testing::internal::CaptureStderr();
  // workers and hbone_port are bound at start; the outbound limit is live.
  rewriteN1(std::string(kNoPoll) + "log_level: warn\nworkers: 3\nhbone_port: 16008\n"
                                   "limits: {outbound: {max_connections: 1}}\n");
  sighup();
  bool applied = waitFor([&] { return status().generation == 1; });
  std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(applied) << status().error;

  auto s = status();
  EXPECT_EQ(s.last_result, "applied");
  EXPECT_THAT(s.last_applied_keys, ElementsAre("limits.outbound"));
  EXPECT_THAT(s.restart_required_keys, ElementsAre("workers", "hbone_port"));
  EXPECT_THAT(log, HasSubstr("config: workers changed in"));
  EXPECT_THAT(log, HasSubstr("config: hbone_port changed in"));
  EXPECT_EQ(n1_->metric("ferry_config_restart_required_keys"), 2);
  // Restart keys keep their running value: two workers, peers' HBONE port 15008 (the
  // tunnel to s1 would fail on 16008).
  EXPECT_EQ(n1_->server().workerCount(), 2u);
  open(1);
  EXPECT_EQ(echoAll(fds_, "tunnelled"), 1);
  // The live key applied.
  EXPECT_TRUE(refused(kOther));

  // Read again unchanged, the version still reports what waits for a restart.
  sighup();
  ASSERT_TRUE(waitFor([&] { return status().applied == 2; }));
  EXPECT_EQ(status().generation, 1u);
  EXPECT_THAT(status().restart_required_keys, ElementsAre("workers", "hbone_port"));
}

TEST_F(ReloadTest, PolicyFilesListIsReadBeforeItAppliesAndThenApplies) {
  // n2 judges inbound connections: it starts with one harmless policy file.
  std::string allow = files_.dir() + "/allow.yaml", deny = files_.dir() + "/deny.yaml";
  writeFile(allow,
            "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: all, namespace: default}\n"
            "spec: {action: ALLOW, rules: [{}]}\n");
  writeFile(deny,
            "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: none, namespace: default}\n"
            "spec: {action: DENY, rules: [{}]}\n");
  auto n2Config = [&](const std::string& file) { return "policy: {files: [\"" + file + "\"]}\n"; };
  startNodes("", "error", n2Config(allow));
  AppServer app(kServer, kAppPort, AppServer::echo);
  open(1);
  ASSERT_EQ(echoAll(fds_, "allowed"), 1);
  auto n2Status = [&] { return n2_->server().reloadStatus(); };

  // A list naming a file that cannot be read refuses the version: the old list applies.
  writeFile(n2_->configPath(), files_.configYaml("n2", n2Config(files_.dir() + "/missing.yaml")));
  ASSERT_TRUE(waitFor([&] { return n2Status().rejected == 1; }));
  EXPECT_THAT(n2Status().error, HasSubstr("policy.files"));
  EXPECT_THAT(n2Status().error, HasSubstr("missing.yaml"));
  EXPECT_EQ(echoAll(fds_, "still allowed"), 1);
  open(1);
  EXPECT_EQ(echoAll(fds_, "new and allowed"), 2);

  // A list that loads: its DENY applies to new connections (and, as any policy change, to
  // the open ones: docs/policy.md), and the old file's ALLOW is gone.
  writeFile(n2_->configPath(), files_.configYaml("n2", n2Config(deny)));
  ASSERT_TRUE(waitFor([&] { return n2Status().generation == 1; })) << n2Status().error;
  EXPECT_THAT(n2Status().last_applied_keys, ElementsAre("policy.files"));
  EXPECT_TRUE(refused(kOther));
  EXPECT_TRUE(waitFor([&] { return n2_->closed(Direction::kInbound, CloseReason::kPolicyDenied) >= 1; }));
  EXPECT_EQ(n2_->metric("ferry_policies{kind=\"AuthorizationPolicy\"}"), 1);
}

}  // namespace
}  // namespace ferry::testing
