// Workload identity at runtime, two ferryd on loopback issuing from their own intermediates
// (identity.source: ca): CA material missing at start (not ready, fail closed, recovers
// without restart), certificates forgotten when their workload leaves, and rotation under
// load — leaf certificates every second and a root rotated with overlap while 200
// long-lived connections echo and short ones keep arriving — dropping nothing.
#include <arpa/inet.h>
#include <openssl/bn.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <algorithm>
#include <functional>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "proxy/identity/ca.h"
#include "proxy/identity/openssl_util.h"
#include "tests/integration/loopback_lab.h"
#include "tests/integration/rotation_load.h"

namespace ferry::testing {
namespace {

using identity::CertificateAuthority;
using session::CloseReason;
using session::Direction;

std::string caCertPath(const LabFiles& files, const std::string& node) { return files.caDir() + "/" + node + "-ca.pem"; }
std::string caKeyPath(const LabFiles& files, const std::string& node) { return files.caDir() + "/" + node + "-ca.key"; }

std::string caIdentity(const LabFiles& files, const std::string& node, const std::string& more = "") {
  return "identity: {source: ca, ca_cert: " + caCertPath(files, node) + ", ca_key: " + caKeyPath(files, node) +
         ", leaf_lifetime: 2s, poll_interval: 50ms" + more + "}\n";
}

CertificateAuthority loadLabRoot(const LabFiles& files) {
  auto root = CertificateAuthority::load(files.caDir() + "/ca.pem", files.caDir() + "/ca.key");
  EXPECT_TRUE(root.ok()) << root.status();
  return *std::move(root);
}

void writeIntermediate(const LabFiles& files, const CertificateAuthority& root, const std::string& node,
                       std::optional<CertificateAuthority>* out = nullptr) {
  auto inter = root.issueIntermediate(std::chrono::hours(1));
  ASSERT_TRUE(inter.ok()) << inter.status();
  ASSERT_TRUE(inter->writePem(caCertPath(files, node), caKeyPath(files, node)).ok());
  if (out != nullptr) out->emplace(*std::move(inter));
}

void writeBundle(const LabFiles& files, const std::vector<const CertificateAuthority*>& roots) {
  std::string text;
  for (const auto* root : roots) text += *identity::certToPem(root->cert());
  ASSERT_TRUE(identity::writeFileAtomic(files.certDir() + "/bundle.pem", text, 0644).ok());
}

// A certificate's notAfter in Unix seconds, as the expiry metric states it.
double unixNotAfter(const X509* cert) {
  return static_cast<double>(std::chrono::duration_cast<std::chrono::seconds>(
                                 identity::asn1TimeToTimePoint(X509_get0_notAfter(cert)).time_since_epoch())
                                 .count());
}
constexpr char kWorkloadExpiry[] = "ferry_certificate_expiry_timestamp_seconds{kind=\"workload\"}";

class IdentityRotationTest : public ::testing::Test {
 protected:
  void TearDown() override {
    n1_.reset();
    n2_.reset();
  }
  // Removes the leaf files LabFiles wrote: with source: ca nothing may depend on them.
  void removeLeafFiles() {
    for (const auto& pod : LabFiles::defaultPods()) std::filesystem::remove_all(files_.certDir() + "/default/" + pod.sa);
  }

  LabFiles files_;
  std::unique_ptr<Node> n1_;
  std::unique_ptr<Node> n2_;
};

TEST_F(IdentityRotationTest, MissingCaAtStartIsNotReadyResetsConnectionsAndRecoversWhenFilesAppear) {
  removeLeafFiles();
  CertificateAuthority root = loadLabRoot(files_);
  writeIntermediate(files_, root, "n2");
  n2_ = std::make_unique<Node>(files_, "n2", caIdentity(files_, "n2"));
  ASSERT_TRUE(n2_->ok());
  n1_ = std::make_unique<Node>(files_, "n1", caIdentity(files_, "n1"));
  ASSERT_TRUE(n1_->started()) << "missing CA material must not stop ferryd from starting";
  EXPECT_FALSE(n1_->ok());
  AppServer app("127.0.2.10", kAppPort, AppServer::echo);

  std::string body;
  EXPECT_EQ(httpGet("127.0.1.1", 15021, "/healthz/ready", &body), 503);
  EXPECT_NE(body.find(caCertPath(files_, "n1")), std::string::npos) << body;
  EXPECT_EQ(n1_->metric("ferry_identity_ready"), 0);
  EXPECT_EQ(n1_->metric("ferry_ready"), 0);

  // Fail closed: the captured connection is reset, never sent in plaintext.
  int fd = connectOutbound("127.0.1.10", "127.0.2.10", kAppPort);
  ASSERT_GE(fd, 0);
  setRecvTimeout(fd, std::chrono::seconds(10));
  char byte;
  // The PROXY header is all ferryd needs to decide: no byte of ours is required (and one
  // sent after the reset would fail).
  EXPECT_EQ(::recv(fd, &byte, 1, 0), -1);
  EXPECT_EQ(errno, ECONNRESET);
  ::close(fd);
  EXPECT_TRUE(waitFor([&] { return n1_->closed(Direction::kOutbound, CloseReason::kNoCertificate) == 1; }));
  EXPECT_EQ(app.accepted(), 0u);

  writeIntermediate(files_, root, "n1");
  ASSERT_TRUE(waitFor([&] { return httpGet("127.0.1.1", 15021, "/healthz/ready") == 200; }))
      << "ferryd recovers once the CA files exist, without a restart";
  EXPECT_EQ(n1_->metric("ferry_identity_ready"), 1);
  EXPECT_TRUE(echoOnce("127.0.1.10", "127.0.2.10", "after recovery"));
}

TEST_F(IdentityRotationTest, CertificateOfAWorkloadThatLeftIsForgotten) {
  removeLeafFiles();
  CertificateAuthority root = loadLabRoot(files_);
  writeIntermediate(files_, root, "n1");
  writeIntermediate(files_, root, "n2");
  n1_ = std::make_unique<Node>(files_, "n1", caIdentity(files_, "n1") + "workloads_poll: 50ms\n");
  n2_ = std::make_unique<Node>(files_, "n2", caIdentity(files_, "n2"));
  ASSERT_TRUE(n1_->ok() && n2_->ok());
  AppServer app("127.0.2.10", kAppPort, AppServer::echo);
  ASSERT_TRUE(echoOnce("127.0.1.10", "127.0.2.10", "from c1"));
  ASSERT_TRUE(echoOnce("127.0.1.11", "127.0.2.10", "from c2"));
  EXPECT_EQ(n1_->metric("ferry_certificates_cached"), 2);

  // c2 (service account "other") leaves node n1.
  std::string yaml = "workloads:\n";
  for (const auto& p : LabFiles::defaultPods()) {
    if (p.name == "c2") continue;
    yaml += "  - {name: " + p.name + ", namespace: default, service_account: " + p.sa + ", node: " + p.node +
            ", ips: [" + p.ip + "], hbone: true, tls_mode: " + p.tls_mode + "}\n";
  }
  ASSERT_TRUE(identity::writeFileAtomic(files_.dir() + "/workloads.yaml", yaml, 0644).ok());
  ASSERT_TRUE(waitFor([&] { return n1_->metric("ferry_certificates_forgotten_total") == 1; }));
  EXPECT_EQ(n1_->metric("ferry_certificates_cached"), 1);
  EXPECT_TRUE(echoOnce("127.0.1.10", "127.0.2.10", "c1 keeps its certificate"));
  EXPECT_EQ(n1_->metric("ferry_certificates_issued_total"), 2) << "c1's certificate was kept, not re-issued";
}

// ferry_certificate_expiry_timestamp_seconds{kind}: what the chart's expiry alerts read
// (docs/operations.md, "Alerts"). It names the issuing intermediate's notAfter, follows a new
// one, the roots', and the earliest workload SVID's.
TEST_F(IdentityRotationTest, TheExpiryMetricNamesWhenEachKindOfCertificateRunsOut) {
  removeLeafFiles();
  CertificateAuthority root = loadLabRoot(files_);
  std::optional<CertificateAuthority> inter;
  writeIntermediate(files_, root, "n1", &inter);
  writeIntermediate(files_, root, "n2");
  n1_ = std::make_unique<Node>(files_, "n1", caIdentity(files_, "n1"));
  n2_ = std::make_unique<Node>(files_, "n2", caIdentity(files_, "n2"));
  ASSERT_TRUE(n1_->ok() && n2_->ok());
  const auto unix = unixNotAfter;
  const std::string workload = kWorkloadExpiry;
  const std::string issuer = "ferry_certificate_expiry_timestamp_seconds{kind=\"issuer\"}";
  const std::string roots = "ferry_certificate_expiry_timestamp_seconds{kind=\"root\"}";
  EXPECT_EQ(n1_->metric(issuer), unix(inter->cert()));
  EXPECT_EQ(n1_->metric(roots), unix(root.cert()));

  AppServer app("127.0.2.10", kAppPort, AppServer::echo);
  ASSERT_TRUE(echoOnce("127.0.1.10", "127.0.2.10", "from c1"));
  // Leaves live 2 s and are re-issued at half life: the earliest ends within 2 s of now.
  const double now = static_cast<double>(
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count());
  double leaf = n1_->metric(workload);
  EXPECT_GE(leaf, now - 1);
  EXPECT_LE(leaf, now + 3);

  // A new intermediate that ends sooner: the metric follows it once it is in use.
  auto shorter = root.issueIntermediate(std::chrono::minutes(30));
  ASSERT_TRUE(shorter.ok()) << shorter.status();
  ASSERT_TRUE(shorter->writePem(caCertPath(files_, "n1"), caKeyPath(files_, "n1")).ok());
  EXPECT_TRUE(waitFor([&] { return n1_->metric(issuer) == unix(shorter->cert()); })) << n1_->metric(issuer);
  EXPECT_LT(n1_->metric(issuer), unix(inter->cert()));
}

// With certificates from files, one that expires unrenewed is still what the workload kind
// names: the alert on it must not resolve when the workload breaks (the next-earliest
// certificate would take its place).
TEST_F(IdentityRotationTest, AnExpiredCertificateFromFilesKeepsItsPlaceInTheExpiryMetric) {
  CertificateAuthority root = loadLabRoot(files_);
  auto id = identity::SpiffeId::forWorkload("cluster.local", "default", "client");
  auto leaf = root.issueLeaf(id, std::chrono::seconds(3));
  ASSERT_TRUE(leaf.ok()) << leaf.status();
  ASSERT_TRUE(identity::writeSvidFiles(files_.certDir(), id, *leaf, {}).ok());
  n1_ = std::make_unique<Node>(files_, "n1");
  n2_ = std::make_unique<Node>(files_, "n2");
  ASSERT_TRUE(n1_->ok() && n2_->ok());
  AppServer app("127.0.2.10", kAppPort, AppServer::echo);
  ASSERT_TRUE(echoOnce("127.0.1.10", "127.0.2.10", "from c1"));
  const double expiry = unixNotAfter(leaf->cert.get());
  EXPECT_EQ(n1_->metric(kWorkloadExpiry), expiry) << "c1's is the earliest of n1's (c2's lives an hour)";
  ASSERT_TRUE(waitFor(
      [&] {
        return std::chrono::system_clock::now() > identity::asn1TimeToTimePoint(X509_get0_notAfter(leaf->cert.get())) +
                                                       std::chrono::seconds(1);
      },
      std::chrono::seconds(10)));
  EXPECT_EQ(n1_->metric(kWorkloadExpiry), expiry) << "expired, and still named";
}

// Leaves live 2 s (refreshed after 1 s) and every new tunnel handshakes with the current
// certificate; pooled tunnels idle for 200 ms are released, so the paced short connections
// keep making new handshakes. The root rotates in three file writes, each step waited for
// on both nodes' metrics.
TEST_F(IdentityRotationTest, LeafAndRootRotationUnderLoadDropNothing) {
  removeLeafFiles();
  CertificateAuthority root = loadLabRoot(files_);
  writeIntermediate(files_, root, "n1");
  writeIntermediate(files_, root, "n2");
  // Idle release is checked at each PING: a short interval makes idle tunnels go quickly.
  const std::string pool = "pool: {idle_release: 200ms, ping_interval: 100ms, ping_timeout: 10s}\n";
  n1_ = std::make_unique<Node>(files_, "n1", caIdentity(files_, "n1") + pool);
  n2_ = std::make_unique<Node>(files_, "n2", caIdentity(files_, "n2") + pool);
  ASSERT_TRUE(n1_->ok() && n2_->ok());
  AppServer app("127.0.2.10", kAppPort, AppServer::echo);

  RotationLoad load(200);
  ASSERT_TRUE(load.started());

  Prober prober(root);
  std::optional<CertificateAuthority> n2_new_inter;
  auto refreshed = [&](Node& n) { return n.metric("ferry_certificates_refreshed_total"); };
  auto start = Clock::now();

  // 1. Leaf rotations: at least three re-issues on each node.
  ASSERT_TRUE(prober.waitProbing(
      [&] { return refreshed(*n1_) >= 3 && refreshed(*n2_) >= 3 && prober.serials() >= 4; }))
      << "n1 refreshed " << refreshed(*n1_) << ", n2 refreshed " << refreshed(*n2_) << ", serials " << prober.serials();

  // 2. Root rotation, step 1: both roots trusted everywhere before anyone issues from the new one.
  auto next_root = CertificateAuthority::createRoot("cluster.local", std::chrono::hours(24));
  ASSERT_TRUE(next_root.ok()) << next_root.status();
  writeBundle(files_, {&root, &*next_root});
  ASSERT_TRUE(prober.waitProbing([&] {
    return n1_->metric("ferry_trust_bundle_roots") == 2 && n2_->metric("ferry_trust_bundle_roots") == 2;
  }));
  // Step 2: each node switches to an intermediate of the new root.
  writeIntermediate(files_, *next_root, "n1");
  writeIntermediate(files_, *next_root, "n2", &n2_new_inter);
  ASSERT_TRUE(n2_new_inter.has_value());
  prober.countIssuer(n2_new_inter->cert());
  ASSERT_TRUE(prober.waitProbing([&] {
    return n1_->metric("ferry_identity_ca_generation") == 1 && n2_->metric("ferry_identity_ca_generation") == 1;
  }));
  double n1_at_switch = refreshed(*n1_), n2_at_switch = refreshed(*n2_);
  ASSERT_TRUE(prober.waitProbing([&] {
    return refreshed(*n1_) >= n1_at_switch + 2 && refreshed(*n2_) >= n2_at_switch + 2 && prober.serialsFromIssuer() > 0;
  })) << "certificates from the new CA in use on both nodes";
  // Step 3: the old root leaves the bundle (the probe's own certificate moves first).
  prober.useClientCa(*next_root);
  writeBundle(files_, {&*next_root});
  ASSERT_TRUE(prober.waitProbing([&] {
    return n1_->metric("ferry_trust_bundle_roots") == 1 && n2_->metric("ferry_trust_bundle_roots") == 1;
  }));
  double n1_at_removal = refreshed(*n1_), n2_at_removal = refreshed(*n2_);
  size_t new_ca_serials_at_removal = prober.serialsFromIssuer();
  ASSERT_TRUE(prober.waitProbing([&] {
    return refreshed(*n1_) >= n1_at_removal + 2 && refreshed(*n2_) >= n2_at_removal + 2 &&
           prober.serialsFromIssuer() > new_ca_serials_at_removal;
  })) << "new handshakes keep succeeding under the new root alone";

  int intact = load.finish();
  double secs = std::chrono::duration<double>(Clock::now() - start).count();

  std::printf("[ measure  ] %d long-lived connections (%llu echo rounds, min %llu per connection) and %llu short "
              "connections over %.1f s; certificates re-issued: n1 %.0f, n2 %.0f; serials presented by n2: %zu "
              "(%zu from the new root's CA); CA reload failures n1 %.0f n2 %.0f\n",
              load.longLived(), load.longRounds(), load.minRounds(), load.shortOk(), secs, refreshed(*n1_),
              refreshed(*n2_), prober.serials(), prober.serialsFromIssuer(),
              n1_->metric("ferry_identity_reload_failures_total"),
              n2_->metric("ferry_identity_reload_failures_total"));
  load.expectNothingDropped(intact);
  for (Node* n : {n1_.get(), n2_.get()}) {
    for (Direction d : {Direction::kOutbound, Direction::kInbound}) {
      for (size_t r = 0; r < static_cast<size_t>(identity::SvidRejection::kCount); ++r) {
        EXPECT_EQ(n->stats().rejections(d, static_cast<identity::SvidRejection>(r)), 0u)
            << identity::svidRejectionLabel(static_cast<identity::SvidRejection>(r));
      }
    }
    EXPECT_EQ(n->stats().hbone_handshake_failures.load(), 0u);
    EXPECT_EQ(n->metric("ferry_certificate_issue_failures_total"), 0);
  }
  for (CloseReason bad : {CloseReason::kNoCertificate, CloseReason::kHandshakeFailed, CloseReason::kPeerReset,
                          CloseReason::kConnectFailed, CloseReason::kTunnelRefused, CloseReason::kInternal}) {
    EXPECT_EQ(n1_->closed(Direction::kOutbound, bad), 0u) << session::closeReasonLabel(bad);
  }
  EXPECT_GE(refreshed(*n1_), 7);
  EXPECT_GE(refreshed(*n2_), 7);
}

}  // namespace
}  // namespace ferry::testing
