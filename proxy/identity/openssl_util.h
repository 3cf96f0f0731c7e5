#pragma once
// RAII owners for OpenSSL handles, error draining and PEM/file helpers. OpenSSL objects in
// ferry live only inside these types (style.md habit 4).
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proxy/common/file.h"

namespace ferry::identity {

template <typename T, void (*Free)(T*)>
struct OpenSslDeleter {
  void operator()(T* p) const { Free(p); }
};

using X509Ptr = std::unique_ptr<X509, OpenSslDeleter<X509, X509_free>>;
using EvpPkeyPtr = std::unique_ptr<EVP_PKEY, OpenSslDeleter<EVP_PKEY, EVP_PKEY_free>>;
using BioPtr = std::unique_ptr<BIO, OpenSslDeleter<BIO, BIO_free_all>>;
using X509StorePtr = std::unique_ptr<X509_STORE, OpenSslDeleter<X509_STORE, X509_STORE_free>>;
using X509StoreCtxPtr =
    std::unique_ptr<X509_STORE_CTX, OpenSslDeleter<X509_STORE_CTX, X509_STORE_CTX_free>>;
using SslCtxPtr = std::unique_ptr<SSL_CTX, OpenSslDeleter<SSL_CTX, SSL_CTX_free>>;
using SslPtr = std::unique_ptr<SSL, OpenSslDeleter<SSL, SSL_free>>;
using BignumPtr = std::unique_ptr<BIGNUM, OpenSslDeleter<BIGNUM, BN_free>>;
using Asn1IntegerPtr = std::unique_ptr<ASN1_INTEGER, OpenSslDeleter<ASN1_INTEGER, ASN1_INTEGER_free>>;
using Asn1OctetStringPtr =
    std::unique_ptr<ASN1_OCTET_STRING, OpenSslDeleter<ASN1_OCTET_STRING, ASN1_OCTET_STRING_free>>;
using Asn1BitStringPtr =
    std::unique_ptr<ASN1_BIT_STRING, OpenSslDeleter<ASN1_BIT_STRING, ASN1_BIT_STRING_free>>;
using X509NamePtr = std::unique_ptr<X509_NAME, OpenSslDeleter<X509_NAME, X509_NAME_free>>;
using GeneralNamesPtr =
    std::unique_ptr<GENERAL_NAMES, OpenSslDeleter<GENERAL_NAMES, GENERAL_NAMES_free>>;
using BasicConstraintsPtr =
    std::unique_ptr<BASIC_CONSTRAINTS, OpenSslDeleter<BASIC_CONSTRAINTS, BASIC_CONSTRAINTS_free>>;
using ExtendedKeyUsagePtr = std::unique_ptr<EXTENDED_KEY_USAGE,
                                            OpenSslDeleter<EXTENDED_KEY_USAGE, EXTENDED_KEY_USAGE_free>>;
using AuthorityKeyIdPtr =
    std::unique_ptr<AUTHORITY_KEYID, OpenSslDeleter<AUTHORITY_KEYID, AUTHORITY_KEYID_free>>;

// A STACK_OF(X509) that owns its certificates.
struct X509StackDeleter {
  void operator()(STACK_OF(X509) * s) const { sk_X509_pop_free(s, X509_free); }
};
using X509StackPtr = std::unique_ptr<STACK_OF(X509), X509StackDeleter>;

// Takes another reference on `cert` (X509_up_ref) and owns it.
X509Ptr upRef(X509* cert);
EvpPkeyPtr upRef(EVP_PKEY* key);

// Empties this thread's OpenSSL error queue into one line ("" if it was empty), e.g.
// "error:0A000086:SSL routines::certificate verify failed; ...".
std::string drainOpenSslErrors();
// `what` plus the drained OpenSSL errors, as an internal error.
absl::Status openSslError(std::string_view what);

// All certificates in a PEM text, in order. Fails if there is none or one is malformed.
absl::StatusOr<std::vector<X509Ptr>> parseCertsPem(std::string_view pem);
// One private key in PEM (PKCS#8, "EC PRIVATE KEY" or "RSA PRIVATE KEY"); never prompts for
// a password, encrypted keys are an error.
absl::StatusOr<EvpPkeyPtr> parseKeyPem(std::string_view pem);
// The same from files; errors name the path.
absl::StatusOr<std::vector<X509Ptr>> loadCertsPem(const std::string& path);
absl::StatusOr<EvpPkeyPtr> loadKeyPem(const std::string& path);

absl::StatusOr<std::string> certToPem(X509* cert);
// Unencrypted PKCS#8 ("BEGIN PRIVATE KEY").
absl::StatusOr<std::string> keyToPem(EVP_PKEY* key);

// PEM files are a few KiB; anything this large is not one (a wrong path, a device).
inline constexpr size_t kMaxPemFileBytes = 4 << 20;
// common::readFile capped at kMaxPemFileBytes.
absl::StatusOr<std::string> readFile(const std::string& path);
// The atomic write lives with the other file helpers (proxy/common/file.h).
using common::writeFileAtomic;

std::chrono::system_clock::time_point asn1TimeToTimePoint(const ASN1_TIME* t);
// "2024-01-02T03:04:05Z".
std::string formatTime(std::chrono::system_clock::time_point t);
// The one-line subject or issuer ("CN=..., O=...").
std::string nameToString(const X509_NAME* name);

}  // namespace ferry::identity
