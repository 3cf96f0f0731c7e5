#pragma once
// ferryd as ferry-ca's client (identity.source: cluster-ca, docs/ferry-ca.md "ferryd as the
// client"): no signing key on the node. Each local identity gets an ECDSA P-256 key made in
// memory and a certificate that ferry-ca signs for it, asked for over HTTPS with the node's
// projected service-account token.
//
// - All network work runs on the io_context given (ferryd's control thread); workers only
//   read what is cached, under a short lock, and never wait for ferry-ca.
// - retain(keep) is told the local identities whenever workloads change: new ones are
//   requested at once, those no longer local are forgotten (holders keep their SVID).
// - A certificate is refreshed at half of the life it had left when it arrived; after a
//   failure the next attempt waits 1 s doubling to 60 s, jittered (Retry-After of a 429 or
//   503 is honoured); the previous SVID is served until it expires.
// - Every answer is checked before it is used: the leaf follows the X.509-SVID rules, names
//   the identity asked for, certifies our key, and chains to the trust bundle.
// - The trust bundle (cert_dir/bundle.pem) is watched as the built-in CA's is; a new bundle
//   gives a new TLS context towards ferry-ca, and SVIDs it no longer trusts are re-requested.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proxy/ca/protocol.h"
#include "proxy/common/file.h"
#include "proxy/common/histogram.h"
#include "proxy/identity/ca_cert_source.h"
#include "proxy/identity/cert_source.h"
#include "proxy/k8s/http_stream.h"
#include "proxy/telemetry/metrics.h"

namespace ferry::ca {

struct ClusterCaOptions {
  std::string address;      // host:port dialled
  std::string server_name;  // the name ferry-ca's certificate must carry; empty: address's host
  std::string token_file;   // the projected token, re-read for every request
  std::string bundle_file;  // cert_dir/bundle.pem
  std::string trust_domain;
  std::chrono::milliseconds request_timeout{10'000};
  std::chrono::seconds validity{0};  // lifetime asked for; 0: ferry-ca's default
  // A Service's ClusterIP by namespace and name as ferryd's view of the API server has it, ""
  // when it does not know (ServiceName below). Unset: the address is resolved by DNS.
  std::function<std::string(std::string_view namespace_name, std::string_view name)> service_ip = nullptr;
};

// `<name>.<namespace>.svc` with or without the cluster domain after it (ferry-ca.ferry-system.svc,
// ferry-ca.ferry-system.svc.cluster.local): the Service's namespace and name; nullopt for any
// other host. ferryd dials such a Service by the ClusterIP the API server gives it and still
// requires the name in ferry-ca's certificate, so issuing identities needs no cluster DNS
// (which may itself be a pod waiting for its node's ferryd).
struct ServiceName {
  std::string namespace_name;
  std::string name;
};
std::optional<ServiceName> serviceOfHost(std::string_view host);

// The first retry waits kRetryInitial; each further failure doubles it up to kRetryMax (the
// same schedule as the built-in CA's issuance, identity/ca_cert_source.h).
inline constexpr std::chrono::seconds kRetryInitial = identity::kIssueRetryInterval;
inline constexpr std::chrono::seconds kRetryMax = identity::kMaxIssueRetryInterval;
// A Retry-After beyond this is taken as this: a wrong header must not park an identity for
// hours while its certificate runs out.
inline constexpr std::chrono::seconds kMaxRetryAfter{600};
// The control thread looks at the schedule at least this often, so that a wall-clock jump
// (a suspended VM) delays a refresh by no more than this.
inline constexpr std::chrono::seconds kMaxTimerWait{30};

// The wait before attempt `failures` + 1 after `failures` (>= 1) failures in a row: kRetryInitial
// doubled per failure up to kRetryMax, then jittered into [half, whole] with `unit` in [0, 1)
// ("equal jitter": nodes that failed together do not retry together).
std::chrono::milliseconds retryDelay(int failures, double unit);
// When a certificate received at `received` and valid until `not_after` is replaced: at half
// of the life it had left (notBefore is set back a minute by ferry-ca, so it is not used).
std::chrono::system_clock::time_point refreshTime(std::chrono::system_clock::time_point received,
                                                  std::chrono::system_clock::time_point not_after);

// A PKCS#10 request in PEM for `id`, signed by `key`: exactly one SAN, the URI `id`; no subject.
absl::StatusOr<std::string> makeCsr(const identity::SpiffeId& id, EVP_PKEY* key);
// The SVID that ferry-ca's answer makes, or why it must not be used: the leaf passes the
// X.509-SVID rules, carries exactly `id`, certifies `key`, is valid at `now` and chains to
// `bundle` through the intermediates sent.
absl::StatusOr<std::shared_ptr<const identity::Svid>> svidFromAnswer(const SignResponse& answer,
                                                                     const identity::SpiffeId& id, EVP_PKEY* key,
                                                                     const identity::TrustBundle& bundle,
                                                                     std::chrono::system_clock::time_point now);
// The roots of a bundle file's text (each a CA certificate).
absl::StatusOr<std::shared_ptr<const identity::TrustBundle>> parseBundle(std::string_view pem,
                                                                         std::string trust_domain);

class ClusterCaSource : public identity::CertSource {
 public:
  // Checks the options (address host:port); reads nothing yet. `io` runs the requests and must
  // not run after the source is gone; `clock` must outlive it.
  static absl::StatusOr<std::unique_ptr<ClusterCaSource>> create(
      boost::asio::io_context& io, ClusterCaOptions options, const identity::Clock& clock = identity::systemClock());
  ~ClusterCaSource() override;
  // Asks nothing any more and lets go of its timer: call it (control thread, or once the
  // io_context stopped) when the source outlives its io_context.
  void stop();

  // Control thread. Re-reads the bundle file if it changed and applies it; returns true when a
  // new bundle took effect (the first one included). Then starts what is due (tick()).
  bool poll();
  // Control thread. Starts the requests that are due by the clock; arms the timer for the next.
  // The timer calls it; tests call it after moving a fake clock.
  void tick();
  // Control thread. The identities of the local workloads: new ones are requested now, the
  // others are forgotten (returns how many).
  size_t retain(const absl::flat_hash_set<identity::SpiffeId>& keep);

  // Thread-safe. The SVID held for `id` while it is valid, else why there is none (waiting
  // for ferry-ca, its last refusal, the last failure). An identity not known yet is requested
  // (from the control thread); one in back-off waits for its turn.
  absl::StatusOr<std::shared_ptr<const identity::Svid>> svid(const identity::SpiffeId& id) override;
  absl::StatusOr<std::shared_ptr<const identity::TrustBundle>> bundle() override;

  // Thread-safe. OK once the bundle is loaded and ferry-ca has answered once (any HTTP
  // answer); else why not.
  absl::Status status() const;
  // The SVIDs held now (for /certs), and why each identity without one has none.
  std::vector<std::shared_ptr<const identity::Svid>> held() const;
  std::vector<std::pair<std::string, std::string>> pending() const;
  const ClusterCaOptions& options() const { return options_; }

  // ferry_cluster_ca_* (docs/operations.md).
  void collect(telemetry::Exposition& out) const;
  uint64_t signedCount() const { return counters_.signed_certificates.load(std::memory_order_relaxed); }
  uint64_t requestCount() const { return counters_.requests.load(std::memory_order_relaxed); }
  uint64_t refusedCount() const;
  uint64_t failureCount() const;

 private:
  struct Entry {
    identity::EvpPkeyPtr key;  // this identity's key for its whole local life
    std::shared_ptr<const identity::Svid> svid;
    std::chrono::system_clock::time_point next_attempt;  // refresh time, or retry time
    bool in_flight = false;
    bool wake_posted = false;
    int failures = 0;       // in a row
    absl::Status why_none;  // shown while there is no valid SVID
  };
  // Failure reasons, each a label of ferry_cluster_ca_failures_total (kLocal: no key or CSR).
  enum Failure { kNetwork, kToken, kBadAnswer, kInvalidCertificate, kLocal, kFailureCount };

  ClusterCaSource(boost::asio::io_context& io, ClusterCaOptions options, k8s::internal::ServerAddress server,
                  const identity::Clock& clock);

  boost::asio::awaitable<void> request(identity::SpiffeId id, std::shared_ptr<Entry> entry);
  boost::asio::awaitable<void> probe();
  // One HTTPS exchange: status and body, or a network error. `answered_` is set on any status.
  struct Exchange {
    int status = 0;
    int retry_after = -1;
    std::string body;
  };
  // The arguments are the caller's locals: it awaits this at once.
  boost::asio::awaitable<absl::StatusOr<Exchange>> exchange(const std::string& method, const std::string& bearer,
                                                            const std::string& body);
  // ferry-ca's answers to a request: a 200 whose SVID is taken if usable, or a refusal, which
  // is counted by its code and kept as the entry's reason.
  void signedAnswer(const identity::SpiffeId& id, Entry& entry, const std::string& body);
  void refusedAnswer(const identity::SpiffeId& id, Entry& entry, const Exchange& answer);
  // Reads token_file into token_ (trimmed); the error says why there is none.
  absl::Status readToken();
  // After a failed or refused request: the entry waits, its reason is kept.
  void failed(const identity::SpiffeId& id, Entry& entry, absl::Status why, int retry_after_seconds);
  void arm();
  void wake();  // any thread: tick() soon on the io_context

  boost::asio::io_context& io_;
  const ClusterCaOptions options_;
  const k8s::internal::ServerAddress server_;
  const identity::Clock& clock_;
  std::string location_;  // "ferry-ca at <address>" for messages

  // Control thread only.
  common::WatchedFile bundle_file_;
  std::shared_ptr<boost::asio::ssl::context> tls_;
  std::unique_ptr<boost::asio::steady_timer> timer_;  // null once stopped
  std::mt19937_64 random_;
  std::string token_;  // as last read
  // With no identity to ask for, ferry-ca is probed (readiness needs one answer) on this
  // schedule.
  struct Probe {
    bool running = false;
    int failures = 0;  // in a row
    std::chrono::system_clock::time_point at{};
  } probe_;

  mutable std::mutex mu_;  // guards what follows
  absl::flat_hash_map<identity::SpiffeId, std::shared_ptr<Entry>> entries_;
  std::shared_ptr<const identity::TrustBundle> bundle_;
  absl::Status bundle_error_ = absl::UnavailableError("the trust bundle has not been read yet");
  bool answered_ = false;
  absl::Status last_network_error_;
  bool wake_posted_ = false;
  std::map<std::string, uint64_t> refused_;  // by code (a known code, or "other")

  // ferry_cluster_ca_* and ferry_certificates_forgotten_total (collect()); any thread.
  struct Counters {
    std::atomic<uint64_t> requests{0};
    std::atomic<uint64_t> signed_certificates{0};
    std::atomic<uint64_t> forgotten{0};
    std::atomic<uint64_t> failures[kFailureCount] = {};
    common::DurationHistogram latency;
  } counters_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace ferry::ca
