// Access-log records (docs/operations.md, "Access log") as ferryd writes them at close:
// who was on each side (workload and principal), for each way a connection can end.
#include <arpa/inet.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <thread>

#include <openssl/ssl.h>

#include <gtest/gtest.h>

#include "proxy/identity/dir_cert_source.h"
#include "proxy/identity/tls_context.h"
#include "tests/integration/access_log_capture.h"
#include "tests/integration/loopback_lab.h"
#include "tests/integration/policy_fixtures.h"

namespace ferry::testing {
namespace {

using session::CloseReason;
using session::Direction;

constexpr uint16_t kAppPort = 8080;
constexpr char kClientId[] = "spiffe://cluster.local/ns/default/sa/client";
constexpr char kServerId[] = "spiffe://cluster.local/ns/default/sa/server";

// A connection from `src` to `dst`:8080 that echoed "hi" once and stays open; -1 if not.
int openAndEcho(const std::string& src, const std::string& dst) {
  int fd = connectOutbound(src, dst, kAppPort);
  char back[2];
  if (fd >= 0 && sendAll(fd, "hi", 2) && recvExact(fd, back, 2)) return fd;
  if (fd >= 0) ::close(fd);
  return -1;
}

// Expects ferryd to reset or close `fd` (a connection it refuses), then closes it.
void expectRefused(int fd) {
  ASSERT_GE(fd, 0);
  setRecvTimeout(fd, std::chrono::seconds(10));
  char buf[4];
  EXPECT_LE(::recv(fd, buf, sizeof(buf), 0), 0);
  ::close(fd);
}

class AccessLogTest : public ::testing::Test {
 protected:
  void startNodes(const std::string& extra = "") {
    n1_ = std::make_unique<Node>(files_, "n1", "log_level: info\n" + extra);
    n2_ = std::make_unique<Node>(files_, "n2", "log_level: info\n" + extra);
    ASSERT_TRUE(n1_->ok());
    ASSERT_TRUE(n2_->ok());
  }
  void TearDown() override {
    n1_.reset();
    n2_.reset();
  }

  LogCapture log_;
  LabFiles files_;
  std::unique_ptr<Node> n1_;
  std::unique_ptr<Node> n2_;
};

TEST_F(AccessLogTest, TextRecordsNameTheWorkloadAndPrincipalOnEachSide) {
  startNodes();
  AppServer app("127.0.2.10", kAppPort, AppServer::echo);
  ASSERT_TRUE(echoOnce("127.0.1.10", "127.0.2.10"));
  std::string sides = std::string(" src_workload=default/c1 src_principal=") + kClientId +
                      " dst_workload=default/s1 dst_principal=" + kServerId;
  auto outbound = log_.lines({"access direction=outbound src=127.0.1.10:", "reason=ok", sides});
  EXPECT_EQ(outbound.size(), 1u) << log_.all();
  auto inbound = log_.lines({"access direction=inbound src=127.0.1.10:", "reason=ok", sides});
  EXPECT_EQ(inbound.size(), 1u) << log_.all();
}

TEST_F(AccessLogTest, TextRecordOfAPassthroughNamesOnlyTheKnownSide) {
  startNodes();
  AppServer app("127.0.3.10", kAppPort, AppServer::echo);
  ASSERT_TRUE(echoOnce("127.0.1.10", "127.0.3.10"));
  auto lines = log_.lines({"access direction=outbound src=127.0.1.10:", "dst=127.0.3.10:8080 peer=passthrough reason=ok"});
  ASSERT_EQ(lines.size(), 1u) << log_.all();
  // The line ends with the source's workload: no principal (no mTLS), no destination workload.
  EXPECT_TRUE(lines[0].ends_with(" src_workload=default/c1")) << lines[0];
}

class JsonAccessLogTest : public AccessLogTest {
 protected:
  void startJson(const std::string& extra = "") { startNodes("access_log: {format: json}\n" + extra); }
  std::string policyFile() const { return files_.dir() + "/policies.yaml"; }
  // JSON on both nodes; n2 enforces the policies of a file it checks every 50 ms.
  void startWithPolicies(const std::string& policies) {
    writeFile(policyFile(), policies);
    startJson("workloads_poll: 50ms\npolicy:\n  files: [" + policyFile() + "]\n");
  }
  JsonRecord record(const std::string& direction, const std::string& reason) {
    return onlyRecord(log_, direction, reason);
  }
};

TEST_F(JsonAccessLogTest, SuccessOnBothLegsCarriesEveryField) {
  startJson();
  AppServer app("127.0.2.10", kAppPort, AppServer::echo);
  ASSERT_TRUE(echoOnce("127.0.1.10", "127.0.2.10"));
  for (const char* direction : {"outbound", "inbound"}) {
    SCOPED_TRACE(direction);
    auto r = record(direction, "ok");
    EXPECT_TRUE(r.text["timestamp"].ends_with("Z")) << r.raw;
    EXPECT_TRUE(r.text["source_address"].starts_with("127.0.1.10:")) << r.raw;
    EXPECT_EQ(r.text["destination_address"], "127.0.2.10:8080");
    EXPECT_EQ(r.text["source_workload"], "default/c1");
    EXPECT_EQ(r.text["source_principal"], kClientId);
    EXPECT_EQ(r.text["destination_workload"], "default/s1");
    EXPECT_EQ(r.text["destination_principal"], kServerId);
    EXPECT_EQ(r.text["peer"], std::string(direction) == "outbound" ? kServerId : kClientId);
    // sent: from the accepting side (the client, on both legs); received: back.
    EXPECT_EQ(r.number["bytes_sent"], 5u);
    EXPECT_EQ(r.number["bytes_received"], 5u);
    EXPECT_EQ(r.text["detail"], "");
  }
  EXPECT_EQ(record("outbound", "ok").text["policy_verdict"], "") << "outbound is not judged";
  EXPECT_EQ(record("inbound", "ok").text["policy_verdict"], "allowed");
  // No text line besides: one format at a time.
  EXPECT_TRUE(log_.lines({"access direction="}, 0).empty()) << log_.all();
}

TEST_F(JsonAccessLogTest, TextIsTheDefaultAndTheOffSwitchSilencesBoth) {
  startNodes("access_log: {enabled: false}\n");
  AppServer app("127.0.2.10", kAppPort, AppServer::echo);
  ASSERT_TRUE(echoOnce("127.0.1.10", "127.0.2.10"));
  ASSERT_TRUE(waitFor([&] { return n2_->closed(Direction::kInbound, CloseReason::kOk) == 1; }));
  ASSERT_TRUE(waitFor([&] { return n1_->closed(Direction::kOutbound, CloseReason::kOk) == 1; }));
  EXPECT_TRUE(log_.lines({"access direction="}, 0).empty()) << log_.all();
  EXPECT_TRUE(log_.lines({"{\"timestamp\":"}, 0).empty()) << log_.all();
  EXPECT_EQ(n1_->stats().access_log_sampled_out.load(), 0u);
}

TEST_F(JsonAccessLogTest, SamplingWritesOneSuccessInFourButEveryFailure) {
  // One worker per node: the sampler's count is the node's.
  startNodes("workers: 1\naccess_log: {format: json, sample_success: 0.25}\n");
  AppServer app("127.0.2.10", kAppPort, AppServer::echo);
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(echoOnce("127.0.1.10", "127.0.2.10"));
  ASSERT_TRUE(waitFor([&] { return n1_->closed(Direction::kOutbound, CloseReason::kOk) == 8; }));
  expectRefused(connectOutbound("127.0.1.10", "127.0.2.10", 9));
  record("outbound", "tunnel_refused");
  EXPECT_EQ(log_.lines({"\"direction\":\"outbound\"", "\"reason\":\"ok\""}, 2).size(), 2u) << log_.all();
  EXPECT_EQ(n1_->stats().access_log_sampled_out.load(), 6u);
}

TEST_F(JsonAccessLogTest, FailuresBeyondTheWorkersLimitAreCountedNotWritten) {
  startNodes("workers: 1\naccess_log: {format: json, failures_per_second: 1, failures_burst: 2}\n");
  // Five connections to a port nothing listens on, passed through (no HBONE: one record each).
  for (int i = 0; i < 5; ++i) {
    expectRefused(connectOutbound("127.0.1.10", "127.0.3.10", 9));
  }
  ASSERT_TRUE(waitFor([&] { return n1_->closed(Direction::kOutbound, CloseReason::kConnectFailed) == 5; }));
  auto written = log_.lines({"\"reason\":\"connect_failed\""}, 2).size();
  // The burst of two, and at most one more if a second passed meanwhile.
  EXPECT_GE(written, 2u);
  EXPECT_LE(written, 3u);
  EXPECT_EQ(written + n1_->stats().access_log_failures_suppressed.load(), 5u);
}

TEST_F(JsonAccessLogTest, ConnectFailedAndTunnelRefused) {
  startJson();
  expectRefused(connectOutbound("127.0.1.10", "127.0.2.10", 9));
  auto inbound = record("inbound", "connect_failed");
  EXPECT_NE(inbound.text["detail"].find("connecting to 127.0.2.10:9"), std::string::npos) << inbound.raw;
  EXPECT_EQ(inbound.text["destination_workload"], "default/s1");
  auto outbound = record("outbound", "tunnel_refused");
  EXPECT_EQ(outbound.text["detail"], "CONNECT answered 503");
  EXPECT_EQ(outbound.text["source_workload"], "default/c1");
}

TEST_F(JsonAccessLogTest, UnknownSourceNamesTheDestinationOnly) {
  startJson();
  expectRefused(connectOutbound("127.0.1.99", "127.0.2.10", kAppPort));
  auto r = record("outbound", "unknown_source");
  EXPECT_EQ(r.text["source_workload"], "");
  EXPECT_EQ(r.text["destination_workload"], "default/s1");
  EXPECT_NE(r.text["detail"].find("is not a workload of node n1"), std::string::npos) << r.raw;
}

TEST_F(JsonAccessLogTest, StrictPlaintextAndBadRequestOnThePlaintextListener) {
  startJson();
  for (const char* dst : {"127.0.2.11", "127.0.2.99"}) {
    expectRefused(connectCaptured("127.0.1.10", "127.0.2.1", 15006, dst, kAppPort));
  }
  auto strict = record("inbound_plaintext", "strict_plaintext");
  EXPECT_EQ(strict.text["source_workload"], "default/c1");
  EXPECT_EQ(strict.text["destination_workload"], "default/s2");
  EXPECT_EQ(strict.text["source_principal"], "") << "plaintext has no principal";
  EXPECT_NE(strict.text["detail"].find("is STRICT"), std::string::npos) << strict.raw;
  auto bad = record("inbound_plaintext", "bad_request");
  EXPECT_EQ(bad.text["destination_address"], "127.0.2.99:8080");
  EXPECT_EQ(bad.text["destination_workload"], "");
}

TEST_F(JsonAccessLogTest, SelfTargetAndBadProxyHeader) {
  startJson();
  expectRefused(connectOutbound("127.0.1.10", "127.0.1.1", 15001));
  auto self = record("outbound", "self_target");
  EXPECT_NE(self.text["detail"].find("is ferryd itself"), std::string::npos) << self.raw;
  EXPECT_EQ(self.text["source_workload"], "default/c1");

  // No PROXY header: bytes that are not one. Quotes and a control character in what the
  // record quotes would break a hand-made JSON line.
  int raw = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(15001);
  a.sin_addr.s_addr = htonl(0x7f000101);  // 127.0.1.1
  ASSERT_EQ(::connect(raw, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  std::string junk = "\"GET / HTTP/1.1\"\r\n\x01\r\n\r\n";
  ASSERT_TRUE(sendAll(raw, junk.data(), junk.size()));
  expectRefused(raw);
  auto header = record("outbound", "bad_proxy_header");
  EXPECT_NE(header.text["detail"], "");
}

TEST_F(JsonAccessLogTest, PolicyDeniedCarriesTheVerdictAndThePolicy) {
  startWithPolicies(kAllowClient);
  AppServer app("127.0.2.10", kAppPort, AppServer::echo);
  EXPECT_FALSE(echoOnce("127.0.1.11", "127.0.2.10"));  // c2 (sa other) is not allowed
  auto r = record("inbound", "policy_denied");
  EXPECT_EQ(r.text["policy_verdict"], "denied");
  EXPECT_NE(r.text["policy"].find("denied"), std::string::npos) << r.raw;
  EXPECT_EQ(r.text["source_principal"], "spiffe://cluster.local/ns/default/sa/other");
  EXPECT_EQ(r.text["source_workload"], "default/c2");
  EXPECT_EQ(r.text["detail"], "401");
  ASSERT_TRUE(echoOnce("127.0.1.10", "127.0.2.10"));
  auto allowed = record("inbound", "ok");
  EXPECT_EQ(allowed.text["policy_verdict"], "allowed");
  EXPECT_NE(allowed.text["policy"].find("allowed by ALLOW policy default/allow-client"), std::string::npos)
      << allowed.raw;
}

TEST_F(JsonAccessLogTest, IdleTimeoutAndUpstreamReset) {
  startJson("timeouts: {idle: 1s}\n");
  AppServer app("127.0.2.10", kAppPort, AppServer::echo);
  int fd = openAndEcho("127.0.1.10", "127.0.2.10");
  ASSERT_GE(fd, 0);
  expectRefused(fd);  // closed by the idle timeout (1 s, well within the 10 s wait)
  // Whichever side's timer fired first: that side says idle_timeout.
  auto lines = log_.lines({"\"reason\":\"idle_timeout\""});
  ASSERT_FALSE(lines.empty()) << log_.all();
  auto r = parseRecord(lines[0]);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->number["bytes_sent"], 2u);
  EXPECT_EQ(r->number["bytes_received"], 2u);
  EXPECT_GE(r->number["duration_ms"], 1000u);

  AppServer resetter("127.0.3.10", kAppPort, [](int fd) {
    char c;
    ::recv(fd, &c, 1, 0);
    setAbortOnClose(fd);
  });
  int pfd = connectOutbound("127.0.1.10", "127.0.3.10", kAppPort);
  ASSERT_GE(pfd, 0);
  ASSERT_TRUE(sendAll(pfd, "x", 1));
  expectRefused(pfd);
  auto reset = record("outbound", "upstream_reset");
  EXPECT_EQ(reset.text["peer"], "passthrough");
  EXPECT_EQ(reset.text["destination_address"], "127.0.3.10:8080");
  EXPECT_EQ(reset.number["bytes_sent"], 1u);
}

TEST_F(JsonAccessLogTest, ConnectionsOpenAtTheDrainDeadlineAreRecordedAsShutdown) {
  startJson("timeouts: {drain: 200ms}\n");
  AppServer app("127.0.2.10", kAppPort, AppServer::echo);
  int fd = openAndEcho("127.0.1.10", "127.0.2.10");
  ASSERT_GE(fd, 0);
  n1_.reset();  // drains, then resets what is still open
  auto r = record("outbound", "shutdown");
  EXPECT_EQ(r.text["source_workload"], "default/c1");
  EXPECT_EQ(r.number["bytes_sent"], 2u);
  ::close(fd);
}

// An HBONE port on `ip` whose TLS server presents the identity of service account `sa`:
// what a client meets when the node it dials is not who the destination's identity says.
class ImpostorHbone {
 public:
  ImpostorHbone(const LabFiles& files, const std::string& ip, const std::string& sa)
      : certs_(files.certDir(), "cluster.local"), cache_(certs_, "cluster.local") {
    auto ctx = cache_.serverContext(identity::SpiffeId::forWorkload("cluster.local", "default", sa));
    EXPECT_TRUE(ctx.ok()) << ctx.status();
    if (ctx.ok()) ctx_ = *ctx;
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(15008);
    inet_pton(AF_INET, ip.c_str(), &a.sin_addr);
    EXPECT_EQ(::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    EXPECT_EQ(::listen(listen_fd_, 16), 0);
    thread_ = std::thread([this] {
      for (;;) {
        int fd = ::accept(listen_fd_, nullptr, nullptr);
        if (fd < 0) return;  // shut down
        if (ctx_) {
          SSL* ssl = SSL_new(ctx_->native_handle());
          SSL_set_fd(ssl, fd);
          SSL_accept(ssl);  // the client gives up on the certificate
          SSL_free(ssl);
        }
        ::close(fd);
      }
    });
  }
  ~ImpostorHbone() {
    ::shutdown(listen_fd_, SHUT_RDWR);
    thread_.join();
    ::close(listen_fd_);
  }

 private:
  identity::DirCertSource certs_;
  identity::TlsContextCache cache_;
  std::shared_ptr<boost::asio::ssl::context> ctx_;
  int listen_fd_ = -1;
  std::thread thread_;
};

TEST_F(JsonAccessLogTest, HandshakeFailedNamesTheIdentityExpected) {
  startJson();
  // b1 (node n3, sa server3): its node answers with the certificate of sa client.
  ImpostorHbone impostor(files_, "127.0.4.10", "client");
  expectRefused(connectOutbound("127.0.1.10", "127.0.4.10", kAppPort));
  auto r = record("outbound", "handshake_failed");
  EXPECT_EQ(r.text["destination_workload"], "default/b1");
  EXPECT_EQ(r.text["destination_principal"], "spiffe://cluster.local/ns/default/sa/server3");
  EXPECT_EQ(r.text["peer"], "expected:spiffe://cluster.local/ns/default/sa/server3");
  EXPECT_NE(r.text["detail"].find("failed verification"), std::string::npos) << r.raw;
}

TEST_F(JsonAccessLogTest, PolicyRevokedIsADeniedVerdict) {
  startWithPolicies("");
  AppServer app("127.0.2.10", kAppPort, AppServer::echo);
  int fd = openAndEcho("127.0.1.10", "127.0.2.10");
  ASSERT_GE(fd, 0);
  // Only sa other may call s1 from now on: the open connection of sa client is closed.
  writeFile(policyFile(), kAllowOtherOnly);
  auto r = record("inbound", "policy_revoked");
  EXPECT_EQ(r.text["policy_verdict"], "denied");
  EXPECT_NE(r.text["detail"], "") << r.raw;
  EXPECT_EQ(r.number["bytes_sent"], 2u);
  expectRefused(fd);
}

TEST_F(JsonAccessLogTest, ClientResetIsDownstreamResetHereAndPeerResetThere) {
  startJson();
  AppServer app("127.0.2.10", kAppPort, [](int fd) {
    char buf[16];
    while (::recv(fd, buf, sizeof(buf), 0) > 0) {
    }
  });
  int fd = connectOutbound("127.0.1.10", "127.0.2.10", kAppPort);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(sendAll(fd, "hi", 2));
  ASSERT_TRUE(waitFor([&] { return app.accepted() == 1; }));
  abortClose(fd);
  auto outbound = record("outbound", "downstream_reset");
  EXPECT_EQ(outbound.text["destination_workload"], "default/s1");
  auto inbound = record("inbound", "peer_reset");
  EXPECT_EQ(inbound.text["source_workload"], "default/c1");
}

TEST_F(JsonAccessLogTest, NoCertificateForTheSourceIdentity) {
  // c2's identity (sa other) has no SVID files: ferryd has nothing to present for it.
  std::filesystem::remove_all(files_.certDir() + "/default/other");
  startJson();
  expectRefused(connectOutbound("127.0.1.11", "127.0.2.10", kAppPort));
  auto r = record("outbound", "no_certificate");
  EXPECT_EQ(r.text["source_workload"], "default/c2");
  EXPECT_EQ(r.text["source_principal"], "spiffe://cluster.local/ns/default/sa/other");
  EXPECT_NE(r.text["detail"].find("no certificate for spiffe://cluster.local/ns/default/sa/other"), std::string::npos)
      << r.raw;
}

}  // namespace
}  // namespace ferry::testing
