// DirCertSource, TlsContextCache and peer verification, with real TLS 1.3 handshakes run in
// memory over BIO pairs (no sockets, no threads).
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proxy/identity/ca.h"
#include "proxy/identity/dir_cert_source.h"
#include "proxy/identity/tls_context.h"
#include "tests/support/forge_cert.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_ca.h"
#include "tests/support/tls_handshake.h"

namespace ferry::identity {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;
using std::chrono::hours;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr const char* kTd = ferry::test_support::kTestTrustDomain;  // clientId's and serverId's

using ferry::test_support::clientId;
using ferry::test_support::serverId;
using ferry::test_support::TempDir;

std::string statusText(const absl::Status& s) { return std::string(s.message()); }

void writeBundle(const std::string& dir, const std::vector<X509*>& roots) {
  std::string pem;
  for (X509* root : roots) pem += *certToPem(root);
  ASSERT_TRUE(writeFileAtomic(dir + "/bundle.pem", pem, 0644).ok());
}

IssuedCert issue(const CertificateAuthority& ca, const SpiffeId& id) {
  auto leaf = ca.issueLeaf(id, hours(1));
  EXPECT_TRUE(leaf.ok()) << leaf.status();
  return *std::move(leaf);
}

void writeSvid(const std::string& dir, const SpiffeId& id, const IssuedCert& leaf,
               const std::vector<X509*>& chain = {}) {
  absl::Status s = writeSvidFiles(dir, id, leaf, chain);
  ASSERT_TRUE(s.ok()) << s;
}

mode_t fileMode(const std::string& path) {
  struct stat st = {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

class IdentityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto root = CertificateAuthority::createRoot(kTd, hours(2));
    ASSERT_TRUE(root.ok()) << root.status();
    root_ = new CertificateAuthority(*std::move(root));
    auto other = CertificateAuthority::createRoot(kTd, hours(2));
    ASSERT_TRUE(other.ok()) << other.status();
    other_root_ = new CertificateAuthority(*std::move(other));
  }
  static void TearDownTestSuite() {
    delete root_;
    delete other_root_;
  }
  void SetUp() override { writeBundle(dir_.path(), {root_->cert()}); }

  static CertificateAuthority* root_;
  static CertificateAuthority* other_root_;  // same trust domain, unrelated key
  TempDir dir_;
};

CertificateAuthority* IdentityTest::root_ = nullptr;
CertificateAuthority* IdentityTest::other_root_ = nullptr;

// ---------------------------------------------------------------- CA files

TEST_F(IdentityTest, CaRoundTripsThroughPemFilesWithPrivateKeyFile) {
  std::string cert = dir_.path() + "/ca.pem";
  std::string key = dir_.path() + "/ca.key";
  ASSERT_TRUE(root_->writePem(cert, key).ok());
  EXPECT_EQ(fileMode(key), 0600u);
  auto loaded = CertificateAuthority::load(cert, key);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->trustDomain(), kTd);
  EXPECT_EQ(X509_cmp(loaded->cert(), root_->cert()), 0);
  auto leaf = loaded->issueLeaf(clientId(), hours(1));
  ASSERT_TRUE(leaf.ok());
  EXPECT_EQ(X509_check_issued(root_->cert(), leaf->cert.get()), X509_V_OK);
}

TEST_F(IdentityTest, CaLoadRejectsKeyOfAnotherCa) {
  std::string cert = dir_.path() + "/ca.pem";
  std::string key = dir_.path() + "/ca.key";
  std::string other_key = dir_.path() + "/other.key";
  ASSERT_TRUE(root_->writePem(cert, key).ok());
  ASSERT_TRUE(other_root_->writePem(dir_.path() + "/other.pem", other_key).ok());
  auto loaded = CertificateAuthority::load(cert, other_key);
  ASSERT_FALSE(loaded.ok());
  EXPECT_THAT(statusText(loaded.status()), HasSubstr("does not match"));
  EXPECT_THAT(statusText(loaded.status()), HasSubstr(other_key));
}

TEST_F(IdentityTest, CaLoadRejectsLeafCertificate) {
  IssuedCert leaf = issue(*root_, clientId());
  writeSvid(dir_.path(), clientId(), leaf);
  std::string base = dir_.path() + "/default/client";
  auto loaded = CertificateAuthority::load(base + "/cert.pem", base + "/key.pem");
  ASSERT_FALSE(loaded.ok());
  EXPECT_THAT(statusText(loaded.status()), HasSubstr("not a CA certificate"));
}

TEST_F(IdentityTest, WriteSvidFilesWritesChainAndPrivateKey) {
  auto inter = root_->issueIntermediate(hours(1));
  ASSERT_TRUE(inter.ok());
  IssuedCert leaf = issue(*inter, clientId());
  writeSvid(dir_.path(), clientId(), leaf, {inter->cert()});
  std::string base = dir_.path() + "/default/client";
  EXPECT_EQ(fileMode(base + "/key.pem"), 0600u);
  auto certs = loadCertsPem(base + "/cert.pem");
  ASSERT_TRUE(certs.ok());
  ASSERT_EQ(certs->size(), 2u);
  EXPECT_EQ(X509_cmp((*certs)[0].get(), leaf.cert.get()), 0);
  EXPECT_EQ(X509_cmp((*certs)[1].get(), inter->cert()), 0);
}

TEST_F(IdentityTest, WriteSvidFilesRefusesPathTraversal) {
  IssuedCert leaf = issue(*root_, clientId());
  EXPECT_FALSE(writeSvidFiles(dir_.path(), SpiffeId::forWorkload(kTd, "..", "x"), leaf, {}).ok());
  EXPECT_FALSE(writeSvidFiles(dir_.path(), *SpiffeId::parse("spiffe://example.org/a/b"), leaf, {}).ok());
}

// ---------------------------------------------------------------- DirCertSource

TEST_F(IdentityTest, DirCertSourceLoadsGoodSvid) {
  IssuedCert leaf = issue(*root_, clientId());
  writeSvid(dir_.path(), clientId(), leaf);
  DirCertSource source(dir_.path(), kTd);
  auto svid = source.svid(clientId());
  ASSERT_TRUE(svid.ok()) << svid.status();
  EXPECT_EQ((*svid)->id, clientId());
  EXPECT_EQ(X509_cmp((*svid)->leaf.get(), leaf.cert.get()), 0);
  EXPECT_TRUE((*svid)->intermediates.empty());
  EXPECT_EQ(EVP_PKEY_eq((*svid)->key.get(), leaf.key.get()), 1);
  EXPECT_GT((*svid)->not_after, std::chrono::system_clock::now() + milliseconds(3500 * 1000));
  EXPECT_LT((*svid)->not_before, std::chrono::system_clock::now());
  auto again = source.svid(clientId());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->get(), svid->get());
  auto bundle = source.bundle();
  ASSERT_TRUE(bundle.ok());
  EXPECT_EQ((*bundle)->trust_domain, kTd);
  ASSERT_EQ((*bundle)->roots.size(), 1u);
}

TEST_F(IdentityTest, DirCertSourceLoadsChainThroughIntermediate) {
  auto inter = root_->issueIntermediate(hours(1));
  ASSERT_TRUE(inter.ok());
  writeSvid(dir_.path(), clientId(), issue(*inter, clientId()), {inter->cert()});
  DirCertSource source(dir_.path(), kTd);
  auto svid = source.svid(clientId());
  ASSERT_TRUE(svid.ok()) << svid.status();
  EXPECT_EQ((*svid)->intermediates.size(), 1u);
}

TEST_F(IdentityTest, DirCertSourceReportsMissingBundle) {
  TempDir empty;
  DirCertSource source(empty.path(), kTd);
  auto svid = source.svid(clientId());
  ASSERT_FALSE(svid.ok());
  EXPECT_THAT(statusText(svid.status()), HasSubstr(empty.path() + "/bundle.pem"));
}

TEST_F(IdentityTest, DirCertSourceReportsMissingCertificate) {
  DirCertSource source(dir_.path(), kTd);
  auto svid = source.svid(clientId());
  ASSERT_FALSE(svid.ok());
  EXPECT_THAT(statusText(svid.status()), HasSubstr(dir_.path() + "/default/client/cert.pem"));
}

TEST_F(IdentityTest, DirCertSourceReportsMissingKey) {
  writeSvid(dir_.path(), clientId(), issue(*root_, clientId()));
  std::string key = dir_.path() + "/default/client/key.pem";
  ASSERT_EQ(::unlink(key.c_str()), 0);
  DirCertSource source(dir_.path(), kTd);
  auto svid = source.svid(clientId());
  ASSERT_FALSE(svid.ok());
  EXPECT_THAT(statusText(svid.status()), HasSubstr(key));
}

TEST_F(IdentityTest, DirCertSourceRejectsKeyThatDoesNotMatchCertificate) {
  IssuedCert a = issue(*root_, clientId());
  IssuedCert b = issue(*root_, clientId());
  a.key = std::move(b.key);
  writeSvid(dir_.path(), clientId(), a);
  DirCertSource source(dir_.path(), kTd);
  auto svid = source.svid(clientId());
  ASSERT_FALSE(svid.ok());
  EXPECT_THAT(statusText(svid.status()), HasSubstr("does not match"));
  EXPECT_THAT(statusText(svid.status()), HasSubstr(dir_.path() + "/default/client/key.pem"));
}

TEST_F(IdentityTest, DirCertSourceRejectsExpiredCertificate) {
  ferry::testing::ForgeOptions opts;
  opts.uri_sans = {clientId().str()};
  opts.not_before_offset = seconds(-7200);
  opts.lifetime = seconds(-3600);
  auto leaf = ferry::testing::forgeLeaf(*root_, opts);
  ASSERT_TRUE(leaf.ok());
  writeSvid(dir_.path(), clientId(), *leaf);
  DirCertSource source(dir_.path(), kTd);
  auto svid = source.svid(clientId());
  ASSERT_FALSE(svid.ok());
  EXPECT_THAT(statusText(svid.status()), HasSubstr("expired"));
  EXPECT_THAT(statusText(svid.status()), HasSubstr("cert.pem"));
}

TEST_F(IdentityTest, DirCertSourceRejectsCertificateForAnotherIdentity) {
  writeSvid(dir_.path(), clientId(), issue(*root_, serverId()));
  DirCertSource source(dir_.path(), kTd);
  auto svid = source.svid(clientId());
  ASSERT_FALSE(svid.ok());
  EXPECT_THAT(statusText(svid.status()), HasSubstr("holds the identity " + serverId().str()));
}

TEST_F(IdentityTest, DirCertSourceRejectsChainFromUntrustedCa) {
  writeSvid(dir_.path(), clientId(), issue(*other_root_, clientId()));
  DirCertSource source(dir_.path(), kTd);
  auto svid = source.svid(clientId());
  ASSERT_FALSE(svid.ok());
  EXPECT_THAT(statusText(svid.status()), HasSubstr("chain does not verify"));
  EXPECT_THAT(statusText(svid.status()), HasSubstr("bundle.pem"));
}

TEST_F(IdentityTest, DirCertSourceRejectsLeafThatIsNotAnSvid) {
  ferry::testing::ForgeOptions opts;
  opts.uri_sans = {clientId().str()};
  opts.is_ca = true;
  auto leaf = ferry::testing::forgeLeaf(*root_, opts);
  ASSERT_TRUE(leaf.ok());
  writeSvid(dir_.path(), clientId(), *leaf);
  DirCertSource source(dir_.path(), kTd);
  auto svid = source.svid(clientId());
  ASSERT_FALSE(svid.ok());
  EXPECT_THAT(statusText(svid.status()), HasSubstr("must not be a CA"));
}

TEST_F(IdentityTest, DirCertSourceRejectsIdentitiesItCannotStore) {
  DirCertSource source(dir_.path(), kTd);
  auto other_td = source.svid(*SpiffeId::parse("spiffe://other.org/ns/default/sa/client"));
  ASSERT_FALSE(other_td.ok());
  EXPECT_THAT(statusText(other_td.status()), HasSubstr("not in trust domain"));
  EXPECT_FALSE(source.svid(SpiffeId::forWorkload(kTd, "..", "..")).ok());
  EXPECT_FALSE(source.svid(SpiffeId::forWorkload(kTd, "a/b", "c")).ok());
  auto not_istio = source.svid(*SpiffeId::parse("spiffe://example.org/workload/x"));
  ASSERT_FALSE(not_istio.ok());
  EXPECT_THAT(statusText(not_istio.status()), HasSubstr("/ns/<namespace>/sa/<service-account>"));
}

TEST_F(IdentityTest, DirCertSourcePicksUpRotatedCertificate) {
  IssuedCert first = issue(*root_, clientId());
  writeSvid(dir_.path(), clientId(), first);
  DirCertSource source(dir_.path(), kTd, milliseconds(0));
  auto before = source.svid(clientId());
  ASSERT_TRUE(before.ok());
  IssuedCert second = issue(*root_, clientId());
  writeSvid(dir_.path(), clientId(), second);
  auto after = source.svid(clientId());
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_NE(after->get(), before->get());
  EXPECT_EQ(X509_cmp((*after)->leaf.get(), second.cert.get()), 0);
}

TEST_F(IdentityTest, DirCertSourceChecksFilesAtMostOncePerInterval) {
  writeSvid(dir_.path(), clientId(), issue(*root_, clientId()));
  DirCertSource source(dir_.path(), kTd, hours(1));
  auto before = source.svid(clientId());
  ASSERT_TRUE(before.ok());
  writeSvid(dir_.path(), clientId(), issue(*root_, clientId()));
  auto after = source.svid(clientId());
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->get(), before->get());
}

TEST_F(IdentityTest, DirCertSourceKeepsPreviousSvidWhenRotationLeavesBrokenFiles) {
  IssuedCert first = issue(*root_, clientId());
  writeSvid(dir_.path(), clientId(), first);
  DirCertSource source(dir_.path(), kTd, milliseconds(0));
  auto before = source.svid(clientId());
  ASSERT_TRUE(before.ok());
  // Half a rotation: a new key next to the old certificate.
  IssuedCert second = issue(*root_, clientId());
  ASSERT_TRUE(writeFileAtomic(dir_.path() + "/default/client/key.pem", *keyToPem(second.key.get()), 0600).ok());
  auto during = source.svid(clientId());
  ASSERT_TRUE(during.ok()) << during.status();
  EXPECT_EQ(during->get(), before->get());
  writeSvid(dir_.path(), clientId(), second);
  auto after = source.svid(clientId());
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(X509_cmp((*after)->leaf.get(), second.cert.get()), 0);
}

TEST_F(IdentityTest, DirCertSourceAcceptsBundleWithSeveralRootsDuringRootRotation) {
  writeBundle(dir_.path(), {other_root_->cert(), root_->cert()});
  writeSvid(dir_.path(), clientId(), issue(*root_, clientId()));
  writeSvid(dir_.path(), serverId(), issue(*other_root_, serverId()));
  DirCertSource source(dir_.path(), kTd);
  EXPECT_TRUE(source.svid(clientId()).ok());
  EXPECT_TRUE(source.svid(serverId()).ok());
  auto bundle = source.bundle();
  ASSERT_TRUE(bundle.ok());
  EXPECT_EQ((*bundle)->roots.size(), 2u);
}

// ---------------------------------------------------------------- TLS

using ferry::test_support::expectDataFlows;
using ferry::test_support::expectPeers;
using ferry::test_support::Handshake;
using ferry::test_support::runHandshake;

class TlsTest : public IdentityTest {
 protected:
  void SetUp() override {
    IdentityTest::SetUp();
    // The server presents a chain through an intermediate; the client is signed by the root.
    auto inter = root_->issueIntermediate(hours(1));
    ASSERT_TRUE(inter.ok());
    writeSvid(dir_.path(), serverId(), issue(*inter, serverId()), {inter->cert()});
    writeSvid(dir_.path(), clientId(), issue(*root_, clientId()));
  }

  std::shared_ptr<boost::asio::ssl::context> serverCtx() {
    auto ctx = server_cache_.serverContext(serverId());
    EXPECT_TRUE(ctx.ok()) << ctx.status();
    return ctx.ok() ? *ctx : nullptr;
  }
  std::shared_ptr<boost::asio::ssl::context> clientCtx(TlsContextCache& cache, const SpiffeId& id) {
    auto ctx = cache.clientContext(id);
    EXPECT_TRUE(ctx.ok()) << ctx.status();
    return ctx.ok() ? *ctx : nullptr;
  }

  DirCertSource server_source_{dir_.path(), kTd};
  TlsContextCache server_cache_{server_source_, kTd};
  DirCertSource client_source_{dir_.path(), kTd};
  TlsContextCache client_cache_{client_source_, kTd};
};

TEST_F(TlsTest, ContextsFollowMeshTlsSettings) {
  auto server = serverCtx();
  auto client = clientCtx(client_cache_, clientId());
  ASSERT_TRUE(server && client);
  for (SSL_CTX* ctx : {server->native_handle(), client->native_handle()}) {
    EXPECT_EQ(SSL_CTX_get_min_proto_version(ctx), TLS1_3_VERSION);
    EXPECT_EQ(SSL_CTX_get_max_proto_version(ctx), TLS1_3_VERSION);
    EXPECT_NE(SSL_CTX_get_options(ctx) & SSL_OP_NO_TICKET, 0u);
    EXPECT_EQ(SSL_CTX_get_session_cache_mode(ctx), SSL_SESS_CACHE_OFF);
    EXPECT_EQ(SSL_CTX_get_max_early_data(ctx), 0u);
    EXPECT_NE(SSL_CTX_get_mode(ctx) & SSL_MODE_RELEASE_BUFFERS, 0);
    EXPECT_EQ(SSL_CTX_get_verify_depth(ctx), 4);
    EXPECT_EQ(X509_VERIFY_PARAM_get_flags(SSL_CTX_get0_param(ctx)) & X509_V_FLAG_PARTIAL_CHAIN, 0u);
  }
  EXPECT_EQ(SSL_CTX_get_verify_mode(server->native_handle()),
            SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT);
  EXPECT_EQ(SSL_CTX_get_verify_mode(client->native_handle()), SSL_VERIFY_PEER);
  EXPECT_EQ(SSL_CTX_get_num_tickets(server->native_handle()), 0u);
}

TEST_F(TlsTest, MutualTlsHandshakeNegotiatesH2AndYieldsBothIdentities) {
  auto server = serverCtx();
  auto client = clientCtx(client_cache_, clientId());
  ASSERT_TRUE(server && client);
  Handshake h = runHandshake(client->native_handle(), server->native_handle());
  ASSERT_TRUE(h.client_ok) << h.client_error;
  ASSERT_TRUE(h.server_ok) << h.server_error;

  EXPECT_EQ(SSL_version(h.client.get()), TLS1_3_VERSION);
  EXPECT_THAT(std::string(SSL_get_cipher_name(h.client.get())),
              AnyOf("TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384"));
  EXPECT_EQ(SSL_session_reused(h.client.get()), 0);
  EXPECT_EQ(negotiatedAlpn(h.client.get()), "h2");
  EXPECT_EQ(negotiatedAlpn(h.server.get()), "h2");

  ASSERT_NO_FATAL_FAILURE(expectPeers(h, kTd, clientId(), serverId()));
  expectDataFlows(h);
}

TEST_F(TlsTest, ServerRejectsClientOfferingNoAlpn) {
  auto server = serverCtx();
  auto client = clientCtx(client_cache_, clientId());
  ASSERT_TRUE(server && client);
  Handshake h = runHandshake(client->native_handle(), server->native_handle(),
                             [](SSL* ssl) { SSL_set_alpn_protos(ssl, nullptr, 0); });
  EXPECT_FALSE(h.server_ok);
  EXPECT_FALSE(h.client_ok);
  EXPECT_THAT(h.client_error, HasSubstr("no application protocol"));
}

TEST_F(TlsTest, ServerRejectsClientOfferingOnlyHttp11) {
  auto server = serverCtx();
  auto client = clientCtx(client_cache_, clientId());
  ASSERT_TRUE(server && client);
  static const unsigned char kHttp11[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  Handshake h = runHandshake(client->native_handle(), server->native_handle(),
                             [](SSL* ssl) { SSL_set_alpn_protos(ssl, kHttp11, sizeof(kHttp11)); });
  EXPECT_FALSE(h.server_ok);
  EXPECT_FALSE(h.client_ok);
  EXPECT_THAT(h.server_error, HasSubstr("no application protocol"));
  EXPECT_THAT(h.client_error, HasSubstr("no application protocol"));
}

TEST_F(TlsTest, ServerRejectsClientWithoutCertificate) {
  auto server = serverCtx();
  auto client = clientCtx(client_cache_, clientId());
  ASSERT_TRUE(server && client);
  Handshake h = runHandshake(client->native_handle(), server->native_handle(),
                             [](SSL* ssl) { SSL_certs_clear(ssl); });
  EXPECT_FALSE(h.server_ok);
  EXPECT_FALSE(h.client_ok);
  EXPECT_THAT(h.server_error, HasSubstr("peer did not return a certificate"));
}

TEST_F(TlsTest, ServerRejectsClientCertificateFromAnotherCa) {
  // The client trusts both roots (so it accepts the server), but its own certificate comes from
  // a CA the server does not trust.
  TempDir client_dir;
  writeBundle(client_dir.path(), {root_->cert(), other_root_->cert()});
  writeSvid(client_dir.path(), clientId(), issue(*other_root_, clientId()));
  DirCertSource source(client_dir.path(), kTd);
  TlsContextCache cache(source, kTd);
  auto server = serverCtx();
  auto client = clientCtx(cache, clientId());
  ASSERT_TRUE(server && client);
  Handshake h = runHandshake(client->native_handle(), server->native_handle());
  EXPECT_FALSE(h.server_ok);
  EXPECT_FALSE(h.client_ok);
  EXPECT_THAT(h.server_error, HasSubstr("certificate verify failed"));
  EXPECT_THAT(h.client_error, HasSubstr("unknown ca"));
}

TEST_F(TlsTest, ClientRejectsServerCertificateFromAnotherCa) {
  TempDir client_dir;
  writeBundle(client_dir.path(), {other_root_->cert()});
  writeSvid(client_dir.path(), clientId(), issue(*other_root_, clientId()));
  DirCertSource source(client_dir.path(), kTd);
  TlsContextCache cache(source, kTd);
  auto server = serverCtx();
  auto client = clientCtx(cache, clientId());
  ASSERT_TRUE(server && client);
  Handshake h = runHandshake(client->native_handle(), server->native_handle());
  EXPECT_FALSE(h.client_ok);
  EXPECT_FALSE(h.server_ok);
  EXPECT_THAT(h.client_error, HasSubstr("certificate verify failed"));
}

TEST_F(TlsTest, VerifyPeerRejectsClientOfAnotherTrustDomain) {
  // Same CA material, but the client's SVID and bundle say other.org: the chain verifies, the
  // trust domain does not match.
  SpiffeId foreign = *SpiffeId::parse("spiffe://other.org/ns/default/sa/client");
  TempDir client_dir;
  writeBundle(client_dir.path(), {root_->cert()});
  writeSvid(client_dir.path(), foreign, issue(*root_, foreign));
  DirCertSource source(client_dir.path(), "other.org");
  TlsContextCache cache(source, "other.org");
  auto server = serverCtx();
  auto client = clientCtx(cache, foreign);
  ASSERT_TRUE(server && client);
  Handshake h = runHandshake(client->native_handle(), server->native_handle());
  ASSERT_TRUE(h.server_ok) << h.server_error;
  auto peer = verifyPeer(h.server.get(), kTd);
  ASSERT_FALSE(peer.ok());
  EXPECT_EQ(peer.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(statusText(peer.status()), HasSubstr("trust domain \"other.org\""));
  EXPECT_THAT(statusText(peer.status()), HasSubstr("\"example.org\""));
}

TEST_F(TlsTest, ServerRejectsTls12OnlyClient) {
  auto server = serverCtx();
  auto client = clientCtx(client_cache_, clientId());
  ASSERT_TRUE(server && client);
  Handshake h = runHandshake(client->native_handle(), server->native_handle(), [](SSL* ssl) {
    SSL_set_min_proto_version(ssl, TLS1_2_VERSION);
    SSL_set_max_proto_version(ssl, TLS1_2_VERSION);
  });
  EXPECT_FALSE(h.server_ok);
  EXPECT_FALSE(h.client_ok);
  EXPECT_THAT(h.server_error, HasSubstr("unsupported protocol"));
}

TEST_F(TlsTest, VerifyPeerRefusesUnfinishedHandshake) {
  auto client = clientCtx(client_cache_, clientId());
  ASSERT_TRUE(client);
  SslPtr ssl(SSL_new(client->native_handle()));
  auto peer = verifyPeer(ssl.get(), kTd);
  ASSERT_FALSE(peer.ok());
  EXPECT_THAT(statusText(peer.status()), HasSubstr("not completed"));
  EXPECT_EQ(negotiatedAlpn(ssl.get()), "");
}

TEST_F(TlsTest, CacheReusesContextUntilCertificateRotates) {
  DirCertSource source(dir_.path(), kTd, milliseconds(0));
  TlsContextCache cache(source, kTd);
  auto first = cache.serverContext(serverId());
  auto again = cache.serverContext(serverId());
  ASSERT_TRUE(first.ok() && again.ok());
  EXPECT_EQ(first->get(), again->get());
  auto client_side = cache.clientContext(serverId());
  ASSERT_TRUE(client_side.ok());
  EXPECT_NE(client_side->get(), first->get());

  IssuedCert rotated = issue(*root_, serverId());
  writeSvid(dir_.path(), serverId(), rotated);
  auto after = cache.serverContext(serverId());
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_NE(after->get(), first->get());
  EXPECT_EQ(X509_cmp(SSL_CTX_get0_certificate((*after)->native_handle()), rotated.cert.get()), 0);
}

TEST_F(TlsTest, CacheReportsMissingIdentity) {
  auto ctx = server_cache_.serverContext(*SpiffeId::parse("spiffe://example.org/ns/none/sa/none"));
  ASSERT_FALSE(ctx.ok());
  EXPECT_THAT(statusText(ctx.status()), HasSubstr("/none/none/cert.pem"));
  auto foreign = server_cache_.clientContext(*SpiffeId::parse("spiffe://other.org/ns/a/sa/b"));
  EXPECT_FALSE(foreign.ok());
}

}  // namespace
}  // namespace ferry::identity
