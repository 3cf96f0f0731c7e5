#include "proxy/identity/watched_ca_source.h"

#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "proxy/common/log.h"

namespace ferry::identity {
namespace {

struct LoadedCa {
  CertificateAuthority ca;
  std::vector<X509Ptr> chain;
};

absl::StatusOr<LoadedCa> loadCa(const CaFiles& files) {
  auto ca = CertificateAuthority::load(files.ca_cert, files.ca_key);
  if (!ca.ok()) return absl::Status(ca.status().code(), absl::StrCat("identity.ca_cert/ca_key: ", ca.status().message()));
  auto certs = loadCertsPem(files.ca_cert);
  if (!certs.ok()) return absl::Status(certs.status().code(), absl::StrCat("identity.ca_cert: ", certs.status().message()));
  std::vector<X509Ptr> chain;
  for (size_t i = 1; i < certs->size(); ++i) chain.push_back(std::move((*certs)[i]));
  return LoadedCa{*std::move(ca), std::move(chain)};
}

absl::StatusOr<std::vector<X509Ptr>> loadRoots(const std::string& path) {
  auto roots = loadCertsPem(path);
  if (!roots.ok()) return absl::Status(roots.status().code(), absl::StrCat("trust bundle: ", roots.status().message()));
  return roots;
}

}  // namespace

WatchedCaSource::WatchedCaSource(CaFiles files, std::string trust_domain, std::chrono::seconds leaf_lifetime,
                                 const Clock& clock)
    : files_(std::move(files)),
      trust_domain_(std::move(trust_domain)),
      leaf_lifetime_(leaf_lifetime),
      clock_(clock),
      ca_cert_file_{common::WatchedFile(files_.ca_cert, kMaxPemFileBytes)},
      ca_key_file_{common::WatchedFile(files_.ca_key, kMaxPemFileBytes)},
      bundle_file_{common::WatchedFile(files_.bundle, kMaxPemFileBytes)} {}

std::string WatchedCaSource::Watched::stamp() const {
  if (file.failing()) return absl::StrCat("unreadable: ", file.error().message());
  return absl::StrCat("v", version);
}

WatchedCaSource::Stamps WatchedCaSource::stampNow() {
  for (Watched* w : {&ca_cert_file_, &ca_key_file_, &bundle_file_}) {
    if (w->file.poll() == common::WatchedFile::Result::kChanged) ++w->version;
  }
  return Stamps{ca_cert_file_.stamp(), ca_key_file_.stamp(), bundle_file_.stamp()};
}

bool WatchedCaSource::poll() {
  Stamps now = stampNow();
  if (polled_ && now == seen_) return false;
  polled_ = true;
  seen_ = now;
  bool ready = current() != nullptr;
  // Back to what is in effect (a file that was briefly unreadable): nothing to apply.
  if (ready && now == applied_) return false;
  absl::Status s = apply(now);
  if (s.ok()) {
    applied_ = now;
    reloads_.fetch_add(1, std::memory_order_relaxed);
    std::lock_guard<std::mutex> lock(mu_);
    status_ = absl::OkStatus();
    return true;
  }
  reload_failures_.fetch_add(1, std::memory_order_relaxed);
  if (ready) {
    FERRY_LOG(kWarn, "identity: %s; keeping the CA and trust bundle in use", s.message());
  } else {
    FERRY_LOG(kWarn, "identity: %s; not ready, connections that need a certificate are reset until it is fixed",
              s.message());
    std::lock_guard<std::mutex> lock(mu_);
    status_ = s;
  }
  return false;
}

absl::Status WatchedCaSource::apply(const Stamps& now) {
  std::shared_ptr<CaCertSource> source = current();
  bool ca_changed = !source || now.ca_cert != applied_.ca_cert || now.ca_key != applied_.ca_key;
  bool bundle_changed = !source || now.bundle != applied_.bundle;
  if (!ca_changed && !bundle_changed) return absl::OkStatus();  // e.g. a file came and went

  std::optional<LoadedCa> ca;
  if (ca_changed) {
    auto loaded = loadCa(files_);
    if (!loaded.ok()) return loaded.status();
    ca.emplace(*std::move(loaded));
  }
  std::optional<std::vector<X509Ptr>> roots;
  if (bundle_changed) {
    auto loaded = loadRoots(files_.bundle);
    if (!loaded.ok()) return loaded.status();
    roots.emplace(*std::move(loaded));
  }

  if (!source) {
    auto created = CaCertSource::create(std::move(ca->ca), std::move(ca->chain), std::move(*roots), trust_domain_,
                                        leaf_lifetime_, clock_);
    if (!created.ok()) return created.status();
    std::lock_guard<std::mutex> lock(mu_);
    source_ = *std::move(created);
    FERRY_LOG(kInfo, "identity: issuing workload certificates from the built-in CA %s (trust bundle %s)",
              files_.ca_cert, files_.bundle);
    return absl::OkStatus();
  }
  absl::Status s;
  if (ca && roots) {
    s = source->setAuthorityAndBundle(std::move(ca->ca), std::move(ca->chain), std::move(*roots));
  } else if (ca) {
    s = source->setAuthority(std::move(ca->ca), std::move(ca->chain));
  } else {
    s = source->setBundle(std::move(*roots));
  }
  if (!s.ok()) return s;
  FERRY_LOG(kInfo, "identity: applied a new %s", ca && roots ? "CA and trust bundle" : ca ? "CA (certificates are re-issued on next use)" : "trust bundle");
  return absl::OkStatus();
}

absl::Status WatchedCaSource::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

std::shared_ptr<CaCertSource> WatchedCaSource::current() const {
  std::lock_guard<std::mutex> lock(mu_);
  return source_;
}

absl::StatusOr<std::shared_ptr<const Svid>> WatchedCaSource::svid(const SpiffeId& id) {
  std::shared_ptr<CaCertSource> source;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!source_) return absl::FailedPreconditionError(absl::StrCat("not ready: ", status_.message()));
    source = source_;
  }
  return source->svid(id);
}

absl::StatusOr<std::shared_ptr<const TrustBundle>> WatchedCaSource::bundle() {
  std::shared_ptr<CaCertSource> source;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!source_) return absl::FailedPreconditionError(absl::StrCat("not ready: ", status_.message()));
    source = source_;
  }
  return source->bundle();
}

size_t WatchedCaSource::retain(const absl::flat_hash_set<SpiffeId>& keep) {
  std::shared_ptr<CaCertSource> source = current();
  return source ? source->retain(keep) : 0;
}

}  // namespace ferry::identity
