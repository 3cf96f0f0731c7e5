// Rotation under load with certificates from ferry-ca (issue 17): two ferryd on loopback with
// identity.source: cluster-ca ask a real in-process ferry-ca (tests/integration/ca_lab.h: the HTTPS
// signing server, a TokenReviewer answering from a table, a PodIndex fed with the lab's pods) for
// their workloads' certificates. ferry-ca signs for 2 s, so ferryd re-fetches about every second;
// then ferry-ca's signing intermediate rotates, then its root (with overlap). 100 long-lived
// connections echo and short ones keep arriving throughout; nothing may drop.

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <map>
#include <vector>

#include "tests/integration/ca_lab.h"
#include "tests/integration/loopback_lab.h"
#include "tests/integration/rotation_load.h"

namespace ferry::testing {
namespace {

using session::CloseReason;
using session::Direction;

class ClusterCaRotationTest : public ::testing::Test {
 protected:
  void TearDown() override {
    n1_.reset();
    n2_.reset();
  }

  // ferry-ca's view of the lab: every pod of LabFiles::defaultPods() on its
  // node, and one ferryd pod per node whose token (the content of
  // <lab>/<node>-token) the reviewer knows.
  void feedCa() {
    std::vector<k8s::Pod> pods;
    for (const auto& p : LabFiles::defaultPods())
      pods.push_back(ca::lab::pod("default", p.name, "uid-" + p.name, p.sa, p.node));
    for (const std::string node : {"n1", "n2"}) {
      pods.push_back(ca::lab::pod(ca::lab::kAgentNamespace, "ferryd-" + node, "uid-ferryd-" + node, "ferryd", node));
      ca_.reviewer().set("hdr.token-" + node + ".sig", ca::lab::agentReview("ferryd-" + node, "uid-ferryd-" + node));
      writeFile(tokenFile(node), "hdr.token-" + node + ".sig");
    }
    ca_.pods().replace(std::move(pods));
  }
  std::string tokenFile(const std::string& node) const { return files_.dir() + "/" + node + "-token"; }
  std::string identityYaml(const std::string& node) const {
    return "identity: {source: cluster-ca, poll_interval: 50ms, cluster_ca: "
           "{address: 127.0.0.1:" +
           std::to_string(ca_.port()) + ", server_name: " + ca::lab::kServerName + ", token_file: " + tokenFile(node) +
           ", request_timeout: 5s}}\n";
  }

  LabFiles files_;
  ca::lab::CaLab ca_{[] {
    ca::lab::LabOptions o;
    o.default_validity = std::chrono::seconds(2);
    return o;
  }()};
  std::unique_ptr<Node> n1_;
  std::unique_ptr<Node> n2_;
};

// Pooled tunnels idle for 200 ms are released, so the paced short connections
// keep making new handshakes with whatever certificate is current.
TEST_F(ClusterCaRotationTest, RefreshIntermediateAndRootRotationUnderLoadDropNothing) {
  // Only ferry-ca issues: no leaf files, and the bundle is ferry-ca's root
  // alone.
  for (const auto& pod : LabFiles::defaultPods()) std::filesystem::remove_all(files_.certDir() + "/default/" + pod.sa);
  writeFile(files_.certDir() + "/bundle.pem", ca::lab::pemOf(ca_.root()));
  feedCa();
  const std::string pool = "pool: {idle_release: 200ms, ping_interval: 100ms, ping_timeout: 10s}\n";
  n1_ = std::make_unique<Node>(files_, "n1", identityYaml("n1") + pool);
  n2_ = std::make_unique<Node>(files_, "n2", identityYaml("n2") + pool);
  ASSERT_TRUE(n1_->started() && n2_->started());
  ASSERT_TRUE(waitFor([&] {
    return httpGet("127.0.1.1", 15021, "/healthz/ready") == 200 && httpGet("127.0.2.1", 15021, "/healthz/ready") == 200;
  })) << "both nodes ready once ferry-ca answers";
  auto signedBy = [&](Node& n) { return n.metric("ferry_cluster_ca_signed_total"); };
  AppServer app("127.0.2.10", kAppPort, AppServer::echo);
  // Ready means ferry-ca answers; a certificate is asked for when a connection
  // first needs its identity, and that connection is reset. So one echo from c1
  // and one from c2 until both pass, and what failed meanwhile is the baseline
  // of the counters asserted at the end.
  ASSERT_TRUE(waitFor([&] {
    return echoOnce("127.0.1.10", "127.0.2.10", "warm c1") && echoOnce("127.0.1.11", "127.0.2.10", "warm c2");
  })) << "n1 signed "
      << signedBy(*n1_) << ", n2 signed " << signedBy(*n2_);
  // client and other on n1, server on n2.
  ASSERT_TRUE(waitFor([&] { return signedBy(*n1_) >= 2 && signedBy(*n2_) >= 1; }));
  const double n1_first = signedBy(*n1_), n2_first = signedBy(*n2_);
  // Counters that must not move under load, by name.
  auto failureCounts = [&] {
    std::map<std::string, uint64_t> out;
    for (Node* n : {n1_.get(), n2_.get()}) {
      std::string node = n == n1_.get() ? "n1 " : "n2 ";
      for (Direction d : {Direction::kOutbound, Direction::kInbound}) {
        for (size_t r = 0; r < static_cast<size_t>(identity::SvidRejection::kCount); ++r) {
          auto why = static_cast<identity::SvidRejection>(r);
          out[node + (d == Direction::kOutbound ? "outbound" : "inbound") + " SVID rejection " +
              identity::svidRejectionLabel(why)] = n->stats().rejections(d, why);
        }
      }
      out[node + "HBONE handshake failures"] = n->stats().hbone_handshake_failures.load();
    }
    for (CloseReason bad : {CloseReason::kNoCertificate, CloseReason::kHandshakeFailed, CloseReason::kPeerReset,
                            CloseReason::kConnectFailed, CloseReason::kTunnelRefused, CloseReason::kInternal}) {
      out[std::string("n1 outbound closes ") + session::closeReasonLabel(bad)] = n1_->closed(Direction::kOutbound, bad);
    }
    return out;
  };
  const std::map<std::string, uint64_t> warmup_failures = failureCounts();

  RotationLoad load(100);
  ASSERT_TRUE(load.started());

  Prober prober(ca_.rootCa());
  auto start = Clock::now();

  // 1. Refreshes from ferry-ca: at least three per identity on each node.
  ASSERT_TRUE(prober.waitProbing([&] {
    return signedBy(*n1_) >= n1_first + 6 && signedBy(*n2_) >= n2_first + 3 && prober.serials() >= 4;
  })) << "n1 signed "
      << signedBy(*n1_) << ", n2 signed " << signedBy(*n2_) << ", serials " << prober.serials();

  // ferry-ca applies its changed files (each a reload): the test polls its watcher.
  auto reloadCa = [&] {
    uint64_t before = ca_.reloads();
    return waitFor([&] {
      ca_.poll();
      return ca_.reloads() == before + 1;
    });
  };
  // Both nodes fetch at least twice more and n2 presents `from_issuer` leaves of the counted issuer.
  auto waitFetchedFrom = [&](size_t from_issuer) {
    double n1_at = signedBy(*n1_), n2_at = signedBy(*n2_);
    return prober.waitProbing([&] {
      return signedBy(*n1_) >= n1_at + 4 && signedBy(*n2_) >= n2_at + 2 && prober.serialsFromIssuer() >= from_issuer;
    });
  };

  // 2. ferry-ca's intermediate rotates (same root).
  ca_.rotate();
  prober.countIssuer(ca_.intermediate());
  ASSERT_TRUE(reloadCa()) << "ferry-ca reloads the new intermediate";
  ASSERT_TRUE(waitFetchedFrom(2)) << "both nodes hold certificates of the new intermediate: n1 signed "
                                  << signedBy(*n1_) << ", n2 " << signedBy(*n2_) << ", n2 presented "
                                  << prober.serialsFromIssuer() << " from it";
  const size_t from_rotated_intermediate = prober.serialsFromIssuer();

  // 3. Root rotation with overlap (docs/security.md), each step on ferry-ca's and both nodes' bundles.
  auto next_root = identity::CertificateAuthority::createRoot(ca::lab::kTrustDomain, std::chrono::hours(24));
  ASSERT_TRUE(next_root.ok()) << next_root.status();
  auto writeBundles = [&](const std::vector<X509*>& roots) {
    ca_.writeBundle(roots);
    std::string pem;
    for (X509* root : roots) pem += ca::lab::pemOf(root);
    writeFile(files_.certDir() + "/bundle.pem", pem);
  };
  auto rootsAre = [&](int n) {
    return n1_->metric("ferry_trust_bundle_roots") == n && n2_->metric("ferry_trust_bundle_roots") == n;
  };
  // Step 1: both roots trusted everywhere.
  writeBundles({ca_.root(), next_root->cert()});
  ASSERT_TRUE(reloadCa()) << "ferry-ca takes the bundle {old, new}";
  ASSERT_TRUE(prober.waitProbing([&] { return rootsAre(2); }));
  // Step 2: ferry-ca signs from an intermediate of the new root.
  ca_.rotate(&*next_root);
  prober.countIssuer(ca_.intermediate());
  ASSERT_TRUE(reloadCa()) << "ferry-ca takes an intermediate of the new root";
  ASSERT_TRUE(waitFetchedFrom(2)) << "both nodes hold certificates of the new root's intermediate";
  // Step 3: the old root leaves (the probe's own certificate moves first).
  prober.useClientCa(*next_root);
  writeBundles({next_root->cert()});
  ASSERT_TRUE(reloadCa()) << "ferry-ca takes the bundle {new}";
  ASSERT_TRUE(prober.waitProbing([&] { return rootsAre(1); }));
  ASSERT_TRUE(waitFetchedFrom(prober.serialsFromIssuer() + 1))
      << "fetches and handshakes go on under the new root alone";

  int intact = load.finish();
  double secs = std::chrono::duration<double>(Clock::now() - start).count();

  std::printf(
      "[ measure  ] %d long-lived connections (%llu echo rounds, min %llu per connection) and %llu short "
      "connections over %.1f s; certificates signed by ferry-ca: n1 %.0f, n2 %.0f; serials presented by n2: "
      "%zu (%zu from the rotated intermediate, %zu from the new root's); ferry-ca reloads %llu\n",
      load.longLived(), load.longRounds(), load.minRounds(), load.shortOk(), secs, signedBy(*n1_), signedBy(*n2_),
      prober.serials(), from_rotated_intermediate, prober.serialsFromIssuer(),
      static_cast<unsigned long long>(ca_.reloads()));
  load.expectNothingDropped(intact);
  // Nothing failed after the warm-up: SVID rejections and handshake failures on
  // both nodes, and no bad close (no_certificate, handshake_failed, ...) of
  // n1's outbound connections.
  for (const auto& [name, count] : failureCounts()) {
    EXPECT_EQ(count, warmup_failures.at(name)) << name << " after the warm-up";
  }
}

}  // namespace
}  // namespace ferry::testing
