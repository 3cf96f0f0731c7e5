#pragma once
// An in-process ferry-ca on 127.0.0.1 for tests and the benchmark (tests/bench/ca_sign_bench.cc):
// real files for the CA (a root, an intermediate that signs), the real HTTPS transport and
// signing pipeline on their own io thread, a PodIndex fed by hand and a TokenReviewer that
// answers from a table instead of an API server. Also the clients' side: CSRs and a small
// synchronous HTTPS client that keeps its connection open.
#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>

#include "proxy/ca/audit.h"
#include "proxy/ca/authorizer.h"
#include "proxy/ca/https_server.h"
#include "proxy/ca/protocol.h"
#include "proxy/ca/rate_limit.h"
#include "proxy/ca/signing_service.h"
#include "proxy/ca/token_reviewer.h"
#include "proxy/identity/ca.h"
#include "proxy/identity/openssl_util.h"
#include "proxy/identity/watched_ca_source.h"
#include "tests/support/temp_dir.h"

namespace ferry::ca::lab {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

inline constexpr const char* kTrustDomain = "cluster.local";
inline constexpr const char* kAgentNamespace = "ferry-system";
inline constexpr const char* kServerName = "ferry-ca.ferry-system.svc";

// Answers from a table: token -> review. An unknown token did not authenticate. Thread-safe.
class FakeTokenReviewer : public TokenReviewer {
 public:
  void set(std::string token, TokenReview review) {
    std::lock_guard lock(mu_);
    reviews_[std::move(token)] = std::move(review);
  }
  // Every review fails as if the API server were down.
  void failAll(bool fail) { fail_ = fail; }
  asio::awaitable<absl::StatusOr<TokenReview>> review(std::string token) override {
    reviews_made_.fetch_add(1);
    if (fail_) co_return absl::UnavailableError("TokenReview: connect: Connection refused");
    std::lock_guard lock(mu_);
    auto it = reviews_.find(token);
    if (it == reviews_.end()) {
      TokenReview refused;
      refused.error = "invalid bearer token";
      co_return refused;
    }
    co_return it->second;
  }
  uint64_t reviewsMade() const { return reviews_made_.load(); }

 private:
  std::mutex mu_;
  std::map<std::string, TokenReview> reviews_;
  std::atomic<bool> fail_{false};
  std::atomic<uint64_t> reviews_made_{0};
};

// A bound token of ferryd's pod `pod` (its UID `uid`).
inline TokenReview agentReview(const std::string& pod, const std::string& uid) {
  TokenReview r;
  r.authenticated = true;
  r.username = std::string("system:serviceaccount:") + kAgentNamespace + ":ferryd";
  r.uid = "sa-uid";
  r.audiences = {"ferry-ca"};
  r.pod_name = pod;
  r.pod_uid = uid;
  return r;
}

inline k8s::Pod pod(std::string ns, std::string name, std::string uid, std::string sa, std::string node) {
  k8s::Pod p;
  p.namespace_name = std::move(ns);
  p.name = std::move(name);
  p.uid = std::move(uid);
  p.service_account = std::move(sa);
  p.node_name = std::move(node);
  p.phase = "Running";
  return p;
}

inline std::string pemOf(X509* cert) { return *identity::certToPem(cert); }

// A PKCS#10 request for `uri` (its one SAN) signed by `key`.
inline std::string makeCsr(const std::string& uri, EVP_PKEY* key) {
  X509_REQ* req = X509_REQ_new();
  X509_REQ_set_version(req, 0);
  X509_REQ_set_pubkey(req, key);
  GENERAL_NAMES* names = GENERAL_NAMES_new();
  GENERAL_NAME* gn = GENERAL_NAME_new();
  ASN1_IA5STRING* ia5 = ASN1_IA5STRING_new();
  ASN1_STRING_set(ia5, uri.data(), static_cast<int>(uri.size()));
  GENERAL_NAME_set0_value(gn, GEN_URI, ia5);
  sk_GENERAL_NAME_push(names, gn);
  STACK_OF(X509_EXTENSION)* exts = sk_X509_EXTENSION_new_null();
  sk_X509_EXTENSION_push(exts, X509V3_EXT_i2d(NID_subject_alt_name, 0, names));
  X509_REQ_add_extensions(req, exts);
  X509_REQ_sign(req, key, EVP_sha256());
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_X509_REQ(bio, req);
  char* data = nullptr;
  long n = BIO_get_mem_data(bio, &data);
  std::string pem(data, static_cast<size_t>(n));
  BIO_free(bio);
  sk_X509_EXTENSION_pop_free(exts, X509_EXTENSION_free);
  GENERAL_NAMES_free(names);
  X509_REQ_free(req);
  return pem;
}

inline identity::EvpPkeyPtr newKey() { return identity::EvpPkeyPtr(EVP_EC_gen("P-256")); }

inline std::string workloadId(const std::string& ns, const std::string& sa, const std::string& td = kTrustDomain) {
  return "spiffe://" + td + "/ns/" + ns + "/sa/" + sa;
}

// A sign request body for `id` with a fresh key (returned in `key` when asked).
inline std::string signBody(const std::string& id, identity::EvpPkeyPtr* key = nullptr, int64_t validity = 0) {
  identity::EvpPkeyPtr k = newKey();
  std::string body = encode(SignRequest{makeCsr(id, k.get()), std::chrono::seconds(validity)});
  if (key != nullptr) *key = std::move(k);
  return body;
}

// True when `chain` (leaf first) verifies against `root` now.
inline bool chainVerifies(const std::vector<identity::X509Ptr>& chain, X509* root) {
  if (chain.empty()) return false;
  X509_STORE* store = X509_STORE_new();
  X509_STORE_add_cert(store, root);
  STACK_OF(X509)* untrusted = sk_X509_new_null();
  for (size_t i = 1; i < chain.size(); ++i) sk_X509_push(untrusted, chain[i].get());
  X509_STORE_CTX* ctx = X509_STORE_CTX_new();
  X509_STORE_CTX_init(ctx, store, chain[0].get(), untrusted);
  bool ok = X509_verify_cert(ctx) == 1;
  X509_STORE_CTX_free(ctx);
  sk_X509_free(untrusted);
  X509_STORE_free(store);
  return ok;
}

struct LabOptions {
  double node_rate = 1000;
  double node_burst = 1000;
  bool list_pods = true;  // false: the pod view never synced
  std::chrono::seconds default_validity{24 * 3600};  // a request without validity_seconds
  HttpsServerOptions server;
};

// The CA material on disk and a ferry-ca serving from it.
class CaLab {
 public:
  explicit CaLab(LabOptions options = {}) : options_(options) {
    root_.emplace(*identity::CertificateAuthority::createRoot(kTrustDomain, std::chrono::hours(24 * 365)));
    (void)root_->writePem(dir_ + "/root.pem", dir_ + "/root-key.pem");
    rotate();
    ca_ = std::make_unique<identity::WatchedCaSource>(
        identity::CaFiles{dir_ + "/ca-cert.pem", dir_ + "/ca-key.pem", dir_ + "/root.pem"}, kTrustDomain,
        std::chrono::hours(24));
    ca_->poll();
    limiter_ = *NodeRateLimiter::create(options_.node_rate, options_.node_burst);
    audit_ = std::make_unique<AuditLog>([this](std::string_view line) {
      std::lock_guard lock(audit_mu_);
      audit_lines_.emplace_back(line);
    });
    SigningSettings settings;
    settings.authorizer = AuthorizerSettings{kTrustDomain, kAgentNamespace, "ferryd", "ferry-ca"};
    settings.default_validity = options_.default_validity;
    service_ = std::make_unique<SigningService>(settings, *ca_, pods_, reviewer_, *limiter_, *audit_);
    serving_ = std::make_unique<ServingCertificate>(*ca_, servingNames("ferry-ca", kAgentNamespace, {}),
                                                    std::chrono::hours(24));
    HttpsServerOptions server = options_.server;
    server.listen = *common::parseHostPort("127.0.0.1:0", true);
    server_ = std::make_unique<HttpsServer>(io_, server, [this] { return serving_->current(); }, *service_);
    // Two nodes, a ferryd on each; workloads app/web on node-a, app/db on node-b.
    if (options_.list_pods) pods_.replace({pod(kAgentNamespace, "ferryd-a", "uid-a", "ferryd", "node-a"),
                   pod(kAgentNamespace, "ferryd-b", "uid-b", "ferryd", "node-b"),
                   pod("app", "web-1", "uid-web", "web", "node-a"), pod("app", "db-1", "uid-db", "db", "node-b")});
    reviewer_.set("hdr.token-a.sig", agentReview("ferryd-a", "uid-a"));
    reviewer_.set("hdr.token-b.sig", agentReview("ferryd-b", "uid-b"));
    if (auto st = server_->listen(); !st.ok()) std::abort();
    thread_ = std::thread([this] { io_.run(); });
  }
  ~CaLab() {
    onIo([this] { server_->stop(); });
    guard_.reset();
    io_.stop();
    thread_.join();
  }

  // A new intermediate under `root` (by default the lab's), written over the CA files (not
  // yet polled).
  void rotate(const identity::CertificateAuthority* root = nullptr) {
    intermediate_.emplace(*(root != nullptr ? root : &*root_)->issueIntermediate(std::chrono::hours(24 * 30)));
    (void)intermediate_->writePem(dir_ + "/ca-cert.pem", dir_ + "/ca-key.pem");
  }
  // ferry-ca's trust bundle becomes `roots` (not yet polled): a root rotation's first and last steps.
  void writeBundle(const std::vector<X509*>& roots) {
    std::string pem;
    for (X509* root : roots) pem += pemOf(root);
    (void)identity::writeFileAtomic(dir_ + "/root.pem", pem, 0644);
  }
  // Runs `f` on the server's io thread and waits for it.
  template <class F>
  auto onIo(F f) -> decltype(f()) {
    std::packaged_task<decltype(f())()> task(std::move(f));
    auto done = task.get_future();
    asio::post(io_, [&task] { task(); });
    return done.get();
  }
  bool poll() { return onIo([this] { return ca_->poll(); }); }

  uint16_t port() const { return server_->port(); }
  X509* root() const { return root_->cert(); }
  // The root itself (it can issue, e.g. a client certificate for a probe).
  const identity::CertificateAuthority& rootCa() const { return *root_; }
  // The CA files reloaded so far (the first load counts).
  uint64_t reloads() const { return ca_->reloads(); }
  X509* intermediate() const { return intermediate_->cert(); }
  FakeTokenReviewer& reviewer() { return reviewer_; }
  PodIndex& pods() { return pods_; }
  SigningService& service() { return *service_; }
  HttpsServer& server() { return *server_; }
  ServingCertificate& serving() { return *serving_; }
  std::vector<std::string> auditLines() {
    std::lock_guard lock(audit_mu_);
    return audit_lines_;
  }
  // A client TLS context that trusts the lab's root.
  std::shared_ptr<asio::ssl::context> clientTls() const {
    auto tls = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_client);
    tls->set_verify_mode(asio::ssl::verify_peer);
    std::string pem = pemOf(root_->cert());
    tls->add_certificate_authority(asio::buffer(pem));
    return tls;
  }

 private:
  LabOptions options_;
  ferry::test_support::TempDir tmp_{"ca-lab"};
  const std::string dir_ = tmp_.path();
  std::optional<identity::CertificateAuthority> root_, intermediate_;
  asio::io_context io_{1};
  asio::executor_work_guard<asio::io_context::executor_type> guard_{io_.get_executor()};
  std::unique_ptr<identity::WatchedCaSource> ca_;
  PodIndex pods_;
  FakeTokenReviewer reviewer_;
  std::unique_ptr<NodeRateLimiter> limiter_;
  std::mutex audit_mu_;
  std::vector<std::string> audit_lines_;
  std::unique_ptr<AuditLog> audit_;
  std::unique_ptr<SigningService> service_;
  std::unique_ptr<ServingCertificate> serving_;
  std::unique_ptr<HttpsServer> server_;
  std::thread thread_;
};

// One HTTPS connection to the lab, kept open across requests; synchronous (a test thread or
// one benchmark connection each).
class KeepAliveClient {
 public:
  struct Reply {
    int status = 0;
    std::string body;
    std::string retry_after;
  };
  KeepAliveClient(asio::ssl::context& tls, uint16_t port) : stream_(io_, tls), port_(port) {}
  boost::system::error_code connect() {
    boost::system::error_code ec;
    SSL_set_tlsext_host_name(stream_.native_handle(), kServerName);
    SSL_set1_host(stream_.native_handle(), kServerName);
    beast::get_lowest_layer(stream_).connect({asio::ip::make_address("127.0.0.1"), port_}, ec);
    if (!ec) stream_.handshake(asio::ssl::stream_base::client, ec);
    return ec;
  }
  std::optional<Reply> post(const std::string& bearer, const std::string& body,
                            const std::string& target = "/v1/certificates") {
    http::request<http::string_body> req{http::verb::post, target, 11};
    req.set(http::field::host, kServerName);
    req.set(http::field::content_type, "application/json");
    if (!bearer.empty()) req.set(http::field::authorization, "Bearer " + bearer);
    req.keep_alive(true);
    req.body() = body;
    req.prepare_payload();
    boost::system::error_code ec;
    http::write(stream_, req, ec);
    if (ec) return std::nullopt;
    http::response<http::string_body> res;
    http::read(stream_, buffer_, res, ec);
    if (ec) return std::nullopt;
    return Reply{static_cast<int>(res.result_int()), res.body(), std::string(res[http::field::retry_after])};
  }
  // The certificate the server presented.
  identity::X509Ptr serverCert() { return identity::X509Ptr(SSL_get1_peer_certificate(stream_.native_handle())); }

 private:
  asio::io_context io_;
  beast::ssl_stream<asio::ip::tcp::socket> stream_;
  beast::flat_buffer buffer_;
  uint16_t port_;
};

}  // namespace ferry::ca::lab
