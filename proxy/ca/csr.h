#pragma once
// The CSR of a sign request (docs/ferry-ca.md "Protocol"): parsed and checked before anyone
// is asked who sent it. Only the public key and the SPIFFE ID are taken from it; the subject
// and every other requested extension are ignored, since ferry-ca writes the certificate's
// profile itself.
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "proxy/identity/openssl_util.h"
#include "proxy/identity/spiffe_id.h"

namespace ferry::ca {

struct ParsedCsr {
  identity::SpiffeId id;              // the one URI SAN, a workload ID (/ns/<ns>/sa/<sa>)
  identity::WorkloadName workload;    // its namespace and service account
  identity::EvpPkeyPtr public_key;    // the key the CSR carries (and is signed with)
  std::string key_type;               // "ECDSA P-256", "RSA 3072", ... (for logs)
};

// One PEM "CERTIFICATE REQUEST" (PKCS#10). Refused, InvalidArgument with a sentence naming
// the rule (the caller answers bad_csr), when: it is not one PEM CSR (garbage, truncated, or
// a second PEM block after it); its signature does not verify with the key it carries; the
// key is not ECDSA P-256/P-384 or RSA of 2048..4096 bits; it requests not exactly one SAN,
// or that SAN is not a URI (DNS, IP, email, other), or the URI is not a workload SPIFFE ID;
// it requests basicConstraints with cA true. The trust domain is not checked here:
// authorize() does, so that the answer is wrong_trust_domain rather than bad_csr.
absl::StatusOr<ParsedCsr> parseCsr(std::string_view pem);

}  // namespace ferry::ca
