#pragma once
// A small in-process certificate authority: `ferryctl ca`, ferry-ca, the `ca` identity source
// and tests use it to mint roots, intermediates, X.509-SVIDs and ferry-ca's serving
// certificate. It makes well-formed certificates only; tests of the checks that refuse broken
// ones forge them in tests/support/forge_cert.h.
#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "proxy/identity/openssl_util.h"
#include "proxy/identity/spiffe_id.h"

namespace ferry::identity {

struct IssuedCert {
  X509Ptr cert;
  EvpPkeyPtr key;
};

class CertificateAuthority {
 public:
  // New self-signed root: ECDSA P-256, cA=true, keyUsage critical keyCertSign+cRLSign, URI SAN
  // spiffe://<td> (no path), given lifetime, random 128-bit serial, SKID/AKID.
  static absl::StatusOr<CertificateAuthority> createRoot(std::string_view trust_domain,
                                                         std::chrono::seconds lifetime);
  // A CA certificate (first one in the file) with its key; the trust domain comes from its
  // spiffe://<td> URI SAN.
  static absl::StatusOr<CertificateAuthority> load(const std::string& cert_pem_path,
                                                   const std::string& key_pem_path);

  // Leaf X.509-SVID for id: ECDSA P-256 key generated in-process, URI SAN = id (critical, empty
  // subject), cA=false (basicConstraints critical), keyUsage critical digitalSignature, EKU
  // serverAuth+clientAuth, notBefore = now-60s, notAfter = now+lifetime.
  absl::StatusOr<IssuedCert> issueLeaf(const SpiffeId& id, std::chrono::seconds lifetime) const;
  // The same X.509-SVID for a key made elsewhere (ferry-ca signs the key of a node's CSR):
  // only `public_key` is used from it.
  absl::StatusOr<X509Ptr> issueLeafForKey(const SpiffeId& id, EVP_PKEY* public_key,
                                          std::chrono::seconds lifetime) const;
  // A TLS server certificate (ferry-ca's own HTTPS): DNS SANs `dns_names` (at least one; the
  // first is also the subject CN), cA=false, keyUsage digitalSignature, EKU serverAuth only,
  // notBefore = now-60s, notAfter = now+lifetime.
  absl::StatusOr<X509Ptr> issueServing(const std::vector<std::string>& dns_names, EVP_PKEY* public_key,
                                       std::chrono::seconds lifetime) const;

  // Intermediate CA signed by this CA (URI SAN spiffe://<td>, pathlen 0).
  absl::StatusOr<CertificateAuthority> issueIntermediate(std::chrono::seconds lifetime) const;

  X509* cert() const { return cert_.get(); }
  EVP_PKEY* key() const { return key_.get(); }
  const std::string& trustDomain() const { return trust_domain_; }

  // Writes the certificate (0644) and the key (0600), each atomically.
  absl::Status writePem(const std::string& cert_path, const std::string& key_path) const;

 private:
  CertificateAuthority(X509Ptr cert, EvpPkeyPtr key, std::string trust_domain)
      : cert_(std::move(cert)), key_(std::move(key)), trust_domain_(std::move(trust_domain)) {}
  // Every leaf this CA makes (SVIDs, serving certificates): cA=false, keyUsage
  // digitalSignature, EKU serverAuth (+clientAuth if `client_auth`), SANs `uris` then
  // `dns_names`, notBefore = now-60s.
  absl::StatusOr<X509Ptr> makeLeaf(EVP_PKEY* subject_key, const std::vector<std::string>& uris,
                                   const std::vector<std::string>& dns_names, bool client_auth,
                                   std::chrono::seconds lifetime) const;

  X509Ptr cert_;
  EvpPkeyPtr key_;
  std::string trust_domain_;
};

// A subjectAltName value: the URIs, then the DNS names (certificates and CSRs).
absl::StatusOr<GeneralNamesPtr> subjectAltNames(const std::vector<std::string>& uris,
                                                const std::vector<std::string>& dns_names = {});

// Writes an issued leaf (plus chain) into the DirCertSource layout:
// <dir>/<ns>/<sa>/{cert.pem,key.pem}, each atomically (write temp + rename); key.pem is 0600.
absl::Status writeSvidFiles(const std::string& dir, const SpiffeId& id, const IssuedCert& leaf,
                            const std::vector<X509*>& chain);

}  // namespace ferry::identity
