// CaCertSource: SVIDs issued in-process by the built-in CA, refreshed at half life under a fake
// clock (no sleeps), root rotation with overlap, and real TLS 1.3 handshakes over BIO pairs.
#include <openssl/err.h>
#include <openssl/ssl.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proxy/identity/ca.h"
#include "proxy/identity/ca_cert_source.h"
#include "proxy/identity/tls_context.h"
#include "tests/support/fake_clock.h"
#include "tests/support/test_ca.h"
#include "tests/support/tls_handshake.h"

namespace ferry::identity {
namespace {

using ::testing::HasSubstr;
using std::chrono::hours;
using std::chrono::minutes;
using std::chrono::seconds;
using std::chrono::system_clock;

constexpr const char* kTd = ferry::test_support::kTestTrustDomain;  // newRoot's

std::string statusText(const absl::Status& s) { return std::string(s.message()); }

using ferry::test_support::clientId;
using ferry::test_support::FakeClock;
using ferry::test_support::newIntermediate;
using ferry::test_support::newRoot;
using ferry::test_support::serverId;

std::vector<X509Ptr> certs(const std::vector<X509*>& in) {
  std::vector<X509Ptr> out;
  for (X509* cert : in) out.push_back(upRef(cert));
  return out;
}

// The chain check a peer makes: leaf plus intermediates against the bundle's roots.
absl::Status verifiesAgainst(const Svid& svid, const TrustBundle& bundle) {
  X509StorePtr store(X509_STORE_new());
  X509StackPtr untrusted(sk_X509_new_null());
  X509StoreCtxPtr ctx(X509_STORE_CTX_new());
  for (const X509Ptr& root : bundle.roots) X509_STORE_add_cert(store.get(), root.get());
  ERR_clear_error();
  for (const X509Ptr& cert : svid.intermediates) sk_X509_push(untrusted.get(), upRef(cert.get()).release());
  X509_STORE_CTX_init(ctx.get(), store.get(), svid.leaf.get(), untrusted.get());
  if (X509_verify_cert(ctx.get()) == 1) return absl::OkStatus();
  int err = X509_STORE_CTX_get_error(ctx.get());
  ERR_clear_error();
  return absl::FailedPreconditionError(X509_verify_cert_error_string(err));
}

class CaSourceTest : public ::testing::Test {
 protected:
  std::unique_ptr<CaCertSource> makeSource(CertificateAuthority ca, std::vector<X509*> chain,
                                           std::vector<X509*> roots, seconds lifetime = hours(24)) {
    auto source = CaCertSource::create(std::move(ca), certs(chain), certs(roots), kTd, lifetime, clock_);
    EXPECT_TRUE(source.ok()) << source.status();
    return source.ok() ? *std::move(source) : nullptr;
  }

  std::shared_ptr<const Svid> get(CaCertSource& source, const SpiffeId& id) {
    auto svid = source.svid(id);
    EXPECT_TRUE(svid.ok()) << svid.status();
    return svid.ok() ? *svid : nullptr;
  }

  std::shared_ptr<const TrustBundle> bundleOf(CaCertSource& source) {
    auto bundle = source.bundle();
    EXPECT_TRUE(bundle.ok()) << bundle.status();
    return bundle.ok() ? *bundle : nullptr;
  }

  FakeClock clock_;
  CertificateAuthority root_ = newRoot();
};

// ---------------------------------------------------------------- issuance and caching

TEST_F(CaSourceTest, IssuesLazilyOnFirstUseAndReturnsSamePointerAfter) {
  X509Ptr root_cert = upRef(root_.cert());
  auto source = makeSource(std::move(root_), {}, {root_cert.get()});
  ASSERT_NE(source, nullptr);
  EXPECT_EQ(source->issued(), 0u);
  auto first = get(*source, clientId());
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(source->issued(), 1u);
  clock_.advance(hours(11));
  auto again = get(*source, clientId());
  EXPECT_EQ(again.get(), first.get());
  EXPECT_EQ(source->issued(), 1u);
  EXPECT_EQ(source->refreshes(), 0u);
  EXPECT_EQ(source->failures(), 0u);
}

TEST_F(CaSourceTest, LeafVerifiesAgainstBundleAndIsValidSvidForRequestedId) {
  X509Ptr root_cert = upRef(root_.cert());
  auto source = makeSource(std::move(root_), {}, {root_cert.get()});
  ASSERT_NE(source, nullptr);
  auto svid = get(*source, serverId());
  ASSERT_NE(svid, nullptr);
  EXPECT_EQ(svid->id, serverId());
  auto leaf_id = validateSvidLeaf(svid->leaf.get());
  ASSERT_TRUE(leaf_id.ok()) << leaf_id.status();
  EXPECT_EQ(*leaf_id, serverId());
  EXPECT_EQ(X509_check_private_key(svid->leaf.get(), svid->key.get()), 1);
  EXPECT_TRUE(svid->intermediates.empty()) << "a root CA sends no chain";
  EXPECT_TRUE(verifiesAgainst(*svid, *bundleOf(*source)).ok());
  // The default lifetime, plus the CA's one-minute back-dating of notBefore.
  EXPECT_EQ(std::chrono::duration_cast<seconds>(svid->not_after - svid->not_before), hours(24) + minutes(1));
}

TEST_F(CaSourceTest, ReissuesAtHalfLifetimeNotBeforeAndCountsRefresh) {
  X509Ptr root_cert = upRef(root_.cert());
  auto source = makeSource(std::move(root_), {}, {root_cert.get()}, hours(1));
  ASSERT_NE(source, nullptr);
  auto first = get(*source, clientId());
  clock_.advance(minutes(30) - seconds(1));
  EXPECT_EQ(get(*source, clientId()).get(), first.get());
  EXPECT_EQ(source->refreshes(), 0u);
  clock_.advance(seconds(1));
  auto second = get(*source, clientId());
  ASSERT_NE(second, nullptr);
  EXPECT_NE(second.get(), first.get());
  EXPECT_NE(X509_cmp(second->leaf.get(), first->leaf.get()), 0);
  EXPECT_EQ(EVP_PKEY_eq(second->key.get(), first->key.get()), 0) << "each refresh gets a new key";
  EXPECT_EQ(source->issued(), 2u);
  EXPECT_EQ(source->refreshes(), 1u);
  // The new one is cached for its own half life.
  clock_.advance(minutes(29));
  EXPECT_EQ(get(*source, clientId()).get(), second.get());
  EXPECT_EQ(source->issued(), 2u);
}

TEST_F(CaSourceTest, PreviousSvidStaysUsableByItsHolderAfterRefresh) {
  X509Ptr root_cert = upRef(root_.cert());
  auto source = makeSource(std::move(root_), {}, {root_cert.get()}, hours(1));
  ASSERT_NE(source, nullptr);
  std::shared_ptr<const Svid> held = get(*source, clientId());
  clock_.advance(minutes(30));
  auto fresh = get(*source, clientId());
  ASSERT_NE(fresh.get(), held.get());
  EXPECT_EQ(held.use_count(), 1) << "the source let go; the holder alone keeps it alive";
  ASSERT_NE(held->leaf, nullptr);
  EXPECT_EQ(X509_check_private_key(held->leaf.get(), held->key.get()), 1);
  EXPECT_TRUE(verifiesAgainst(*held, *bundleOf(*source)).ok());
}

TEST_F(CaSourceTest, ConcurrentFirstUsesShareOneIssuance) {
  X509Ptr root_cert = upRef(root_.cert());
  auto source = makeSource(std::move(root_), {}, {root_cert.get()});
  ASSERT_NE(source, nullptr);
  constexpr int kThreads = 8;
  std::vector<const Svid*> seen(kThreads, nullptr);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      auto svid = source->svid(clientId());
      if (svid.ok()) seen[i] = svid->get();
    });
  }
  for (auto& t : threads) t.join();
  for (const Svid* s : seen) EXPECT_EQ(s, seen[0]);
  EXPECT_NE(seen[0], nullptr);
  EXPECT_EQ(source->issued(), 1u);
}

TEST_F(CaSourceTest, RejectsIdentityOfAnotherTrustDomain) {
  X509Ptr root_cert = upRef(root_.cert());
  auto source = makeSource(std::move(root_), {}, {root_cert.get()});
  ASSERT_NE(source, nullptr);
  auto svid = source->svid(*SpiffeId::parse("spiffe://other.org/ns/default/sa/client"));
  ASSERT_FALSE(svid.ok());
  EXPECT_EQ(svid.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(statusText(svid.status()), HasSubstr("spiffe://other.org/ns/default/sa/client"));
  EXPECT_THAT(statusText(svid.status()), HasSubstr("not in trust domain example.org"));
  auto td_only = source->svid(*SpiffeId::parse("spiffe://example.org"));
  ASSERT_FALSE(td_only.ok());
  EXPECT_THAT(statusText(td_only.status()), HasSubstr("has no path"));
  EXPECT_EQ(source->issued(), 0u);
  EXPECT_EQ(source->failures(), 0u);
}

TEST_F(CaSourceTest, RefusesCaOfAnotherTrustDomainOrNotTrustedByBundle) {
  auto other_td = CertificateAuthority::createRoot("other.org", hours(1));
  ASSERT_TRUE(other_td.ok());
  X509Ptr other_td_cert = upRef(other_td->cert());
  auto wrong_td = CaCertSource::create(*std::move(other_td), {}, certs({other_td_cert.get()}), kTd,
                                       hours(1), clock_);
  ASSERT_FALSE(wrong_td.ok());
  EXPECT_THAT(statusText(wrong_td.status()), HasSubstr("trust domain other.org"));

  auto no_roots = CaCertSource::create(newRoot(), {}, {}, kTd, hours(1), clock_);
  ASSERT_FALSE(no_roots.ok());
  EXPECT_THAT(statusText(no_roots.status()), HasSubstr("holds no root"));

  CertificateAuthority stranger = newRoot();
  auto untrusted = CaCertSource::create(std::move(root_), {}, certs({stranger.cert()}), kTd, hours(1), clock_);
  ASSERT_FALSE(untrusted.ok());
  EXPECT_THAT(statusText(untrusted.status()), HasSubstr("does not verify against the trust bundle"));
}

// ---------------------------------------------------------------- intermediates and bundles

TEST_F(CaSourceTest, IntermediateCaLeafCarriesIntermediateAndVerifiesAgainstRoot) {
  CertificateAuthority inter = newIntermediate(root_);
  X509Ptr inter_cert = upRef(inter.cert());
  auto source = makeSource(std::move(inter), {}, {root_.cert()});
  ASSERT_NE(source, nullptr);
  auto svid = get(*source, clientId());
  ASSERT_NE(svid, nullptr);
  ASSERT_EQ(svid->intermediates.size(), 1u);
  EXPECT_EQ(X509_cmp(svid->intermediates[0].get(), inter_cert.get()), 0);
  EXPECT_TRUE(verifiesAgainst(*svid, *bundleOf(*source)).ok());
  Svid bare{svid->id, upRef(svid->leaf.get()), {}, upRef(svid->key.get()), svid->not_before, svid->not_after};
  EXPECT_FALSE(verifiesAgainst(bare, *bundleOf(*source)).ok()) << "the intermediate is what links leaf to root";

  // A chain that names the root (and the CA itself) is tolerated; neither is sent.
  CertificateAuthority inter2 = newIntermediate(root_);
  X509Ptr inter2_cert = upRef(inter2.cert());
  auto with_root = makeSource(std::move(inter2), {inter2_cert.get(), root_.cert()}, {root_.cert()});
  ASSERT_NE(with_root, nullptr);
  auto svid2 = get(*with_root, clientId());
  ASSERT_NE(svid2, nullptr);
  ASSERT_EQ(svid2->intermediates.size(), 1u);
  EXPECT_EQ(X509_cmp(svid2->intermediates[0].get(), inter2_cert.get()), 0);
}

TEST_F(CaSourceTest, BundleWithTwoRootsVerifiesLeavesOfEither) {
  CertificateAuthority second = newRoot();
  X509Ptr first_cert = upRef(root_.cert());
  X509Ptr second_cert = upRef(second.cert());
  auto a = makeSource(std::move(root_), {}, {first_cert.get(), second_cert.get()});
  auto b = makeSource(std::move(second), {}, {first_cert.get(), second_cert.get()});
  ASSERT_TRUE(a && b);
  auto from_a = get(*a, clientId());
  auto from_b = get(*b, serverId());
  ASSERT_TRUE(from_a && from_b);
  for (CaCertSource* source : {a.get(), b.get()}) {
    auto bundle = bundleOf(*source);
    ASSERT_EQ(bundle->roots.size(), 2u);
    EXPECT_TRUE(verifiesAgainst(*from_a, *bundle).ok());
    EXPECT_TRUE(verifiesAgainst(*from_b, *bundle).ok());
  }
  TrustBundle only_first{kTd, certs({first_cert.get()})};
  EXPECT_FALSE(verifiesAgainst(*from_b, only_first).ok());
}

TEST_F(CaSourceTest, SetBundleChangesPointerAndRefusesBundleThatDropsIssuingRoot) {
  CertificateAuthority next = newRoot();
  X509Ptr root_cert = upRef(root_.cert());
  auto source = makeSource(std::move(root_), {}, {root_cert.get()});
  ASSERT_NE(source, nullptr);
  auto before = bundleOf(*source);
  EXPECT_EQ(bundleOf(*source).get(), before.get()) << "same pointer while unchanged";

  ASSERT_TRUE(source->setBundle(certs({root_cert.get(), next.cert()})).ok());
  auto after = bundleOf(*source);
  EXPECT_NE(after.get(), before.get());
  EXPECT_EQ(after->roots.size(), 2u);
  EXPECT_EQ(before->roots.size(), 1u) << "holders of the old bundle see it unchanged";

  absl::Status dropped = source->setBundle(certs({next.cert()}));
  EXPECT_EQ(dropped.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(statusText(dropped), HasSubstr("would not trust the issuing CA"));
  EXPECT_EQ(bundleOf(*source).get(), after.get());
  EXPECT_FALSE(source->setBundle({}).ok());
}

TEST_F(CaSourceTest, RootRotatesWithOverlapAndOldSvidsStayValidUntilOldRootLeaves) {
  CertificateAuthority next = newRoot();
  X509Ptr old_cert = upRef(root_.cert());
  X509Ptr next_cert = upRef(next.cert());
  auto source = makeSource(std::move(root_), {}, {old_cert.get()});
  ASSERT_NE(source, nullptr);
  auto old_svid = get(*source, clientId());

  // Switching before the new root is trusted would break every peer: refused.
  EXPECT_THAT(statusText(source->setAuthority(newRoot(), {})), HasSubstr("add its root to the bundle first"));

  ASSERT_TRUE(source->setBundle(certs({old_cert.get(), next_cert.get()})).ok());
  ASSERT_TRUE(source->setAuthority(std::move(next), {}).ok());
  auto new_svid = get(*source, clientId());
  ASSERT_NE(new_svid.get(), old_svid.get()) << "a new CA re-issues before half life";
  EXPECT_EQ(source->refreshes(), 1u);
  auto overlap = bundleOf(*source);
  EXPECT_TRUE(verifiesAgainst(*old_svid, *overlap).ok());
  EXPECT_TRUE(verifiesAgainst(*new_svid, *overlap).ok());

  ASSERT_TRUE(source->setBundle(certs({next_cert.get()})).ok());
  EXPECT_TRUE(verifiesAgainst(*new_svid, *bundleOf(*source)).ok());
  EXPECT_EQ(get(*source, clientId()).get(), new_svid.get());
}

// ---------------------------------------------------------------- lifecycle

TEST_F(CaSourceTest, ForgetMakesNextCallIssueAnew) {
  X509Ptr root_cert = upRef(root_.cert());
  auto source = makeSource(std::move(root_), {}, {root_cert.get()});
  ASSERT_NE(source, nullptr);
  auto first = get(*source, clientId());
  source->forget(clientId());
  source->forget(serverId());  // never issued: harmless
  auto second = get(*source, clientId());
  ASSERT_NE(second, nullptr);
  EXPECT_NE(second.get(), first.get());
  EXPECT_EQ(source->issued(), 2u);
  EXPECT_EQ(source->refreshes(), 0u) << "a workload coming back is a first issuance, not a refresh";
}

TEST_F(CaSourceTest, LeavesNeverOutliveTheCaAndExpiredCaFailsWithBackOff) {
  CertificateAuthority short_lived = newRoot(hours(2));
  X509Ptr cert = upRef(short_lived.cert());
  auto source = makeSource(std::move(short_lived), {}, {cert.get()});  // 24 h leaves asked
  ASSERT_NE(source, nullptr);
  auto svid = get(*source, clientId());
  ASSERT_NE(svid, nullptr);
  EXPECT_LE(svid->not_after, asn1TimeToTimePoint(X509_get0_notAfter(cert.get())));

  clock_.advance(hours(3));
  auto expired = source->svid(clientId());
  ASSERT_FALSE(expired.ok());
  EXPECT_THAT(statusText(expired.status()), HasSubstr("expired at"));
  EXPECT_THAT(statusText(expired.status()), HasSubstr(clientId().str()));
  EXPECT_EQ(source->failures(), 1u);

  // Within the back-off the error is served without another attempt; after it, retried.
  EXPECT_FALSE(source->svid(clientId()).ok());
  EXPECT_EQ(source->failures(), 1u);
  clock_.advance(kIssueRetryInterval);
  EXPECT_FALSE(source->svid(clientId()).ok());
  EXPECT_EQ(source->failures(), 2u);
  clock_.advance(kIssueRetryInterval);
  EXPECT_FALSE(source->svid(clientId()).ok());
  EXPECT_EQ(source->failures(), 2u) << "the interval doubled";
}

// ---------------------------------------------------------------- keys made elsewhere (ferry-ca)

std::vector<X509*> raw(const std::vector<X509Ptr>& certs) {
  std::vector<X509*> out;
  for (const X509Ptr& cert : certs) out.push_back(cert.get());
  return out;
}

TEST_F(CaSourceTest, SignForMakesAnSvidOfTheCallersKeyThatChainsToTheBundle) {
  CertificateAuthority inter = newIntermediate(root_);
  X509Ptr root_cert = upRef(root_.cert());
  auto source = makeSource(std::move(inter), {}, {root_cert.get()});
  ASSERT_NE(source, nullptr);
  EvpPkeyPtr node_key(EVP_EC_gen("P-384"));
  ASSERT_NE(node_key, nullptr);
  auto signed_leaf = source->signFor(clientId(), node_key.get(), hours(2));
  ASSERT_TRUE(signed_leaf.ok()) << signed_leaf.status();
  auto id = validateSvidLeaf(signed_leaf->leaf.get());
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(*id, clientId());
  EXPECT_EQ(X509_check_private_key(signed_leaf->leaf.get(), node_key.get()), 1) << "the caller's key, not a new one";
  ASSERT_EQ(signed_leaf->intermediates.size(), 1u) << "the intermediate goes with the leaf";
  EXPECT_TRUE(verifyChain(signed_leaf->leaf.get(), raw(signed_leaf->intermediates), *bundleOf(*source)).ok());
  EXPECT_EQ(signed_leaf->generation, 0u);
  auto not_before = asn1TimeToTimePoint(X509_get0_notBefore(signed_leaf->leaf.get()));
  EXPECT_EQ(std::chrono::duration_cast<seconds>(signed_leaf->not_after - not_before), hours(2) + minutes(1));
  EXPECT_EQ(source->issued(), 0u) << "signing for others is not the node's own issuance";
}

TEST_F(CaSourceTest, SignForCutsTheLifetimeToTheCaAndRefusesOtherTrustDomainsAndExpiredCas) {
  CertificateAuthority short_lived = newRoot(hours(2));
  X509Ptr cert = upRef(short_lived.cert());
  auto source = makeSource(std::move(short_lived), {}, {cert.get()});
  ASSERT_NE(source, nullptr);
  EvpPkeyPtr node_key(EVP_EC_gen("P-256"));
  auto cut = source->signFor(clientId(), node_key.get(), hours(24));
  ASSERT_TRUE(cut.ok()) << cut.status();
  EXPECT_LE(cut->not_after, asn1TimeToTimePoint(X509_get0_notAfter(cert.get())));

  auto other = source->signFor(*SpiffeId::parse("spiffe://other.org/ns/a/sa/b"), node_key.get(), hours(1));
  ASSERT_FALSE(other.ok());
  EXPECT_THAT(statusText(other.status()), HasSubstr("not in trust domain"));

  clock_.advance(hours(3));
  auto expired = source->signFor(clientId(), node_key.get(), hours(1));
  ASSERT_FALSE(expired.ok());
  EXPECT_THAT(statusText(expired.status()), HasSubstr("expired at"));
}

TEST_F(CaSourceTest, SignServingNamesItsDnsNamesServesOnlyAsServerAndFollowsTheCaGeneration) {
  X509Ptr root_cert = upRef(root_.cert());
  CertificateAuthority second = newIntermediate(root_);
  auto source = makeSource(std::move(root_), {}, {root_cert.get()});
  ASSERT_NE(source, nullptr);
  EvpPkeyPtr key(EVP_EC_gen("P-256"));
  std::vector<std::string> names = {"ferry-ca", "ferry-ca.ferry-system", "ferry-ca.ferry-system.svc"};
  auto serving = source->signServing(names, key.get(), hours(24));
  ASSERT_TRUE(serving.ok()) << serving.status();
  X509* leaf = serving->leaf.get();
  for (const std::string& name : names) {
    EXPECT_EQ(X509_check_host(leaf, name.data(), name.size(), 0, nullptr), 1) << name;
  }
  EXPECT_NE(X509_check_host(leaf, "ferry-ca.other", 14, 0, nullptr), 1);
  EXPECT_EQ(X509_check_ca(leaf), 0);
  EXPECT_EQ(X509_check_purpose(leaf, X509_PURPOSE_SSL_SERVER, 0), 1);
  EXPECT_NE(X509_check_purpose(leaf, X509_PURPOSE_SSL_CLIENT, 0), 1) << "it never authenticates as a client";
  EXPECT_TRUE(uriSans(leaf).empty()) << "a serving certificate is no SVID";
  EXPECT_TRUE(verifyChain(leaf, {}, *bundleOf(*source)).ok());
  EXPECT_EQ(serving->generation, 0u);

  ASSERT_TRUE(source->setAuthority(std::move(second), {}).ok());
  auto renewed = source->signServing(names, key.get(), hours(24));
  ASSERT_TRUE(renewed.ok()) << renewed.status();
  EXPECT_EQ(renewed->generation, source->authorityGeneration());
  EXPECT_EQ(renewed->generation, 1u);
  EXPECT_EQ(renewed->intermediates.size(), 1u);
}

TEST_F(CaSourceTest, ServingCertificateRefusesMissingOrMalformedDnsNames) {
  EvpPkeyPtr key(EVP_EC_gen("P-256"));
  for (const std::vector<std::string>& names : std::vector<std::vector<std::string>>{
           {}, {""}, {"a..b"}, {"*.ferry-system.svc"}, {"-ferry"}, {"ferry ca"}, {std::string(64, 'a')}}) {
    auto cert = root_.issueServing(names, key.get(), hours(1));
    EXPECT_FALSE(cert.ok()) << (names.empty() ? "(none)" : names.front());
    if (!cert.ok()) {
      EXPECT_EQ(cert.status().code(), absl::StatusCode::kInvalidArgument);
    }
  }
  EXPECT_FALSE(root_.issueServing({"ferry-ca"}, nullptr, hours(1)).ok());
  EXPECT_FALSE(root_.issueLeafForKey(clientId(), nullptr, hours(1)).ok());
  EXPECT_FALSE(root_.issueLeafForKey(clientId(), key.get(), seconds(0)).ok());
}

// ---------------------------------------------------------------- TLS

using ferry::test_support::expectPeers;
using ferry::test_support::Handshake;
using ferry::test_support::runHandshake;

TEST_F(CaSourceTest, MutualTlsHandshakeBetweenTwoNodesOnIntermediatesOfOneRootSucceeds) {
  // Two nodes, as in the lab: each holds its own intermediate signed by the shared root.
  auto server_source = makeSource(newIntermediate(root_), {}, {root_.cert()});
  auto client_source = makeSource(newIntermediate(root_), {}, {root_.cert()});
  ASSERT_TRUE(server_source && client_source);
  TlsContextCache server_cache(*server_source, kTd);
  TlsContextCache client_cache(*client_source, kTd);
  auto server = server_cache.serverContext(serverId());
  auto client = client_cache.clientContext(clientId());
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_TRUE(client.ok()) << client.status();

  Handshake h = runHandshake((*client)->native_handle(), (*server)->native_handle());
  ASSERT_TRUE(h.client_ok) << h.client_error;
  ASSERT_TRUE(h.server_ok) << h.server_error;
  ASSERT_NO_FATAL_FAILURE(expectPeers(h, kTd, clientId(), serverId()));

  ASSERT_EQ(SSL_write(h.client.get(), "ping", 4), 4);
  char buf[8] = {};
  ASSERT_EQ(SSL_read(h.server.get(), buf, sizeof(buf)), 4);
  EXPECT_EQ(std::string(buf, 4), "ping");
}

TEST_F(CaSourceTest, HandshakeSucceedsAfterRefreshWithContextsRebuiltFromNewSvid) {
  X509Ptr root_cert = upRef(root_.cert());
  auto source = makeSource(std::move(root_), {}, {root_cert.get()}, hours(1));
  ASSERT_NE(source, nullptr);
  TlsContextCache cache(*source, kTd);
  auto server_before = cache.serverContext(serverId());
  ASSERT_TRUE(server_before.ok());
  clock_.advance(minutes(30));
  auto server_after = cache.serverContext(serverId());
  auto client = cache.clientContext(clientId());
  ASSERT_TRUE(server_after.ok() && client.ok());
  EXPECT_NE(server_after->get(), server_before->get()) << "a refreshed SVID gets a new context";
  for (auto* server : {server_before->get(), server_after->get()}) {
    Handshake h = runHandshake((*client)->native_handle(), server->native_handle());
    EXPECT_TRUE(h.client_ok) << h.client_error;
    EXPECT_TRUE(h.server_ok) << h.server_error;
  }
}

}  // namespace
}  // namespace ferry::identity
