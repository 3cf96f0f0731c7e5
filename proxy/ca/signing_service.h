#pragma once
// What ferry-ca does with one request (docs/ferry-ca.md): route → ready? → decode → parse the
// CSR → TokenReview → authorize → the node's rate limit → sign. Every outcome is one audit
// line and one count of ferry_ca_requests_total{decision, reason}.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ssl/context.hpp>

#include "absl/status/status.h"
#include "proxy/ca/audit.h"
#include "proxy/ca/authorizer.h"
#include "proxy/ca/https_server.h"
#include "proxy/ca/rate_limit.h"
#include "proxy/ca/review_gate.h"
#include "proxy/ca/token_reviewer.h"
#include "proxy/common/histogram.h"
#include "proxy/identity/watched_ca_source.h"

namespace ferry::telemetry {
class Exposition;
}

namespace ferry::ca {

// Every reason of ferry_ca_requests_total and the audit line: "signed" and the refusal codes
// of docs/ferry-ca.md's table. X(enumerator, code, HTTP status).
#define FERRY_CA_REASONS(X)                          \
  X(kSigned, "signed", 200)                          \
  X(kBadRequest, "bad_request", 400)                 \
  X(kBadCsr, "bad_csr", 400)                         \
  X(kUnauthenticated, "unauthenticated", 401)        \
  X(kWrongAudience, "wrong_audience", 401)           \
  X(kNotNodeAgent, "not_node_agent", 403)            \
  X(kUnboundToken, "unbound_token", 403)             \
  X(kCallerPodUnknown, "caller_pod_unknown", 403)    \
  X(kWrongTrustDomain, "wrong_trust_domain", 403)    \
  X(kNoPodOnNode, "no_pod_on_node", 403)             \
  X(kTooLarge, "too_large", 413)                     \
  X(kRateLimited, "rate_limited", 429)               \
  X(kNotReady, "not_ready", 503)                     \
  X(kReviewFailed, "review_failed", 503)             \
  X(kSigningFailed, "signing_failed", 500)

enum class Reason : int {
#define FERRY_CA_ENUM(e, code, status) e,
  FERRY_CA_REASONS(FERRY_CA_ENUM)
#undef FERRY_CA_ENUM
      kCount
};
std::string_view reasonCode(Reason reason);
int reasonStatus(Reason reason);

struct SigningSettings {
  AuthorizerSettings authorizer;
  std::chrono::seconds default_validity{24 * 3600};  // validity_seconds 0 or absent
  std::chrono::seconds max_validity{24 * 3600};      // a longer wish is cut to this
  // TokenReviews in flight at once; beyond, a request is answered review_failed (503, the
  // caller retries with back-off) without asking. Each is an API server request: a flood of
  // bad tokens must not become a flood on the API server.
  size_t max_reviews_in_flight = 256;
  // Before any review: the token's shape, a short cache of reviews, a per-client rate
  // (review_gate.h). The CSR's trust domain is checked before the token.
  ReviewGateSettings review_gate;
};

class SigningService : public HttpsHandler {
 public:
  // All references must outlive the service. `pods` is fed by a pods informer.
  SigningService(SigningSettings settings, identity::WatchedCaSource& ca, const PodIndex& pods,
                 TokenReviewer& reviewer, NodeRateLimiter& limiter, AuditLog& audit);

  boost::asio::awaitable<HttpsAnswer> handle(HttpsCall call) override;
  HttpsAnswer refused(TransportRefusal why, std::string message, const std::string& remote) override;

  // OK once a CA is loaded and the pod view has synced; else why not (/healthz/ready).
  absl::Status ready() const;

  // ferry_ca_requests_total, ferry_ca_request_duration_seconds, ferry_ca_token_review_duration_seconds,
  // ferry_ca_ready, ferry_ca_reloads_total, ferry_ca_reload_failures_total.
  void collect(telemetry::Exposition& out) const;
  uint64_t count(Reason reason) const { return counts_[static_cast<int>(reason)].load(std::memory_order_relaxed); }

 private:
  // Writes the audit line, counts, and makes the answer.
  HttpsAnswer finish(Reason reason, AuditRecord record, std::string body_or_message,
                     std::chrono::steady_clock::time_point began, int retry_after = -1);
  // The steps of handle() that can refuse: each answers the refusal (finish(), which takes
  // `record`) or nothing when the request goes on.
  // The route (path and method), the content type, and whether ferry-ca is ready.
  std::optional<HttpsAnswer> checkCall(const HttpsCall& call, AuditRecord& record,
                                       std::chrono::steady_clock::time_point began);
  // Before a TokenReview is made for `remote` (ip:port): its client's rate of reviews and the
  // reviews in flight.
  std::optional<HttpsAnswer> holdBackReview(const std::string& remote, AuditRecord& record,
                                            std::chrono::steady_clock::time_point began);
  // The reviewed caller may have `id` signed (authorize()), and its node is within its rate.
  std::optional<HttpsAnswer> refuseCaller(const TokenReview& review, const identity::SpiffeId& id,
                                          AuditRecord& record, std::chrono::steady_clock::time_point began);
  // Asks the API server about `token`, counted and timed; an answer is remembered by the gate.
  boost::asio::awaitable<absl::StatusOr<TokenReview>> reviewToken(const std::string& token);

  const SigningSettings settings_;
  identity::WatchedCaSource& ca_;
  const PodIndex& pods_;
  TokenReviewer& reviewer_;
  NodeRateLimiter& limiter_;
  AuditLog& audit_;

  size_t reviews_in_flight_ = 0;  // io thread only
  ReviewGate gate_;               // io thread only
  std::atomic<uint64_t> reviews_made_{0}, reviews_reused_{0};
  std::atomic<uint64_t> counts_[static_cast<int>(Reason::kCount)] = {};
  // The whole request, from its last byte read to the answer made (TLS and the network are
  // not in it); from 100 µs (a refusal) to 10 s (a TokenReview at its timeout).
  common::DurationHistogram request_seconds_{
      {1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2, 2e-2, 5e-2, 0.1, 0.2, 0.5, 1, 2, 5, 10}};
  // The TokenReview alone: an API round trip, ~1-20 ms in a healthy cluster.
  common::DurationHistogram review_seconds_{
      {1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2, 2e-2, 5e-2, 0.1, 0.2, 0.5, 1, 2, 5, 10}};
};

// ferry-ca's own HTTPS certificate (docs/ferry-ca.md "Protocol"): a P-256 key made in memory,
// a certificate from the current signing CA naming `dns_names`, a TLS 1.2+ server context.
// current() makes a new one when the CA changed (its generation) or half its life has passed;
// connections made before keep theirs.
class ServingCertificate {
 public:
  ServingCertificate(identity::WatchedCaSource& ca, std::vector<std::string> dns_names,
                     std::chrono::seconds lifetime);
  // io thread. nullptr while no CA is loaded or issuing fails (logged; the next call retries).
  std::shared_ptr<boost::asio::ssl::context> current();
  uint64_t issued() const { return issued_.load(std::memory_order_relaxed); }

 private:
  absl::StatusOr<std::shared_ptr<boost::asio::ssl::context>> issue(identity::CaCertSource& source);

  identity::WatchedCaSource& ca_;
  const std::vector<std::string> dns_names_;
  const std::chrono::seconds lifetime_;
  std::shared_ptr<boost::asio::ssl::context> context_;
  const identity::CaCertSource* source_ = nullptr;  // that issued context_
  uint64_t generation_ = 0;
  std::chrono::system_clock::time_point renew_at_;
  std::chrono::steady_clock::time_point retry_at_;  // after a failure
  std::atomic<uint64_t> issued_{0};
};

// The DNS names of ferry-ca's serving certificate: `<service>`, `<service>.<namespace>`,
// `<service>.<namespace>.svc`, then `extra` (duplicates dropped).
std::vector<std::string> servingNames(const std::string& service, const std::string& namespace_name,
                                      const std::vector<std::string>& extra);

}  // namespace ferry::ca
