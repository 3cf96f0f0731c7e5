// Live reload of the config file (docs/configuration.md, "Reloading"): the Server's
// members that read a new version, decide key by key (config/reload.h) and apply it.
#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proxy/common/log.h"
#include "proxy/config/memory_budget.h"
#include "proxy/config/reload.h"
#include "proxy/server/server.h"

namespace ferry::server {

namespace {

// Whole seconds: StrCat prints a double with six digits, which would round a Unix time to
// hours.
int64_t epochSeconds(std::chrono::system_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::seconds>(t.time_since_epoch()).count();
}

}  // namespace

void ReloadHistory::applied(std::vector<std::string> live_keys, std::vector<std::string> restart_keys) {
  std::lock_guard lock(mu_);
  status_.last_attempt = status_.last_success = std::chrono::system_clock::now();
  status_.last_result = "applied";
  status_.error.clear();
  ++status_.applied;
  if (!live_keys.empty()) {
    ++status_.generation;
    status_.last_applied_keys = std::move(live_keys);
  }
  status_.restart_required_keys = std::move(restart_keys);
}

void ReloadHistory::rejected(std::string why) {
  std::lock_guard lock(mu_);
  status_.last_attempt = std::chrono::system_clock::now();
  status_.last_result = "rejected";
  status_.error = std::move(why);
  ++status_.rejected;
}

void Server::reloadConfig(bool reread) {
  if (!config_file_) {
    if (reread) FERRY_LOG(kInfo, "config: no config file to re-read (ferryd was given its config in-process)");
    return;
  }
  // SIGHUP reads the file even when its stamp and content are the ones applied last: the
  // operator asked, and a restart key still waiting is reported again.
  if (reread) config_file_->reset();
  auto polled = config_file_->poll();
  if (polled == common::WatchedFile::Result::kUnchanged) return;
  if (polled == common::WatchedFile::Result::kFailed) return rejectReload(config_file_->error());
  auto next = config::parseConfigFile(config_file_->content(), config_file_->path());
  if (!next.ok()) return rejectReload(next.status());
  // Fitted again: the file's limits may have changed, and so may the cgroup's (a resize).
  if (auto st = config::fitConfigToMemory(*next); !st.ok()) {
    return rejectReload(absl::Status(st.code(), absl::StrCat(config_file_->path(), ": ", st.message())));
  }
  if (!(next->memory_budget == config_.memory_budget)) {
    FERRY_LOG(kInfo, "memory: %s", config::describeBudget(next->memory_budget));
    config_.memory_budget = next->memory_budget;
    data_plane_->applyMemoryBudget();
  }

  auto change = config::diffConfig(config_, *next);
  // A new policy list (or root namespace, under which every file is judged again) is read
  // before anything applies: files that do not load refuse the version, as at start.
  bool new_policy_files =
      next->policy.files != config_.policy.files || next->policy.root_namespace != config_.policy.root_namespace;
  if (new_policy_files) {
    if (auto st = policy_.loadFiles(next->policy.files); !st.ok()) {
      return rejectReload(absl::Status(st.code(), absl::StrCat(config_file_->path(), ": policy.files: ", st.message())));
    }
  }
  for (const auto& key : change.restart) {
    FERRY_LOG(kWarn, "config: %s changed in %s; it applies at the next start (until then ferryd keeps the value it "
              "started with)", key, config_file_->path());
  }
  if (!change.live.empty()) {
    FERRY_LOG(kInfo, "config: applying %s from %s", absl::StrJoin(change.live, ", "), config_file_->path());
    applyConfig(*next, new_policy_files);
  } else {
    FERRY_LOG(kInfo, "config: %s read again: no key that applies live changed", config_file_->path());
  }
  reloads_.applied(std::move(change.live), std::move(change.restart));
}

void Server::rejectReload(const absl::Status& why) {
  FERRY_LOG(kError, "config: reload refused, nothing changed (ferryd keeps running the config it has): %s",
            why.message());
  reloads_.rejected(std::string(why.message()));
}

void Server::applyConfig(const config::Config& next, bool new_policy_files) {
  const config::Config before = config_;
  config::applyLive(config_, next);
  // Only when the file's value changed: a level set since through the admin API stays
  // until the file says something new.
  if (config_.log_level != before.log_level) common::setLogLevel(config_.log_level);
  // The identity runtime keeps its own poll interval: the next poll waits the new one.
  if (identity_ != nullptr) identity_->setPollInterval(config_.identity.poll_interval);
  if (new_policy_files) {  // loaded by reloadConfig
    policy_.applyFiles(config_.policy.root_namespace);
  }
  // Limits, the access log and each worker's copy (timeouts, pool and HBONE settings).
  // workloads_poll, timeouts.drain and limits.trim_after_closes are read from config_ by
  // the control thread each time.
  data_plane_->applyConfig(before);
}

void ReloadHistory::collect(telemetry::Exposition& out) const {
  ReloadStatus status = get();
  out.counter("ferry_config_reloads_total",
              "Versions of the config file read after start, by result (rejected: nothing of it applied)")
      .add(static_cast<double>(status.applied), {{"result", "applied"}})
      .add(static_cast<double>(status.rejected), {{"result", "rejected"}});
  out.gauge("ferry_config_last_reload_success", "0 when the last version of the config file read was rejected",
            status.last_result == "rejected" ? 0 : 1);
  out.gauge("ferry_config_last_reload_success_timestamp_seconds",
            "When a version of the config file was last applied (0: none since start)",
            status.applied == 0 ? 0 : static_cast<double>(epochSeconds(status.last_success)));
  out.gauge("ferry_config_generation", "Reloads that changed a key applied live", static_cast<double>(status.generation));
  out.gauge("ferry_config_restart_required_keys", "Keys whose value in the config file waits for a restart",
            static_cast<double>(status.restart_required_keys.size()));
}

}  // namespace ferry::server
