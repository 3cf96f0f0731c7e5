#include "proxy/identity/tls_context.h"

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <cstring>
#include <exception>

#include <boost/asio/ssl/error.hpp>

#include "absl/strings/str_cat.h"
#include "proxy/identity/string_compat.h"

namespace ferry::identity {
namespace {

// docs/hbone.md, "TLS": the two suites ztunnel allows (FIPS-friendly), and its key exchanges.
constexpr char kCipherSuites[] = "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384";
constexpr char kGroups[] = "X25519:P-256";
// HBONE is HTTP/2 CONNECT; the wire form of the ALPN list ["h2"].
constexpr unsigned char kAlpnH2[] = {2, 'h', '2'};
// At most 4 intermediates between leaf and root (OpenSSL's own default is 100): mesh chains are
// root → (one or two intermediates) → leaf, and a bound stops a peer from making us walk long
// chains.
constexpr int kVerifyDepth = 4;

// Server: accept only h2. OpenSSL answers SSL_TLSEXT_ERR_ALERT_FATAL with a fatal
// no_application_protocol alert.
int selectAlpn(SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in,
               unsigned int inlen, void*) {
  unsigned int i = 0;
  while (i < inlen) {
    unsigned int len = in[i];
    if (i + 1 + len > inlen) break;
    if (len == 2 && std::memcmp(in + i + 1, "h2", 2) == 0) {
      *out = in + i + 1;
      *outlen = 2;
      return SSL_TLSEXT_ERR_OK;
    }
    i += 1 + len;
  }
  return SSL_TLSEXT_ERR_ALERT_FATAL;
}

// Server: OpenSSL skips the ALPN callback when the client sends no ALPN extension at all;
// HBONE is h2-only, so a client without ALPN is refused the same way.
int requireAlpn(SSL* ssl, int* alert, void*) {
  const unsigned char* data = nullptr;
  size_t len = 0;
  if (SSL_client_hello_get0_ext(ssl, TLSEXT_TYPE_application_layer_protocol_negotiation, &data, &len) != 1) {
    *alert = SSL_AD_NO_APPLICATION_PROTOCOL;
    return SSL_CLIENT_HELLO_ERROR;
  }
  return SSL_CLIENT_HELLO_SUCCESS;
}

absl::Status configure(SSL_CTX* ctx, bool server, const Svid& svid, const TrustBundle& bundle) {
  ERR_clear_error();
  if (SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION) != 1 ||
      SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION) != 1) {
    return openSslError("cannot restrict to TLS 1.3");
  }
  if (SSL_CTX_set_ciphersuites(ctx, kCipherSuites) != 1) return openSslError("cannot set cipher suites");
  if (SSL_CTX_set1_groups_list(ctx, kGroups) != 1) return openSslError("cannot set groups");
  // No resumption at all (docs/hbone.md, "TLS"; Envoy CVE-2022-21654): pooling amortises
  // handshakes.
  SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET | SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
  if (server && SSL_CTX_set_num_tickets(ctx, 0) != 1) return openSslError("cannot disable tickets");
  // Never 0-RTT: early data can be replayed.
  if (SSL_CTX_set_max_early_data(ctx, 0) != 1 || SSL_CTX_set_recv_max_early_data(ctx, 0) != 1) {
    return openSslError("cannot disable early data");
  }
  // Idle pooled connections keep no 34 KiB of buffers each.
  SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);

  if (SSL_CTX_use_certificate(ctx, svid.leaf.get()) != 1) return openSslError("cannot use certificate");
  for (const X509Ptr& cert : svid.intermediates) {
    if (SSL_CTX_add1_chain_cert(ctx, cert.get()) != 1) return openSslError("cannot add intermediate");
  }
  if (SSL_CTX_use_PrivateKey(ctx, svid.key.get()) != 1) return openSslError("cannot use private key");
  if (SSL_CTX_check_private_key(ctx) != 1) return openSslError("private key does not match certificate");

  X509_STORE* store = SSL_CTX_get_cert_store(ctx);
  for (const X509Ptr& root : bundle.roots) {
    if (X509_STORE_add_cert(store, root.get()) != 1) {
      unsigned long err = ERR_peek_last_error();
      if (ERR_GET_REASON(err) != X509_R_CERT_ALREADY_IN_HASH_TABLE) return openSslError("cannot add root");
      ERR_clear_error();
    }
  }
  int mode = SSL_VERIFY_PEER;
  if (server) mode |= SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
  SSL_CTX_set_verify(ctx, mode, nullptr);
  SSL_CTX_set_verify_depth(ctx, kVerifyDepth);
  // Only full chains to a bundle root count; no host name check, identity is verifyPeer's job.
  X509_VERIFY_PARAM* param = SSL_CTX_get0_param(ctx);
  X509_VERIFY_PARAM_clear_flags(param, X509_V_FLAG_PARTIAL_CHAIN);

  if (server) {
    SSL_CTX_set_client_hello_cb(ctx, requireAlpn, nullptr);
    SSL_CTX_set_alpn_select_cb(ctx, selectAlpn, nullptr);
  } else if (SSL_CTX_set_alpn_protos(ctx, kAlpnH2, sizeof(kAlpnH2)) != 0) {  // 0 means success here
    return openSslError("cannot set ALPN");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<boost::asio::ssl::context>> buildContext(bool server, const Svid& svid,
                                                                        const TrustBundle& bundle) {
  std::shared_ptr<boost::asio::ssl::context> ctx;
  try {
    ctx = std::make_shared<boost::asio::ssl::context>(boost::asio::ssl::context::tls);
  } catch (const std::exception& e) {
    return openSslError(absl::StrCat("cannot create TLS context: ", e.what()));
  }
  if (absl::Status s = configure(ctx->native_handle(), server, svid, bundle); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(server ? "server" : "client", " TLS context for ",
                                               svid.id.str(), ": ", s.message()));
  }
  return ctx;
}

}  // namespace

TlsContextCache::TlsContextCache(CertSource& source, std::string trust_domain)
    : source_(source), trust_domain_(std::move(trust_domain)) {}

absl::StatusOr<std::shared_ptr<boost::asio::ssl::context>> TlsContextCache::clientContext(
    const SpiffeId& local) {
  return get(Side::kClient, local);
}

absl::StatusOr<std::shared_ptr<boost::asio::ssl::context>> TlsContextCache::serverContext(
    const SpiffeId& local) {
  return get(Side::kServer, local);
}

absl::StatusOr<std::shared_ptr<boost::asio::ssl::context>> TlsContextCache::get(Side side,
                                                                               const SpiffeId& local) {
  if (local.trustDomain() != trust_domain_) {
    return absl::InvalidArgumentError(absl::StrCat("local identity ", local.str(),
                                                   " is not in the trust domain ", trust_domain_));
  }
  // Asked every time: the source rate-limits its own checks, and a new pointer is how a
  // rotated certificate or bundle reaches new handshakes.
  auto svid = source_.svid(local);
  if (!svid.ok()) return svid.status();
  auto bundle = source_.bundle();
  if (!bundle.ok()) return bundle.status();
  if ((*bundle)->trust_domain != trust_domain_) {
    return absl::FailedPreconditionError(absl::StrCat("trust bundle is for ", (*bundle)->trust_domain,
                                                      ", not ", trust_domain_));
  }
  auto& cache = side == Side::kServer ? server_ : client_;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache.find(local);
    if (it != cache.end() && it->second.svid == *svid && it->second.bundle == *bundle) {
      return it->second.context;
    }
  }
  // Built outside the lock: two threads may race to build the same context, which is cheaper
  // than serialising every handshake behind one build.
  auto built = buildContext(side == Side::kServer, **svid, **bundle);
  if (!built.ok()) return built.status();
  std::lock_guard<std::mutex> lock(mu_);
  Entry& entry = cache[local];
  if (entry.svid != *svid || entry.bundle != *bundle) {
    entry = Entry{*svid, *bundle, *built};
  }
  return entry.context;
}

size_t TlsContextCache::retain(const absl::flat_hash_set<SpiffeId>& keep) {
  std::lock_guard<std::mutex> lock(mu_);
  absl::flat_hash_set<SpiffeId> dropped;
  for (auto* cache : {&client_, &server_}) {
    for (auto it = cache->begin(); it != cache->end();) {
      if (keep.contains(it->first)) {
        ++it;
        continue;
      }
      dropped.insert(it->first);
      cache->erase(it++);
    }
  }
  return dropped.size();
}

namespace {
int expectedIdentityIndex() {
  static const int index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return index;
}

int verifyExpectedIdentity(int preverify_ok, X509_STORE_CTX* store) {
  if (!preverify_ok) return 0;
  if (X509_STORE_CTX_get_error_depth(store) != 0) return 1;
  auto* ssl = static_cast<SSL*>(
      X509_STORE_CTX_get_ex_data(store, SSL_get_ex_data_X509_STORE_CTX_idx()));
  const auto* expected =
      ssl ? static_cast<const std::string*>(SSL_get_ex_data(ssl, expectedIdentityIndex())) : nullptr;
  if (expected == nullptr) return 1;
  auto sans = uriSans(X509_STORE_CTX_get_current_cert(store));
  if (sans.size() == 1 && sans[0] == *expected) return 1;
  X509_STORE_CTX_set_error(store, X509_V_ERR_APPLICATION_VERIFICATION);
  return 0;
}
}  // namespace

void requirePeerIdentity(SSL* ssl, const std::string* expected) {
  SSL_set_ex_data(ssl, expectedIdentityIndex(), const_cast<std::string*>(expected));
  SSL_set_verify(ssl, SSL_get_verify_mode(ssl), &verifyExpectedIdentity);
}

absl::StatusOr<SpiffeId> verifyPeer(SSL* ssl, std::string_view trust_domain, SvidRejection* reason) {
  SvidRejection unused;
  SvidRejection& why = reason != nullptr ? *reason : unused;
  if (ssl == nullptr || SSL_is_init_finished(ssl) != 1) {
    return absl::FailedPreconditionError("TLS handshake has not completed");
  }
  X509* peer = SSL_get0_peer_certificate(ssl);
  if (peer == nullptr) {
    why = SvidRejection::kNoCertificate;
    return absl::UnauthenticatedError("peer presented no certificate");
  }
  long result = SSL_get_verify_result(ssl);
  if (result != X509_V_OK) {
    why = rejectionForVerifyError(
        result, SSL_is_server(ssl) ? VerifyingRole::kServer : VerifyingRole::kClient);
    return absl::UnauthenticatedError(absl::StrCat("peer certificate chain did not verify: ",
                                                   X509_verify_cert_error_string(result)));
  }
  auto id = validateSvidLeaf(peer, &why);
  if (!id.ok()) {
    return absl::UnauthenticatedError(absl::StrCat("peer certificate: ", id.status().message()));
  }
  if (id->trustDomain() != trust_domain) {
    why = SvidRejection::kTrustDomain;
    return absl::PermissionDeniedError(absl::StrCat("peer ", id->str(), " is in trust domain \"",
                                                    id->trustDomain(), "\", not the local trust domain \"",
                                                    toAbsl(trust_domain), "\""));
  }
  return id;
}

std::optional<SvidRejection> handshakeRejection(SSL* ssl, const boost::system::error_code& ec) {
  if (ssl == nullptr) return std::nullopt;
  long verify = SSL_get_verify_result(ssl);
  // OpenSSL leaves X509_V_OK in place until a chain was actually verified and failed.
  if (verify != X509_V_OK) {
    return rejectionForVerifyError(verify, SSL_is_server(ssl) ? VerifyingRole::kServer
                                                              : VerifyingRole::kClient);
  }
  // Asio's SSL category carries OpenSSL's packed error code; a server with
  // SSL_VERIFY_FAIL_IF_NO_PEER_CERT fails the handshake with this reason.
  if (ec.category() == boost::asio::error::get_ssl_category() &&
      ERR_GET_REASON(static_cast<unsigned long>(ec.value())) == SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE) {
    return SvidRejection::kNoCertificate;
  }
  return std::nullopt;
}

std::string negotiatedAlpn(SSL* ssl) {
  const unsigned char* data = nullptr;
  unsigned int len = 0;
  SSL_get0_alpn_selected(ssl, &data, &len);
  if (data == nullptr) return "";
  return std::string(reinterpret_cast<const char*>(data), len);
}

}  // namespace ferry::identity
