#pragma once
// In-process CAs and the SPIFFE IDs the identity tests issue for, in the trust domain
// example.org: header-only, linked by tests only. A CA that cannot be made fails the test.
#include <openssl/x509.h>

#include <chrono>
#include <string>
#include <utility>

#include <gtest/gtest.h>

#include "proxy/identity/ca.h"
#include "proxy/identity/openssl_util.h"
#include "proxy/identity/spiffe_id.h"

namespace ferry::test_support {

inline constexpr char kTestTrustDomain[] = "example.org";

// A root of kTestTrustDomain. The default lifetime outlasts any test; a test of expiry or
// rotation passes its own.
inline identity::CertificateAuthority newRoot(std::chrono::seconds lifetime = std::chrono::hours(48)) {
  auto root = identity::CertificateAuthority::createRoot(kTestTrustDomain, lifetime);
  EXPECT_TRUE(root.ok()) << root.status();
  return *std::move(root);
}

// An intermediate signed by `parent` (a node's signer, as ferry-ca hands out).
inline identity::CertificateAuthority newIntermediate(const identity::CertificateAuthority& parent,
                                                      std::chrono::seconds lifetime = std::chrono::hours(48)) {
  auto inter = parent.issueIntermediate(lifetime);
  EXPECT_TRUE(inter.ok()) << inter.status();
  return *std::move(inter);
}

inline std::string pemOf(X509* cert) { return *identity::certToPem(cert); }

// The two ends of a handshake, as workloads of namespace default.
inline identity::SpiffeId clientId() { return *identity::SpiffeId::parse("spiffe://example.org/ns/default/sa/client"); }
inline identity::SpiffeId serverId() { return *identity::SpiffeId::parse("spiffe://example.org/ns/default/sa/server"); }

}  // namespace ferry::test_support
