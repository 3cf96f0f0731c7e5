#include "tests/support/forge_cert.h"

#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proxy/common/status_macros.h"

namespace ferry::testing {
namespace {

using identity::openSslError;

// Adds extension `nid` written as in openssl.cnf ("critical,CA:FALSE"); `ctx` names the
// subject and issuer that key identifiers are taken from.
absl::Status addConfExt(X509* x, X509V3_CTX* ctx, int nid, const std::string& value) {
  X509_EXTENSION* ext = X509V3_EXT_nconf_nid(nullptr, ctx, nid, value.c_str());
  bool added = ext != nullptr && X509_add_ext(x, ext, -1) == 1;
  X509_EXTENSION_free(ext);
  if (!added) return openSslError(absl::StrCat("cannot add ", OBJ_nid2sn(nid), " \"", value, "\""));
  return absl::OkStatus();
}

std::string keyUsage(const ForgeOptions& opts) {
  std::vector<std::string> bits;
  if (opts.digital_signature) bits.push_back("digitalSignature");
  if (opts.key_cert_sign) bits.push_back("keyCertSign");
  // RFC 5280 forbids an empty keyUsage (OpenSSL flags it as malformed): a leaf without
  // digitalSignature is then an RSA-style keyEncipherment-only certificate.
  if (bits.empty()) bits.push_back("keyEncipherment");
  return absl::StrCat("critical,", absl::StrJoin(bits, ","));
}

// Serial, validity, key and issuer name; extensions are added after.
absl::StatusOr<identity::X509Ptr> newLeaf(const identity::CertificateAuthority& ca, EVP_PKEY* key,
                                          const ForgeOptions& opts) {
  identity::X509Ptr x(X509_new());
  identity::BignumPtr serial(BN_new());
  // 127 random bits with the top one set: positive and never zero.
  if (!x || !serial || X509_set_version(x.get(), X509_VERSION_3) != 1 ||
      BN_rand(serial.get(), 127, BN_RAND_TOP_ONE, BN_RAND_BOTTOM_ANY) != 1 ||
      BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(x.get())) == nullptr ||
      X509_gmtime_adj(X509_getm_notBefore(x.get()), static_cast<long>(opts.not_before_offset.count())) == nullptr ||
      X509_gmtime_adj(X509_getm_notAfter(x.get()), static_cast<long>(opts.lifetime.count())) == nullptr ||
      X509_set_pubkey(x.get(), key) != 1 ||
      X509_set_issuer_name(x.get(), X509_get_subject_name(ca.cert())) != 1) {
    return openSslError("cannot build the forged certificate");
  }
  return x;
}

}  // namespace

absl::StatusOr<identity::IssuedCert> forgeLeaf(const identity::CertificateAuthority& ca,
                                               const ForgeOptions& opts) {
  ERR_clear_error();
  identity::EvpPkeyPtr key =
      opts.subject_key != nullptr ? identity::upRef(opts.subject_key) : identity::EvpPkeyPtr(EVP_EC_gen("P-256"));
  if (!key) return openSslError("cannot generate ECDSA P-256 key");
  FERRY_ASSIGN_OR_RETURN(identity::X509Ptr x, newLeaf(ca, key.get(), opts));
  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, ca.cert(), x.get(), nullptr, nullptr, 0);
  FERRY_RETURN_IF_ERROR(
      addConfExt(x.get(), &ctx, NID_basic_constraints, opts.is_ca ? "critical,CA:TRUE" : "critical,CA:FALSE"));
  FERRY_RETURN_IF_ERROR(addConfExt(x.get(), &ctx, NID_key_usage, keyUsage(opts)));
  if (opts.eku) {
    std::vector<std::string> purposes;
    if (opts.eku_server) purposes.push_back("serverAuth");
    if (opts.eku_client) purposes.push_back("clientAuth");
    if (purposes.empty()) return absl::InvalidArgumentError("an extendedKeyUsage needs serverAuth or clientAuth");
    FERRY_RETURN_IF_ERROR(addConfExt(x.get(), &ctx, NID_ext_key_usage, absl::StrJoin(purposes, ",")));
  }
  if (!opts.uri_sans.empty()) {
    // Built, not written as config text: a URI may hold the ',' that config text splits on.
    FERRY_ASSIGN_OR_RETURN(identity::GeneralNamesPtr names, identity::subjectAltNames(opts.uri_sans));
    if (X509_add1_ext_i2d(x.get(), NID_subject_alt_name, names.get(), /*crit=*/1, X509V3_ADD_DEFAULT) != 1) {
      return openSslError("cannot add subjectAltName");
    }
  }
  FERRY_RETURN_IF_ERROR(addConfExt(x.get(), &ctx, NID_subject_key_identifier, "hash"));
  FERRY_RETURN_IF_ERROR(addConfExt(x.get(), &ctx, NID_authority_key_identifier, "keyid"));
  if (X509_sign(x.get(), ca.key(), EVP_sha256()) <= 0) return openSslError("cannot sign the forged certificate");
  // X509_dup goes through DER, so the copy's cached extension data describe what peers see.
  identity::X509Ptr cert(X509_dup(x.get()));
  if (!cert) return openSslError("cannot copy the forged certificate");
  return identity::IssuedCert{std::move(cert), std::move(key)};
}

}  // namespace ferry::testing
