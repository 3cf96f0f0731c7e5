#pragma once
// X.509-SVIDs (docs/security.md, "The SVID rules, and every rejection reason") and the trust
// bundle they chain to.
#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "proxy/identity/openssl_util.h"
#include "proxy/identity/spiffe_id.h"

namespace ferry::identity {

// An X.509-SVID with its key, ready for a TLS context. Immutable once built; shared between
// threads as shared_ptr<const Svid>.
struct Svid {
  SpiffeId id;
  X509Ptr leaf;
  std::vector<X509Ptr> intermediates;  // leaf's issuer first
  EvpPkeyPtr key;
  std::chrono::system_clock::time_point not_before, not_after;
};

// The roots of one trust domain. Several roots overlap while a root rotates.
struct TrustBundle {
  std::string trust_domain;
  std::vector<X509Ptr> roots;
};

// The earliest notAfter of each kind of certificate a daemon holds, for the metric
// ferry_certificate_expiry_timestamp_seconds{kind} (docs/operations.md) and the alerts
// built on it. A kind the daemon holds none of is absent, not zero.
struct CertificateExpiry {
  static constexpr const char* kMetric = "ferry_certificate_expiry_timestamp_seconds";
  static constexpr const char* kHelp =
      "Earliest notAfter (Unix seconds) of the certificates held, by kind: workload (SVID leaves), issuer (the CAs "
      "that sign them), root (the trust bundle)";
  std::optional<std::chrono::system_clock::time_point> workload, issuer, root;

  // The leaf as workload, its intermediates as issuer.
  void addSvid(const Svid& svid);
  void addIssuer(std::chrono::system_clock::time_point not_after);
  void addRoots(const TrustBundle& bundle);
  // (kind label, Unix seconds) of each kind present.
  std::vector<std::pair<const char*, double>> samples() const;
};

// Why a peer certificate was refused: one label per rule, so that the metric
// ferry_svid_rejections_total{reason} tells an operator which rule a peer broke without
// reading logs. X(name, label, help).
#define FERRY_SVID_REJECTIONS(X)                                                                    \
  X(kNoCertificate, "no_certificate", "the peer presented no certificate")                          \
  X(kUntrustedChain, "untrusted_chain", "the chain leads to no root of the trust bundle, or a signature is bad") \
  X(kExpired, "expired", "a certificate of the chain has expired")                                  \
  X(kNotYetValid, "not_yet_valid", "a certificate of the chain is not valid yet (clock skew?)")     \
  X(kChainTooLong, "chain_too_long", "more intermediates than the verify depth allows")             \
  X(kChainInvalid, "chain_invalid", "RFC 5280 path validation failed for another reason")           \
  X(kMalformedExtension, "malformed_extension", "a malformed or duplicated X.509v3 extension")      \
  X(kUriSanCount, "uri_san_count", "not exactly one URI SAN (X509-SVID 2)")                         \
  X(kNotSpiffeId, "not_spiffe_id", "the URI SAN is not a valid SPIFFE ID")                          \
  X(kRootPath, "root_path", "the SPIFFE ID has no path (a trust domain ID, not a workload)")         \
  X(kLeafIsCa, "leaf_is_ca", "basicConstraints cA=true on the leaf")                                \
  X(kNoKeyUsage, "no_key_usage", "keyUsage extension absent")                                       \
  X(kNoDigitalSignature, "no_digital_signature", "keyUsage without digitalSignature")               \
  X(kCaKeyUsage, "ca_key_usage", "keyUsage with keyCertSign or cRLSign on a leaf")                  \
  X(kEkuNoServerAuth, "eku_no_server_auth", "extendedKeyUsage present without serverAuth")          \
  X(kEkuNoClientAuth, "eku_no_client_auth", "extendedKeyUsage present without clientAuth")          \
  X(kTrustDomain, "trust_domain", "the peer belongs to another trust domain")                       \
  X(kIdentityMismatch, "identity_mismatch", "the server is not the expected destination identity")

enum class SvidRejection {
#define FERRY_X(name, label, help) name,
  FERRY_SVID_REJECTIONS(FERRY_X)
#undef FERRY_X
  kCount
};
const char* svidRejectionLabel(SvidRejection r);
const char* svidRejectionHelp(SvidRejection r);

// Which end did the verifying: it decides what a failed purpose check means.
enum class VerifyingRole { kServer, kClient };

// The rejection an OpenSSL chain verification error (X509_V_ERR_*) stands for.
// X509_V_ERR_INVALID_PURPOSE is OpenSSL's own extendedKeyUsage check: a server verifying a
// client certificate requires clientAuth, a client verifying a server requires serverAuth.
SvidRejection rejectionForVerifyError(long x509_error, VerifyingRole role);

// X.509-SVID leaf rules (X509-SVID §2-§4): exactly one URI SAN which is a valid SPIFFE ID with a
// non-root path, cA=false, key usage present with digitalSignature and without
// keyCertSign/cRLSign, EKU (if present) includes serverAuth and clientAuth. Returns the ID or an
// error naming the rule (and, when `reason` is set, the rule's label). Does not check the
// chain or the validity period.
absl::StatusOr<SpiffeId> validateSvidLeaf(X509* leaf, SvidRejection* reason = nullptr);

// RFC 5280 path validation of `leaf` through `untrusted` (intermediates, any order) to one
// of `bundle`'s roots, at `at` (now when unset). The error names OpenSSL's reason and depth.
absl::Status verifyChain(X509* leaf, const std::vector<X509*>& untrusted, const TrustBundle& bundle,
                         std::optional<std::chrono::system_clock::time_point> at = std::nullopt);

// Every URI SAN of `cert`, in order (for diagnostics and CA loading).
std::vector<std::string> uriSans(X509* cert);

}  // namespace ferry::identity
