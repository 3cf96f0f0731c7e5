#include "proxy/ca/csr.h"

#include <openssl/err.h>
#include <openssl/pem.h>

#include <cstring>
#include <limits>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "proxy/common/strings.h"

namespace ferry::ca {
namespace {

using common::toAbsl;
using identity::EvpPkeyPtr;

using X509ReqPtr = std::unique_ptr<X509_REQ, identity::OpenSslDeleter<X509_REQ, X509_REQ_free>>;
struct ExtensionsDeleter {
  void operator()(STACK_OF(X509_EXTENSION) * s) const { sk_X509_EXTENSION_pop_free(s, X509_EXTENSION_free); }
};
using ExtensionsPtr = std::unique_ptr<STACK_OF(X509_EXTENSION), ExtensionsDeleter>;

// Key sizes accepted (docs/ferry-ca.md): RSA below 2048 bits is breakable in reach of a
// well-funded attacker (NIST SP 800-131A), above 4096 it only costs the CA time, and every
// ferryd makes ECDSA P-256 anyway.
constexpr int kMinRsaBits = 2048;
constexpr int kMaxRsaBits = 4096;
// Names from the CSR reach error messages and the audit line: escaped and shortened.
constexpr size_t kMaxQuotedBytes = 128;

absl::Status bad(std::string_view why) { return absl::InvalidArgumentError(absl::StrCat("CSR: ", toAbsl(why))); }

std::string quoted(std::string_view text) {
  std::string out = absl::CHexEscape(toAbsl(text.substr(0, kMaxQuotedBytes)));
  if (text.size() > kMaxQuotedBytes) absl::StrAppend(&out, "...");
  return absl::StrCat("\"", out, "\"");
}

std::string_view asn1Text(const ASN1_STRING* s) {
  return {reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)), static_cast<size_t>(ASN1_STRING_length(s))};
}

// The one PEM CSR of `pem`; a second PEM block after it is refused (which of the two would
// the caller have meant?).
absl::StatusOr<X509ReqPtr> readOne(std::string_view pem) {
  if (pem.size() > static_cast<size_t>(std::numeric_limits<int>::max())) return bad("too large");
  identity::BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (!bio) return identity::openSslError("cannot create memory BIO");
  X509ReqPtr req(PEM_read_bio_X509_REQ(bio.get(), nullptr, nullptr, nullptr));
  if (!req) {
    std::string errors = identity::drainOpenSslErrors();
    return bad(absl::StrCat("not a PEM \"CERTIFICATE REQUEST\" (PKCS#10)", errors.empty() ? "" : ": ", errors));
  }
  char* name = nullptr;
  char* header = nullptr;
  unsigned char* data = nullptr;
  long len = 0;
  bool another = PEM_read_bio(bio.get(), &name, &header, &data, &len) == 1;
  OPENSSL_free(name);
  OPENSSL_free(header);
  OPENSSL_free(data);
  ERR_clear_error();  // the normal end: no start line
  if (another) return bad("holds more than one PEM block; send exactly one CSR");
  return req;
}

// "ECDSA P-256", "RSA 2048": accepted; anything else refused, saying what it was.
absl::StatusOr<std::string> checkKey(EVP_PKEY* key) {
  constexpr std::string_view kAccepted = "ECDSA P-256 or P-384, or RSA of 2048 to 4096 bits, is accepted";
  int type = EVP_PKEY_get_base_id(key);
  if (type == EVP_PKEY_EC) {
    char group[80] = {};
    size_t len = 0;
    if (EVP_PKEY_get_group_name(key, group, sizeof(group), &len) != 1) {
      ERR_clear_error();
      return bad(absl::StrCat("an ECDSA key on explicit or unknown curve parameters; ", toAbsl(kAccepted)));
    }
    std::string_view curve(group, len);
    if (curve == "prime256v1" || curve == "P-256") return std::string("ECDSA P-256");
    if (curve == "secp384r1" || curve == "P-384") return std::string("ECDSA P-384");
    return bad(absl::StrCat("an ECDSA key on curve ", toAbsl(curve), "; ", toAbsl(kAccepted)));
  }
  if (type == EVP_PKEY_RSA) {
    int bits = EVP_PKEY_get_bits(key);
    if (bits < kMinRsaBits || bits > kMaxRsaBits) {
      return bad(absl::StrCat("an RSA key of ", bits, " bits; ", toAbsl(kAccepted)));
    }
    return absl::StrCat("RSA ", bits);
  }
  const char* name = EVP_PKEY_get0_type_name(key);
  return bad(absl::StrCat("a key of type ", name != nullptr ? name : OBJ_nid2sn(type), "; ", toAbsl(kAccepted)));
}

// The requested extensions (an empty list when none are requested).
absl::StatusOr<ExtensionsPtr> requestedExtensions(X509_REQ* req) {
  int requests = 0;
  for (int nid : {NID_ext_req, NID_ms_ext_req}) {
    for (int at = -1; (at = X509_REQ_get_attr_by_NID(req, nid, at)) >= 0;) ++requests;
  }
  if (requests == 0) return ExtensionsPtr(sk_X509_EXTENSION_new_null());
  if (requests > 1) return bad("holds more than one extension request attribute");
  ExtensionsPtr exts(X509_REQ_get_extensions(req));
  if (!exts) {
    std::string errors = identity::drainOpenSslErrors();
    return bad(absl::StrCat("its extension request does not decode", errors.empty() ? "" : ": ", errors));
  }
  return exts;
}

// X509V3_get_d2i's `crit` out-parameter when it returns nothing.
constexpr int kExtAbsent = -1;
constexpr int kExtRepeated = -2;

// One requested extension decoded; nullptr when absent. Repeated or undecodable: refused.
absl::StatusOr<void*> findExtension(const STACK_OF(X509_EXTENSION) * exts, int nid, std::string_view name) {
  int crit = kExtAbsent;
  void* value = X509V3_get_d2i(exts, nid, &crit, nullptr);
  if (value != nullptr || crit == kExtAbsent) return value;
  ERR_clear_error();
  if (crit == kExtRepeated) return bad(absl::StrCat("requests ", toAbsl(name), " more than once"));
  return bad(absl::StrCat("its requested ", toAbsl(name), " does not decode"));
}

std::string describeName(const GENERAL_NAME* name) {
  int type = 0;
  void* value = GENERAL_NAME_get0_value(name, &type);
  switch (type) {
    case GEN_DNS:
      return absl::StrCat("a DNS name ", quoted(asn1Text(static_cast<ASN1_IA5STRING*>(value))));
    case GEN_EMAIL:
      return absl::StrCat("an email address ", quoted(asn1Text(static_cast<ASN1_IA5STRING*>(value))));
    case GEN_URI:
      return absl::StrCat("a URI ", quoted(asn1Text(static_cast<ASN1_IA5STRING*>(value))));
    case GEN_IPADD:
      return "an IP address";
    default:
      return absl::StrCat("a name of type ", type);
  }
}

// The one URI SAN, as a workload SPIFFE ID.
absl::StatusOr<identity::SpiffeId> requestedId(const STACK_OF(X509_EXTENSION) * exts) {
  auto found = findExtension(exts, NID_subject_alt_name, "subjectAltName");
  if (!found.ok()) return found.status();
  identity::GeneralNamesPtr sans(static_cast<GENERAL_NAMES*>(*found));
  constexpr std::string_view kWanted = "exactly one SAN is accepted, the SPIFFE ID as a URI";
  if (!sans || sk_GENERAL_NAME_num(sans.get()) == 0) return bad(absl::StrCat("requests no SAN; ", toAbsl(kWanted)));
  for (int i = 0; i < sk_GENERAL_NAME_num(sans.get()); ++i) {
    const GENERAL_NAME* name = sk_GENERAL_NAME_value(sans.get(), i);
    if (name->type != GEN_URI) return bad(absl::StrCat("requests ", describeName(name), " as SAN; ", toAbsl(kWanted)));
  }
  if (sk_GENERAL_NAME_num(sans.get()) != 1) {
    return bad(absl::StrCat("requests ", sk_GENERAL_NAME_num(sans.get()), " URI SANs; ", toAbsl(kWanted)));
  }
  std::string_view uri = asn1Text(sk_GENERAL_NAME_value(sans.get(), 0)->d.uniformResourceIdentifier);
  if (std::memchr(uri.data(), '\0', uri.size()) != nullptr) {
    return bad(absl::StrCat("its URI SAN ", quoted(uri), " holds a NUL byte"));
  }
  auto id = identity::SpiffeId::parse(uri);
  if (!id.ok()) return bad(absl::StrCat("its URI SAN is not a SPIFFE ID: ", id.status().message()));
  return *std::move(id);
}

absl::Status checkNotCa(const STACK_OF(X509_EXTENSION) * exts) {
  auto found = findExtension(exts, NID_basic_constraints, "basicConstraints");
  if (!found.ok()) return found.status();
  identity::BasicConstraintsPtr bc(static_cast<BASIC_CONSTRAINTS*>(*found));
  if (bc && bc->ca != 0) return bad("requests basicConstraints with cA true; a workload certificate is never a CA");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ParsedCsr> parseCsr(std::string_view pem) {
  ERR_clear_error();
  auto req = readOne(pem);
  if (!req.ok()) return req.status();
  // get0: the request keeps it; the result takes its own reference once everything passed.
  EVP_PKEY* key = X509_REQ_get0_pubkey(req->get());
  if (key == nullptr) {
    ERR_clear_error();
    return bad("its public key does not decode");
  }
  auto key_type = checkKey(key);
  if (!key_type.ok()) return key_type.status();
  // Checked after the key's size, so that a huge RSA key costs no verification.
  if (X509_REQ_verify(req->get(), key) != 1) {
    ERR_clear_error();
    return bad("its signature does not verify with the key it carries");
  }
  auto exts = requestedExtensions(req->get());
  if (!exts.ok()) return exts.status();
  auto id = requestedId(exts->get());
  if (!id.ok()) return id.status();
  auto workload = identity::workloadName(*id);
  if (!workload.ok()) {
    return bad(absl::StrCat("its SPIFFE ID ", id->str(),
                            " is not a workload ID (spiffe://<trust domain>/ns/<namespace>/sa/<service account>)"));
  }
  if (absl::Status s = checkNotCa(exts->get()); !s.ok()) return s;
  return ParsedCsr{*std::move(id), *std::move(workload), identity::upRef(key), *std::move(key_type)};
}

}  // namespace ferry::ca
