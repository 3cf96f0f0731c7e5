#include "proxy/identity/dir_cert_source.h"

#include <openssl/err.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "proxy/common/log.h"

namespace ferry::identity {
namespace {


}  // namespace

absl::StatusOr<std::string> svidDirectory(const std::string& dir, const SpiffeId& id) {
  // forWorkload() does not validate: re-parse so that nothing odd reaches a file path.
  if (auto parsed = SpiffeId::parse(id.str()); !parsed.ok()) return parsed.status();
  auto workload = workloadName(id);
  if (!workload.ok()) return workload.status();
  return absl::StrCat(dir, "/", workload->namespace_name, "/", workload->service_account);
}

DirCertSource::DirCertSource(std::string dir, std::string trust_domain,
                             std::chrono::milliseconds recheck_interval)
    : dir_(std::move(dir)),
      trust_domain_(std::move(trust_domain)),
      recheck_interval_(recheck_interval),
      bundle_(absl::StrCat(dir_, "/bundle.pem")) {}

absl::StatusOr<std::shared_ptr<const TrustBundle>> DirCertSource::bundle() {
  std::lock_guard<std::mutex> lock(bundle_.mu);
  auto now = std::chrono::steady_clock::now();
  if (bundle_.loaded && now - bundle_.checked < recheck_interval_) return bundle_.result;
  bundle_.checked = now;
  const std::string& path = bundle_.file.path();
  bool unchanged = bundle_.file.poll() == common::WatchedFile::Result::kUnchanged;
  if (bundle_.loaded && unchanged) return bundle_.result;
  bundle_.loaded = true;

  auto load = [&]() -> absl::StatusOr<std::shared_ptr<const TrustBundle>> {
    if (absl::Status s = validateTrustDomain(trust_domain_); !s.ok()) return s;
    auto certs = loadCertsPem(path);
    if (!certs.ok()) {
      return absl::Status(certs.status().code(),
                          absl::StrCat("trust bundle: ", certs.status().message()));
    }
    for (size_t i = 0; i < certs->size(); ++i) {
      if (X509_check_ca((*certs)[i].get()) == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("trust bundle ", path, ": certificate #", i + 1, " is not a CA certificate"));
      }
    }
    auto out = std::make_shared<TrustBundle>();
    out->trust_domain = trust_domain_;
    out->roots = *std::move(certs);
    return std::shared_ptr<const TrustBundle>(std::move(out));
  };
  auto fresh = load();
  if (!fresh.ok() && bundle_.result.ok()) {
    // Keep trusting the previous roots: a half-written or deleted bundle must not cut every
    // connection of the node.
    FERRY_LOG(kWarn, "%s; keeping the previously loaded trust bundle", fresh.status().message());
    return bundle_.result;
  }
  bundle_.result = std::move(fresh);
  return bundle_.result;
}

absl::StatusOr<std::shared_ptr<const Svid>> DirCertSource::svid(const SpiffeId& id) {
  if (id.trustDomain() != trust_domain_) {
    return absl::InvalidArgumentError(absl::StrCat("identity ", id.str(), " is not in trust domain ",
                                                   trust_domain_, " served from ", dir_));
  }
  auto base = svidDirectory(dir_, id);
  if (!base.ok()) return base.status();
  auto roots = bundle();
  if (!roots.ok()) return roots.status();

  std::shared_ptr<SvidEntry> entry;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto& slot = svids_[id];
    if (!slot) slot = std::make_shared<SvidEntry>(*base);
    entry = slot;
  }
  std::string cert_path = *base + "/cert.pem";
  std::string key_path = *base + "/key.pem";

  std::lock_guard<std::mutex> lock(entry->mu);
  auto serve = [&]() -> absl::StatusOr<std::shared_ptr<const Svid>> {
    if (entry->svid) {
      if (std::chrono::system_clock::now() < entry->svid->not_after) return entry->svid;
      std::string why = absl::StrCat(cert_path, ": certificate for ", id.str(), " expired at ",
                                     formatTime(entry->svid->not_after));
      if (!entry->error.ok()) absl::StrAppend(&why, " and reloading failed: ", entry->error.message());
      return absl::FailedPreconditionError(why);
    }
    if (entry->error.ok()) return absl::InternalError(absl::StrCat("no certificate loaded for ", id.str()));
    return entry->error;
  };
  auto now = std::chrono::steady_clock::now();
  bool same_bundle = entry->verified_against == *roots;
  if (entry->loaded && same_bundle && now - entry->checked < recheck_interval_) return serve();
  entry->checked = now;
  // Both polled every time: each remembers what it saw.
  bool cert_unchanged = entry->cert.poll() == common::WatchedFile::Result::kUnchanged;
  bool key_unchanged = entry->key.poll() == common::WatchedFile::Result::kUnchanged;
  if (entry->loaded && same_bundle && cert_unchanged && key_unchanged) return serve();
  entry->loaded = true;
  entry->verified_against = *roots;

  auto fresh = load(id, cert_path, key_path, **roots);
  if (fresh.ok()) {
    entry->svid = *std::move(fresh);
    entry->error = absl::OkStatus();
    return entry->svid;
  }
  entry->error = fresh.status();
  if (entry->svid && std::chrono::system_clock::now() < entry->svid->not_after) {
    FERRY_LOG(kWarn, "%s; keeping the previous certificate for %s until %s", entry->error.message(),
              id.str(), formatTime(entry->svid->not_after));
  }
  return serve();
}

std::shared_ptr<const Svid> DirCertSource::lastLoaded(const SpiffeId& id) {
  std::shared_ptr<SvidEntry> entry;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = svids_.find(id);
    if (it == svids_.end()) return nullptr;
    entry = it->second;
  }
  std::lock_guard<std::mutex> lock(entry->mu);
  return entry->svid;
}

absl::StatusOr<std::shared_ptr<const Svid>> DirCertSource::load(const SpiffeId& id,
                                                                const std::string& cert_path,
                                                                const std::string& key_path,
                                                                const TrustBundle& bundle) const {
  auto certs = loadCertsPem(cert_path);
  if (!certs.ok()) return certs.status();
  auto key = loadKeyPem(key_path);
  if (!key.ok()) return key.status();
  X509* leaf = certs->front().get();
  if (X509_check_private_key(leaf, key->get()) != 1) {
    std::string errors = drainOpenSslErrors();
    return absl::InvalidArgumentError(absl::StrCat(key_path, " does not match the certificate in ",
                                                   cert_path, errors.empty() ? "" : ": ", errors));
  }
  auto leaf_id = validateSvidLeaf(leaf);
  if (!leaf_id.ok()) return absl::InvalidArgumentError(absl::StrCat(cert_path, ": ", leaf_id.status().message()));
  if (*leaf_id != id) {
    return absl::InvalidArgumentError(
        absl::StrCat(cert_path, " holds the identity ", leaf_id->str(), ", expected ", id.str()));
  }
  auto svid = std::make_shared<Svid>();
  svid->id = *std::move(leaf_id);
  svid->not_before = asn1TimeToTimePoint(X509_get0_notBefore(leaf));
  svid->not_after = asn1TimeToTimePoint(X509_get0_notAfter(leaf));
  auto now = std::chrono::system_clock::now();
  if (now >= svid->not_after) {
    return absl::FailedPreconditionError(
        absl::StrCat(cert_path, ": certificate expired at ", formatTime(svid->not_after)));
  }
  if (now < svid->not_before) {
    return absl::FailedPreconditionError(
        absl::StrCat(cert_path, ": certificate is not valid before ", formatTime(svid->not_before),
                     " (clock skew?)"));
  }
  std::vector<X509Ptr> intermediates;
  for (size_t i = 1; i < certs->size(); ++i) intermediates.push_back(std::move((*certs)[i]));
  std::vector<X509*> untrusted;
  for (const X509Ptr& cert : intermediates) untrusted.push_back(cert.get());
  if (absl::Status s = verifyChain(leaf, untrusted, bundle); !s.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(cert_path, ": chain does not verify against ",
                                                      dir_, "/bundle.pem: ", s.message()));
  }
  svid->leaf = std::move(certs->front());
  svid->intermediates = std::move(intermediates);
  svid->key = *std::move(key);
  return std::shared_ptr<const Svid>(std::move(svid));
}

}  // namespace ferry::identity
