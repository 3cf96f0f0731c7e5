#include "proxy/ca/cluster_ca_source.h"

#include <openssl/ec.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <algorithm>
#include <utility>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "proxy/common/log.h"
#include "proxy/common/status_macros.h"
#include "proxy/identity/ca.h"

namespace ferry::ca {
namespace asio = boost::asio;
using identity::EvpPkeyPtr;
using identity::SpiffeId;
using identity::Svid;
using identity::TrustBundle;
using identity::X509Ptr;
using std::chrono::system_clock;

namespace {

using X509ReqPtr = std::unique_ptr<X509_REQ, identity::OpenSslDeleter<X509_REQ, X509_REQ_free>>;

// A projected token is ~1 KB; anything this large is not one (a wrong path).
constexpr size_t kMaxTokenBytes = 64 * 1024;

// The codes of docs/ferry-ca.md's table: ferry_cluster_ca_refused_total{code} states these
// and "other", so that a peer cannot grow the label set.
constexpr std::string_view kRefusalCodes[] = {
    "bad_request",  "bad_csr",       "unauthenticated",    "wrong_audience", "not_node_agent",
    "unbound_token", "caller_pod_unknown", "wrong_trust_domain", "no_pod_on_node", "too_large",
    "rate_limited", "not_ready",     "signing_failed",     "other"};

constexpr const char* kFailureLabels[] = {"network", "token", "bad_answer", "invalid_certificate", "local"};

std::string_view knownCode(std::string_view code) {
  for (std::string_view known : kRefusalCodes) {
    if (code == known) return known;
  }
  return "other";
}

// A signature takes ferry-ca milliseconds, its TokenReview a round trip to the API server:
// tens of ms; request_timeout's default is 10 s.
std::vector<double> latencyBounds() { return {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}; }

}  // namespace

std::chrono::milliseconds retryDelay(int failures, double unit) {
  std::chrono::milliseconds base = kRetryInitial;
  for (int i = 1; i < failures && base < kRetryMax; ++i) base *= 2;
  base = std::min<std::chrono::milliseconds>(base, kRetryMax);
  unit = std::clamp(unit, 0.0, 1.0);
  return base / 2 + std::chrono::milliseconds(static_cast<int64_t>(static_cast<double>(base.count()) / 2 * unit));
}

system_clock::time_point refreshTime(system_clock::time_point received, system_clock::time_point not_after) {
  if (not_after <= received) return received;
  return received + (not_after - received) / 2;
}

absl::StatusOr<std::string> makeCsr(const SpiffeId& id, EVP_PKEY* key) {
  ERR_clear_error();
  X509ReqPtr req(X509_REQ_new());
  if (!req) return identity::openSslError("cannot allocate a CSR");
  if (X509_REQ_set_version(req.get(), 0) != 1 || X509_REQ_set_pubkey(req.get(), key) != 1) {
    return identity::openSslError("cannot set the CSR's key");
  }
  FERRY_ASSIGN_OR_RETURN(identity::GeneralNamesPtr names, identity::subjectAltNames({id.str()}));
  // Critical: the subject is empty (RFC 5280 4.2.1.6), as in the certificate it asks for.
  X509_EXTENSION* san = X509V3_EXT_i2d(NID_subject_alt_name, 1, names.get());
  STACK_OF(X509_EXTENSION)* extensions = sk_X509_EXTENSION_new_null();
  bool added = san != nullptr && extensions != nullptr && sk_X509_EXTENSION_push(extensions, san) > 0;
  if (!added) X509_EXTENSION_free(san);
  added = added && X509_REQ_add_extensions(req.get(), extensions) == 1;
  sk_X509_EXTENSION_pop_free(extensions, X509_EXTENSION_free);
  if (!added) return identity::openSslError("cannot add the CSR's subjectAltName");
  if (X509_REQ_sign(req.get(), key, EVP_sha256()) <= 0) return identity::openSslError("cannot sign the CSR");
  identity::BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_X509_REQ(bio.get(), req.get()) != 1) return identity::openSslError("cannot write the CSR");
  char* data = nullptr;
  long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

absl::StatusOr<std::shared_ptr<const Svid>> svidFromAnswer(const SignResponse& answer, const SpiffeId& id,
                                                           EVP_PKEY* key, const TrustBundle& bundle,
                                                           system_clock::time_point now) {
  if (answer.cert_chain_pem.empty()) return absl::InvalidArgumentError("the answer holds no certificate");
  std::vector<X509Ptr> chain;
  for (const std::string& pem : answer.cert_chain_pem) {
    auto certs = identity::parseCertsPem(pem);
    if (!certs.ok()) return absl::InvalidArgumentError(absl::StrCat("cert_chain: ", certs.status().message()));
    for (auto& cert : *certs) chain.push_back(std::move(cert));
  }
  X509* leaf = chain.front().get();
  auto got = identity::validateSvidLeaf(leaf);
  if (!got.ok()) return absl::InvalidArgumentError(absl::StrCat("the leaf is no X.509-SVID: ", got.status().message()));
  if (!(*got == id)) return absl::InvalidArgumentError(absl::StrCat("the leaf is for ", got->str(), ", not ", id.str()));
  if (EVP_PKEY_eq(X509_get0_pubkey(leaf), key) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError("the leaf certifies another key than the one our CSR carried");
  }
  std::vector<X509*> intermediates;
  for (size_t i = 1; i < chain.size(); ++i) intermediates.push_back(chain[i].get());
  if (absl::Status s = identity::verifyChain(leaf, intermediates, bundle, now); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("the chain does not verify against the trust bundle: ", s.message()));
  }
  auto svid = std::make_shared<Svid>();
  svid->id = id;
  svid->not_before = identity::asn1TimeToTimePoint(X509_get0_notBefore(leaf));
  svid->not_after = identity::asn1TimeToTimePoint(X509_get0_notAfter(leaf));
  svid->leaf = std::move(chain.front());
  for (size_t i = 1; i < chain.size(); ++i) svid->intermediates.push_back(std::move(chain[i]));
  svid->key = identity::upRef(key);
  return std::shared_ptr<const Svid>(std::move(svid));
}

absl::StatusOr<std::shared_ptr<const TrustBundle>> parseBundle(std::string_view pem, std::string trust_domain) {
  auto roots = identity::parseCertsPem(pem);
  if (!roots.ok()) return roots.status();
  for (const X509Ptr& root : *roots) {
    if (X509_check_ca(root.get()) == 0) {
      return absl::InvalidArgumentError(absl::StrCat("a certificate of the bundle is no CA: ",
                                                     identity::nameToString(X509_get_subject_name(root.get()))));
    }
  }
  return std::make_shared<const TrustBundle>(TrustBundle{std::move(trust_domain), *std::move(roots)});
}

std::optional<ServiceName> serviceOfHost(std::string_view host) {
  // name.namespace.svc[.cluster-domain]: DNS labels, so neither part is empty or has a dot.
  size_t first = host.find('.');
  if (first == std::string_view::npos) return std::nullopt;
  size_t second = host.find('.', first + 1);
  if (second == std::string_view::npos) return std::nullopt;
  std::string_view name = host.substr(0, first), ns = host.substr(first + 1, second - first - 1);
  std::string_view rest = host.substr(second + 1);
  if (name.empty() || ns.empty() || !(rest == "svc" || rest.starts_with("svc."))) return std::nullopt;
  return ServiceName{std::string(ns), std::string(name)};
}

absl::StatusOr<std::unique_ptr<ClusterCaSource>> ClusterCaSource::create(asio::io_context& io, ClusterCaOptions options,
                                                                         const identity::Clock& clock) {
  auto server = k8s::internal::parseServerUrl(absl::StrCat("https://", options.address));
  if (!server.ok() || options.address.find(':') == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("identity.cluster_ca.address: '", options.address, "' is not host:port"));
  }
  if (!options.server_name.empty() && options.server_name != server->host) server->verify_name = options.server_name;
  if (options.token_file.empty()) return absl::InvalidArgumentError("identity.cluster_ca.token_file is required");
  return std::unique_ptr<ClusterCaSource>(new ClusterCaSource(io, std::move(options), *std::move(server), clock));
}

ClusterCaSource::ClusterCaSource(asio::io_context& io, ClusterCaOptions options, k8s::internal::ServerAddress server,
                                 const identity::Clock& clock)
    : io_(io),
      options_(std::move(options)),
      server_(std::move(server)),
      clock_(clock),
      location_(absl::StrCat("ferry-ca at ", options_.address)),
      bundle_file_(options_.bundle_file, identity::kMaxPemFileBytes),
      timer_(std::make_unique<asio::steady_timer>(io)),
      random_(std::random_device{}()),
      counters_{.latency = common::DurationHistogram(latencyBounds())} {}

ClusterCaSource::~ClusterCaSource() { stop(); }

void ClusterCaSource::stop() {
  alive_ = std::make_shared<bool>(false);  // suspended requests and handlers end without touching this object
  timer_.reset();
}

bool ClusterCaSource::poll() {
  auto result = bundle_file_.poll();
  bool applied = false;
  if (result == common::WatchedFile::Result::kFailed) {
    std::lock_guard lock(mu_);
    FERRY_LOG(kWarn, "identity: trust bundle %s: %s%s", options_.bundle_file, bundle_file_.error().message(),
              bundle_ ? "; keeping the bundle in use" : "; not ready");
    if (!bundle_) bundle_error_ = bundle_file_.error();
  } else if (result == common::WatchedFile::Result::kChanged) {
    auto parsed = parseBundle(bundle_file_.content(), options_.trust_domain);
    std::shared_ptr<asio::ssl::context> tls;
    if (parsed.ok()) {
      // Towards ferry-ca: TLS 1.2 or 1.3, its certificate verified against the bundle's roots.
      tls = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_client);
      SSL_CTX_set_min_proto_version(tls->native_handle(), TLS1_2_VERSION);
      tls->set_verify_mode(asio::ssl::verify_peer);
      X509_STORE* store = SSL_CTX_get_cert_store(tls->native_handle());
      for (const X509Ptr& root : (*parsed)->roots) X509_STORE_add_cert(store, root.get());
      ERR_clear_error();  // a root listed twice
    }
    std::lock_guard lock(mu_);
    if (!parsed.ok()) {
      FERRY_LOG(kWarn, "identity: trust bundle %s: %s%s", options_.bundle_file, parsed.status().message(),
                bundle_ ? "; keeping the bundle in use" : "; not ready");
      if (!bundle_) bundle_error_ = parsed.status();
    } else {
      bundle_ = *parsed;
      bundle_error_ = absl::OkStatus();
      tls_ = std::move(tls);
      applied = true;
      // An SVID the new bundle does not trust (the last step of a root rotation) is replaced now.
      auto now = clock_.now();
      for (auto& [id, entry] : entries_) {
        if (!entry->svid) continue;
        std::vector<X509*> intermediates;
        for (const X509Ptr& cert : entry->svid->intermediates) intermediates.push_back(cert.get());
        if (absl::Status s = identity::verifyChain(entry->svid->leaf.get(), intermediates, *bundle_, now); !s.ok()) {
          FERRY_LOG(kInfo, "identity: the new trust bundle does not trust the certificate of %s (%s): asking again",
                    id.str(), s.message());
          entry->next_attempt = now;
        }
      }
      FERRY_LOG(kInfo, "identity: trust bundle %s loaded (%d roots); certificates from %s", options_.bundle_file,
                bundle_->roots.size(), location_);
    }
  }
  tick();
  return applied;
}

void ClusterCaSource::tick() {
  if (!timer_) return;  // stopped
  auto now = clock_.now();
  std::vector<std::pair<SpiffeId, std::shared_ptr<Entry>>> due;
  bool start_probe = false;
  {
    std::lock_guard lock(mu_);
    wake_posted_ = false;
    if (tls_) {
      for (auto& [id, entry] : entries_) {
        if (entry->in_flight || now < entry->next_attempt) continue;
        entry->in_flight = true;
        due.emplace_back(id, entry);
      }
      // Nothing to ask for, and readiness waits for ferry-ca's first answer: ask it anything.
      start_probe = entries_.empty() && !answered_ && !probe_.running && now >= probe_.at;
    }
  }
  for (auto& [id, entry] : due) asio::co_spawn(io_, request(id, entry), asio::detached);
  if (start_probe) {
    probe_.running = true;
    asio::co_spawn(io_, probe(), asio::detached);
  }
  arm();
}

void ClusterCaSource::arm() {
  auto now = clock_.now();
  auto next = now + kMaxTimerWait;
  {
    std::lock_guard lock(mu_);
    for (auto& [id, entry] : entries_) {
      if (!entry->in_flight) next = std::min(next, entry->next_attempt);
    }
    if (entries_.empty() && !answered_ && !probe_.running) next = std::min(next, probe_.at);
  }
  if (!timer_) return;
  timer_->expires_after(std::max<system_clock::duration>(next - now, system_clock::duration::zero()));
  timer_->async_wait([this, alive = std::weak_ptr<bool>(alive_)](const boost::system::error_code& ec) {
    if (!ec && !alive.expired()) tick();
  });
}

void ClusterCaSource::wake() {
  // mu_ held by the caller.
  if (wake_posted_) return;
  wake_posted_ = true;
  asio::post(io_, [this, alive = std::weak_ptr<bool>(alive_)] {
    if (!alive.expired()) tick();
  });
}

size_t ClusterCaSource::retain(const absl::flat_hash_set<SpiffeId>& keep) {
  size_t dropped = 0;
  bool added = false;
  {
    std::lock_guard lock(mu_);
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (keep.contains(it->first)) {
        ++it;
        continue;
      }
      entries_.erase(it++);  // a request in flight for it finds itself forgotten
      ++dropped;
    }
    for (const SpiffeId& id : keep) {
      if (entries_.contains(id) || id.trustDomain() != options_.trust_domain) continue;
      auto entry = std::make_shared<Entry>();
      entry->why_none = absl::UnavailableError("waiting for ferry-ca's answer");
      entries_.emplace(id, std::move(entry));
      added = true;
    }
  }
  counters_.forgotten.fetch_add(dropped, std::memory_order_relaxed);
  if (added) tick();
  return dropped;
}

absl::StatusOr<std::shared_ptr<const Svid>> ClusterCaSource::svid(const SpiffeId& id) {
  if (id.trustDomain() != options_.trust_domain) {
    return absl::InvalidArgumentError(
        absl::StrCat("identity: ", id.str(), " is not of the trust domain ", options_.trust_domain));
  }
  auto now = clock_.now();
  std::lock_guard lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) {
    // Asked for before retain() heard of it (a workload that just arrived): ask at once.
    auto entry = std::make_shared<Entry>();
    entry->why_none = absl::UnavailableError("waiting for ferry-ca's answer");
    it = entries_.emplace(id, std::move(entry)).first;
    wake();
  }
  const Entry& entry = *it->second;
  if (entry.svid && now < entry.svid->not_after) return entry.svid;
  if (!entry.in_flight && now >= entry.next_attempt) wake();
  std::string why(entry.why_none.message());
  if (!bundle_) why = absl::StrCat("no trust bundle: ", bundle_error_.message());
  return absl::UnavailableError(absl::StrCat("identity: no certificate for ", id.str(), entry.svid ? " (the last expired)" : "",
                                             " from ", location_, ": ", why));
}

absl::StatusOr<std::shared_ptr<const TrustBundle>> ClusterCaSource::bundle() {
  std::lock_guard lock(mu_);
  if (!bundle_) {
    return absl::FailedPreconditionError(
        absl::StrCat("not ready: trust bundle ", options_.bundle_file, ": ", bundle_error_.message()));
  }
  return bundle_;
}

absl::Status ClusterCaSource::status() const {
  std::lock_guard lock(mu_);
  if (!bundle_) {
    return absl::UnavailableError(
        absl::StrCat("identity: trust bundle ", options_.bundle_file, ": ", bundle_error_.message()));
  }
  if (!answered_) {
    std::string why = absl::StrCat("identity: ", location_, " has not answered yet");
    if (!last_network_error_.ok()) absl::StrAppend(&why, " (", last_network_error_.message(), ")");
    return absl::UnavailableError(why);
  }
  return absl::OkStatus();
}

std::vector<std::shared_ptr<const Svid>> ClusterCaSource::held() const {
  auto now = clock_.now();
  std::vector<std::shared_ptr<const Svid>> out;
  std::lock_guard lock(mu_);
  for (const auto& [id, entry] : entries_) {
    if (entry->svid && now < entry->svid->not_after) out.push_back(entry->svid);
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> ClusterCaSource::pending() const {
  auto now = clock_.now();
  std::vector<std::pair<std::string, std::string>> out;
  std::lock_guard lock(mu_);
  for (const auto& [id, entry] : entries_) {
    if (!entry->svid || now >= entry->svid->not_after) out.emplace_back(id.str(), std::string(entry->why_none.message()));
  }
  return out;
}

absl::Status ClusterCaSource::readToken() {
  auto token = common::readFile(options_.token_file, kMaxTokenBytes);
  if (!token.ok()) return absl::Status(token.status().code(), absl::StrCat("token_file: ", token.status().message()));
  token_ = std::string(absl::StripAsciiWhitespace(*token));
  if (token_.empty()) return absl::FailedPreconditionError(absl::StrCat("token_file ", options_.token_file, " is empty"));
  return absl::OkStatus();
}

asio::awaitable<void> ClusterCaSource::request(SpiffeId id, std::shared_ptr<Entry> entry) {
  std::weak_ptr<bool> alive = alive_;
  if (!entry->key) entry->key.reset(EVP_EC_gen("P-256"));
  if (!entry->key) {
    counters_.failures[kLocal].fetch_add(1, std::memory_order_relaxed);
    failed(id, *entry, identity::openSslError("cannot generate an ECDSA P-256 key"), -1);
    co_return;
  }
  // GCC 12 destroys class temporaries of conditional expressions and co_await operands in
  // coroutines twice: this coroutine builds every value in a named local, with if/else.
  auto csr = makeCsr(id, entry->key.get());
  if (!csr.ok()) {
    counters_.failures[kLocal].fetch_add(1, std::memory_order_relaxed);
    failed(id, *entry, csr.status(), -1);
    co_return;
  }
  absl::Status token_error = readToken();
  std::string bearer;
  if (token_error.ok()) bearer = token_;
  if (!token_error.ok()) {
    counters_.failures[kToken].fetch_add(1, std::memory_order_relaxed);
    failed(id, *entry, token_error, -1);
    co_return;
  }
  counters_.requests.fetch_add(1, std::memory_order_relaxed);
  auto started = std::chrono::steady_clock::now();
  const std::string method = "POST";
  const std::string body = encode(SignRequest{*std::move(csr), options_.validity});
  auto answer = co_await exchange(method, bearer, body);
  if (alive.expired()) co_return;
  counters_.latency.observe(std::chrono::steady_clock::now() - started);
  {
    std::lock_guard lock(mu_);
    auto it = entries_.find(id);
    if (it == entries_.end() || it->second != entry) co_return;  // forgotten meanwhile
  }
  if (!answer.ok()) {
    counters_.failures[kNetwork].fetch_add(1, std::memory_order_relaxed);
    failed(id, *entry, answer.status(), -1);
  } else if (answer->status == 200) {
    signedAnswer(id, *entry, answer->body);
  } else {
    refusedAnswer(id, *entry, *answer);
  }
  arm();
}

void ClusterCaSource::signedAnswer(const SpiffeId& id, Entry& entry, const std::string& body) {
  auto decoded = decodeSignResponse(body);
  std::shared_ptr<const TrustBundle> bundle;
  {
    std::lock_guard lock(mu_);
    bundle = bundle_;
  }
  auto now = clock_.now();
  absl::StatusOr<std::shared_ptr<const Svid>> svid = absl::UnknownError("not decoded");
  if (decoded.ok()) {
    svid = svidFromAnswer(*decoded, id, entry.key.get(), *bundle, now);
  } else {
    svid = decoded.status();
  }
  if (!svid.ok()) {
    counters_.failures[decoded.ok() ? kInvalidCertificate : kBadAnswer].fetch_add(1, std::memory_order_relaxed);
    failed(id, entry, absl::Status(svid.status().code(), absl::StrCat("unusable answer: ", svid.status().message())), -1);
    return;
  }
  counters_.signed_certificates.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard lock(mu_);
  entry.svid = *std::move(svid);
  entry.in_flight = false;
  entry.failures = 0;
  entry.why_none = absl::UnavailableError("waiting for ferry-ca's answer");
  entry.next_attempt = refreshTime(now, entry.svid->not_after);
  FERRY_LOG(kInfo, "identity: %s signed %s until %s (refresh at %s)", location_, id.str(),
            identity::formatTime(entry.svid->not_after), identity::formatTime(entry.next_attempt));
}

void ClusterCaSource::refusedAnswer(const SpiffeId& id, Entry& entry, const Exchange& answer) {
  auto error = decodeErrorBody(answer.body);
  std::string code = absl::StrCat("HTTP ", answer.status);
  std::string message = "no error body";
  if (error.ok()) {
    code = error->code;
    message = error->message;
  }
  {
    std::lock_guard lock(mu_);
    ++refused_[std::string(knownCode(code))];
  }
  bool may_say_when = answer.status == 429 || answer.status == 503;
  failed(id, entry,
         absl::PermissionDeniedError(absl::StrCat("refused (HTTP ", answer.status, " ", code, "): ", message)),
         may_say_when ? answer.retry_after : -1);
}

asio::awaitable<void> ClusterCaSource::probe() {
  std::weak_ptr<bool> alive = alive_;
  const std::string method = "GET", none;
  auto answer = co_await exchange(method, none, none);
  if (alive.expired()) co_return;
  probe_.running = false;
  if (answer.ok()) {
    FERRY_LOG(kInfo, "identity: %s answers (HTTP %d to a probe: no local workload needs a certificate yet)",
              location_, answer->status);
  } else {
    ++probe_.failures;
    std::uniform_real_distribution<double> unit(0, 1);
    probe_.at = clock_.now() + retryDelay(probe_.failures, unit(random_));
    FERRY_LOG(kWarn, "identity: %s: %s; trying again at %s", location_, answer.status().message(),
              identity::formatTime(probe_.at));
  }
  arm();
}

asio::awaitable<absl::StatusOr<ClusterCaSource::Exchange>> ClusterCaSource::exchange(const std::string& method,
                                                                                     const std::string& bearer,
                                                                                     const std::string& body) {
  std::weak_ptr<bool> alive = alive_;
  std::shared_ptr<asio::ssl::context> tls = tls_;  // this exchange keeps its context
  if (!tls) co_return absl::UnavailableError("no trust bundle to verify ferry-ca with");
  auto timeout = options_.request_timeout;
  // A Service name is dialled at the ClusterIP the API server gives it, when ferryd knows
  // it (ServiceName, cluster_ca_source.h); the certificate must still carry the name.
  k8s::internal::ServerAddress target = server_;
  if (options_.service_ip && !server_.host_is_ip) {
    if (auto service = serviceOfHost(server_.host)) {
      if (std::string ip = options_.service_ip(service->namespace_name, service->name); !ip.empty()) {
        if (target.verify_name.empty()) target.verify_name = server_.host;
        target.host = std::move(ip);
        target.host_is_ip = true;
      }
    }
  }
  k8s::internal::HttpStream stream(io_, *tls, target);
  k8s::internal::HttpStream::Request request;
  request.method = method;
  request.target = std::string(kSignPath);
  request.bearer = bearer;
  request.user_agent = "ferryd";
  request.body = body;
  boost::system::error_code ec = co_await stream.open(request, timeout);
  if (alive.expired()) co_return absl::CancelledError("stopped");
  if (ec) {
    std::string what = ec.message();
    if (k8s::internal::isTimeout(ec)) what = "no answer within request_timeout";
    absl::Status why = absl::UnavailableError(absl::StrCat(location_, ": ", what));
    std::lock_guard lock(mu_);
    last_network_error_ = why;
    co_return why;
  }
  Exchange out;
  out.status = stream.status();
  out.retry_after = stream.retryAfterSeconds();
  {
    std::lock_guard lock(mu_);
    answered_ = true;
    last_network_error_ = absl::OkStatus();
  }
  ec = co_await stream.readAll(out.body, kMaxResponseBytes, timeout);
  if (alive.expired()) co_return absl::CancelledError("stopped");
  if (ec) co_return absl::UnavailableError(absl::StrCat(location_, ": reading the answer: ", ec.message()));
  co_return out;
}

void ClusterCaSource::failed(const SpiffeId& id, Entry& entry, absl::Status why, int retry_after_seconds) {
  std::uniform_real_distribution<double> unit(0, 1);
  auto now = clock_.now();
  std::lock_guard lock(mu_);
  entry.in_flight = false;
  ++entry.failures;
  std::chrono::milliseconds wait = retryDelay(entry.failures, unit(random_));
  if (retry_after_seconds >= 0) {
    wait = std::max<std::chrono::milliseconds>(wait, std::min<std::chrono::seconds>(
                                                         std::chrono::seconds(retry_after_seconds), kMaxRetryAfter));
  }
  entry.next_attempt = now + wait;
  entry.why_none = why;
  bool serving = entry.svid && now < entry.svid->not_after;
  FERRY_LOG(kWarn, "identity: certificate for %s from %s: %s; %s, next attempt at %s", id.str(), location_,
            why.message(), serving ? absl::StrCat("serving the previous one until ", identity::formatTime(entry.svid->not_after))
                                   : std::string("connections that need it are reset"),
            identity::formatTime(entry.next_attempt));
}

uint64_t ClusterCaSource::refusedCount() const {
  std::lock_guard lock(mu_);
  uint64_t total = 0;
  for (const auto& [code, n] : refused_) total += n;
  return total;
}

uint64_t ClusterCaSource::failureCount() const {
  uint64_t total = 0;
  for (const auto& n : counters_.failures) total += n.load(std::memory_order_relaxed);
  return total;
}

void ClusterCaSource::collect(telemetry::Exposition& out) const {
  auto value = [](uint64_t v) { return static_cast<double>(v); };
  out.counter("ferry_cluster_ca_requests_total", "Signing requests sent to ferry-ca", value(requestCount()));
  out.counter("ferry_cluster_ca_signed_total", "Certificates ferry-ca signed that passed our checks",
              value(signedCount()));
  {
    auto refused = out.counter("ferry_cluster_ca_refused_total", "Requests ferry-ca refused, by its error code");
    std::lock_guard lock(mu_);
    for (std::string_view code : kRefusalCodes) {
      auto it = refused_.find(std::string(code));
      refused.add(it == refused_.end() ? 0 : value(it->second), {{"code", code}});
    }
  }
  auto failures = out.counter("ferry_cluster_ca_failures_total",
                              "Requests that got no usable answer (network, token file, malformed or unusable answer)");
  for (int i = 0; i < kFailureCount; ++i) {
    failures.add(value(counters_.failures[i].load(std::memory_order_relaxed)), {{"reason", kFailureLabels[i]}});
  }
  out.histogram("ferry_cluster_ca_request_duration_seconds", "Time from sending a request to ferry-ca's answer")
      .add(counters_.latency);
  out.counter("ferry_certificates_forgotten_total", "SVIDs dropped because no local workload uses the identity",
              value(counters_.forgotten.load(std::memory_order_relaxed)));
  out.gauge("ferry_certificates_cached", "Identities with an SVID held now", value(held().size()));
}

}  // namespace ferry::ca
