#pragma once
// The load of the rotation tests (identity_rotation_test,
// cluster_ca_rotation_test): long-lived echo connections c1 -> s1 on 8080 and
// short connections that keep arriving, and a probe of the certificate n2
// presents. Header-only: each test binary includes it once.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <openssl/bn.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "proxy/identity/ca.h"
#include "proxy/identity/openssl_util.h"
#include "tests/integration/loopback_lab.h"

namespace ferry::testing {

inline constexpr uint16_t kAppPort = 8080;

inline std::string randomBytes(size_t n, std::mt19937& rng) {
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

// The certificate a node's HBONE listener presents for `pod_ip` now: a TLS 1.3
// handshake with a client certificate of the trust domain, no stream opened.
struct Presented {
  std::string serial;        // hex, empty when the handshake failed
  identity::X509Ptr issuer;  // the intermediate sent after the leaf
};

inline Presented probe(const std::string& pod_ip, const identity::CertificateAuthority& client_ca) {
  Presented out;
  identity::SslCtxPtr ctx(SSL_CTX_new(TLS_client_method()));
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_3_VERSION);
  static const unsigned char kAlpn[] = {2, 'h', '2'};
  SSL_CTX_set_alpn_protos(ctx.get(), kAlpn, sizeof(kAlpn));
  auto leaf =
      client_ca.issueLeaf(identity::SpiffeId::forWorkload("cluster.local", "default", "probe"), std::chrono::hours(1));
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

// Watches what n2 presents for s1 (127.0.2.10) as a peer sees it, at most every
// 100 ms while the test waits (each probe is a new handshake too). Test thread
// only.
class Prober {
 public:
  explicit Prober(const identity::CertificateAuthority& client_ca) : client_ca_(&client_ca) {}
  // The CA of the probe's own client certificate from now on.
  void useClientCa(const identity::CertificateAuthority& client_ca) { client_ca_ = &client_ca; }
  // Leaves issued by `issuer` are counted apart from now on (from zero).
  void countIssuer(X509* issuer) {
    issuer_ = identity::upRef(issuer);
    serials_from_issuer_.clear();
  }
  // Waits up to 30 s for `cond`, probing now and then.
  bool waitProbing(const std::function<bool()>& cond) {
    return waitFor(
        [&] {
          probeOnce();
          return cond();
        },
        std::chrono::seconds(30));
  }
  size_t serials() const { return serials_.size(); }
  size_t serialsFromIssuer() const { return serials_from_issuer_.size(); }

 private:
  void probeOnce() {
    if (Clock::now() - last_probe_ < std::chrono::milliseconds(100)) return;
    last_probe_ = Clock::now();
    Presented p = probe("127.0.2.10", *client_ca_);
    if (p.serial.empty()) return;
    serials_.insert(p.serial);
    if (issuer_ && p.issuer && X509_cmp(p.issuer.get(), issuer_.get()) == 0) serials_from_issuer_.insert(p.serial);
  }

  const identity::CertificateAuthority* client_ca_;
  identity::X509Ptr issuer_;
  Clock::time_point last_probe_ = Clock::now() - std::chrono::seconds(1);
  std::set<std::string> serials_, serials_from_issuer_;
};

// `long_lived` echo connections from c1 to s1, each echoing random messages in
// turn on four threads, and short connections: from c1 (they share c1's
// tunnels), and from c2 paced so that its idle tunnel is released between some
// of them and a new handshake follows.
class RotationLoad {
 public:
  explicit RotationLoad(int long_lived) : fds_(long_lived, -1), rounds_per_conn_(long_lived, 0) {
    for (int i = 0; i < long_lived; ++i) {
      fds_[i] = connectOutbound("127.0.1.10", "127.0.2.10", kAppPort);
      if (fds_[i] < 0) {
        ADD_FAILURE() << "long-lived connection " << i << " did not open";
        return;
      }
      setRecvTimeout(fds_[i], std::chrono::seconds(30));
    }
    for (int t = 0; t < kLoadThreads; ++t) threads_.emplace_back([this, t] { echoLongLived(t); });
    for (const char* src : {"127.0.1.10", "127.0.1.11"}) threads_.emplace_back([this, src] { shortOnes(src); });
    started_ = true;
  }
  RotationLoad(const RotationLoad&) = delete;
  RotationLoad& operator=(const RotationLoad&) = delete;
  ~RotationLoad() {
    stop();
    for (int fd : fds_) {
      if (fd >= 0) ::close(fd);
    }
  }
  bool started() const { return started_; }

  // Stops the load, echoes once more on every long-lived connection
  // (byte-exact) and closes them: how many were intact.
  int finish() {
    stop();
    int intact = 0;
    for (size_t i = 0; i < fds_.size(); ++i) {
      if (fds_[i] < 0) continue;
      std::string msg = "final " + std::to_string(i);
      std::string back(msg.size(), '\0');
      if (sendAll(fds_[i], msg.data(), msg.size()) && recvExact(fds_[i], back.data(), back.size()) && back == msg) {
        ++intact;
      }
      ::close(fds_[i]);
      fds_[i] = -1;
    }
    return intact;
  }
  // After finish(): every long-lived connection intact and echoing, no failure
  // of any kind.
  void expectNothingDropped(int intact) const {
    EXPECT_EQ(intact, static_cast<int>(fds_.size()));
    EXPECT_EQ(long_failures_.load(), 0u);
    EXPECT_EQ(short_failures_.load(), 0u);
    EXPECT_GT(short_ok_.load(), 10u);
    for (size_t i = 0; i < rounds_per_conn_.size(); ++i) {
      EXPECT_GT(rounds_per_conn_[i], 0u) << "connection " << i << " never echoed";
    }
  }
  int longLived() const { return static_cast<int>(fds_.size()); }
  unsigned long long longRounds() const { return long_rounds_.load(); }
  unsigned long long minRounds() const { return *std::min_element(rounds_per_conn_.begin(), rounds_per_conn_.end()); }
  unsigned long long shortOk() const { return short_ok_.load(); }

 private:
  static constexpr int kLoadThreads = 4;

  void stop() {
    stop_ = true;
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
  }
  void echoLongLived(int t) {
    std::mt19937 rng(t);
    while (!stop_.load()) {
      for (size_t i = t; i < fds_.size(); i += kLoadThreads) {
        if (fds_[i] < 0) continue;
        std::string msg = randomBytes(256 + rng() % 4096, rng);
        std::string back(msg.size(), '\0');
        if (sendAll(fds_[i], msg.data(), msg.size()) && recvExact(fds_[i], back.data(), back.size()) && back == msg) {
          ++rounds_per_conn_[i];
          ++long_rounds_;
        } else {
          ADD_FAILURE() << "long-lived connection " << i << " failed: " << std::strerror(errno);
          ++long_failures_;
          ::close(fds_[i]);
          fds_[i] = -1;
        }
      }
    }
  }
  void shortOnes(const std::string& src) {
    bool paced = src == "127.0.1.11";
    std::mt19937 rng(paced ? 100 : 101);
    while (!stop_.load()) {
      std::string msg = randomBytes(64 + rng() % 2048, rng);
      if (echoOnce(src, "127.0.2.10", msg)) {
        ++short_ok_;
      } else {
        ADD_FAILURE() << "short connection from " << src << " failed";
        ++short_failures_;
      }
      // Load pacing, not synchronisation. c2: 0-400 ms, around a 200 ms idle
      // release. c1: 10 ms, because every short connection leaves its ports
      // (one on each side of ferryd, all from 127.0.1.10) in TIME_WAIT for 60
      // s, and 127.0.1.10 has only the 28K ports of ip_local_port_range, shared
      // with every other test of the binary.
      std::this_thread::sleep_for(std::chrono::milliseconds(paced ? rng() % 400 : 10));
    }
  }

  std::vector<int> fds_;
  std::vector<uint64_t> rounds_per_conn_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> long_rounds_{0}, long_failures_{0}, short_ok_{0}, short_failures_{0};
  bool started_ = false;
};

}  // namespace ferry::testing
