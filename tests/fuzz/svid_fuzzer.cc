// The X.509-SVID rules (proxy/identity/svid.cc) over DER a peer controls. The input is one or
// more DER certificates back to back: the first is the leaf, the last (when there are two
// or more) stands for the trust bundle's root and the ones between are intermediates, so
// that the fuzzer reaches the chain checks past the signatures with the seeds' real chains.
// Checks beyond "does not crash": an accepted leaf has exactly one URI SAN, which parses to
// the ID returned; a refused one names a rejection label.
#include <openssl/x509.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <vector>

#include "proxy/identity/svid.h"

using namespace ferry::identity;

namespace {
// Enough for a leaf, the intermediates the verify depth allows, and a root.
constexpr size_t kMaxCerts = 8;

// Chains are checked at the leaf's notBefore plus a minute, so that a seed keeps reaching
// the same code after its certificates have expired.
std::optional<std::chrono::system_clock::time_point> checkTime(X509* leaf) {
  struct tm tm {};
  if (ASN1_TIME_to_tm(X509_get0_notBefore(leaf), &tm) != 1) return std::nullopt;
  time_t t = timegm(&tm);
  if (t == static_cast<time_t>(-1)) return std::nullopt;
  return std::chrono::system_clock::from_time_t(t) + std::chrono::minutes(1);
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<X509Ptr> certs;
  const unsigned char* p = data;
  const unsigned char* end = data + size;
  while (p < end && certs.size() < kMaxCerts) {
    X509* cert = d2i_X509(nullptr, &p, end - p);
    if (cert == nullptr) break;
    certs.emplace_back(cert);
  }
  drainOpenSslErrors();
  if (certs.empty()) return 0;
  X509* leaf = certs.front().get();

  SvidRejection reason = SvidRejection::kCount;
  auto id = validateSvidLeaf(leaf, &reason);
  auto sans = uriSans(leaf);
  if (id.ok()) {
    // The SAN parses to the ID returned; it need not print the same, as the scheme is
    // case-insensitive (SPIFFE-ID §2.4: "SPIFFE://" is accepted, "spiffe://" emitted).
    if (sans.size() != 1) std::abort();
    auto san_id = SpiffeId::parse(sans.front());
    if (!san_id.ok() || !(*san_id == *id)) std::abort();
  } else if (reason == SvidRejection::kCount || svidRejectionLabel(reason) == nullptr) {
    std::abort();
  }

  if (certs.size() >= 2) {
    TrustBundle bundle;
    bundle.trust_domain = id.ok() ? id->trustDomain() : "cluster.local";
    bundle.roots.push_back(upRef(certs.back().get()));
    std::vector<X509*> untrusted;
    for (size_t i = 1; i + 1 < certs.size(); ++i) untrusted.push_back(certs[i].get());
    auto status = verifyChain(leaf, untrusted, bundle, checkTime(leaf));
    (void)status;
  }
  drainOpenSslErrors();
  return 0;
}
