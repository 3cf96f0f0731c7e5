#pragma once
// X.509-SVIDs (shared/reference/spiffe.md B5.2) and the trust bundle they chain to.
#include <chrono>
#include <optional>
#include <string>
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

// X.509-SVID leaf rules (spiffe.md B5.2): exactly one URI SAN which is a valid SPIFFE ID with a
// non-root path, cA=false, key usage present with digitalSignature and without
// keyCertSign/cRLSign, EKU (if present) includes serverAuth and clientAuth. Returns the ID or an
// error naming the rule. Does not check the chain or the validity period.
absl::StatusOr<SpiffeId> validateSvidLeaf(X509* leaf);

// RFC 5280 path validation of `leaf` through `untrusted` (intermediates, any order) to one
// of `bundle`'s roots, at `at` (now when unset). The error names OpenSSL's reason and depth.
absl::Status verifyChain(X509* leaf, const std::vector<X509*>& untrusted, const TrustBundle& bundle,
                         std::optional<std::chrono::system_clock::time_point> at = std::nullopt);

// Every URI SAN of `cert`, in order (for diagnostics and CA loading).
std::vector<std::string> uriSans(X509* cert);

}  // namespace ferry::identity
