#include "proxy/workloads/file_source.h"

#include <malloc.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proxy/common/log.h"
#include "proxy/config/workloads_file.h"

namespace ferry::workloads {

Workload workloadFromEntry(config::WorkloadEntry&& entry) {
  Workload w;
  w.name = std::move(entry.name);
  w.namespace_name = intern(entry.namespace_name);
  w.service_account = intern(entry.service_account);
  w.node = intern(entry.node);
  w.ips.assign(entry.ips.begin(), entry.ips.end());
  w.host_interface = std::move(entry.host_interface);
  w.hbone = entry.hbone;
  w.tls_mode = entry.tls_mode == config::TlsMode::kStrict ? TlsMode::kStrict : TlsMode::kPermissive;
  if (!entry.labels.empty()) w.labels = LabelSet(std::move(entry.labels));
  w.telemetry = internTelemetry(
      telemetryOf(entry.workload_name.empty() ? w.name : std::move(entry.workload_name), w.labels.get()));
  return w;
}

absl::StatusOr<std::vector<Workload>> parseWorkloadList(std::string_view text, std::string_view source_name,
                                                        config::FileFormat format) {
  std::vector<Workload> all;
  auto parsed = config::parseWorkloads(text, source_name, format, [&](config::WorkloadEntry&& entry) {
    all.push_back(workloadFromEntry(std::move(entry)));
  });
  if (!parsed.ok()) return parsed;
  return all;
}

absl::StatusOr<std::shared_ptr<const Registry>> parseRegistry(std::string_view text, std::string_view source_name,
                                                              std::string_view local_node, config::FileFormat format) {
  auto all = parseWorkloadList(text, source_name, format);
  if (!all.ok()) return all.status();
  Store store(local_node);
  store.replaceAll(*std::move(all));
  return store.current();
}

FileSource::FileSource(std::string path) : file_(std::move(path)) {}

absl::Status FileSource::start(Store& store) {
  // Start-up must see the file's real state, whatever was seen before.
  file_.reset();
  return reload(store).status();
}

bool FileSource::poll(Store& store) {
  auto published = reload(store);
  if (published.ok()) return *published;
  failures_.fetch_add(1, std::memory_order_relaxed);
  FERRY_LOG(kWarn, "workloads: %s; keeping the previous %d workloads", published.status().message(),
            store.current()->size());
  return false;
}

absl::StatusOr<bool> FileSource::reload(Store& store) {
  switch (file_.poll()) {
    case common::WatchedFile::Result::kUnchanged:
      return false;
    case common::WatchedFile::Result::kFailed:
      return file_.error();
    case common::WatchedFile::Result::kChanged:
      break;
  }
  std::string text = file_.takeContent();
  auto all = parseWorkloadList(text, file_.path(), config::formatOf(file_.path()));
  if (!all.ok()) return all.status();
  text = std::string();
  size_t total = all->size();
  adjust(*all);
  auto result = store.replaceAll(*std::move(all));
  // The file was checked for duplicate IPs, so nothing is refused here; say so if it is.
  if (!result.rejected.empty()) {
    FERRY_LOG(kWarn, "workloads: %s: refused %d entries: %s", file_.path(), result.rejected.size(),
              absl::StrJoin(result.rejected, "; "));
  }
  // Parsing a big file leaves its temporaries' pages in the heap (the text, the entries, the
  // parser's duplicate checks: ~100 MB for 150,000 entries); hand them back now rather than
  // keep them for life.
  malloc_trim(0);
  auto registry = store.current();
  FERRY_LOG(kInfo, "workloads: loaded %d workloads (%d local) from %s, %d changed, generation %d", total,
            registry->localCount(), file_.path(), result.changed, store.generation());
  return result.changed > 0;
}

void FileSource::adjust(std::vector<Workload>& all) {
  if (sandboxes_.empty() && deleted_sandboxes_.empty()) return;
  std::erase_if(all, [&](Workload& w) {
    auto it = deleted_sandboxes_.find(w.displayName());
    if (it == deleted_sandboxes_.end()) return false;
    it->second = std::move(w);
    return true;
  });
  for (auto& w : all) {
    if (!w.host_interface.empty()) continue;
    if (auto it = sandboxes_.find(w.displayName()); it != sandboxes_.end()) w.host_interface = it->second.device;
  }
}

CniDecision FileSource::cniDecide(const Store& store, const std::string& key, const std::string&) const {
  auto registry = store.current();
  for (const auto& w : registry->local()) {
    if (w->displayName() == key) return {CniDecision::kEnrolled, ""};
  }
  if (deleted_sandboxes_.contains(key)) return {CniDecision::kEnrolled, ""};
  return {CniDecision::kNotEnrolled, absl::StrCat("not a workload of node ", registry->localNode(), " in ", file_.path())};
}

CniDecision FileSource::cniAdd(Store& store, const CniSandbox& sandbox) {
  auto registry = store.current();
  const Workload* found = nullptr;
  for (const auto& w : registry->local()) {
    if (w->displayName() == sandbox.key) found = w.get();
  }
  if (found == nullptr) {
    // Its previous sandbox was deleted: the file's entry comes back with the new one.
    if (auto it = deleted_sandboxes_.find(sandbox.key); it != deleted_sandboxes_.end()) {
      return cniAddTo(store, it->second, sandbox);
    }
  }
  if (found == nullptr) {
    return {CniDecision::kNotEnrolled, absl::StrCat("not a workload of node ", registry->localNode(), " in ", file_.path())};
  }
  return cniAddTo(store, *found, sandbox);
}

CniDecision FileSource::cniAddTo(Store& store, Workload w, const CniSandbox& sandbox) {
  for (const auto& ip : sandbox.ips) {
    if (std::find(w.ips.begin(), w.ips.end(), ip) == w.ips.end()) {
      return {CniDecision::kRefused, absl::StrCat(file_.path(), " gives ", sandbox.key, " other addresses than the ",
                                                  ip.to_string(), " its CNI assigned")};
    }
  }
  auto known = sandboxes_.find(sandbox.key);
  bool file_names_device = !w.host_interface.empty() && (known == sandboxes_.end() || known->second.device != w.host_interface);
  if (file_names_device && w.host_interface != sandbox.device) {
    return {CniDecision::kRefused, absl::StrCat(file_.path(), " names host_interface ", w.host_interface, " for ",
                                                sandbox.key, "; its CNI made ", sandbox.device)};
  }
  sandboxes_[sandbox.key] = Sandbox{sandbox.device, sandbox.container_id};
  deleted_sandboxes_.erase(sandbox.key);
  w.host_interface = sandbox.device;
  std::string key = w.displayName();
  store.apply({Update{std::move(key), std::move(w)}});
  return {CniDecision::kEnrolled, ""};
}

void FileSource::cniDel(Store& store, const std::string& key, const std::string& container_id) {
  if (auto it = sandboxes_.find(key); it != sandboxes_.end()) {
    if (it->second.container_id != container_id) return;  // an older sandbox's DEL
    sandboxes_.erase(it);
  }
  auto registry = store.current();
  for (const auto& w : registry->local()) {
    if (w->displayName() != key) continue;
    Workload kept = *w;
    kept.host_interface.clear();  // the device went with the sandbox
    deleted_sandboxes_.insert_or_assign(key, std::move(kept));
    store.apply({Update{key, std::nullopt}});
    return;
  }
}

}  // namespace ferry::workloads
