#pragma once
// ferry-cni on the node (docs/install.md, "The CNI chain"): ferryd copies the plugin into the
// runtime's bin folder and keeps its entry last in the configuration list the runtime uses,
// as istio-cni does. The primary CNI owns that file and may rewrite it at any time (on its
// own restart, on an upgrade); check() notices and chains again. Control thread only.
#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "proxy/cni/chain.h"
#include "proxy/common/file.h"
#include "proxy/config/config.h"

namespace ferry::telemetry {
class Exposition;
}  // namespace ferry::telemetry

namespace ferry::server {

class CniInstaller {
 public:
  // `extra_excluded_namespaces`: added to cni.exclude_namespaces (ferryd's own namespace: a
  // ferryd that is down must be able to start). `istio_ambient`: the enrolment rule the
  // plugin applies itself while ferryd is down (kubernetes.istio_ambient).
  CniInstaller(const config::Cni& config, const std::vector<std::string>& extra_excluded_namespaces,
               bool istio_ambient = false);
  // Where ferryd writes the plugin's kubeconfig (cni_credentials.h), in its view of conf_dir.
  static std::string kubeconfigPathIn(const std::string& conf_dir);
  std::string kubeconfigPath() const { return kubeconfigPathIn(conf_dir_); }

  // Copies the plugin (errors are start-up errors: ferry's own files are missing or the
  // bin folder cannot be written), then chains it. A configuration folder without a
  // configuration file yet (the primary CNI has not written one) or with a file that cannot
  // be chained is no error: it is logged, counted, and check() tries again.
  absl::Status install();
  // Cheap enough for every workloads poll: a listing of the configuration folder, a stat of
  // the chosen file and of the installed plugin; a file is read only when its stamp changed
  // (common::WatchedFile). Re-chains when the primary CNI rewrote the file or another file
  // became the first, and puts back a plugin someone removed. True when it wrote something.
  bool check();
  // Takes ferry's entry out of every configuration file of the folder that has one (and
  // nothing else of those files), then removes the plugin and its kubeconfig. check() does
  // nothing afterwards.
  void uninstall();

  // ferry_cni_chain_installed, ferry_cni_rechained_total, ferry_cni_chain_errors_total.
  void collect(telemetry::Exposition& out) const;
  bool chained() const { return chained_.load(std::memory_order_relaxed); }
  uint64_t rechains() const { return rechains_.load(std::memory_order_relaxed); }
  uint64_t errors() const { return errors_.load(std::memory_order_relaxed); }
  // The file the chain is in (or waits for), for logs and tests.
  std::string chainedFile() const { return watched_ ? watched_->path() : std::string(); }

 private:
  absl::Status installPlugin();
  // True when it wrote the file.
  bool chain();
  // Counts the failure and logs it when it differs from the last one (a broken file is
  // reported once per version, not on every poll). False, for chain() to return.
  bool fail(const std::string& message);

  const std::string bin_dir_, conf_dir_;
  const std::string source_;     // the plugin to copy (cni.plugin_binary, or beside ferryd)
  const std::string installed_;  // <bin_dir>/ferry-cni
  const cni::ChainEntry entry_;
  int64_t plugin_size_ = -1;     // the size copied (check() compares the installed one)
  std::optional<common::WatchedFile> watched_;
  bool waiting_logged_ = false;  // "no configuration file yet" said once
  bool ever_chained_ = false;    // later writes are re-chains
  bool uninstalled_ = false;
  std::string last_error_;
  std::atomic<bool> chained_{false};
  std::atomic<uint64_t> rechains_{0}, errors_{0};
};

}  // namespace ferry::server
