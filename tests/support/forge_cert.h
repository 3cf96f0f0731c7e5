#pragma once
// Leaf certificates that a correct CA never issues, signed by a real one, for tests of the
// checks that refuse them (svid.h's leaf rules, chain and validity checks, ferry-ca answers).
// Production's CertificateAuthority makes well-formed certificates only; everything that can
// be wrong here lives in this test-only library (ferry_test_forge).
#include <chrono>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proxy/identity/ca.h"

namespace ferry::testing {

// Each field's default is what a well-formed X.509-SVID has, so a test changes only the one
// property it is about.
struct ForgeOptions {
  // SAN URIs in this order (critical, empty subject); none: no subjectAltName at all.
  std::vector<std::string> uri_sans;
  // The key to certify (only its public half is used, e.g. from a CSR); null: a new P-256
  // key, returned in IssuedCert::key. Given, IssuedCert::key holds another reference to it.
  EVP_PKEY* subject_key = nullptr;
  bool is_ca = false;                  // basicConstraints cA
  bool digital_signature = true;       // keyUsage bits; with neither of these two the
  bool key_cert_sign = false;          // keyUsage is keyEncipherment (it may not be empty)
  bool eku = true;                     // an extendedKeyUsage extension at all
  bool eku_client = true;              // clientAuth in it
  bool eku_server = true;              // serverAuth in it
  // notBefore = now+not_before_offset, notAfter = now+lifetime (a negative lifetime gives an
  // expired certificate).
  std::chrono::seconds not_before_offset{-60};
  std::chrono::seconds lifetime{3600};
};

// A leaf as `opts` describes it, issued under `ca`'s name and signed with its key.
absl::StatusOr<identity::IssuedCert> forgeLeaf(const identity::CertificateAuthority& ca,
                                               const ForgeOptions& opts);

}  // namespace ferry::testing
