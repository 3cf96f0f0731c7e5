#include "proxy/identity/ca.h"

#include <openssl/err.h>
#include <openssl/rand.h>

#include <filesystem>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "proxy/common/status_macros.h"
#include "proxy/identity/string_compat.h"
#include "proxy/identity/dir_cert_source.h"
#include "proxy/identity/svid.h"

namespace ferry::identity {
namespace {

// RFC 5280 caps X.520 organizationName at 64 characters; longer trust domains live only in
// the URI SAN.
constexpr size_t kMaxOrganizationChars = 64;
// Issued certificates start a minute in the past so that peers whose clocks lag slightly
// accept them at once.
constexpr long kBackdateSeconds = 60;
// X.509 keyUsage bit positions (RFC 5280 §4.2.1.3).
constexpr int kKuDigitalSignature = 0;
constexpr int kKuKeyCertSign = 5;
constexpr int kKuCrlSign = 6;

absl::StatusOr<EvpPkeyPtr> generateP256() {
  EvpPkeyPtr key(EVP_EC_gen("P-256"));
  if (!key) return openSslError("cannot generate ECDSA P-256 key");
  return key;
}

absl::Status setRandomSerial(X509* x) {
  unsigned char bytes[16];  // 128 bits, as CA/Browser Forum practice asks (>= 64 random bits)
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) return openSslError("RAND_bytes failed");
  bytes[0] &= 0x7f;  // serials are positive
  BignumPtr bn(BN_bin2bn(bytes, sizeof(bytes), nullptr));
  if (!bn) return openSslError("cannot create serial");
  if (BN_is_zero(bn.get())) BN_one(bn.get());
  if (BN_to_ASN1_INTEGER(bn.get(), X509_get_serialNumber(x)) == nullptr) {
    return openSslError("cannot set serial");
  }
  return absl::OkStatus();
}

absl::Status addExt(X509* x, int nid, void* value, bool critical, std::string_view what) {
  if (X509_add1_ext_i2d(x, nid, value, critical ? 1 : 0, X509V3_ADD_DEFAULT) != 1) {
    return openSslError(absl::StrCat("cannot add ", toAbsl(what), " extension"));
  }
  return absl::OkStatus();
}

absl::Status addBasicConstraints(X509* x, bool is_ca, int pathlen) {
  BasicConstraintsPtr bc(BASIC_CONSTRAINTS_new());
  if (!bc) return openSslError("cannot allocate basicConstraints");
  bc->ca = is_ca ? 0xFF : 0;
  if (is_ca && pathlen >= 0) {
    bc->pathlen = ASN1_INTEGER_new();
    if (bc->pathlen == nullptr || ASN1_INTEGER_set(bc->pathlen, pathlen) != 1) {
      return openSslError("cannot set pathlen");
    }
  }
  return addExt(x, NID_basic_constraints, bc.get(), true, "basicConstraints");
}

absl::Status addKeyUsage(X509* x, const std::vector<int>& bits) {
  Asn1BitStringPtr ku(ASN1_BIT_STRING_new());
  if (!ku) return openSslError("cannot allocate keyUsage");
  for (int bit : bits) {
    if (ASN1_BIT_STRING_set_bit(ku.get(), bit, 1) != 1) return openSslError("cannot set keyUsage bit");
  }
  return addExt(x, NID_key_usage, ku.get(), true, "keyUsage");
}

absl::Status addSans(X509* x, const std::vector<std::string>& uris, const std::vector<std::string>& dns,
                    bool critical) {
  auto names = subjectAltNames(uris, dns);
  if (!names.ok()) return names.status();
  return addExt(x, NID_subject_alt_name, names->get(), critical, "subjectAltName");
}

absl::Status addExtendedKeyUsage(X509* x, bool server, bool client) {
  ExtendedKeyUsagePtr eku(sk_ASN1_OBJECT_new_null());
  if (!eku) return openSslError("cannot allocate extendedKeyUsage");
  // OBJ_nid2obj returns static objects, which ASN1_OBJECT_free leaves alone.
  if (server && sk_ASN1_OBJECT_push(eku.get(), OBJ_nid2obj(NID_server_auth)) <= 0) {
    return openSslError("cannot build extendedKeyUsage");
  }
  if (client && sk_ASN1_OBJECT_push(eku.get(), OBJ_nid2obj(NID_client_auth)) <= 0) {
    return openSslError("cannot build extendedKeyUsage");
  }
  return addExt(x, NID_ext_key_usage, eku.get(), false, "extendedKeyUsage");
}

// SKID = SHA-1 of the public key (RFC 5280 §4.2.1.2 method 1); returns it for the AKID of a
// self-signed certificate.
absl::StatusOr<Asn1OctetStringPtr> addSubjectKeyId(X509* x) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (X509_pubkey_digest(x, EVP_sha1(), md, &len) != 1) return openSslError("cannot hash public key");
  Asn1OctetStringPtr skid(ASN1_OCTET_STRING_new());
  if (!skid || ASN1_OCTET_STRING_set(skid.get(), md, static_cast<int>(len)) != 1) {
    return openSslError("cannot build subjectKeyIdentifier");
  }
  if (absl::Status s = addExt(x, NID_subject_key_identifier, skid.get(), false, "subjectKeyIdentifier");
      !s.ok()) {
    return s;
  }
  return skid;
}

absl::Status addAuthorityKeyId(X509* x, const ASN1_OCTET_STRING* issuer_skid) {
  if (issuer_skid == nullptr) return absl::OkStatus();  // an external CA without SKID
  AuthorityKeyIdPtr akid(AUTHORITY_KEYID_new());
  if (!akid) return openSslError("cannot allocate authorityKeyIdentifier");
  akid->keyid = ASN1_OCTET_STRING_dup(issuer_skid);
  if (akid->keyid == nullptr) return openSslError("cannot copy key id");
  return addExt(x, NID_authority_key_identifier, akid.get(), false, "authorityKeyIdentifier");
}

// A v3 certificate with serial, validity (backdated) and public key; extensions and names are
// the caller's.
absl::StatusOr<X509Ptr> newCertificate(EVP_PKEY* subject_key, std::chrono::seconds lifetime) {
  X509Ptr x(X509_new());
  if (!x) return openSslError("cannot allocate certificate");
  if (X509_set_version(x.get(), X509_VERSION_3) != 1) return openSslError("cannot set version");
  if (absl::Status s = setRandomSerial(x.get()); !s.ok()) return s;
  if (X509_gmtime_adj(X509_getm_notBefore(x.get()), -kBackdateSeconds) == nullptr ||
      X509_gmtime_adj(X509_getm_notAfter(x.get()), static_cast<long>(lifetime.count())) == nullptr) {
    return openSslError("cannot set validity");
  }
  if (X509_set_pubkey(x.get(), subject_key) != 1) return openSslError("cannot set public key");
  return x;
}

bool addSubjectEntry(X509* x, const char* field, std::string_view value) {
  return X509_NAME_add_entry_by_txt(X509_get_subject_name(x), field, MBSTRING_UTF8,
                                    reinterpret_cast<const unsigned char*>(value.data()),
                                    static_cast<int>(value.size()), -1, 0) == 1;
}

absl::Status setCaSubject(X509* x, std::string_view common_name, std::string_view trust_domain) {
  if (trust_domain.size() <= kMaxOrganizationChars && !addSubjectEntry(x, "O", trust_domain)) {
    return openSslError("cannot set subject O");
  }
  if (!addSubjectEntry(x, "CN", common_name)) return openSslError("cannot set subject CN");
  return absl::OkStatus();
}

// Signs and re-parses, so that the returned object's cached extension data describe exactly
// the DER that peers will see.
absl::StatusOr<X509Ptr> signAndFinish(X509Ptr x, EVP_PKEY* issuer_key) {
  if (X509_sign(x.get(), issuer_key, EVP_sha256()) <= 0) return openSslError("cannot sign certificate");
  unsigned char* der = nullptr;
  int len = i2d_X509(x.get(), &der);
  if (len <= 0) return openSslError("cannot encode certificate");
  const unsigned char* p = der;
  X509Ptr out(d2i_X509(nullptr, &p, len));
  OPENSSL_free(der);
  if (!out) return openSslError("cannot decode certificate");
  return out;
}

// A DNS name a serving certificate may carry: RFC 1123 labels of letters, digits and '-'
// (not first or last), 1..63 bytes each, 253 bytes in all; no wildcard.
absl::Status validateDnsName(std::string_view name) {
  constexpr size_t kMaxName = 253, kMaxLabel = 63;
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("DNS name \"", toAbsl(name.substr(0, kMaxName)), "\" ", toAbsl(why)));
  };
  if (name.empty() || name.size() > kMaxName) return bad("must be 1 to 253 bytes");
  for (absl::string_view label : absl::StrSplit(toAbsl(name), '.')) {
    if (label.empty() || label.size() > kMaxLabel) return bad("has a label that is empty or over 63 bytes");
    if (label.front() == '-' || label.back() == '-') return bad("has a label that starts or ends with '-'");
    for (char c : label) {
      if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-') {
        return bad("may hold only letters, digits, '-' and '.'");
      }
    }
  }
  return absl::OkStatus();
}

// The trust domain of a CA certificate: its single spiffe://<td> URI SAN.
absl::StatusOr<std::string> caTrustDomain(X509* cert) {
  std::string found;
  for (const std::string& uri : uriSans(cert)) {
    auto id = SpiffeId::parse(uri);
    if (id.ok() && id->path().empty()) {
      if (!found.empty() && found != id->trustDomain()) {
        return absl::InvalidArgumentError("CA certificate names more than one trust domain");
      }
      found = id->trustDomain();
    }
  }
  if (found.empty()) {
    return absl::InvalidArgumentError("CA certificate has no URI SAN of the form spiffe://<trust-domain>");
  }
  return found;
}

// A CA certificate for `key`: keyCertSign + cRLSign, URI SAN spiffe://<td> (no path),
// basicConstraints cA with `path_len` (-1: none), SKID/AKID. Self-signed when `issuer` is
// null, else signed by `issuer`/`issuer_key`.
absl::StatusOr<X509Ptr> makeCaCertificate(EVP_PKEY* key, std::string_view common_name,
                                          std::string_view trust_domain, std::chrono::seconds lifetime,
                                          int path_len, X509* issuer, EVP_PKEY* issuer_key) {
  auto x = newCertificate(key, lifetime);
  if (!x.ok()) return x.status();
  X509* cert = x->get();
  if (absl::Status s = setCaSubject(cert, common_name, trust_domain); !s.ok()) return s;
  X509* signer = issuer != nullptr ? issuer : cert;
  if (X509_set_issuer_name(cert, X509_get_subject_name(signer)) != 1) return openSslError("cannot set issuer");
  if (absl::Status s = addBasicConstraints(cert, true, path_len); !s.ok()) return s;
  if (absl::Status s = addKeyUsage(cert, {kKuKeyCertSign, kKuCrlSign}); !s.ok()) return s;
  if (absl::Status s = addSans(cert, {absl::StrCat("spiffe://", toAbsl(trust_domain))}, {}, false); !s.ok()) {
    return s;
  }
  auto skid = addSubjectKeyId(cert);
  if (!skid.ok()) return skid.status();
  const ASN1_OCTET_STRING* authority = issuer != nullptr ? X509_get0_subject_key_id(issuer) : skid->get();
  if (absl::Status s = addAuthorityKeyId(cert, authority); !s.ok()) return s;
  return signAndFinish(*std::move(x), issuer_key != nullptr ? issuer_key : key);
}

}  // namespace

absl::StatusOr<GeneralNamesPtr> subjectAltNames(const std::vector<std::string>& uris,
                                                const std::vector<std::string>& dns_names) {
  GeneralNamesPtr names(sk_GENERAL_NAME_new_null());
  if (!names) return openSslError("cannot allocate subjectAltName");
  auto add = [&](const std::string& text_value, int type) -> absl::Status {
    GENERAL_NAME* name = GENERAL_NAME_new();
    ASN1_IA5STRING* text = ASN1_IA5STRING_new();
    if (name == nullptr || text == nullptr ||
        ASN1_STRING_set(text, text_value.data(), static_cast<int>(text_value.size())) != 1) {
      GENERAL_NAME_free(name);
      ASN1_IA5STRING_free(text);
      return openSslError("cannot build subjectAltName");
    }
    GENERAL_NAME_set0_value(name, type, text);
    if (sk_GENERAL_NAME_push(names.get(), name) <= 0) {
      GENERAL_NAME_free(name);
      return openSslError("cannot build subjectAltName");
    }
    return absl::OkStatus();
  };
  for (const std::string& uri : uris) {
    if (absl::Status s = add(uri, GEN_URI); !s.ok()) return s;
  }
  for (const std::string& name : dns_names) {
    if (absl::Status s = add(name, GEN_DNS); !s.ok()) return s;
  }
  return names;
}

absl::StatusOr<CertificateAuthority> CertificateAuthority::createRoot(std::string_view trust_domain,
                                                                      std::chrono::seconds lifetime) {
  if (absl::Status s = validateTrustDomain(trust_domain); !s.ok()) return s;
  if (lifetime.count() <= 0) return absl::InvalidArgumentError("CA lifetime must be positive");
  ERR_clear_error();
  auto key = generateP256();
  if (!key.ok()) return key.status();
  auto cert = makeCaCertificate(key->get(), "ferry root CA", trust_domain, lifetime, /*path_len=*/-1,
                                /*issuer=*/nullptr, /*issuer_key=*/nullptr);
  if (!cert.ok()) return cert.status();
  return CertificateAuthority(*std::move(cert), *std::move(key), std::string(trust_domain));
}

absl::StatusOr<CertificateAuthority> CertificateAuthority::load(const std::string& cert_pem_path,
                                                                const std::string& key_pem_path) {
  auto certs = loadCertsPem(cert_pem_path);
  if (!certs.ok()) return certs.status();
  auto key = loadKeyPem(key_pem_path);
  if (!key.ok()) return key.status();
  X509Ptr cert = std::move(certs->front());
  if (X509_check_private_key(cert.get(), key->get()) != 1) {
    std::string errors = drainOpenSslErrors();
    return absl::InvalidArgumentError(absl::StrCat(key_pem_path, " does not match the certificate in ",
                                                   cert_pem_path, errors.empty() ? "" : ": ", errors));
  }
  if (X509_check_ca(cert.get()) == 0 || (X509_get_key_usage(cert.get()) & KU_KEY_CERT_SIGN) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(cert_pem_path, ": not a CA certificate (needs cA=true and keyCertSign)"));
  }
  auto td = caTrustDomain(cert.get());
  if (!td.ok()) return absl::InvalidArgumentError(absl::StrCat(cert_pem_path, ": ", td.status().message()));
  return CertificateAuthority(std::move(cert), *std::move(key), *std::move(td));
}

absl::StatusOr<IssuedCert> CertificateAuthority::issueLeaf(const SpiffeId& id,
                                                          std::chrono::seconds lifetime) const {
  ERR_clear_error();
  FERRY_ASSIGN_OR_RETURN(EvpPkeyPtr key, generateP256());
  FERRY_ASSIGN_OR_RETURN(X509Ptr cert, issueLeafForKey(id, key.get(), lifetime));
  return IssuedCert{std::move(cert), std::move(key)};
}

absl::StatusOr<X509Ptr> CertificateAuthority::issueLeafForKey(const SpiffeId& id, EVP_PKEY* public_key,
                                                             std::chrono::seconds lifetime) const {
  if (auto parsed = SpiffeId::parse(id.str()); !parsed.ok()) return parsed.status();
  if (id.path().empty()) return absl::InvalidArgumentError("a leaf SVID needs an ID with a path");
  if (lifetime.count() <= 0) return absl::InvalidArgumentError("certificate lifetime must be positive");
  if (public_key == nullptr) return absl::InvalidArgumentError("a leaf SVID needs a public key");
  return makeLeaf(public_key, {id.str()}, {}, /*client_auth=*/true, lifetime);
}

absl::StatusOr<X509Ptr> CertificateAuthority::issueServing(const std::vector<std::string>& dns_names,
                                                          EVP_PKEY* public_key,
                                                          std::chrono::seconds lifetime) const {
  if (dns_names.empty()) return absl::InvalidArgumentError("a serving certificate needs at least one DNS name");
  for (const std::string& name : dns_names) {
    if (absl::Status s = validateDnsName(name); !s.ok()) return s;
  }
  if (lifetime.count() <= 0) return absl::InvalidArgumentError("certificate lifetime must be positive");
  if (public_key == nullptr) return absl::InvalidArgumentError("a serving certificate needs a public key");
  // It serves HTTPS; it never authenticates as a client.
  return makeLeaf(public_key, {}, dns_names, /*client_auth=*/false, lifetime);
}

absl::StatusOr<X509Ptr> CertificateAuthority::makeLeaf(EVP_PKEY* subject_key, const std::vector<std::string>& uris,
                                                       const std::vector<std::string>& dns_names, bool client_auth,
                                                       std::chrono::seconds lifetime) const {
  FERRY_ASSIGN_OR_RETURN(X509Ptr x, newCertificate(subject_key, lifetime));
  X509* cert = x.get();
  // An SVID has an empty subject, like Istio's workload certificates; RFC 5280 then requires
  // a critical SAN. A serving certificate names its first DNS name as CN too, for people
  // reading it (TLS clients check the SANs only).
  if (!dns_names.empty() && !addSubjectEntry(cert, "CN", dns_names.front())) {
    return openSslError("cannot set subject CN");
  }
  if (X509_set_issuer_name(cert, X509_get_subject_name(cert_.get())) != 1) {
    return openSslError("cannot set issuer");
  }
  FERRY_RETURN_IF_ERROR(addBasicConstraints(cert, /*is_ca=*/false, -1));
  FERRY_RETURN_IF_ERROR(addKeyUsage(cert, {kKuDigitalSignature}));
  FERRY_RETURN_IF_ERROR(addExtendedKeyUsage(cert, /*server=*/true, client_auth));
  FERRY_RETURN_IF_ERROR(addSans(cert, uris, dns_names, /*critical=*/dns_names.empty()));
  if (auto skid = addSubjectKeyId(cert); !skid.ok()) return skid.status();
  FERRY_RETURN_IF_ERROR(addAuthorityKeyId(cert, X509_get0_subject_key_id(cert_.get())));
  return signAndFinish(std::move(x), key_.get());
}

absl::StatusOr<CertificateAuthority> CertificateAuthority::issueIntermediate(
    std::chrono::seconds lifetime) const {
  if (lifetime.count() <= 0) return absl::InvalidArgumentError("CA lifetime must be positive");
  ERR_clear_error();
  auto key = generateP256();
  if (!key.ok()) return key.status();
  // Path length 0: an intermediate signs leaves only, never another CA.
  auto cert = makeCaCertificate(key->get(), "ferry intermediate CA", trust_domain_, lifetime,
                                /*path_len=*/0, cert_.get(), key_.get());
  if (!cert.ok()) return cert.status();
  return CertificateAuthority(*std::move(cert), *std::move(key), trust_domain_);
}

absl::Status CertificateAuthority::writePem(const std::string& cert_path,
                                            const std::string& key_path) const {
  auto key_pem = keyToPem(key_.get());
  if (!key_pem.ok()) return key_pem.status();
  auto cert_pem = certToPem(cert_.get());
  if (!cert_pem.ok()) return cert_pem.status();
  if (absl::Status s = writeFileAtomic(key_path, *key_pem, 0600); !s.ok()) return s;
  return writeFileAtomic(cert_path, *cert_pem, 0644);
}

absl::Status writeSvidFiles(const std::string& dir, const SpiffeId& id, const IssuedCert& leaf,
                            const std::vector<X509*>& chain) {
  auto target = svidDirectory(dir, id);
  if (!target.ok()) return target.status();
  std::error_code ec;
  std::filesystem::create_directories(*target, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot create ", *target, ": ", ec.message()));
  auto cert_pem = certToPem(leaf.cert.get());
  if (!cert_pem.ok()) return cert_pem.status();
  for (X509* cert : chain) {
    auto pem = certToPem(cert);
    if (!pem.ok()) return pem.status();
    absl::StrAppend(&*cert_pem, *pem);
  }
  auto key_pem = keyToPem(leaf.key.get());
  if (!key_pem.ok()) return key_pem.status();
  // Readers may briefly see a new key with the old certificate; DirCertSource then keeps its
  // previous SVID until the next check sees both files new.
  if (absl::Status s = writeFileAtomic(*target + "/key.pem", *key_pem, 0600); !s.ok()) return s;
  return writeFileAtomic(*target + "/cert.pem", *cert_pem, 0644);
}

}  // namespace ferry::identity
