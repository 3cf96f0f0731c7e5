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

namespace ferry::testing {
namespace {

using identity::CertificateAuthority;
using session::CloseReason;
using session::Direction;

constexpr uint16_t kAppPort = 8080;

std::string randomBytes(size_t n, std::mt19937& rng) {
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

bool echoOnce(const std::string& src, const std::string& dst, const std::string& msg) {
  int fd = connectOutbound(src, dst, kAppPort);
  if (fd < 0) return false;
  setRecvTimeout(fd, std::chrono::seconds(20));
  std::string back(msg.size(), '\0');
  bool ok = sendAll(fd, msg.data(), msg.size()) && recvExact(fd, back.data(), back.size()) && back == msg;
  ::close(fd);
  return ok;
}

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

// The certificate a node's HBONE listener presents for `pod_ip` now: a TLS 1.3 handshake
// with a client certificate of the trust domain, no stream opened.
struct Presented {
  std::string serial;       // hex, empty when the handshake failed
  identity::X509Ptr issuer;  // the intermediate sent after the leaf
};

Presented probe(const std::string& pod_ip, const CertificateAuthority& client_ca) {
  Presented out;
  identity::SslCtxPtr ctx(SSL_CTX_new(TLS_client_method()));
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_3_VERSION);
  static const unsigned char kAlpn[] = {2, 'h', '2'};
  SSL_CTX_set_alpn_protos(ctx.get(), kAlpn, sizeof(kAlpn));
  auto leaf = client_ca.issueLeaf(identity::SpiffeId::forWorkload("cluster.local", "default", "probe"),
                                  std::chrono::hours(1));
  if (!leaf.ok()) return out;
  SSL_CTX_use_certificate(ctx.get(), leaf->cert.get());
  if (X509_check_issued(client_ca.cert(), client_ca.cert()) != X509_V_OK) {
    SSL_CTX_add1_chain_cert(ctx.get(), client_ca.cert());
  }
  SSL_CTX_use_PrivateKey(ctx.get(), leaf->key.get());
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in dst{};
  dst.sin_family = AF_INET;
  dst.sin_port = htons(15008);
  inet_pton(AF_INET, pod_ip.c_str(), &dst.sin_addr);
  setRecvTimeout(fd, std::chrono::seconds(10));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&dst), sizeof(dst)) == 0) {
    identity::SslPtr ssl(SSL_new(ctx.get()));
    SSL_set_fd(ssl.get(), fd);
    if (SSL_connect(ssl.get()) == 1) {
      X509* cert = SSL_get0_peer_certificate(ssl.get());
      identity::BignumPtr bn(ASN1_INTEGER_to_BN(X509_get0_serialNumber(cert), nullptr));
      char* hex = BN_bn2hex(bn.get());
      out.serial = hex;
      OPENSSL_free(hex);
      STACK_OF(X509)* chain = SSL_get_peer_cert_chain(ssl.get());
      if (chain != nullptr && sk_X509_num(chain) > 1) out.issuer = identity::upRef(sk_X509_value(chain, 1));
      SSL_shutdown(ssl.get());
    }
  }
  identity::drainOpenSslErrors();
  ::close(fd);
  return out;
}

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

  constexpr int kLongLived = 200;
  std::vector<int> fds(kLongLived, -1);
  for (int i = 0; i < kLongLived; ++i) {
    fds[i] = connectOutbound("127.0.1.10", "127.0.2.10", kAppPort);
    ASSERT_GE(fds[i], 0) << "connection " << i;
    setRecvTimeout(fds[i], std::chrono::seconds(30));
  }

  std::atomic<bool> stop{false};
  std::atomic<uint64_t> long_rounds{0}, long_failures{0}, short_ok{0}, short_failures{0};
  std::vector<uint64_t> rounds_per_conn(kLongLived, 0);
  std::vector<std::thread> threads;
  // Stops and joins the load on every exit, a failed ASSERT included.
  struct Joiner {
    std::atomic<bool>& stop;
    std::vector<std::thread>& threads;
    ~Joiner() {
      stop = true;
      for (auto& t : threads) {
        if (t.joinable()) t.join();
      }
    }
  } joiner{stop, threads};
  constexpr int kLoadThreads = 4;
  for (int t = 0; t < kLoadThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      while (!stop.load()) {
        for (int i = t; i < kLongLived; i += kLoadThreads) {
          if (fds[i] < 0) continue;
          std::string msg = randomBytes(256 + rng() % 4096, rng);
          std::string back(msg.size(), '\0');
          if (sendAll(fds[i], msg.data(), msg.size()) && recvExact(fds[i], back.data(), back.size()) && back == msg) {
            ++rounds_per_conn[i];
            ++long_rounds;
          } else {
            ADD_FAILURE() << "long-lived connection " << i << " failed: " << std::strerror(errno);
            ++long_failures;
            ::close(fds[i]);
            fds[i] = -1;
          }
        }
      }
    });
  }
  // Short connections: from c1 (they share c1's tunnels), and from c2 paced
  // so that its idle tunnel is released between some of them and a new handshake follows.
  for (const char* src : {"127.0.1.10", "127.0.1.11"}) {
    bool paced = std::string(src) == "127.0.1.11";
    threads.emplace_back([&, src, paced] {
      std::mt19937 rng(paced ? 100 : 101);
      while (!stop.load()) {
        std::string msg = randomBytes(64 + rng() % 2048, rng);
        if (echoOnce(src, "127.0.2.10", msg)) {
          ++short_ok;
        } else {
          ADD_FAILURE() << "short connection from " << src << " failed";
          ++short_failures;
        }
        // Load pacing, not synchronisation. c2: 0-400 ms, around the 200 ms idle release.
        // c1: 10 ms, because every short connection leaves its ports (one on each side of
        // ferryd, all from 127.0.1.10) in TIME_WAIT for 60 s, and 127.0.1.10 has only the
        // 28K ports of ip_local_port_range, shared with every other test of this binary.
        std::this_thread::sleep_for(std::chrono::milliseconds(paced ? rng() % 400 : 10));
      }
    });
  }

  // The probe: the certificate n2 presents for s1 over time, as a peer sees it.
  std::mutex probe_mu;
  std::set<std::string> serials;
  std::set<std::string> serials_from_new_ca;
  const CertificateAuthority* probe_ca = &root;
  std::optional<CertificateAuthority> n2_new_inter;
  bool new_ca_written = false;
  auto last_probe = Clock::now() - std::chrono::seconds(1);
  auto probeOnce = [&] {
    std::lock_guard lock(probe_mu);
    if (Clock::now() - last_probe < std::chrono::milliseconds(100)) return;
    last_probe = Clock::now();
    Presented p = probe("127.0.2.10", *probe_ca);
    if (p.serial.empty()) return;
    serials.insert(p.serial);
    if (new_ca_written && p.issuer && X509_cmp(p.issuer.get(), n2_new_inter->cert()) == 0) {
      serials_from_new_ca.insert(p.serial);
    }
  };
  auto refreshed = [&](Node& n) { return n.metric("ferry_certificates_refreshed_total"); };
  // Waits for `cond` while probing n2 now and then (each probe is a new handshake too).
  auto waitProbing = [&](const std::function<bool()>& cond) {
    return waitFor([&] {
      probeOnce();
      return cond();
    }, std::chrono::seconds(30));
  };
  auto start = Clock::now();

  // 1. Leaf rotations: at least three re-issues on each node.
  ASSERT_TRUE(waitProbing([&] { return refreshed(*n1_) >= 3 && refreshed(*n2_) >= 3 && serials.size() >= 4; }))
      << "n1 refreshed " << refreshed(*n1_) << ", n2 refreshed " << refreshed(*n2_) << ", serials " << serials.size();

  // 2. Root rotation, step 1: both roots trusted everywhere before anyone issues from the new one.
  auto next_root = CertificateAuthority::createRoot("cluster.local", std::chrono::hours(24));
  ASSERT_TRUE(next_root.ok()) << next_root.status();
  writeBundle(files_, {&root, &*next_root});
  ASSERT_TRUE(waitProbing([&] {
    return n1_->metric("ferry_trust_bundle_roots") == 2 && n2_->metric("ferry_trust_bundle_roots") == 2;
  }));
  // Step 2: each node switches to an intermediate of the new root.
  {
    std::lock_guard lock(probe_mu);
    writeIntermediate(files_, *next_root, "n1");
    writeIntermediate(files_, *next_root, "n2", &n2_new_inter);
    new_ca_written = true;
  }
  ASSERT_TRUE(waitProbing([&] {
    return n1_->metric("ferry_identity_ca_generation") == 1 && n2_->metric("ferry_identity_ca_generation") == 1;
  }));
  double n1_at_switch = refreshed(*n1_), n2_at_switch = refreshed(*n2_);
  ASSERT_TRUE(waitProbing([&] {
    return refreshed(*n1_) >= n1_at_switch + 2 && refreshed(*n2_) >= n2_at_switch + 2 && !serials_from_new_ca.empty();
  })) << "certificates from the new CA in use on both nodes";
  // Step 3: the old root leaves the bundle (the probe's own certificate moves first).
  {
    std::lock_guard lock(probe_mu);
    probe_ca = &*next_root;
  }
  writeBundle(files_, {&*next_root});
  ASSERT_TRUE(waitProbing([&] {
    return n1_->metric("ferry_trust_bundle_roots") == 1 && n2_->metric("ferry_trust_bundle_roots") == 1;
  }));
  double n1_at_removal = refreshed(*n1_), n2_at_removal = refreshed(*n2_);
  size_t new_ca_serials_at_removal = serials_from_new_ca.size();
  ASSERT_TRUE(waitProbing([&] {
    return refreshed(*n1_) >= n1_at_removal + 2 && refreshed(*n2_) >= n2_at_removal + 2 &&
           serials_from_new_ca.size() > new_ca_serials_at_removal;
  })) << "new handshakes keep succeeding under the new root alone";

  stop = true;
  for (auto& t : threads) t.join();
  double secs = std::chrono::duration<double>(Clock::now() - start).count();
  // Every long-lived connection is still intact and echoes once more, byte-exact.
  int intact = 0;
  for (int i = 0; i < kLongLived; ++i) {
    if (fds[i] < 0) continue;
    std::string msg = "final " + std::to_string(i);
    std::string back(msg.size(), '\0');
    if (sendAll(fds[i], msg.data(), msg.size()) && recvExact(fds[i], back.data(), back.size()) && back == msg) ++intact;
    ::close(fds[i]);
  }

  std::printf("[ measure  ] %d long-lived connections (%llu echo rounds, min %llu per connection) and %llu short "
              "connections over %.1f s; certificates re-issued: n1 %.0f, n2 %.0f; serials presented by n2: %zu "
              "(%zu from the new root's CA); CA reload failures n1 %.0f n2 %.0f\n",
              kLongLived, static_cast<unsigned long long>(long_rounds.load()),
              static_cast<unsigned long long>(*std::min_element(rounds_per_conn.begin(), rounds_per_conn.end())),
              static_cast<unsigned long long>(short_ok.load()), secs, refreshed(*n1_), refreshed(*n2_), serials.size(),
              serials_from_new_ca.size(), n1_->metric("ferry_identity_reload_failures_total"),
              n2_->metric("ferry_identity_reload_failures_total"));
  EXPECT_EQ(intact, kLongLived);
  EXPECT_EQ(long_failures.load(), 0u);
  EXPECT_EQ(short_failures.load(), 0u);
  EXPECT_GT(short_ok.load(), 10u);
  for (int i = 0; i < kLongLived; ++i) EXPECT_GT(rounds_per_conn[i], 0u) << "connection " << i << " never echoed";
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
