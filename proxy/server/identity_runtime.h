#pragma once
// ferryd's workload identities at run time (docs/security.md, "Trust model"): the
// certificate source the config chose (files, the built-in CA, ferry-ca) behind one
// interface, the TLS contexts made from it, its poll timer, its readiness condition, its
// metrics and what /certs says of it. Nothing else in ferryd asks which source it is.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proxy/config/config.h"
#include "proxy/identity/cert_source.h"
#include "proxy/identity/spiffe_id.h"
#include "proxy/identity/svid.h"
#include "proxy/identity/tls_context.h"
#include "proxy/telemetry/metrics.h"
#include "proxy/workloads/registry.h"

namespace ferry::server {

using SvidList = std::vector<std::shared_ptr<const identity::Svid>>;
using IdentityErrors = std::vector<std::pair<std::string, std::string>>;  // identity, why

// What /certs shows of the source beyond the bundle and the SVIDs.
struct IdentityFacts {
  std::optional<uint64_t> ca_generation;  // the built-in CA: issuing CAs replaced since start
  std::string ferry_ca;                   // ferry-ca: its address
  std::optional<size_t> cached;           // SVIDs held by a CA source
};

// What differs between the three sources: one implementation each (identity_runtime.cc).
class IdentitySource {
 public:
  virtual ~IdentitySource() = default;
  virtual identity::CertSource& certs() = 0;
  // Certificates can be had (CA material or trust bundle loaded); not OK says why.
  virtual absl::Status status() = 0;
  // Polled every identity.poll_interval (CA files, ferry-ca's bundle); files: no timer.
  virtual bool polled() const { return false; }
  // True when the source just became usable: the identities waiting for it are due.
  virtual bool poll() { return false; }
  // Keeps the certificates of `keep` only (ferry-ca: and asks for new ones); how many went.
  virtual size_t retain(const absl::flat_hash_set<identity::SpiffeId>& /*keep*/) { return 0; }
  // ferry-ca asks for the local identities at start, not at their first connection.
  virtual bool asksAtStart() const { return false; }
  // The SVIDs this node holds now; `errors` (when given): identities without one yet, and why.
  virtual SvidList held(const workloads::Registry& now, const std::string& trust_domain, IdentityErrors* errors) = 0;
  // The issuing CA's expiry, when the source has one.
  virtual void addIssuer(identity::CertificateExpiry& /*expiry*/) {}
  // Metrics of the source itself, after the common identity metrics.
  virtual void collect(telemetry::Exposition& /*out*/) {}
  virtual IdentityFacts facts() { return {}; }
  // Before the control loop goes (ferry-ca's client has a timer on it).
  virtual void stop() {}
};

class IdentityRuntime {
 public:
  // ferry-ca's Service address from the API server ferryd follows (none: the name resolves).
  using ServiceIpLookup = std::function<std::string(std::string_view namespace_name, std::string_view name)>;

  // The source `config.identity.source` names. Missing CA files or an unreachable ferry-ca
  // are no start-up error: ferryd starts not ready and recovers (docs/ferry-ca.md).
  static absl::StatusOr<std::unique_ptr<IdentityRuntime>> create(const config::Config& config,
                                                                 boost::asio::io_context& control,
                                                                 const workloads::Store& workloads,
                                                                 ServiceIpLookup service_ip);
  ~IdentityRuntime();

  identity::CertSource& certs() { return source_->certs(); }
  identity::TlsContextCache& tls() { return *tls_; }
  // The readiness condition: "not ready: ..." while certificates cannot be had.
  absl::Status health();
  // The source's own word on it (health() without "not ready: "): --check-config's warning.
  absl::Status sourceStatus() { return source_->status(); }
  // The poll timer (when the source has one), and ferry-ca asked for the local identities.
  void start();
  // No more polls (draining, retiring); the source itself goes on.
  void stopPolling();
  // No more polls, and the source stops (before the control loop goes).
  void stop();
  // identity.poll_interval is a live key: the next poll waits the new interval.
  void setPollInterval(std::chrono::milliseconds interval) { poll_interval_ = interval; }
  // Reads the source's files (or ferry-ca's bundle) now: SIGHUP.
  void poll();
  // Drops certificates and TLS contexts of identities no local workload has any more.
  void forgetUnused();
  SvidList held(IdentityErrors* errors = nullptr);
  IdentityFacts facts() { return source_->facts(); }
  // ferry_identity_*, ferry_trust_bundle_roots, the expiry gauge and the source's own.
  void collect(telemetry::Exposition& out);

 private:
  IdentityRuntime(std::unique_ptr<IdentitySource> source, const config::Config& config,
                  boost::asio::io_context& control, const workloads::Store& workloads);
  void schedulePoll();

  std::unique_ptr<IdentitySource> source_;
  std::unique_ptr<identity::TlsContextCache> tls_;
  std::string trust_domain_;
  std::chrono::milliseconds poll_interval_;
  const workloads::Store& workloads_;
  boost::asio::steady_timer timer_;
  bool stopped_ = false;
};

}  // namespace ferry::server
