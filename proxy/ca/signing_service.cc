#include "proxy/ca/signing_service.h"

#include <openssl/ssl.h>

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "proxy/ca/csr.h"
#include "proxy/ca/protocol.h"
#include "proxy/common/log.h"
#include "proxy/common/strings.h"
#include "proxy/telemetry/metrics.h"

namespace ferry::ca {
namespace asio = boost::asio;
using Steady = std::chrono::steady_clock;

namespace {

struct ReasonInfo {
  std::string_view code;
  int status;
};
constexpr ReasonInfo kReasons[] = {
#define FERRY_CA_INFO(e, code, status) {code, status},
    FERRY_CA_REASONS(FERRY_CA_INFO)
#undef FERRY_CA_INFO
};

Reason reasonOf(std::string_view code) {
  for (int i = 0; i < static_cast<int>(Reason::kCount); ++i) {
    if (kReasons[i].code == code) return static_cast<Reason>(i);
  }
  // authorize() answers only codes of the table; an unknown one is refused as not ready
  // rather than signed.
  return Reason::kNotReady;
}

// "Bearer <token>" (the scheme is case-insensitive, RFC 7235); empty when there is none.
std::string bearerToken(std::string_view authorization) {
  constexpr std::string_view kScheme = "bearer ";
  if (authorization.size() <= kScheme.size() || !absl::StartsWithIgnoreCase(common::toAbsl(authorization), common::toAbsl(kScheme))) return {};
  std::string_view token = authorization.substr(kScheme.size());
  while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
  while (!token.empty() && token.back() == ' ') token.remove_suffix(1);
  return std::string(token);
}

// The answer to a signed CSR: the chain, leaf first and no root, in PEM.
absl::StatusOr<SignResponse> chainResponse(const identity::CaCertSource::Signed& signed_cert) {
  SignResponse response;
  auto leaf_pem = identity::certToPem(signed_cert.leaf.get());
  if (!leaf_pem.ok()) return leaf_pem.status();
  response.cert_chain_pem.push_back(*std::move(leaf_pem));
  for (const auto& cert : signed_cert.intermediates) {
    auto pem = identity::certToPem(cert.get());
    if (!pem.ok()) return pem.status();
    response.cert_chain_pem.push_back(*std::move(pem));
  }
  return response;
}

// A failed re-issue of the serving certificate is tried again after this long, not on every
// accepted connection.
constexpr auto kServingRetry = std::chrono::seconds(5);

}  // namespace

std::string_view reasonCode(Reason reason) { return kReasons[static_cast<int>(reason)].code; }
int reasonStatus(Reason reason) { return kReasons[static_cast<int>(reason)].status; }

SigningService::SigningService(SigningSettings settings, identity::WatchedCaSource& ca, const PodIndex& pods,
                               TokenReviewer& reviewer, NodeRateLimiter& limiter, AuditLog& audit)
    : settings_(std::move(settings)), ca_(ca), pods_(pods), reviewer_(reviewer), limiter_(limiter), audit_(audit),
      gate_(settings_.review_gate) {}

absl::Status SigningService::ready() const {
  if (auto st = ca_.status(); !st.ok()) return st;
  if (!pods_.synced()) return absl::UnavailableError("the pod view has not synced yet (the first LIST of pods)");
  return absl::OkStatus();
}

HttpsAnswer SigningService::finish(Reason reason, AuditRecord record, std::string body_or_message, Steady::time_point began,
                                   int retry_after) {
  HttpsAnswer answer;
  answer.status = reasonStatus(reason);
  answer.retry_after_seconds = retry_after;
  record.time = std::chrono::system_clock::now();
  record.signed_cert = reason == Reason::kSigned;
  record.reason = std::string(reasonCode(reason));
  if (reason == Reason::kSigned) {
    answer.body = std::move(body_or_message);
  } else {
    record.message = body_or_message;
    answer.body = encode(ErrorBody{record.reason, std::move(body_or_message)});
  }
  audit_.write(record);
  counts_[static_cast<int>(reason)].fetch_add(1, std::memory_order_relaxed);
  request_seconds_.observe(Steady::now() - began);
  return answer;
}

HttpsAnswer SigningService::refused(TransportRefusal why, std::string message, const std::string& remote) {
  AuditRecord record;
  record.remote = remote;
  return finish(why == TransportRefusal::kTooLarge ? Reason::kTooLarge : Reason::kBadRequest, std::move(record),
                std::move(message), Steady::now());
}

std::optional<HttpsAnswer> SigningService::checkCall(const HttpsCall& call, AuditRecord& record,
                                                     Steady::time_point began) {
  std::string_view target = call.target;
  if (auto q = target.find('?'); q != std::string_view::npos) target = target.substr(0, q);
  if (target != kSignPath) {
    HttpsAnswer a = finish(Reason::kBadRequest, std::move(record),
                           absl::StrCat("no such path: ", common::toAbsl(target), " (ferry-ca serves POST ", common::toAbsl(kSignPath), ")"), began);
    a.status = 404;
    return a;
  }
  if (call.method != "POST") {
    HttpsAnswer a = finish(Reason::kBadRequest, std::move(record),
                           absl::StrCat(common::toAbsl(kSignPath), " serves POST, not ", call.method), began);
    a.status = 405;
    a.allow = "POST";
    return a;
  }
  if (!absl::StartsWithIgnoreCase(call.content_type, "application/json")) {
    return finish(Reason::kBadRequest, std::move(record),
                  absl::StrCat("the body must be application/json, not '", call.content_type, "'"), began);
  }
  if (auto st = ready(); !st.ok()) {
    return finish(Reason::kNotReady, std::move(record), absl::StrCat("ferry-ca is not ready: ", st.message()), began);
  }
  return std::nullopt;
}

std::optional<HttpsAnswer> SigningService::holdBackReview(const std::string& remote, AuditRecord& record,
                                                          Steady::time_point began) {
  std::string client = remote.substr(0, remote.rfind(':'));
  if (auto wait = gate_.takeReview(client, Steady::now())) {
    return finish(Reason::kRateLimited, std::move(record),
                  absl::StrCat(client, " is over its rate of token reviews (made-up tokens?); retry in ",
                               wait->count(), " s"),
                  began, static_cast<int>(wait->count()));
  }
  if (reviews_in_flight_ >= settings_.max_reviews_in_flight) {
    return finish(Reason::kReviewFailed, std::move(record),
                  absl::StrCat(reviews_in_flight_, " TokenReviews are in flight already; retry"), began);
  }
  return std::nullopt;
}

asio::awaitable<absl::StatusOr<TokenReview>> SigningService::reviewToken(const std::string& token) {
  const auto review_began = Steady::now();
  ++reviews_in_flight_;
  reviews_made_.fetch_add(1, std::memory_order_relaxed);
  std::string reviewed = token;
  absl::StatusOr<TokenReview> review = co_await reviewer_.review(std::move(reviewed));
  --reviews_in_flight_;
  review_seconds_.observe(Steady::now() - review_began);
  // An answer, yes or no, is reused for a while; a review that could not be made is not.
  if (review.ok()) gate_.remember(token, *review, Steady::now());
  co_return review;
}

std::optional<HttpsAnswer> SigningService::refuseCaller(const TokenReview& review, const identity::SpiffeId& id,
                                                        AuditRecord& record, Steady::time_point began) {
  record.caller = review.username;

  Decision decision = authorize(review, id, pods_, settings_.authorizer);
  record.caller_pod = decision.caller_pod;
  record.node = decision.node;
  if (!decision.allowed) return finish(reasonOf(decision.code), std::move(record), std::move(decision.message), began);

  auto verdict = limiter_.take(decision.node, Steady::now());
  if (!verdict.allowed) {
    return finish(Reason::kRateLimited, std::move(record),
                  absl::StrCat("node ", decision.node, " is over its signing rate; retry in ",
                               verdict.retry_after.count(), " s"),
                  began, static_cast<int>(verdict.retry_after.count()));
  }
  return std::nullopt;
}

asio::awaitable<HttpsAnswer> SigningService::handle(HttpsCall call) {
  const auto began = Steady::now();
  AuditRecord record;
  record.remote = call.remote;
  if (auto refusal = checkCall(call, record, began)) co_return *std::move(refusal);
  auto request = decodeSignRequest(call.body);
  if (!request.ok()) co_return finish(Reason::kBadRequest, std::move(record), std::string(request.status().message()), began);
  auto csr = parseCsr(request->csr_pem);
  if (!csr.ok()) co_return finish(Reason::kBadCsr, std::move(record), std::string(csr.status().message()), began);
  record.identity = csr->id.str();
  // What costs the API server nothing comes first (review_gate.h): a CSR of another trust
  // domain, a token that cannot be a service account's, a review made lately, a client over
  // its rate of reviews.
  if (csr->id.trustDomain() != settings_.authorizer.trust_domain) {
    co_return finish(Reason::kWrongTrustDomain, std::move(record),
                     absl::StrCat(csr->id.str(), " is not of trust domain ", settings_.authorizer.trust_domain), began);
  }
  std::string token = bearerToken(call.authorization);
  if (token.empty()) {
    co_return finish(Reason::kUnauthenticated, std::move(record), "no bearer token (Authorization: Bearer <token>)",
                     began);
  }
  if (std::string why = ReviewGate::shapeError(token); !why.empty()) {
    co_return finish(Reason::kUnauthenticated, std::move(record), std::move(why), began);
  }
  absl::StatusOr<TokenReview> review = absl::UnknownError("");
  if (auto reused = gate_.cached(token, Steady::now())) {
    reviews_reused_.fetch_add(1, std::memory_order_relaxed);
    review = *std::move(reused);
  } else {
    if (auto refusal = holdBackReview(call.remote, record, began)) co_return *std::move(refusal);
    review = co_await reviewToken(token);
  }
  if (!review.ok()) {
    co_return finish(Reason::kReviewFailed, std::move(record),
                     absl::StrCat("the token could not be reviewed: ", review.status().message()), began);
  }
  if (auto refusal = refuseCaller(*review, csr->id, record, began)) co_return *std::move(refusal);

  std::shared_ptr<identity::CaCertSource> source = ca_.current();
  std::chrono::seconds lifetime = request->validity.count() == 0 ? settings_.default_validity
                                                                 : std::min(request->validity, settings_.max_validity);
  absl::StatusOr<identity::CaCertSource::Signed> signed_cert =
      source ? source->signFor(csr->id, csr->public_key.get(), lifetime)
             : absl::UnavailableError("no CA is loaded");
  absl::StatusOr<SignResponse> response =
      signed_cert.ok() ? chainResponse(*signed_cert) : absl::StatusOr<SignResponse>(signed_cert.status());
  if (!response.ok()) {
    FERRY_LOG(kError, "ferry-ca: signing %s failed: %s", record.identity, response.status().message());
    co_return finish(Reason::kSigningFailed, std::move(record),
                     absl::StrCat("signing failed: ", response.status().message()), began);
  }
  describeLeaf(record, signed_cert->leaf.get());
  co_return finish(Reason::kSigned, std::move(record), encode(*response), began);
}

void SigningService::collect(telemetry::Exposition& out) const {
  auto requests = out.counter("ferry_ca_requests_total", "Sign requests by decision and reason (docs/ferry-ca.md)");
  for (int i = 0; i < static_cast<int>(Reason::kCount); ++i) {
    Reason r = static_cast<Reason>(i);
    requests.add(static_cast<double>(count(r)),
                 {{"decision", r == Reason::kSigned ? "signed" : "refused"}, {"reason", reasonCode(r)}});
  }
  out.histogram("ferry_ca_request_duration_seconds",
                "Sign requests from the last byte read to the answer made, TokenReview included")
      .add(request_seconds_);
  out.histogram("ferry_ca_token_review_duration_seconds", "TokenReviews alone (an API server round trip)")
      .add(review_seconds_);
  out.counter("ferry_ca_token_reviews_total",
              "Bearer tokens judged: reviewed by the API server, or by a review of the same token made lately")
      .add(static_cast<double>(reviews_made_.load(std::memory_order_relaxed)), {{"source", "api_server"}})
      .add(static_cast<double>(reviews_reused_.load(std::memory_order_relaxed)), {{"source", "cache"}});
  out.gauge("ferry_ca_ready", "1 once the CA is loaded and the pod view has synced", ready().ok() ? 1 : 0);
  out.counter("ferry_ca_reloads_total", "CA or bundle file changes applied (the first load included)",
              static_cast<double>(ca_.reloads()));
  out.counter("ferry_ca_reload_failures_total", "CA or bundle file changes refused (the previous material is kept)",
              static_cast<double>(ca_.reloadFailures()));
  // The rotation runbook waits on this (docs/security.md): 0 for the first signing CA, +1
  // for each one that replaced it.
  if (auto current = ca_.current()) {
    out.gauge("ferry_ca_authority_generation", "Signing CAs that replaced the first one since start",
              static_cast<double>(current->authorityGeneration()));
  }
}

std::vector<std::string> servingNames(const std::string& service, const std::string& namespace_name,
                                      const std::vector<std::string>& extra) {
  std::vector<std::string> names = {service, absl::StrCat(service, ".", namespace_name),
                                    absl::StrCat(service, ".", namespace_name, ".svc")};
  for (const std::string& n : extra) {
    if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
  }
  return names;
}

ServingCertificate::ServingCertificate(identity::WatchedCaSource& ca, std::vector<std::string> dns_names,
                                       std::chrono::seconds lifetime)
    : ca_(ca), dns_names_(std::move(dns_names)), lifetime_(lifetime) {}

std::shared_ptr<asio::ssl::context> ServingCertificate::current() {
  std::shared_ptr<identity::CaCertSource> source = ca_.current();
  if (source == nullptr) return nullptr;
  bool stale = context_ == nullptr || source.get() != source_ || source->authorityGeneration() != generation_ ||
               std::chrono::system_clock::now() >= renew_at_;
  if (!stale || Steady::now() < retry_at_) return context_;
  auto fresh = issue(*source);
  if (!fresh.ok()) {
    FERRY_LOG(kError, "ferry-ca: cannot issue the serving certificate: %s%s", fresh.status().message(),
              context_ ? " (keeping the previous one)" : "");
    retry_at_ = Steady::now() + kServingRetry;
    return context_;
  }
  context_ = *std::move(fresh);
  source_ = source.get();
  issued_.fetch_add(1, std::memory_order_relaxed);
  return context_;
}

absl::StatusOr<std::shared_ptr<asio::ssl::context>> ServingCertificate::issue(identity::CaCertSource& source) {
  identity::EvpPkeyPtr key(EVP_EC_gen("P-256"));
  if (!key) return identity::openSslError("cannot generate the serving key");
  uint64_t generation = source.authorityGeneration();
  auto cert = source.signServing(dns_names_, key.get(), lifetime_);
  if (!cert.ok()) return cert.status();
  auto tls = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_server);
  SSL_CTX* ctx = tls->native_handle();
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION);
  if (SSL_CTX_use_certificate(ctx, cert->leaf.get()) != 1) return identity::openSslError("serving certificate");
  for (const auto& inter : cert->intermediates) {
    // add1: the context takes its own reference.
    if (SSL_CTX_add1_chain_cert(ctx, inter.get()) != 1) return identity::openSslError("serving certificate chain");
  }
  if (SSL_CTX_use_PrivateKey(ctx, key.get()) != 1) return identity::openSslError("serving key");
  generation_ = generation;
  auto now = std::chrono::system_clock::now();
  renew_at_ = now + (cert->not_after - now) / 2;
  FERRY_LOG(kInfo, "ferry-ca: serving certificate issued (CA generation %d), valid until %s", generation,
            identity::formatTime(cert->not_after));
  return tls;
}

}  // namespace ferry::ca
