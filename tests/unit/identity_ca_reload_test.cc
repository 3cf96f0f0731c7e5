// WatchedCaSource: the built-in CA's files watched at runtime. Missing material at start
// means not ready (never a crash, never a certificate), good files make it ready, broken
// changes keep the previous material, and a root rotates through three file writes.
// Also the lifecycle piece that goes with workloads: identities no local workload uses are
// forgotten (CaCertSource::retain, TlsContextCache::retain).
#include <openssl/x509.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proxy/identity/ca.h"
#include "proxy/identity/ca_cert_source.h"
#include "proxy/identity/svid.h"
#include "proxy/identity/tls_context.h"
#include "proxy/identity/watched_ca_source.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_ca.h"

namespace ferry::identity {
namespace {

using ::testing::HasSubstr;
using std::chrono::hours;

constexpr const char* kTd = ferry::test_support::kTestTrustDomain;  // newRoot's

using ferry::test_support::clientId;
using ferry::test_support::newRoot;
using ferry::test_support::pemOf;
using ferry::test_support::serverId;

std::string message(const absl::Status& s) { return std::string(s.message()); }

// A node's signer of a day.
CertificateAuthority intermediateOf(const CertificateAuthority& root) {
  return ferry::test_support::newIntermediate(root, hours(24));
}

class CaReloadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(dir_.ok());
    files_ = CaFiles{dir_.file("ca.pem"), dir_.file("ca.key"), dir_.file("bundle.pem")};
  }

  void writeCa(const CertificateAuthority& ca) { ASSERT_TRUE(ca.writePem(files_.ca_cert, files_.ca_key).ok()); }
  void writeBundle(const std::vector<const CertificateAuthority*>& roots) {
    std::string text;
    for (const auto* root : roots) text += pemOf(root->cert());
    ASSERT_TRUE(writeFileAtomic(files_.bundle, text, 0644).ok());
  }
  std::unique_ptr<WatchedCaSource> makeSource() {
    return std::make_unique<WatchedCaSource>(files_, kTd, std::chrono::hours(1));
  }
  static size_t roots(WatchedCaSource& source) {
    auto bundle = source.bundle();
    return bundle.ok() ? (*bundle)->roots.size() : 0;
  }
  // Whether the SVID the source hands out now for `id` was issued by `ca` (intermediates all
  // share one subject name, so the certificate itself is compared).
  static bool issuedBy(WatchedCaSource& source, const SpiffeId& id, const CertificateAuthority& ca) {
    auto svid = source.svid(id);
    EXPECT_TRUE(svid.ok()) << svid.status();
    return svid.ok() && !(*svid)->intermediates.empty() && X509_cmp((*svid)->intermediates[0].get(), ca.cert()) == 0;
  }

  ferry::test_support::TempDir dir_{"careload"};
  CaFiles files_;
  CertificateAuthority root_ = newRoot();
};

TEST_F(CaReloadTest, MissingCaAtStartIsNotReadyWithReasonAndRefusesCertificates) {
  auto source = makeSource();
  EXPECT_FALSE(source->poll());
  EXPECT_FALSE(source->status().ok());
  EXPECT_THAT(message(source->status()), HasSubstr(files_.ca_cert));
  auto svid = source->svid(clientId());
  ASSERT_FALSE(svid.ok());
  EXPECT_THAT(message(svid.status()), HasSubstr("not ready"));
  EXPECT_THAT(message(svid.status()), HasSubstr(files_.ca_cert));
  EXPECT_FALSE(source->bundle().ok());
  EXPECT_EQ(source->current(), nullptr);
  EXPECT_EQ(source->reloadFailures(), 1u);
  EXPECT_FALSE(source->poll()) << "nothing changed: no second attempt, no second log line";
  EXPECT_EQ(source->reloadFailures(), 1u);
}

TEST_F(CaReloadTest, BecomesReadyWhenMaterialAppearsWithoutRestart) {
  auto source = makeSource();
  writeCa(intermediateOf(root_));
  EXPECT_FALSE(source->poll()) << "CA without a bundle";
  EXPECT_THAT(message(source->status()), HasSubstr("bundle"));
  writeBundle({&root_});
  EXPECT_TRUE(source->poll());
  EXPECT_TRUE(source->status().ok()) << source->status();
  auto svid = source->svid(clientId());
  ASSERT_TRUE(svid.ok()) << svid.status();
  EXPECT_TRUE(verifyChain((*svid)->leaf.get(), {(*svid)->intermediates[0].get()}, **source->bundle()).ok());
  EXPECT_EQ(source->reloads(), 1u);
}

TEST_F(CaReloadTest, BrokenCaStartIsNotReadyUntilFixed) {
  writeBundle({&root_});
  ASSERT_TRUE(writeFileAtomic(files_.ca_cert, "not a certificate", 0644).ok());
  ASSERT_TRUE(writeFileAtomic(files_.ca_key, "not a key", 0600).ok());
  auto source = makeSource();
  EXPECT_FALSE(source->poll());
  EXPECT_THAT(message(source->status()), HasSubstr("identity.ca_cert"));
  writeCa(intermediateOf(root_));
  EXPECT_TRUE(source->poll());
  EXPECT_TRUE(source->status().ok());
}

TEST_F(CaReloadTest, CaOfAnotherRootThanTheBundleIsNotReady) {
  CertificateAuthority stranger = newRoot();
  writeBundle({&root_});
  writeCa(intermediateOf(stranger));
  auto source = makeSource();
  EXPECT_FALSE(source->poll());
  EXPECT_THAT(message(source->status()), HasSubstr("does not verify against the trust bundle"));
}

TEST_F(CaReloadTest, BrokenChangeKeepsPreviousMaterialAndCountsFailure) {
  writeBundle({&root_});
  writeCa(intermediateOf(root_));
  auto source = makeSource();
  ASSERT_TRUE(source->poll());
  auto before = *source->svid(clientId());
  ASSERT_TRUE(writeFileAtomic(files_.ca_cert, "-----BEGIN CERTIFICATE-----\ntruncated", 0644).ok());
  EXPECT_FALSE(source->poll());
  EXPECT_EQ(source->reloadFailures(), 1u);
  EXPECT_TRUE(source->status().ok()) << "the previous CA still works: still ready";
  EXPECT_EQ(source->svid(clientId())->get(), before.get());
  ASSERT_TRUE(writeFileAtomic(files_.bundle, "", 0644).ok());
  EXPECT_FALSE(source->poll());
  EXPECT_EQ(roots(*source), 1u);
}

TEST_F(CaReloadTest, NewCertificateWithOldKeyIsRefusedUntilTheKeyFollows) {
  writeBundle({&root_});
  writeCa(intermediateOf(root_));
  auto source = makeSource();
  ASSERT_TRUE(source->poll());
  CertificateAuthority renewed = intermediateOf(root_);
  ASSERT_TRUE(writeFileAtomic(files_.ca_cert, pemOf(renewed.cert()), 0644).ok());
  EXPECT_FALSE(source->poll()) << "an agent writing cert and key one after the other";
  EXPECT_FALSE(issuedBy(*source, clientId(), renewed));
  writeCa(renewed);
  EXPECT_TRUE(source->poll());
  EXPECT_EQ(source->current()->authorityGeneration(), 1u);
  EXPECT_TRUE(issuedBy(*source, clientId(), renewed)) << "re-issued by the new CA on next use";
}

TEST_F(CaReloadTest, RootRotatesWithOverlapThroughThreeFileWrites) {
  CertificateAuthority next = newRoot();
  CertificateAuthority old_inter = intermediateOf(root_);
  CertificateAuthority new_inter = intermediateOf(next);
  writeBundle({&root_});
  writeCa(old_inter);
  auto source = makeSource();
  ASSERT_TRUE(source->poll());
  auto old_svid = *source->svid(clientId());

  writeBundle({&root_, &next});
  ASSERT_TRUE(source->poll());
  EXPECT_EQ(roots(*source), 2u);
  writeCa(new_inter);
  ASSERT_TRUE(source->poll());
  auto new_svid = *source->svid(clientId());
  EXPECT_TRUE(issuedBy(*source, clientId(), new_inter));
  auto overlap = *source->bundle();
  EXPECT_TRUE(verifyChain(old_svid->leaf.get(), {old_svid->intermediates[0].get()}, *overlap).ok())
      << "certificates of the old CA stay valid while both roots are trusted";
  writeBundle({&next});
  ASSERT_TRUE(source->poll());
  EXPECT_EQ(roots(*source), 1u);
  EXPECT_TRUE(verifyChain(new_svid->leaf.get(), {new_svid->intermediates[0].get()}, **source->bundle()).ok());
  EXPECT_EQ(source->reloads(), 4u);
  EXPECT_EQ(source->reloadFailures(), 0u);
}

TEST_F(CaReloadTest, RemovingOldRootBeforeSwitchingTheCaIsRefused) {
  CertificateAuthority next = newRoot();
  writeBundle({&root_});
  writeCa(intermediateOf(root_));
  auto source = makeSource();
  ASSERT_TRUE(source->poll());
  writeBundle({&next});
  EXPECT_FALSE(source->poll());
  EXPECT_EQ(source->reloadFailures(), 1u);
  EXPECT_EQ(roots(*source), 1u);
  EXPECT_TRUE(source->svid(clientId()).ok()) << "still issuing from the CA the old bundle trusts";
}

TEST_F(CaReloadTest, CaAndBundleChangedTogetherAreAppliedTogether) {
  CertificateAuthority next = newRoot();
  writeBundle({&root_});
  writeCa(intermediateOf(root_));
  auto source = makeSource();
  ASSERT_TRUE(source->poll());
  CertificateAuthority new_inter = intermediateOf(next);
  writeBundle({&next});
  writeCa(new_inter);
  EXPECT_TRUE(source->poll()) << "neither half alone would be accepted";
  EXPECT_TRUE(issuedBy(*source, clientId(), new_inter));
}

TEST_F(CaReloadTest, UnchangedFilesAreNotApplied) {
  writeBundle({&root_});
  writeCa(intermediateOf(root_));
  auto source = makeSource();
  ASSERT_TRUE(source->poll());
  auto svid = *source->svid(clientId());
  writeBundle({&root_});  // rewritten with the same content: a new inode, nothing new
  EXPECT_FALSE(source->poll());
  EXPECT_EQ(source->reloads(), 1u);
  EXPECT_EQ(source->svid(clientId())->get(), svid.get());
}

// ---------------------------------------------------------------- forgetting identities

TEST(IdentityRetainTest, CertificatesAndContextsOfIdentitiesNoWorkloadUsesAreForgotten) {
  CertificateAuthority root = newRoot();
  X509Ptr root_cert = upRef(root.cert());
  std::vector<X509Ptr> roots;
  roots.push_back(upRef(root_cert.get()));
  auto source = CaCertSource::create(std::move(root), {}, std::move(roots), kTd, hours(1));
  ASSERT_TRUE(source.ok()) << source.status();
  TlsContextCache cache(**source, kTd);
  auto client_ctx = cache.clientContext(clientId());
  ASSERT_TRUE(client_ctx.ok());
  ASSERT_TRUE(cache.serverContext(serverId()).ok());
  auto client_svid = *(*source)->svid(clientId());
  auto server_svid = *(*source)->svid(serverId());
  EXPECT_EQ((*source)->cachedCount(), 2u);

  absl::flat_hash_set<SpiffeId> keep = {clientId()};
  EXPECT_EQ((*source)->retain(keep), 1u);
  EXPECT_EQ(cache.retain(keep), 1u);
  EXPECT_EQ((*source)->cachedCount(), 1u);
  EXPECT_EQ((*source)->forgotten(), 1u);
  EXPECT_EQ((*source)->svid(clientId())->get(), client_svid.get()) << "kept identities keep their SVID";
  EXPECT_EQ(cache.clientContext(clientId())->get(), client_ctx->get());
  auto again = (*source)->svid(serverId());
  ASSERT_TRUE(again.ok());
  EXPECT_NE(again->get(), server_svid.get()) << "a workload coming back gets a fresh SVID";
  EXPECT_EQ((*source)->refreshes(), 0u);
}

}  // namespace
}  // namespace ferry::identity
