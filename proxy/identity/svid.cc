#include "proxy/identity/svid.h"

#include <openssl/err.h>
#include <openssl/x509_vfy.h>

#include "absl/strings/str_cat.h"
#include "proxy/identity/string_compat.h"

namespace ferry::identity {
namespace {

absl::Status invalidSvid(std::string_view rule) {
  return absl::InvalidArgumentError(absl::StrCat("not a valid X.509-SVID leaf: ", toAbsl(rule)));
}

}  // namespace

const char* svidRejectionLabel(SvidRejection r) {
  switch (r) {
#define FERRY_X(name, label, help) \
  case SvidRejection::name:        \
    return label;
    FERRY_SVID_REJECTIONS(FERRY_X)
#undef FERRY_X
    case SvidRejection::kCount:
      break;
  }
  return "unknown";
}

const char* svidRejectionHelp(SvidRejection r) {
  switch (r) {
#define FERRY_X(name, label, help) \
  case SvidRejection::name:        \
    return help;
    FERRY_SVID_REJECTIONS(FERRY_X)
#undef FERRY_X
    case SvidRejection::kCount:
      break;
  }
  return "";
}

SvidRejection rejectionForVerifyError(long x509_error, VerifyingRole role) {
  switch (x509_error) {
    case X509_V_ERR_INVALID_PURPOSE:
      // The leaf's extendedKeyUsage lacks the purpose this end requires (a CA whose own EKU
      // lacks it fails the same way; either way the chain is not valid for that purpose).
      return role == VerifyingRole::kServer ? SvidRejection::kEkuNoClientAuth
                                            : SvidRejection::kEkuNoServerAuth;
    case X509_V_ERR_CERT_HAS_EXPIRED:
      return SvidRejection::kExpired;
    case X509_V_ERR_CERT_NOT_YET_VALID:
      return SvidRejection::kNotYetValid;
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT:
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
    case X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
    case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
    case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
    case X509_V_ERR_CERT_SIGNATURE_FAILURE:
    case X509_V_ERR_CERT_UNTRUSTED:
      return SvidRejection::kUntrustedChain;
    case X509_V_ERR_CERT_CHAIN_TOO_LONG:
    case X509_V_ERR_PATH_LENGTH_EXCEEDED:
      return SvidRejection::kChainTooLong;
    case X509_V_ERR_APPLICATION_VERIFICATION:  // requirePeerIdentity's callback
      return SvidRejection::kIdentityMismatch;
    default:
      return SvidRejection::kChainInvalid;
  }
}

std::vector<std::string> uriSans(X509* cert) {
  std::vector<std::string> out;
  GeneralNamesPtr names(
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr)));
  if (!names) return out;
  for (int i = 0; i < sk_GENERAL_NAME_num(names.get()); ++i) {
    const GENERAL_NAME* name = sk_GENERAL_NAME_value(names.get(), i);
    if (name->type != GEN_URI) continue;
    const ASN1_IA5STRING* uri = name->d.uniformResourceIdentifier;
    out.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(uri)),
                     static_cast<size_t>(ASN1_STRING_length(uri)));
  }
  return out;
}

namespace {

// The leaf's one URI SAN as a SPIFFE ID with a path (X509-SVID §2, §3.1).
absl::StatusOr<SpiffeId> leafSpiffeId(X509* leaf, SvidRejection& why) {
  int crit = -1;
  GeneralNamesPtr names(
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(leaf, NID_subject_alt_name, &crit, nullptr)));
  ERR_clear_error();
  if (!names) {
    if (crit == -2) {
      why = SvidRejection::kMalformedExtension;
      return invalidSvid("more than one subjectAltName extension");
    }
    why = SvidRejection::kUriSanCount;
    return invalidSvid("must have exactly one URI SAN (X509-SVID §2), found no subjectAltName");
  }
  const GENERAL_NAME* uri_name = nullptr;
  int uri_count = 0;
  for (int i = 0; i < sk_GENERAL_NAME_num(names.get()); ++i) {
    const GENERAL_NAME* name = sk_GENERAL_NAME_value(names.get(), i);
    if (name->type == GEN_URI) {
      ++uri_count;
      uri_name = name;
    }
  }
  if (uri_count != 1) {
    why = SvidRejection::kUriSanCount;
    return invalidSvid(absl::StrCat("must have exactly one URI SAN (X509-SVID §2), found ", uri_count));
  }
  const ASN1_IA5STRING* uri = uri_name->d.uniformResourceIdentifier;
  std::string_view uri_text(reinterpret_cast<const char*>(ASN1_STRING_get0_data(uri)),
                            static_cast<size_t>(ASN1_STRING_length(uri)));
  auto id = SpiffeId::parse(uri_text);
  if (!id.ok()) {
    why = SvidRejection::kNotSpiffeId;
    return invalidSvid(absl::StrCat("URI SAN is not a SPIFFE ID: ", id.status().message()));
  }
  if (id->path().empty()) {
    why = SvidRejection::kRootPath;
    return invalidSvid(absl::StrCat("leaf SPIFFE ID must have a non-root path (X509-SVID §3.1), got ",
                                    id->str()));
  }
  return id;
}

// A leaf's constraints (X509-SVID §4): no CA, keyUsage digitalSignature and nothing of a CA's,
// and an extendedKeyUsage, if any, for both ends of mTLS. `flags` are the leaf's extension flags.
absl::Status checkLeafUsage(X509* leaf, uint32_t flags, SvidRejection& why) {
  if ((flags & EXFLAG_CA) != 0) {
    why = SvidRejection::kLeafIsCa;
    return invalidSvid("leaf must not be a CA: basicConstraints cA must be false (X509-SVID §4.1)");
  }
  if ((flags & EXFLAG_KUSAGE) == 0) {
    why = SvidRejection::kNoKeyUsage;
    return invalidSvid("keyUsage extension must be present (X509-SVID §4.3)");
  }
  uint32_t ku = X509_get_key_usage(leaf);
  if ((ku & KU_DIGITAL_SIGNATURE) == 0) {
    why = SvidRejection::kNoDigitalSignature;
    return invalidSvid("keyUsage must include digitalSignature (X509-SVID §4.3)");
  }
  if ((ku & KU_KEY_CERT_SIGN) != 0) {
    why = SvidRejection::kCaKeyUsage;
    return invalidSvid("keyUsage must not include keyCertSign in a leaf (X509-SVID §4.3)");
  }
  if ((ku & KU_CRL_SIGN) != 0) {
    why = SvidRejection::kCaKeyUsage;
    return invalidSvid("keyUsage must not include cRLSign in a leaf (X509-SVID §4.3)");
  }
  if ((flags & EXFLAG_XKUSAGE) != 0) {
    uint32_t xku = X509_get_extended_key_usage(leaf);
    if ((xku & XKU_SSL_SERVER) == 0) {
      why = SvidRejection::kEkuNoServerAuth;
      return invalidSvid("extendedKeyUsage must include serverAuth (X509-SVID §4.4)");
    }
    if ((xku & XKU_SSL_CLIENT) == 0) {
      why = SvidRejection::kEkuNoClientAuth;
      return invalidSvid("extendedKeyUsage must include clientAuth (X509-SVID §4.4)");
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SpiffeId> validateSvidLeaf(X509* leaf, SvidRejection* reason) {
  SvidRejection unused;
  SvidRejection& why = reason != nullptr ? *reason : unused;
  if (leaf == nullptr) {
    why = SvidRejection::kNoCertificate;
    return invalidSvid("no certificate");
  }
  // Computes and caches the parsed extensions; EXFLAG_INVALID means one of them is malformed
  // or duplicated, and nothing else about the certificate can be trusted.
  uint32_t flags = X509_get_extension_flags(leaf);
  ERR_clear_error();
  if ((flags & EXFLAG_INVALID) != 0) {
    why = SvidRejection::kMalformedExtension;
    return invalidSvid("malformed or duplicate X.509v3 extension");
  }
  auto id = leafSpiffeId(leaf, why);
  if (!id.ok()) return id.status();
  if (auto st = checkLeafUsage(leaf, flags, why); !st.ok()) return st;
  return *std::move(id);
}

absl::Status verifyChain(X509* leaf, const std::vector<X509*>& untrusted_certs,
                         const TrustBundle& bundle,
                         std::optional<std::chrono::system_clock::time_point> at) {
  X509StorePtr store(X509_STORE_new());
  X509StackPtr untrusted(sk_X509_new_null());
  X509StoreCtxPtr ctx(X509_STORE_CTX_new());
  if (!store || !untrusted || !ctx) return openSslError("cannot allocate X509 store");
  for (const X509Ptr& root : bundle.roots) {
    if (X509_STORE_add_cert(store.get(), root.get()) != 1) {
      // Duplicate roots in a bundle are harmless.
      if (ERR_GET_REASON(ERR_peek_last_error()) != X509_R_CERT_ALREADY_IN_HASH_TABLE) {
        return openSslError("cannot add root");
      }
      ERR_clear_error();
    }
  }
  for (X509* cert : untrusted_certs) {
    X509Ptr ref = upRef(cert);
    if (sk_X509_push(untrusted.get(), ref.get()) <= 0) return openSslError("cannot build chain");
    ref.release();  // now owned by the stack
  }
  if (X509_STORE_CTX_init(ctx.get(), store.get(), leaf, untrusted.get()) != 1) {
    return openSslError("cannot initialise chain verification");
  }
  if (at) X509_STORE_CTX_set_time(ctx.get(), 0, std::chrono::system_clock::to_time_t(*at));
  if (X509_verify_cert(ctx.get()) != 1) {
    int err = X509_STORE_CTX_get_error(ctx.get());
    ERR_clear_error();
    return absl::FailedPreconditionError(absl::StrCat(X509_verify_cert_error_string(err), " (at depth ",
                                                      X509_STORE_CTX_get_error_depth(ctx.get()), ")"));
  }
  return absl::OkStatus();
}

namespace {
void keepEarliest(std::optional<std::chrono::system_clock::time_point>& slot, std::chrono::system_clock::time_point t) {
  if (!slot || t < *slot) slot = t;
}
}  // namespace

void CertificateExpiry::addSvid(const Svid& svid) {
  keepEarliest(workload, svid.not_after);
  for (const auto& cert : svid.intermediates) addIssuer(asn1TimeToTimePoint(X509_get0_notAfter(cert.get())));
}

void CertificateExpiry::addIssuer(std::chrono::system_clock::time_point not_after) { keepEarliest(issuer, not_after); }

void CertificateExpiry::addRoots(const TrustBundle& bundle) {
  for (const auto& cert : bundle.roots) keepEarliest(root, asn1TimeToTimePoint(X509_get0_notAfter(cert.get())));
}

std::vector<std::pair<const char*, double>> CertificateExpiry::samples() const {
  std::vector<std::pair<const char*, double>> out;
  auto add = [&](const char* kind, const std::optional<std::chrono::system_clock::time_point>& t) {
    if (t) out.emplace_back(kind, std::chrono::duration<double>(t->time_since_epoch()).count());
  };
  add("workload", workload);
  add("issuer", issuer);
  add("root", root);
  return out;
}

}  // namespace ferry::identity
