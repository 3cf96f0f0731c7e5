#pragma once
// The workloads file as a Source (docs/configuration.md, "Workloads file"): a
// common::WatchedFile (the daemon's one change rule), parsed by config::parseWorkloads, YAML
// or JSON by extension. A version that fails to parse keeps the previous state, is logged
// and counted once.
#include <atomic>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "proxy/common/file.h"
#include "proxy/config/workloads_file.h"
#include "proxy/workloads/source.h"

namespace ferry::workloads {

// A workloads document in a fresh registry, as FileSource loads it (tools, tests, fuzzers).
absl::StatusOr<std::shared_ptr<const Registry>> parseRegistry(std::string_view text, std::string_view source_name,
                                                              std::string_view local_node,
                                                              config::FileFormat format = config::FileFormat::kYaml);
// One entry of the file as the registry keeps it (the file's types stay the file's).
Workload workloadFromEntry(config::WorkloadEntry&& entry);
// The parsed entries of a workloads document as Workloads, in file order.
absl::StatusOr<std::vector<Workload>> parseWorkloadList(std::string_view text, std::string_view source_name,
                                                        config::FileFormat format);

class FileSource : public Source {
 public:
  explicit FileSource(std::string path);

  absl::Status start(Store& store) override;
  bool poll(Store& store) override;
  uint64_t failures() const override { return failures_.load(std::memory_order_relaxed); }
  std::string describe() const override { return "file " + file_.path(); }
  // ferry-cni: a workload of this node in the file is in the mesh; the sandbox supplies its
  // device when the file names none, and must agree with its addresses.
  CniDecision cniDecide(const Store& store, const std::string& key, const std::string& pod_uid) const override;
  CniDecision cniAdd(Store& store, const CniSandbox& sandbox) override;
  void cniDel(Store& store, const std::string& key, const std::string& container_id) override;

 private:
  // The file's workloads as published: devices from ferry-cni filled in, deleted sandboxes out.
  void adjust(std::vector<Workload>& all);
  CniDecision cniAddTo(Store& store, Workload workload, const CniSandbox& sandbox);
  struct Sandbox {
    std::string device, container_id;
  };
  absl::flat_hash_map<std::string, Sandbox> sandboxes_;  // by key
  // Workloads whose sandbox ferry-cni deleted, as the file has them: out of the registry
  // until an ADD brings them back.
  absl::flat_hash_map<std::string, Workload> deleted_sandboxes_;
  // Reads and applies the file if it changed; false when unchanged.
  absl::StatusOr<bool> reload(Store& store);

  common::WatchedFile file_;
  std::atomic<uint64_t> failures_{0};
};

}  // namespace ferry::workloads
