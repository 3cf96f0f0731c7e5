// ferryd's client of ferry-ca (proxy/ca/cluster_ca_source.h), the parts without a network:
// the CSR it sends, the checks an answer must pass before it is used, and its schedule
// (back-off, refresh). The exchanges with a stand-in ferry-ca are in
// tests/integration/cluster_ca_client_test.cc.
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proxy/ca/cluster_ca_source.h"
#include "proxy/identity/ca.h"
#include "tests/support/forge_cert.h"
#include "tests/support/test_ca.h"

namespace ferry::ca {
namespace {

using identity::CertificateAuthority;
using identity::EvpPkeyPtr;
using identity::SpiffeId;
using identity::TrustBundle;
using identity::X509Ptr;
using ::testing::HasSubstr;
using ferry::test_support::newRoot;
using ferry::test_support::pemOf;
using ferry::testing::ForgeOptions;
using std::chrono::hours;
using std::chrono::milliseconds;
using std::chrono::seconds;
using std::chrono::system_clock;

SpiffeId webId() { return SpiffeId::forWorkload("example.org", "default", "web"); }

EvpPkeyPtr newKey() { return EvpPkeyPtr(EVP_EC_gen("P-256")); }

TrustBundle bundleOf(const CertificateAuthority& root) {
  TrustBundle bundle{"example.org", {}};
  bundle.roots.push_back(identity::upRef(root.cert()));
  return bundle;
}

// What ferry-ca would answer: a leaf signed by `ca` with `opts`, then `chain`.
SignResponse answer(const CertificateAuthority& ca, ForgeOptions opts,
                    const std::vector<X509*>& chain = {}) {
  auto leaf = ferry::testing::forgeLeaf(ca, opts);
  EXPECT_TRUE(leaf.ok()) << leaf.status();
  SignResponse out;
  out.cert_chain_pem.push_back(pemOf(leaf->cert.get()));
  for (X509* cert : chain) out.cert_chain_pem.push_back(pemOf(cert));
  return out;
}

ForgeOptions leafFor(const SpiffeId& id, EVP_PKEY* key) {
  ForgeOptions opts;
  opts.uri_sans = {id.str()};
  opts.subject_key = key;
  opts.lifetime = hours(1);
  return opts;
}

TEST(ClusterCaCsr, CarriesExactlyTheIdentityAsOneUriSanAndIsSignedByTheKey) {
  EvpPkeyPtr key = newKey();
  auto csr_pem = makeCsr(webId(), key.get());
  ASSERT_TRUE(csr_pem.ok()) << csr_pem.status();
  EXPECT_THAT(*csr_pem, HasSubstr("-----BEGIN CERTIFICATE REQUEST-----"));

  identity::BioPtr bio(BIO_new_mem_buf(csr_pem->data(), static_cast<int>(csr_pem->size())));
  std::unique_ptr<X509_REQ, decltype(&X509_REQ_free)> req(PEM_read_bio_X509_REQ(bio.get(), nullptr, nullptr, nullptr),
                                                          X509_REQ_free);
  ASSERT_NE(req, nullptr);
  EVP_PKEY* carried = X509_REQ_get0_pubkey(req.get());
  ASSERT_NE(carried, nullptr);
  EXPECT_EQ(EVP_PKEY_get_base_id(carried), EVP_PKEY_EC);
  EXPECT_EQ(EVP_PKEY_get_bits(carried), 256);
  EXPECT_EQ(EVP_PKEY_eq(carried, key.get()), 1);
  EXPECT_EQ(X509_REQ_verify(req.get(), carried), 1) << "the CSR's self-signature does not verify";
  EXPECT_EQ(X509_NAME_entry_count(X509_REQ_get_subject_name(req.get())), 0);

  STACK_OF(X509_EXTENSION)* extensions = X509_REQ_get_extensions(req.get());
  ASSERT_NE(extensions, nullptr);
  ASSERT_EQ(sk_X509_EXTENSION_num(extensions), 1) << "only the subjectAltName";
  X509_EXTENSION* ext = sk_X509_EXTENSION_value(extensions, 0);
  EXPECT_EQ(OBJ_obj2nid(X509_EXTENSION_get_object(ext)), NID_subject_alt_name);
  auto* names = static_cast<GENERAL_NAMES*>(X509V3_EXT_d2i(ext));
  ASSERT_NE(names, nullptr);
  ASSERT_EQ(sk_GENERAL_NAME_num(names), 1);
  const GENERAL_NAME* name = sk_GENERAL_NAME_value(names, 0);
  ASSERT_EQ(name->type, GEN_URI);
  std::string uri(reinterpret_cast<const char*>(ASN1_STRING_get0_data(name->d.uniformResourceIdentifier)),
                  ASN1_STRING_length(name->d.uniformResourceIdentifier));
  EXPECT_EQ(uri, webId().str());
  GENERAL_NAMES_free(names);
  sk_X509_EXTENSION_pop_free(extensions, X509_EXTENSION_free);
}

TEST(ClusterCaAnswer, LeafForOurKeyAndIdentityThroughAnIntermediateIsUsed) {
  CertificateAuthority root = newRoot();
  auto inter = root.issueIntermediate(hours(24));
  ASSERT_TRUE(inter.ok()) << inter.status();
  EvpPkeyPtr key = newKey();
  auto svid = svidFromAnswer(answer(*inter, leafFor(webId(), key.get()), {inter->cert()}), webId(), key.get(),
                             bundleOf(root), system_clock::now());
  ASSERT_TRUE(svid.ok()) << svid.status();
  EXPECT_EQ((*svid)->id, webId());
  EXPECT_EQ((*svid)->intermediates.size(), 1u);
  EXPECT_EQ(EVP_PKEY_eq((*svid)->key.get(), key.get()), 1);
  EXPECT_GT((*svid)->not_after, system_clock::now() + std::chrono::minutes(59));
}

// Each answer a faulty or hostile ferry-ca could send, refused with a reason that names it.
TEST(ClusterCaAnswer, LeafThatIsNotOursOrNotTrustedIsRefusedSayingWhy) {
  CertificateAuthority root = newRoot();
  CertificateAuthority stranger = newRoot();
  auto inter = root.issueIntermediate(hours(24));
  ASSERT_TRUE(inter.ok()) << inter.status();
  EvpPkeyPtr key = newKey();
  auto ours = leafFor(webId(), key.get());
  auto with_ca_bit = ours;
  with_ca_bit.is_ca = true;
  struct Case {
    const char* what;
    SignResponse answer;
    system_clock::duration later;
    const char* expect;
  };
  const Case cases[] = {
      {"another identity", answer(root, leafFor(SpiffeId::forWorkload("example.org", "default", "db"), key.get())),
       {}, "is for spiffe://example.org/ns/default/sa/db"},
      {"another key", answer(root, leafFor(webId(), nullptr)), {}, "another key"},
      {"another root", answer(stranger, ours), {}, "does not verify against the trust bundle"},
      {"no intermediate", answer(*inter, ours), {}, "does not verify against the trust bundle"},
      {"cA true", answer(root, with_ca_bit), {}, "no X.509-SVID"},
      {"expired", answer(root, ours), hours(2), "expired"},
  };
  for (const Case& c : cases) {
    auto svid = svidFromAnswer(c.answer, webId(), key.get(), bundleOf(root), system_clock::now() + c.later);
    ASSERT_FALSE(svid.ok()) << c.what;
    EXPECT_THAT(std::string(svid.status().message()), HasSubstr(c.expect)) << c.what;
  }
}

TEST(ClusterCaAnswer, EmptyOrGarbledChainIsRefused) {
  CertificateAuthority root = newRoot();
  EvpPkeyPtr key = newKey();
  EXPECT_FALSE(svidFromAnswer(SignResponse{}, webId(), key.get(), bundleOf(root), system_clock::now()).ok());
  SignResponse garbled{{"-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n"}};
  EXPECT_FALSE(svidFromAnswer(garbled, webId(), key.get(), bundleOf(root), system_clock::now()).ok());
}

TEST(ClusterCaSchedule, RetryWaitsOneSecondDoublingToSixtyJitteredIntoTheUpperHalf) {
  // The whole base without jitter's discount (unit just below 1), and its half (unit 0).
  const int64_t expected[] = {1000, 2000, 4000, 8000, 16000, 32000, 60000, 60000, 60000};
  for (int failures = 1; failures <= 9; ++failures) {
    int64_t base = expected[failures - 1];
    EXPECT_EQ(retryDelay(failures, 0).count(), base / 2) << failures;
    EXPECT_EQ(retryDelay(failures, 0.999999).count(), base - 1) << failures;
    int64_t mid = retryDelay(failures, 0.5).count();
    EXPECT_GE(mid, base / 2);
    EXPECT_LE(mid, base);
  }
  EXPECT_EQ(retryDelay(1000, 0.5), retryDelay(7, 0.5)) << "stays at the cap however long it fails";
}

TEST(ClusterCaSchedule, RefreshAtHalfTheLifeLeftWhenReceived) {
  auto received = system_clock::now();
  EXPECT_EQ(refreshTime(received, received + hours(24)), received + hours(12));
  // ferry-ca cut the life short (its CA runs out in 2 h): refresh after 1 h, not 12.
  EXPECT_EQ(refreshTime(received, received + hours(2)), received + hours(1));
  EXPECT_EQ(refreshTime(received, received - seconds(1)), received) << "already expired: at once";
}

TEST(ClusterCaSource, RefusesAnAddressWithoutPort) {
  boost::asio::io_context io;
  auto source = ClusterCaSource::create(io, ClusterCaOptions{"ferry-ca.ferry-system.svc", "", "/token", "/b.pem",
                                                             "example.org"});
  ASSERT_FALSE(source.ok());
  EXPECT_THAT(std::string(source.status().message()), HasSubstr("identity.cluster_ca.address"));
}

TEST(ClusterCaServiceName, NameNamespaceSvcWithOrWithoutTheClusterDomainIsAService) {
  auto short_name = serviceOfHost("ferry-ca.ferry-system.svc");
  ASSERT_TRUE(short_name.has_value());
  EXPECT_EQ(short_name->namespace_name, "ferry-system");
  EXPECT_EQ(short_name->name, "ferry-ca");
  auto full = serviceOfHost("ferry-ca.ferry-system.svc.cluster.local");
  ASSERT_TRUE(full.has_value());
  EXPECT_EQ(full->namespace_name, "ferry-system");
  EXPECT_EQ(full->name, "ferry-ca");
}

TEST(ClusterCaServiceName, OtherHostsAreLeftToDns) {
  for (const char* host : {"ferry-ca", "ferry-ca.ferry-system", "ca.example.com", "10.96.0.12", "a.b.svcx",
                           ".ferry-system.svc", "ferry-ca..svc", "svc"}) {
    EXPECT_FALSE(serviceOfHost(host).has_value()) << host;
  }
}

}  // namespace
}  // namespace ferry::ca
