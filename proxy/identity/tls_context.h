#pragma once
// TLS contexts for HBONE (docs/hbone.md, "TLS"): TLS 1.3 only, ALPN h2, mutual
// authentication with X.509-SVIDs, no resumption.
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include <boost/asio/ssl/context.hpp>
#include <boost/system/error_code.hpp>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "proxy/identity/cert_source.h"

namespace ferry::identity {

// TLS contexts per local identity, cached (keyed by identity; rebuilt when the CertSource
// returns a different Svid or bundle pointer). Thread-safe.
class TlsContextCache {
 public:
  TlsContextCache(CertSource& source, std::string trust_domain);

  // Client side of HBONE: presents `local`'s SVID, verifies the server chain against the bundle.
  // The caller still checks the server's identity with verifyPeer after the handshake.
  absl::StatusOr<std::shared_ptr<boost::asio::ssl::context>> clientContext(const SpiffeId& local);
  // Server side of HBONE (15008): presents `local`'s SVID, REQUIRES a client certificate.
  absl::StatusOr<std::shared_ptr<boost::asio::ssl::context>> serverContext(const SpiffeId& local);

  // Drops the contexts of every identity not in `keep` (no local workload uses it any more),
  // so that their SVIDs and keys are freed once live connections let go. Returns how many
  // identities were dropped.
  size_t retain(const absl::flat_hash_set<SpiffeId>& keep);

 private:
  enum class Side { kClient, kServer };
  struct Entry {
    std::shared_ptr<const Svid> svid;
    std::shared_ptr<const TrustBundle> bundle;
    std::shared_ptr<boost::asio::ssl::context> context;
  };
  absl::StatusOr<std::shared_ptr<boost::asio::ssl::context>> get(Side side, const SpiffeId& local);

  CertSource& source_;
  const std::string trust_domain_;
  std::mutex mu_;
  absl::flat_hash_map<SpiffeId, Entry> client_;
  absl::flat_hash_map<SpiffeId, Entry> server_;
};

// After a completed handshake: chain verified by OpenSSL (SSL_get_verify_result == X509_V_OK and
// a peer cert exists), leaf passes validateSvidLeaf, and its trust domain equals `trust_domain`.
// Returns the peer's ID or why not (and, when `reason` is set, which rule failed).
absl::StatusOr<SpiffeId> verifyPeer(SSL* ssl, std::string_view trust_domain,
                                    SvidRejection* reason = nullptr);

// After a failed handshake: whether it failed because the peer's certificate was refused
// (no certificate, or chain verification), and by which rule. nullopt for every other cause
// (network, protocol version, ALPN), which is no certificate rejection.
std::optional<SvidRejection> handshakeRejection(SSL* ssl, const boost::system::error_code& ec);

// Client side: makes the handshake itself fail unless the server's leaf carries exactly
// `expected` as its URI SAN, so that our certificate is never sent to the wrong server
// (TLS 1.3 sends the client certificate after the server is verified). `expected` must
// outlive the handshake. verifyPeer still runs afterwards for the full SVID rules.
void requirePeerIdentity(SSL* ssl, const std::string* expected);

// The ALPN protocol negotiated ("" if none).
std::string negotiatedAlpn(SSL* ssl);

}  // namespace ferry::identity
