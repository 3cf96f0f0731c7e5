#include "proxy/workloads/workload.h"

#include <algorithm>
#include <memory>
#include <mutex>

#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_set.h"
#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "proxy/common/strings.h"

namespace ferry::workloads {
namespace {

struct Pool {
  std::mutex mu;
  absl::node_hash_set<std::string> strings;  // node-based: addresses stay put
};

Pool& pool() {
  static Pool* instance = new Pool();  // never destroyed: snapshots may outlive static destructors
  return *instance;
}

const std::string* emptyString() {
  static const std::string* empty = [] {
    Pool& p = pool();
    std::lock_guard lock(p.mu);
    return &*p.strings.emplace("").first;
  }();
  return empty;
}

}  // namespace

InternedString::InternedString() : text_(emptyString()) {}

InternedString intern(std::string_view text) {
  if (text.empty()) return InternedString();
  Pool& p = pool();
  std::lock_guard lock(p.mu);
  auto it = p.strings.find(common::toAbsl(text));
  if (it == p.strings.end()) it = p.strings.emplace(text).first;
  return InternedString(&*it);
}

namespace {

struct TelemetryPool {
  std::mutex mu;
  struct Hash {
    size_t operator()(const TelemetryMeta& m) const {
      return absl::HashOf(m.workload, m.canonical_service, m.canonical_revision);
    }
  };
  // weak: an entry whose last holder went is replaced on the next intern of its value, and
  // erased by the deleter of the object it named.
  absl::flat_hash_map<TelemetryMeta, std::weak_ptr<const TelemetryMeta>, Hash> live;
};

TelemetryPool& telemetryPool() {
  static TelemetryPool* instance = new TelemetryPool();  // never destroyed, like pool()
  return *instance;
}

}  // namespace

TelemetryMetaPtr internTelemetry(TelemetryMeta meta) {
  TelemetryPool& p = telemetryPool();
  std::lock_guard lock(p.mu);
  auto& slot = p.live[meta];
  if (auto held = slot.lock()) return held;
  TelemetryMetaPtr made(new TelemetryMeta(std::move(meta)), [](const TelemetryMeta* m) {
    TelemetryPool& p = telemetryPool();
    {
      std::lock_guard lock(p.mu);
      auto it = p.live.find(*m);
      // A newer object of the same value may hold the slot already: leave that one.
      if (it != p.live.end() && it->second.expired()) p.live.erase(it);
    }
    delete m;
  });
  slot = made;
  return made;
}

std::string ownerWorkloadName(std::string_view pod_name, bool generated_name, const OwnerRef* controller,
                              const std::string* pod_template_hash) {
  if (!generated_name || controller == nullptr) return std::string(pod_name);
  std::string_view name = controller->name;
  if (controller->kind == "ReplicaSet" && pod_template_hash != nullptr && !pod_template_hash->empty()) {
    std::string suffix = "-" + *pod_template_hash;
    if (name.size() > suffix.size() && name.substr(name.size() - suffix.size()) == suffix) {
      name.remove_suffix(suffix.size());
    }
  } else if (controller->kind == "Job") {
    // A CronJob's Job is `<cronjob>-<scheduled time in minutes>`: 8 to 10 digits.
    size_t dash = name.rfind('-');
    size_t digits = dash == std::string_view::npos ? 0 : name.size() - dash - 1;
    if (dash != std::string_view::npos && dash > 0 && digits >= 8 && digits <= 10 &&
        std::all_of(name.begin() + dash + 1, name.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      name = name.substr(0, dash);
    }
  }
  return std::string(name);
}

TelemetryMeta telemetryOf(std::string workload, const std::vector<std::pair<std::string, std::string>>& labels) {
  auto first = [&](std::initializer_list<std::string_view> keys) -> const std::string* {
    for (std::string_view key : keys) {
      auto it = std::lower_bound(labels.begin(), labels.end(), key,
                                 [](const auto& label, std::string_view k) { return label.first < k; });
      if (it != labels.end() && it->first == key && !it->second.empty()) return &it->second;
    }
    return nullptr;
  };
  TelemetryMeta m;
  const std::string* service = first({"service.istio.io/canonical-name", "app.kubernetes.io/name", "app"});
  const std::string* revision = first({"service.istio.io/canonical-revision", "app.kubernetes.io/version", "version"});
  m.canonical_service = service != nullptr ? *service : workload;
  m.canonical_revision = revision != nullptr ? *revision : "latest";
  m.workload = std::move(workload);
  return m;
}

LabelSet::LabelSet(Labels labels) {
  std::stable_sort(labels.begin(), labels.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  Labels unique;
  unique.reserve(labels.size());
  for (auto& label : labels) {
    if (!unique.empty() && unique.back().first == label.first) {
      unique.back().second = std::move(label.second);
    } else {
      unique.push_back(std::move(label));
    }
  }
  if (!unique.empty()) labels_ = std::make_shared<const Labels>(std::move(unique));
}

const LabelSet::Labels& LabelSet::get() const {
  static const Labels kNone;
  return labels_ ? *labels_ : kNone;
}

const std::string* LabelSet::find(std::string_view key) const {
  const auto& labels = get();
  auto it = std::lower_bound(labels.begin(), labels.end(), key,
                             [](const auto& label, std::string_view k) { return label.first < k; });
  return it != labels.end() && it->first == key ? &it->second : nullptr;
}

std::string spiffeIdOf(std::string_view trust_domain, std::string_view namespace_name,
                       std::string_view service_account) {
  return absl::StrCat("spiffe://", common::toAbsl(trust_domain), "/ns/", common::toAbsl(namespace_name), "/sa/",
                      common::toAbsl(service_account));
}

std::string Workload::spiffeId(std::string_view trust_domain) const {
  return spiffeIdOf(trust_domain, namespace_name.str(), service_account.str());
}

std::string Workload::displayName() const { return absl::StrCat(namespace_name.str(), "/", name); }

}  // namespace ferry::workloads
