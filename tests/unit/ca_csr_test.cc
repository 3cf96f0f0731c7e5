// parseCsr: the CSR rules of docs/ferry-ca.md "Protocol", each accepted and refused, with
// CSRs made here through OpenSSL (including ones a correct client would never send).
#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/param_build.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>

#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proxy/ca/csr.h"

namespace ferry::ca {
namespace {

using identity::BioPtr;
using identity::EvpPkeyPtr;
using ::testing::HasSubstr;

using X509ReqPtr = std::unique_ptr<X509_REQ, identity::OpenSslDeleter<X509_REQ, X509_REQ_free>>;

constexpr char kId[] = "spiffe://cluster.local/ns/shop/sa/cart";

EvpPkeyPtr ecKey(const char* curve = "P-256") { return EvpPkeyPtr(EVP_EC_gen(curve)); }

// RSA keys are slow to make: one of each size for the whole suite.
EVP_PKEY* rsaKey(unsigned bits) {
  static std::vector<std::pair<unsigned, EvpPkeyPtr>> keys;
  for (auto& [b, key] : keys) {
    if (b == bits) return key.get();
  }
  keys.emplace_back(bits, EvpPkeyPtr(EVP_RSA_gen(bits)));
  return keys.back().second.get();
}

// What goes into a CSR; the defaults make a good one.
struct CsrSpec {
  explicit CsrSpec(EVP_PKEY* carried) : key(carried) {}
  CsrSpec& signedBy(EVP_PKEY* k) { signing_key = k; return *this; }
  CsrSpec& withSans(std::string s) { sans = std::move(s); return *this; }
  CsrSpec& withBasicConstraints(std::string s) { basic_constraints = std::move(s); return *this; }
  CsrSpec& withCommonName(std::string s) { common_name = std::move(s); return *this; }

  EVP_PKEY* key;                    // the key the CSR carries
  EVP_PKEY* signing_key = nullptr;  // the key it is signed with; `key` when null
  // subjectAltName in OpenSSL's config syntax ("URI:spiffe://...,DNS:x"); none if empty.
  std::string sans = std::string("URI:") + kId;
  std::string basic_constraints;    // "critical,CA:TRUE" etc.; none if empty
  std::string common_name;
};

std::string makeCsr(const CsrSpec& spec) {
  X509ReqPtr req(X509_REQ_new());
  EXPECT_EQ(X509_REQ_set_version(req.get(), 0), 1);
  if (!spec.common_name.empty()) {
    X509_NAME* name = X509_REQ_get_subject_name(req.get());
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                               reinterpret_cast<const unsigned char*>(spec.common_name.c_str()), -1, -1, 0);
  }
  EXPECT_EQ(X509_REQ_set_pubkey(req.get(), spec.key), 1);
  STACK_OF(X509_EXTENSION)* exts = sk_X509_EXTENSION_new_null();
  auto add = [&](int nid, const std::string& value) {
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, nullptr, nid, value.c_str());
    EXPECT_NE(ext, nullptr) << value;
    sk_X509_EXTENSION_push(exts, ext);
  };
  if (!spec.sans.empty()) add(NID_subject_alt_name, spec.sans);
  if (!spec.basic_constraints.empty()) add(NID_basic_constraints, spec.basic_constraints);
  if (sk_X509_EXTENSION_num(exts) > 0) {
    EXPECT_EQ(X509_REQ_add_extensions(req.get(), exts), 1);
  }
  sk_X509_EXTENSION_pop_free(exts, X509_EXTENSION_free);
  EXPECT_GT(X509_REQ_sign(req.get(), spec.signing_key != nullptr ? spec.signing_key : spec.key, EVP_sha256()), 0);
  BioPtr bio(BIO_new(BIO_s_mem()));
  EXPECT_EQ(PEM_write_bio_X509_REQ(bio.get(), req.get()), 1);
  char* data = nullptr;
  long len = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(len));
}

std::string refusal(const std::string& pem) {
  auto parsed = parseCsr(pem);
  if (parsed.ok()) {
    ADD_FAILURE() << "accepted " << parsed->id.str();
    return "";
  }
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << parsed.status();
  return std::string(parsed.status().message());
}

// ---------------------------------------------------------------- accepted

TEST(CaCsrTest, AcceptsP256CsrAndReturnsItsWorkloadIdAndKey) {
  EvpPkeyPtr key = ecKey();
  auto parsed = parseCsr(makeCsr(CsrSpec(key.get()).withCommonName("ignored subject")));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->id.str(), kId);
  EXPECT_EQ(parsed->workload.namespace_name, "shop");
  EXPECT_EQ(parsed->workload.service_account, "cart");
  EXPECT_EQ(parsed->key_type, "ECDSA P-256");
  ASSERT_NE(parsed->public_key, nullptr);
  EXPECT_EQ(EVP_PKEY_eq(parsed->public_key.get(), key.get()), 1);
}

TEST(CaCsrTest, AcceptsP384AndRsaFrom2048To4096Bits) {
  EvpPkeyPtr p384 = ecKey("P-384");
  auto ec = parseCsr(makeCsr(CsrSpec(p384.get())));
  ASSERT_TRUE(ec.ok()) << ec.status();
  EXPECT_EQ(ec->key_type, "ECDSA P-384");
  for (unsigned bits : {2048u, 4096u}) {
    auto rsa = parseCsr(makeCsr(CsrSpec(rsaKey(bits))));
    ASSERT_TRUE(rsa.ok()) << bits << ": " << rsa.status();
    EXPECT_EQ(rsa->key_type, "RSA " + std::to_string(bits));
  }
}

TEST(CaCsrTest, AcceptsRequestedBasicConstraintsWithCaFalse) {
  EvpPkeyPtr key = ecKey();
  auto parsed = parseCsr(makeCsr(CsrSpec(key.get()).withBasicConstraints("critical,CA:FALSE")));
  EXPECT_TRUE(parsed.ok()) << parsed.status();
}

TEST(CaCsrTest, AcceptsIdOfAnyTrustDomainLeavingThatCheckToTheAuthorizer) {
  EvpPkeyPtr key = ecKey();
  auto parsed = parseCsr(makeCsr(CsrSpec(key.get()).withSans("URI:spiffe://other.example/ns/a/sa/b")));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->id.trustDomain(), "other.example");
}

// ---------------------------------------------------------------- not one PEM CSR

TEST(CaCsrTest, RefusesGarbageEmptyAndCertificatePem) {
  EXPECT_THAT(refusal(""), HasSubstr("not a PEM \"CERTIFICATE REQUEST\""));
  EXPECT_THAT(refusal("hello, CA"), HasSubstr("not a PEM"));
  EXPECT_THAT(refusal("-----BEGIN CERTIFICATE REQUEST-----\n!!!!\n-----END CERTIFICATE REQUEST-----\n"),
              HasSubstr("not a PEM"));
  EXPECT_THAT(refusal("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"), HasSubstr("not a PEM"));
}

TEST(CaCsrTest, RefusesTruncatedCsr) {
  EvpPkeyPtr key = ecKey();
  std::string pem = makeCsr(CsrSpec(key.get()));
  EXPECT_THAT(refusal(pem.substr(0, pem.size() / 2)), HasSubstr("not a PEM"));
  // Whole PEM lines, but base64 of a DER cut short.
  std::string body = pem.substr(0, pem.find("-----END"));
  std::string shortened = body.substr(0, body.rfind('\n', body.size() - 2) + 1) + "-----END CERTIFICATE REQUEST-----\n";
  EXPECT_THAT(refusal(shortened), HasSubstr("not a PEM"));
}

TEST(CaCsrTest, RefusesTwoCsrsInOneBody) {
  EvpPkeyPtr key = ecKey();
  std::string one = makeCsr(CsrSpec(key.get()));
  EXPECT_THAT(refusal(one + one), HasSubstr("more than one PEM block"));
}

// ---------------------------------------------------------------- signature and key

TEST(CaCsrTest, RefusesCsrSignedByAnotherKeyThanItCarries) {
  EvpPkeyPtr carried = ecKey();
  EvpPkeyPtr signer = ecKey();
  EXPECT_THAT(refusal(makeCsr(CsrSpec(carried.get()).signedBy(signer.get()))),
              HasSubstr("signature does not verify"));
}

TEST(CaCsrTest, RefusesOtherCurvesAndKeyTypesSayingWhatTheyWere) {
  EvpPkeyPtr p521 = ecKey("P-521");
  EXPECT_THAT(refusal(makeCsr(CsrSpec(p521.get()))), HasSubstr("curve secp521r1"));
  EvpPkeyPtr k256 = ecKey("secp256k1");
  EXPECT_THAT(refusal(makeCsr(CsrSpec(k256.get()))), HasSubstr("curve secp256k1"));
  EvpPkeyPtr ed(EVP_PKEY_Q_keygen(nullptr, nullptr, "ED25519"));
  ASSERT_NE(ed, nullptr);
  // Ed25519 signs without a digest.
  X509ReqPtr req(X509_REQ_new());
  X509_REQ_set_pubkey(req.get(), ed.get());
  ASSERT_GT(X509_REQ_sign(req.get(), ed.get(), nullptr), 0);
  BioPtr bio(BIO_new(BIO_s_mem()));
  PEM_write_bio_X509_REQ(bio.get(), req.get());
  char* data = nullptr;
  long len = BIO_get_mem_data(bio.get(), &data);
  EXPECT_THAT(refusal(std::string(data, static_cast<size_t>(len))), HasSubstr("a key of type ED25519"));
}

// An RSA public key with an odd modulus of `bits` bits: not a product of two primes, but the
// size is judged before any signature, and making a real key of this size takes seconds.
EvpPkeyPtr rsaPublicKeyOfSize(int bits) {
  identity::BignumPtr n(BN_new());
  identity::BignumPtr e(BN_new());
  EXPECT_EQ(BN_rand(n.get(), bits, BN_RAND_TOP_ONE, BN_RAND_BOTTOM_ODD), 1);
  EXPECT_EQ(BN_set_word(e.get(), RSA_F4), 1);
  OSSL_PARAM_BLD* bld = OSSL_PARAM_BLD_new();
  OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_N, n.get());
  OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_E, e.get());
  OSSL_PARAM* params = OSSL_PARAM_BLD_to_param(bld);
  EVP_PKEY_CTX* ctx = EVP_PKEY_CTX_new_from_name(nullptr, "RSA", nullptr);
  EVP_PKEY* key = nullptr;
  EXPECT_EQ(EVP_PKEY_fromdata_init(ctx), 1);
  EXPECT_EQ(EVP_PKEY_fromdata(ctx, &key, EVP_PKEY_PUBLIC_KEY, params), 1);
  EVP_PKEY_CTX_free(ctx);
  OSSL_PARAM_free(params);
  OSSL_PARAM_BLD_free(bld);
  return EvpPkeyPtr(key);
}

TEST(CaCsrTest, RefusesRsaKeysOutside2048To4096Bits) {
  EXPECT_THAT(refusal(makeCsr(CsrSpec(rsaKey(1024)))), HasSubstr("an RSA key of 1024 bits"));
  EvpPkeyPtr big = rsaPublicKeyOfSize(4160);
  EvpPkeyPtr signer = ecKey();
  EXPECT_THAT(refusal(makeCsr(CsrSpec(big.get()).signedBy(signer.get()))), HasSubstr("an RSA key of 4160 bits"));
}

// ---------------------------------------------------------------- SANs

TEST(CaCsrTest, RefusesCsrWithoutSan) {
  EvpPkeyPtr key = ecKey();
  EXPECT_THAT(refusal(makeCsr(CsrSpec(key.get()).withSans(""))), HasSubstr("requests no SAN"));
}

TEST(CaCsrTest, RefusesDnsIpAndEmailSansBesideOrInsteadOfTheUri) {
  EvpPkeyPtr key = ecKey();
  std::string uri = std::string("URI:") + kId;
  EXPECT_THAT(refusal(makeCsr(CsrSpec(key.get()).withSans(uri + ",DNS:cart.shop.svc"))),
              HasSubstr("a DNS name \"cart.shop.svc\""));
  EXPECT_THAT(refusal(makeCsr(CsrSpec(key.get()).withSans("IP:10.0.0.1," + uri))), HasSubstr("an IP address"));
  EXPECT_THAT(refusal(makeCsr(CsrSpec(key.get()).withSans("email:a@b.c"))), HasSubstr("an email address"));
}

TEST(CaCsrTest, RefusesTwoUriSans) {
  EvpPkeyPtr key = ecKey();
  EXPECT_THAT(refusal(makeCsr(CsrSpec(key.get()).withSans(std::string("URI:") + kId + ",URI:spiffe://cluster.local/ns/shop/sa/pay"))),
              HasSubstr("2 URI SANs"));
}

TEST(CaCsrTest, RefusesUriThatIsNoSpiffeIdOrNoWorkloadId) {
  EvpPkeyPtr key = ecKey();
  EXPECT_THAT(refusal(makeCsr(CsrSpec(key.get()).withSans("URI:https://cluster.local/ns/a/sa/b"))),
              HasSubstr("not a SPIFFE ID"));
  EXPECT_THAT(refusal(makeCsr(CsrSpec(key.get()).withSans("URI:spiffe://cluster.local"))),
              HasSubstr("not a workload ID"));
  EXPECT_THAT(refusal(makeCsr(CsrSpec(key.get()).withSans("URI:spiffe://cluster.local/ns/a/sa/b/extra"))),
              HasSubstr("not a workload ID"));
  EXPECT_THAT(refusal(makeCsr(CsrSpec(key.get()).withSans("URI:spiffe://cluster.local/ns/a/xx/b"))),
              HasSubstr("not a workload ID"));
}

// ---------------------------------------------------------------- CA bit

TEST(CaCsrTest, RefusesRequestedBasicConstraintsWithCaTrue) {
  EvpPkeyPtr key = ecKey();
  EXPECT_THAT(refusal(makeCsr(CsrSpec(key.get()).withBasicConstraints("critical,CA:TRUE"))),
              HasSubstr("cA true"));
}

}  // namespace
}  // namespace ferry::ca
