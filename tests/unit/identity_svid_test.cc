// X.509-SVID leaf validation (docs/security.md, "The SVID rules, and every rejection reason")
// and the in-process CA that mints test certificates.
#include <chrono>
#include <functional>
#include <set>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proxy/identity/ca.h"
#include "proxy/identity/svid.h"
#include "tests/support/forge_cert.h"

namespace ferry::identity {
namespace {

using ::testing::HasSubstr;
using ferry::testing::ForgeOptions;
using ferry::testing::forgeLeaf;
using std::chrono::hours;
using std::chrono::seconds;

constexpr char kTrustDomain[] = "example.org";
constexpr char kWorkload[] = "spiffe://example.org/ns/default/sa/sleep";

class SvidTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto ca = CertificateAuthority::createRoot(kTrustDomain, hours(1));
    ASSERT_TRUE(ca.ok()) << ca.status();
    ca_ = new CertificateAuthority(*std::move(ca));
  }
  static void TearDownTestSuite() {
    delete ca_;
    ca_ = nullptr;
  }

  static ForgeOptions good() {
    ForgeOptions opts;
    opts.uri_sans = {kWorkload};
    return opts;
  }

  // Forges a leaf with `opts` and returns validateSvidLeaf's error message ("" if accepted).
  static std::string rejection(const ForgeOptions& opts) {
    auto leaf = forgeLeaf(*ca_, opts);
    EXPECT_TRUE(leaf.ok()) << leaf.status();
    if (!leaf.ok()) return "issue failed";
    auto id = validateSvidLeaf(leaf->cert.get());
    return id.ok() ? "" : std::string(id.status().message());
  }

  static CertificateAuthority* ca_;
};

CertificateAuthority* SvidTest::ca_ = nullptr;

TEST_F(SvidTest, AcceptsWellFormedLeafAndReturnsItsId) {
  auto leaf = ca_->issueLeaf(*SpiffeId::parse(kWorkload), hours(24));
  ASSERT_TRUE(leaf.ok()) << leaf.status();
  auto id = validateSvidLeaf(leaf->cert.get());
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(id->str(), kWorkload);
}

TEST_F(SvidTest, AcceptsLeafWithoutEku) {
  auto opts = good();
  opts.eku = false;
  EXPECT_EQ(rejection(opts), "");
}

TEST_F(SvidTest, RejectsTwoUriSans) {
  auto opts = good();
  opts.uri_sans.push_back("spiffe://example.org/ns/other/sa/x");
  EXPECT_THAT(rejection(opts), HasSubstr("exactly one URI SAN"));
}

TEST_F(SvidTest, RejectsLeafWithoutUriSan) {
  auto opts = good();
  opts.uri_sans.clear();
  EXPECT_THAT(rejection(opts), HasSubstr("exactly one URI SAN"));
}

TEST_F(SvidTest, RejectsNonSpiffeUri) {
  auto opts = good();
  opts.uri_sans = {"https://example.org/ns/default/sa/sleep"};
  EXPECT_THAT(rejection(opts), HasSubstr("scheme must be 'spiffe'"));
}

TEST_F(SvidTest, RejectsMalformedSpiffeUri) {
  auto opts = good();
  opts.uri_sans = {"spiffe://Example.org/ns/a"};
  EXPECT_THAT(rejection(opts), HasSubstr("lowercase"));
}

TEST_F(SvidTest, RejectsRootPathId) {
  auto opts = good();
  opts.uri_sans = {"spiffe://example.org"};
  EXPECT_THAT(rejection(opts), HasSubstr("non-root path"));
}

TEST_F(SvidTest, RejectsCaLeaf) {
  auto opts = good();
  opts.is_ca = true;
  EXPECT_THAT(rejection(opts), HasSubstr("must not be a CA"));
}

TEST_F(SvidTest, RejectsLeafWithoutDigitalSignature) {
  auto opts = good();
  opts.digital_signature = false;
  EXPECT_THAT(rejection(opts), HasSubstr("digitalSignature"));
}

TEST_F(SvidTest, RejectsLeafWithKeyCertSign) {
  auto opts = good();
  opts.key_cert_sign = true;
  EXPECT_THAT(rejection(opts), HasSubstr("keyCertSign"));
}

TEST_F(SvidTest, RejectsEkuWithoutClientAuth) {
  auto opts = good();
  opts.eku_client = false;
  EXPECT_THAT(rejection(opts), HasSubstr("clientAuth"));
}

TEST_F(SvidTest, RejectsEkuWithoutServerAuth) {
  auto opts = good();
  opts.eku_server = false;
  EXPECT_THAT(rejection(opts), HasSubstr("serverAuth"));
}

TEST_F(SvidTest, RejectsCaCertificateItself) {
  // The root has a trust-domain ID (no path) and is a CA: never an authentication identity.
  auto id = validateSvidLeaf(ca_->cert());
  ASSERT_FALSE(id.ok());
  EXPECT_THAT(std::string(id.status().message()), HasSubstr("non-root path"));
}

TEST_F(SvidTest, RejectsNullCertificate) { EXPECT_FALSE(validateSvidLeaf(nullptr).ok()); }

// Each rule has its own metric label (ferry_svid_rejections_total{reason}).
TEST_F(SvidTest, EveryRejectionNamesTheRuleThatFailed) {
  struct Case {
    const char* what;
    std::function<void(ForgeOptions&)> tweak;
    SvidRejection want;
  };
  const Case cases[] = {
      {"two URI SANs", [](auto& o) { o.uri_sans.push_back("spiffe://example.org/ns/o/sa/x"); }, SvidRejection::kUriSanCount},
      {"no URI SAN", [](auto& o) { o.uri_sans.clear(); }, SvidRejection::kUriSanCount},
      {"https URI", [](auto& o) { o.uri_sans = {"https://example.org/ns/a/sa/b"}; }, SvidRejection::kNotSpiffeId},
      {"upper-case trust domain", [](auto& o) { o.uri_sans = {"spiffe://Example.org/ns/a"}; }, SvidRejection::kNotSpiffeId},
      {"root path", [](auto& o) { o.uri_sans = {"spiffe://example.org"}; }, SvidRejection::kRootPath},
      {"CA leaf", [](auto& o) { o.is_ca = true; }, SvidRejection::kLeafIsCa},
      {"no digitalSignature", [](auto& o) { o.digital_signature = false; }, SvidRejection::kNoDigitalSignature},
      {"keyCertSign", [](auto& o) { o.key_cert_sign = true; }, SvidRejection::kCaKeyUsage},
      {"EKU without clientAuth", [](auto& o) { o.eku_client = false; }, SvidRejection::kEkuNoClientAuth},
      {"EKU without serverAuth", [](auto& o) { o.eku_server = false; }, SvidRejection::kEkuNoServerAuth},
  };
  for (const Case& c : cases) {
    auto opts = good();
    c.tweak(opts);
    auto leaf = forgeLeaf(*ca_, opts);
    ASSERT_TRUE(leaf.ok()) << c.what << ": " << leaf.status();
    SvidRejection why = SvidRejection::kCount;
    EXPECT_FALSE(validateSvidLeaf(leaf->cert.get(), &why).ok()) << c.what;
    EXPECT_STREQ(svidRejectionLabel(why), svidRejectionLabel(c.want)) << c.what;
  }
  SvidRejection why = SvidRejection::kCount;
  EXPECT_FALSE(validateSvidLeaf(nullptr, &why).ok());
  EXPECT_EQ(why, SvidRejection::kNoCertificate);
}

TEST(SvidRejectionTest, ChainErrorsMapToReasonsAndEveryReasonHasALabel) {
  EXPECT_EQ(rejectionForVerifyError(X509_V_ERR_CERT_HAS_EXPIRED, VerifyingRole::kServer), SvidRejection::kExpired);
  EXPECT_EQ(rejectionForVerifyError(X509_V_ERR_CERT_NOT_YET_VALID, VerifyingRole::kServer), SvidRejection::kNotYetValid);
  EXPECT_EQ(rejectionForVerifyError(X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY, VerifyingRole::kServer), SvidRejection::kUntrustedChain);
  EXPECT_EQ(rejectionForVerifyError(X509_V_ERR_CERT_SIGNATURE_FAILURE, VerifyingRole::kServer), SvidRejection::kUntrustedChain);
  EXPECT_EQ(rejectionForVerifyError(X509_V_ERR_CERT_CHAIN_TOO_LONG, VerifyingRole::kServer), SvidRejection::kChainTooLong);
  EXPECT_EQ(rejectionForVerifyError(X509_V_ERR_APPLICATION_VERIFICATION, VerifyingRole::kServer), SvidRejection::kIdentityMismatch);
  EXPECT_EQ(rejectionForVerifyError(X509_V_ERR_INVALID_CA, VerifyingRole::kServer), SvidRejection::kChainInvalid);
  // OpenSSL's purpose check is the EKU rule of the end that verified.
  EXPECT_EQ(rejectionForVerifyError(X509_V_ERR_INVALID_PURPOSE, VerifyingRole::kServer),
            SvidRejection::kEkuNoClientAuth);
  EXPECT_EQ(rejectionForVerifyError(X509_V_ERR_INVALID_PURPOSE, VerifyingRole::kClient),
            SvidRejection::kEkuNoServerAuth);
  std::set<std::string> labels;
  for (size_t r = 0; r < static_cast<size_t>(SvidRejection::kCount); ++r) {
    std::string label = svidRejectionLabel(static_cast<SvidRejection>(r));
    EXPECT_NE(label, "unknown");
    EXPECT_TRUE(labels.insert(label).second) << "duplicate label " << label;
    EXPECT_STRNE(svidRejectionHelp(static_cast<SvidRejection>(r)), "");
  }
}

TEST_F(SvidTest, RootHasCaShape) {
  X509* root = ca_->cert();
  EXPECT_EQ(X509_check_ca(root), 1);
  uint32_t ku = X509_get_key_usage(root);
  EXPECT_NE(ku & KU_KEY_CERT_SIGN, 0u);
  EXPECT_NE(ku & KU_CRL_SIGN, 0u);
  EXPECT_EQ(ku & KU_DIGITAL_SIGNATURE, 0u);
  EXPECT_THAT(uriSans(root), ::testing::ElementsAre("spiffe://example.org"));
  EXPECT_NE(X509_get0_subject_key_id(root), nullptr);
  EXPECT_EQ(X509_check_issued(root, root), X509_V_OK);
  EXPECT_EQ(EVP_PKEY_get_id(ca_->key()), EVP_PKEY_EC);
  EXPECT_EQ(ca_->trustDomain(), kTrustDomain);
}

TEST_F(SvidTest, LeafHasCriticalSanAndKeyUsageAndBackdatedStart) {
  auto leaf = ca_->issueLeaf(*SpiffeId::parse(kWorkload), hours(24));
  ASSERT_TRUE(leaf.ok());
  X509* cert = leaf->cert.get();
  int idx = X509_get_ext_by_NID(cert, NID_subject_alt_name, -1);
  ASSERT_GE(idx, 0);
  EXPECT_EQ(X509_EXTENSION_get_critical(X509_get_ext(cert, idx)), 1);
  idx = X509_get_ext_by_NID(cert, NID_key_usage, -1);
  ASSERT_GE(idx, 0);
  EXPECT_EQ(X509_EXTENSION_get_critical(X509_get_ext(cert, idx)), 1);
  idx = X509_get_ext_by_NID(cert, NID_basic_constraints, -1);
  ASSERT_GE(idx, 0);
  EXPECT_EQ(X509_EXTENSION_get_critical(X509_get_ext(cert, idx)), 1);
  EXPECT_EQ(X509_check_issued(ca_->cert(), cert), X509_V_OK);
  auto now = std::chrono::system_clock::now();
  auto not_before = asn1TimeToTimePoint(X509_get0_notBefore(cert));
  auto not_after = asn1TimeToTimePoint(X509_get0_notAfter(cert));
  EXPECT_LT(not_before, now - seconds(30));
  EXPECT_GT(not_after, now + hours(23));
  EXPECT_LT(not_after, now + hours(25));
}

TEST_F(SvidTest, IntermediateIsPathLenZeroCaChainingToRoot) {
  auto inter = ca_->issueIntermediate(hours(1));
  ASSERT_TRUE(inter.ok()) << inter.status();
  EXPECT_EQ(X509_check_ca(inter->cert()), 1);
  EXPECT_EQ(X509_get_pathlen(inter->cert()), 0);
  EXPECT_EQ(X509_check_issued(ca_->cert(), inter->cert()), X509_V_OK);
  EXPECT_THAT(uriSans(inter->cert()), ::testing::ElementsAre("spiffe://example.org"));
  auto leaf = inter->issueLeaf(*SpiffeId::parse(kWorkload), hours(1));
  ASSERT_TRUE(leaf.ok());
  EXPECT_EQ(X509_check_issued(inter->cert(), leaf->cert.get()), X509_V_OK);
}

TEST_F(SvidTest, IssueLeafRejectsInvalidId) {
  EXPECT_FALSE(ca_->issueLeaf(SpiffeId::forWorkload("example.org", "..", "x"), hours(1)).ok());
  EXPECT_FALSE(ca_->issueLeaf(*SpiffeId::parse("spiffe://example.org"), hours(1)).ok());
}

TEST(CertificateAuthority, CreateRootRejectsInvalidTrustDomain) {
  auto ca = CertificateAuthority::createRoot("Bad.Domain", hours(1));
  ASSERT_FALSE(ca.ok());
  EXPECT_THAT(std::string(ca.status().message()), HasSubstr("lowercase"));
}

TEST(CertificateAuthority, SerialsAreRandomAndPositive) {
  auto ca = CertificateAuthority::createRoot("example.org", hours(1));
  ASSERT_TRUE(ca.ok());
  auto a = ca->issueLeaf(*SpiffeId::parse(kWorkload), hours(1));
  auto b = ca->issueLeaf(*SpiffeId::parse(kWorkload), hours(1));
  ASSERT_TRUE(a.ok() && b.ok());
  const ASN1_INTEGER* sa = X509_get0_serialNumber(a->cert.get());
  const ASN1_INTEGER* sb = X509_get0_serialNumber(b->cert.get());
  EXPECT_NE(ASN1_INTEGER_cmp(sa, sb), 0);
  EXPECT_EQ(ASN1_STRING_type(sa), V_ASN1_INTEGER);  // not V_ASN1_NEG_INTEGER
}

}  // namespace
}  // namespace ferry::identity
