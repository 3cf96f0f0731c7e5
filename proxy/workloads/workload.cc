#include "proxy/workloads/workload.h"

#include <algorithm>
#include <memory>
#include <mutex>

#include "absl/container/node_hash_set.h"
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

Workload Workload::fromEntry(config::WorkloadEntry&& entry) {
  Workload w;
  w.name = std::move(entry.name);
  w.namespace_name = intern(entry.namespace_name);
  w.service_account = intern(entry.service_account);
  w.node = intern(entry.node);
  w.ips.assign(entry.ips.begin(), entry.ips.end());
  w.host_interface = std::move(entry.host_interface);
  w.hbone = entry.hbone;
  w.tls_mode = entry.tls_mode;
  if (!entry.labels.empty()) w.labels = LabelSet(std::move(entry.labels));
  return w;
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

std::string Workload::spiffeId(std::string_view trust_domain) const {
  return absl::StrCat("spiffe://", common::toAbsl(trust_domain), "/ns/", namespace_name.str(), "/sa/",
                      service_account.str());
}

std::string Workload::displayName() const { return absl::StrCat(namespace_name.str(), "/", name); }

}  // namespace ferry::workloads
