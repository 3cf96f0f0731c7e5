#include "proxy/server/identity_runtime.h"

#include "absl/strings/str_cat.h"
#include "proxy/ca/cluster_ca_source.h"
#include "proxy/common/duration.h"
#include "proxy/common/log.h"
#include "proxy/identity/dir_cert_source.h"
#include "proxy/identity/watched_ca_source.h"

namespace ferry::server {
namespace {

using KeepSet = absl::flat_hash_set<identity::SpiffeId>;

// identity.source: files. cert_dir/<ns>/<sa>/{cert,key}.pem written by an agent.
class FilesIdentity final : public IdentitySource {
 public:
  FilesIdentity(const std::string& cert_dir, const std::string& trust_domain) : dir_(cert_dir, trust_domain) {}
  identity::CertSource& certs() override { return dir_; }
  absl::Status status() override {
    auto bundle = dir_.bundle();
    if (bundle.ok()) return absl::OkStatus();
    return absl::Status(bundle.status().code(), absl::StrCat("identity: ", bundle.status().message()));
  }
  // Each local workload's identity, as the data plane would load it.
  SvidList held(const workloads::Registry& now, const std::string& trust_domain, IdentityErrors* errors) override {
    SvidList out;
    absl::flat_hash_set<std::string> seen;
    for (const auto& w : now.local()) {
      auto id = identity::SpiffeId::forWorkload(trust_domain, w->namespace_name.str(), w->service_account.str());
      if (!seen.insert(id.str()).second) continue;
      auto svid = dir_.svid(id);
      if (svid.ok()) {
        out.push_back(*svid);
        continue;
      }
      if (errors != nullptr) errors->emplace_back(id.str(), std::string(svid.status().message()));
      // One that expired (or whose renewal failed) is still held: the expiry metric keeps
      // naming it, so that its alert does not resolve when the workload breaks.
      if (auto last = dir_.lastLoaded(id)) out.push_back(last);
    }
    return out;
  }

 private:
  identity::DirCertSource dir_;
};

// identity.source: ca. Leaves issued in-process from CA files, watched.
class BuiltInCaIdentity final : public IdentitySource {
 public:
  explicit BuiltInCaIdentity(std::unique_ptr<identity::WatchedCaSource> ca) : ca_(std::move(ca)) {}
  identity::CertSource& certs() override { return *ca_; }
  absl::Status status() override { return ca_->status(); }
  bool polled() const override { return true; }
  bool poll() override { return ca_->poll(); }
  size_t retain(const KeepSet& keep) override { return ca_->retain(keep); }
  SvidList held(const workloads::Registry& /*now*/, const std::string& /*trust_domain*/,
                IdentityErrors* /*errors*/) override {
    auto ca = ca_->current();
    return ca ? ca->held() : SvidList{};
  }
  void addIssuer(identity::CertificateExpiry& expiry) override {
    if (auto ca = ca_->current()) expiry.addIssuer(ca->authorityNotAfter());
  }
  void collect(telemetry::Exposition& out) override {
    auto ca = ca_->current();
    auto value = [](auto v) { return static_cast<double>(v); };
    out.counter("ferry_identity_reloads_total", "CA and trust bundle file changes applied (the first load included)",
                value(ca_->reloads()));
    out.counter("ferry_identity_reload_failures_total",
                "CA and trust bundle file changes refused (previous material kept, or still not ready)",
                value(ca_->reloadFailures()));
    out.gauge("ferry_identity_ca_generation", "Issuing CAs replaced since start (0: the first one)",
              ca ? value(ca->authorityGeneration()) : 0);
    out.counter("ferry_certificates_issued_total", "Workload SVIDs issued by the built-in CA",
                ca ? value(ca->issued()) : 0);
    out.counter("ferry_certificates_refreshed_total", "SVIDs re-issued at half life (or after a CA change)",
                ca ? value(ca->refreshes()) : 0);
    out.counter("ferry_certificate_issue_failures_total", "Failed issuance attempts", ca ? value(ca->failures()) : 0);
    out.counter("ferry_certificates_forgotten_total", "SVIDs dropped because no local workload uses the identity",
                ca ? value(ca->forgotten()) : 0);
    out.gauge("ferry_certificates_cached", "Identities with an SVID held now", ca ? value(ca->cachedCount()) : 0);
  }
  IdentityFacts facts() override {
    IdentityFacts f;
    if (auto ca = ca_->current()) {
      f.ca_generation = ca->authorityGeneration();
      f.cached = ca->cachedCount();
    }
    return f;
  }

 private:
  std::unique_ptr<identity::WatchedCaSource> ca_;
};

// identity.source: cluster-ca. CSRs signed by ferry-ca; no CA key on the node.
class ClusterCaIdentity final : public IdentitySource {
 public:
  explicit ClusterCaIdentity(std::unique_ptr<ca::ClusterCaSource> ca) : ca_(std::move(ca)) {}
  identity::CertSource& certs() override { return *ca_; }
  absl::Status status() override { return ca_->status(); }
  bool polled() const override { return true; }
  bool poll() override { return ca_->poll(); }
  size_t retain(const KeepSet& keep) override { return ca_->retain(keep); }
  bool asksAtStart() const override { return true; }
  // What it signed, and why each identity still waiting has nothing yet.
  SvidList held(const workloads::Registry& /*now*/, const std::string& /*trust_domain*/,
                IdentityErrors* errors) override {
    if (errors != nullptr) *errors = ca_->pending();
    return ca_->held();
  }
  void collect(telemetry::Exposition& out) override { ca_->collect(out); }
  IdentityFacts facts() override {
    IdentityFacts f;
    f.ferry_ca = ca_->options().address;
    f.cached = ca_->held().size();
    return f;
  }
  void stop() override { ca_->stop(); }

 private:
  std::unique_ptr<ca::ClusterCaSource> ca_;
};

absl::StatusOr<std::unique_ptr<IdentitySource>> makeSource(const config::Config& config,
                                                           boost::asio::io_context& control,
                                                           IdentityRuntime::ServiceIpLookup service_ip) {
  const auto& id = config.identity;
  switch (id.source) {
    case config::CertSourceKind::kFiles:
      return std::make_unique<FilesIdentity>(config.cert_dir, config.trust_domain);
    case config::CertSourceKind::kClusterCa: {
      const auto& c = id.cluster_ca;
      ca::ClusterCaOptions options{c.address, c.server_name, c.token_file, config.cert_dir + "/bundle.pem",
                                   config.trust_domain, c.request_timeout};
      // ferry-ca's Service found through the API server ferryd already follows: no cluster
      // DNS needed to issue identities (ServiceName, proxy/ca/cluster_ca_source.h).
      if (service_ip) options.service_ip = std::move(service_ip);
      auto source = ca::ClusterCaSource::create(control, std::move(options));
      if (!source.ok()) return source.status();
      (*source)->poll();
      FERRY_LOG(kInfo, "identity: certificates from ferry-ca at %s (name %s), bundle checked every %s", c.address,
                c.server_name, common::formatDuration(id.poll_interval));
      return std::make_unique<ClusterCaIdentity>(*std::move(source));
    }
    case config::CertSourceKind::kCa:
      break;
  }
  // Missing or broken CA material is not a start-up error: ferryd starts not ready, resets
  // connections that need a certificate, and recovers when the files are fixed (the CA is
  // often written by another agent that may start after us).
  auto source = std::make_unique<identity::WatchedCaSource>(
      identity::CaFiles{id.ca_cert, id.ca_key, config.cert_dir + "/bundle.pem"}, config.trust_domain,
      std::chrono::duration_cast<std::chrono::seconds>(id.leaf_lifetime));
  source->poll();
  FERRY_LOG(kInfo, "identity: built-in CA from %s, leaf lifetime %s, files checked every %s", id.ca_cert,
            common::formatDuration(id.leaf_lifetime), common::formatDuration(id.poll_interval));
  return std::make_unique<BuiltInCaIdentity>(std::move(source));
}

}  // namespace

absl::StatusOr<std::unique_ptr<IdentityRuntime>> IdentityRuntime::create(const config::Config& config,
                                                                          boost::asio::io_context& control,
                                                                          const workloads::Store& workloads,
                                                                          ServiceIpLookup service_ip) {
  auto source = makeSource(config, control, std::move(service_ip));
  if (!source.ok()) return source.status();
  return std::unique_ptr<IdentityRuntime>(new IdentityRuntime(*std::move(source), config, control, workloads));
}

IdentityRuntime::IdentityRuntime(std::unique_ptr<IdentitySource> source, const config::Config& config,
                                 boost::asio::io_context& control, const workloads::Store& workloads)
    : source_(std::move(source)),
      tls_(std::make_unique<identity::TlsContextCache>(source_->certs(), config.trust_domain)),
      trust_domain_(config.trust_domain),
      poll_interval_(config.identity.poll_interval),
      workloads_(workloads),
      timer_(control) {}

IdentityRuntime::~IdentityRuntime() = default;

absl::Status IdentityRuntime::health() {
  absl::Status s = source_->status();
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat("not ready: ", s.message()));
}

void IdentityRuntime::start() {
  if (source_->polled()) schedulePoll();
  // ferry-ca is asked for the identities of the workloads already here now, not at their
  // first connection (which would be reset meanwhile); later ones come with workload changes.
  if (source_->asksAtStart()) forgetUnused();
}

void IdentityRuntime::stopPolling() {
  stopped_ = true;
  timer_.cancel();
}

void IdentityRuntime::stop() {
  stopPolling();
  source_->stop();
}

void IdentityRuntime::poll() {
  // A source that just became usable may find workloads that left while it was missing,
  // and the identities waiting for it are asked for at once.
  if (source_->poll()) forgetUnused();
}

void IdentityRuntime::schedulePoll() {
  if (stopped_) return;
  timer_.expires_after(poll_interval_);
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    poll();
    schedulePoll();
  });
}

void IdentityRuntime::forgetUnused() {
  absl::flat_hash_set<identity::SpiffeId> keep;
  for (const auto& w : workloads_.current()->local()) {
    keep.insert(identity::SpiffeId::forWorkload(trust_domain_, w->namespace_name.str(), w->service_account.str()));
  }
  // With ferry-ca this is also how the source learns a new local identity: it asks for it now.
  size_t certs = source_->retain(keep);
  size_t contexts = tls_->retain(keep);
  if (certs + contexts > 0) {
    FERRY_LOG(kInfo, "identity: forgot %d certificates and the TLS contexts of %d identities no local workload uses",
              certs, contexts);
  }
}

SvidList IdentityRuntime::held(IdentityErrors* errors) {
  return source_->held(*workloads_.current(), trust_domain_, errors);
}

void IdentityRuntime::collect(telemetry::Exposition& out) {
  out.gauge("ferry_identity_ready", "1 when certificates can be had (CA material or trust bundle loaded)",
            source_->status().ok() ? 1 : 0);
  auto bundle = certs().bundle();
  out.gauge("ferry_trust_bundle_roots", "Roots in the trust bundle in use (2 while a root rotates)",
            bundle.ok() ? static_cast<double>((*bundle)->roots.size()) : 0);
  identity::CertificateExpiry expiry;
  for (const auto& svid : held()) expiry.addSvid(*svid);
  source_->addIssuer(expiry);
  if (bundle.ok()) expiry.addRoots(**bundle);
  auto expiries = out.gauge(identity::CertificateExpiry::kMetric, identity::CertificateExpiry::kHelp);
  for (const auto& [kind, at] : expiry.samples()) expiries.add(at, {{"kind", kind}});
  source_->collect(out);
}

}  // namespace ferry::server
