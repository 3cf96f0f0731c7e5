#include "proxy/server/cni_install.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <memory>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/status/statusor.h"
#include "proxy/common/log.h"
#include "proxy/telemetry/metrics.h"

namespace ferry::server {
namespace {

// containerd refuses larger configuration files (go-cni's MaxFileSize, 2 MiB); a file that
// large is not one to chain into.
constexpr size_t kMaxConfigBytes = 2 << 20;
// ferry-cni is a few MB; a file this large at plugin_binary is not it.
constexpr size_t kMaxPluginBytes = 64 << 20;
// A configuration file ferryd creates (a .conf turned into a .conflist) gets the mode the
// runtime's own files have.
constexpr mode_t kConfigMode = 0644;

std::string join(const std::string& dir, const std::string& name) {
  return absl::EndsWith(dir, "/") ? dir + name : absl::StrCat(dir, "/", name);
}

// cni.plugin_binary, or ferry-cni in the folder of ferryd's own executable (the image ships
// both in one folder).
std::string pluginSource(const config::Cni& config) {
  if (!config.plugin_binary.empty()) return config.plugin_binary;
  char exe[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  std::string self = n > 0 ? std::string(exe, static_cast<size_t>(n)) : std::string("/usr/local/bin/ferryd");
  return join(self.substr(0, self.rfind('/')), cni::kPluginType);
}

cni::ChainEntry chainEntry(const config::Cni& config, const std::vector<std::string>& extra, bool istio_ambient) {
  cni::ChainEntry entry;
  if (!config.service_account.empty()) entry.kubeconfig = join(config.nodeConfDir(), cni::kPluginKubeconfig);
  entry.istio_ambient = istio_ambient;
  entry.socket = config.socket;
  entry.failure_policy =
      config.failure_policy == config::CniFailurePolicy::kOpen ? cni::FailurePolicy::kOpen : cni::FailurePolicy::kClosed;
  entry.exclude_namespaces = config.exclude_namespaces;
  for (const auto& ns : extra) {
    if (!ns.empty() && std::find(entry.exclude_namespaces.begin(), entry.exclude_namespaces.end(), ns) ==
                           entry.exclude_namespaces.end()) {
      entry.exclude_namespaces.push_back(ns);
    }
  }
  entry.timeout_ms = config.plugin_timeout.count();
  return entry;
}

// The configuration files of `dir` as a runtime lists them (libcni's ConfFiles: folders are
// left out, symlinks are not). A folder that does not exist yet has none.
absl::StatusOr<std::vector<std::string>> listConfigFiles(const std::string& dir) {
  std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(dir.c_str()), &::closedir);
  if (!d) {
    if (errno == ENOENT) return std::vector<std::string>{};
    return absl::UnavailableError(absl::StrCat("cannot list ", dir, ": ", common::errnoText(errno)));
  }
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d.get())) {
    std::string name = e->d_name;
    if (!cni::isConfigFileName(name)) continue;
    bool is_dir = e->d_type == DT_DIR;
    if (e->d_type == DT_UNKNOWN) {
      struct stat st {};
      is_dir = ::fstatat(::dirfd(d.get()), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
    }
    if (!is_dir) names.push_back(std::move(name));
  }
  return names;
}

mode_t modeOf(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? (st.st_mode & 07777) : kConfigMode;
}

}  // namespace

CniInstaller::CniInstaller(const config::Cni& config, const std::vector<std::string>& extra_excluded_namespaces,
                           bool istio_ambient)
    : bin_dir_(config.bin_dir),
      conf_dir_(config.conf_dir),
      source_(pluginSource(config)),
      installed_(join(config.bin_dir, cni::kPluginType)),
      entry_(chainEntry(config, extra_excluded_namespaces, istio_ambient)) {}

std::string CniInstaller::kubeconfigPathIn(const std::string& conf_dir) { return join(conf_dir, cni::kPluginKubeconfig); }

absl::Status CniInstaller::install() {
  if (auto st = installPlugin(); !st.ok()) return absl::Status(st.code(), absl::StrCat("cni.install: ", st.message()));
  chain();
  return absl::OkStatus();
}

absl::Status CniInstaller::installPlugin() {
  auto plugin = common::readFile(source_, kMaxPluginBytes);
  if (!plugin.ok()) {
    return absl::Status(plugin.status().code(),
                        absl::StrCat("the plugin to install: ", plugin.status().message(), " (cni.plugin_binary)"));
  }
  plugin_size_ = static_cast<int64_t>(plugin->size());
  // The same plugin already there (a restarted ferryd): not rewritten, so a runtime that
  // is executing it meanwhile is not disturbed for nothing.
  if (auto there = common::readFile(installed_, kMaxPluginBytes); there.ok() && *there == *plugin) return absl::OkStatus();
  // Renamed over the old one: a runtime executing it keeps the old inode; the next call gets
  // the new one, whole.
  if (auto st = common::writeFileAtomic(installed_, *plugin, 0755); !st.ok()) {
    return absl::Status(st.code(), absl::StrCat(st.message(), " (cni.bin_dir ", bin_dir_, ")"));
  }
  FERRY_LOG(kInfo, "cni: installed %s as %s", source_, installed_);
  return absl::OkStatus();
}

bool CniInstaller::fail(const std::string& message) {
  errors_.fetch_add(1, std::memory_order_relaxed);
  chained_.store(false, std::memory_order_relaxed);
  if (message == last_error_) return false;
  last_error_ = message;
  FERRY_LOG(kWarn, "cni: %s", message);
  return false;
}

bool CniInstaller::chain() {
  auto names = listConfigFiles(conf_dir_);
  if (!names.ok()) return fail(std::string(names.status().message()));
  std::optional<std::string> first = cni::firstConfigFile(*names);
  if (!first) {
    chained_.store(false, std::memory_order_relaxed);
    watched_.reset();
    if (!waiting_logged_) {
      FERRY_LOG(kInfo, "cni: no CNI configuration in %s yet (the primary CNI writes one): ferry-cni is chained once "
                       "it appears", conf_dir_);
    }
    waiting_logged_ = true;
    return false;
  }
  waiting_logged_ = false;
  const std::string path = join(conf_dir_, *first);
  if (!watched_ || watched_->path() != path) {
    if (watched_) FERRY_LOG(kInfo, "cni: %s is now the first configuration file (was %s)", path, watched_->path());
    watched_.emplace(path, kMaxConfigBytes);
  }
  switch (watched_->poll()) {
    case common::WatchedFile::Result::kUnchanged:
      return false;
    case common::WatchedFile::Result::kFailed:
      return fail(std::string(watched_->error().message()));
    case common::WatchedFile::Result::kChanged:
      break;
  }
  cni::ChainEdit edit = cni::chainIn(watched_->content(), cni::isConflistFileName(*first), entry_);
  if (!edit.ok()) {
    // Retried when the file changes (WatchedFile reads it again then), not on every poll.
    return fail(absl::StrCat("cannot chain ferry-cni into ", path, ": ", edit.error));
  }
  if (!edit.changed) {
    if (!chained_.exchange(true, std::memory_order_relaxed)) FERRY_LOG(kInfo, "cni: ferry-cni is chained in %s", path);
    last_error_.clear();
    ever_chained_ = true;
    return false;
  }
  const std::string target = edit.converted ? join(conf_dir_, cni::conflistFileName(*first)) : path;
  if (auto st = common::writeFileAtomic(target, edit.text, modeOf(path)); !st.ok()) {
    watched_->reset();  // an I/O failure: try again at the next check
    return fail(absl::StrCat("cannot chain ferry-cni into ", path, ": ", st.message()));
  }
  if (edit.converted) {
    // The runtime takes the .conf while it exists (it sorts before its .conflist).
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      int err = errno;
      watched_->reset();
      return fail(absl::StrCat("wrote ", target, " but cannot remove ", path, ", which the runtime still uses: ",
                               common::errnoText(err)));
    }
    watched_.emplace(target, kMaxConfigBytes);
  } else {
    // WatchedFile compares with the last text it read, the file before this write: the
    // primary CNI writing that same text again must count as a change. The next poll reads
    // what was written here.
    watched_->reset();
  }
  const char* why = edit.converted ? " (a single plugin's .conf, now a list)" : "";
  if (ever_chained_) {
    rechains_.fetch_add(1, std::memory_order_relaxed);
    FERRY_LOG(kInfo, "cni: re-chained ferry-cni into %s%s: the file was rewritten without ferry-cni's entry last", target, why);
  } else {
    FERRY_LOG(kInfo, "cni: chained ferry-cni into %s%s", target, why);
  }
  ever_chained_ = true;
  last_error_.clear();
  chained_.store(true, std::memory_order_relaxed);
  return true;
}

bool CniInstaller::check() {
  if (uninstalled_) return false;
  struct stat st {};
  // Removed or replaced behind ferryd's back (a node clean-up): every ADD would fail.
  // installPlugin() logs the copy; its failure is logged once.
  if (::stat(installed_.c_str(), &st) != 0 || st.st_size != plugin_size_) {
    if (auto s = installPlugin(); !s.ok()) fail(std::string(s.message()));
  }
  return chain();
}

void CniInstaller::uninstall() {
  uninstalled_ = true;
  chained_.store(false, std::memory_order_relaxed);
  auto names = listConfigFiles(conf_dir_);
  if (!names.ok()) FERRY_LOG(kWarn, "cni: uninstall: %s", names.status().message());
  for (const auto& name : names.ok() ? *names : std::vector<std::string>{}) {
    const std::string path = join(conf_dir_, name);
    auto text = common::readFile(path, kMaxConfigBytes);
    if (!text.ok() || !absl::StrContains(*text, cni::kPluginType)) continue;
    cni::ChainEdit edit = cni::chainOut(*text);
    if (!edit.ok()) {
      FERRY_LOG(kWarn, "cni: uninstall: %s left as it is: %s", path, edit.error);
    } else if (edit.changed) {
      if (auto st = common::writeFileAtomic(path, edit.text, modeOf(path)); !st.ok()) {
        FERRY_LOG(kWarn, "cni: uninstall: cannot take ferry-cni out of %s: %s", path, st.message());
      } else {
        FERRY_LOG(kInfo, "cni: uninstall: took ferry-cni out of %s", path);
      }
    }
  }
  for (const std::string& path : {installed_, kubeconfigPath()}) {
    if (::unlink(path.c_str()) == 0) {
      FERRY_LOG(kInfo, "cni: uninstall: removed %s", path);
    } else if (errno != ENOENT) {
      FERRY_LOG(kWarn, "cni: uninstall: cannot remove %s: %s", path, common::errnoText(errno));
    }
  }
}

void CniInstaller::collect(telemetry::Exposition& out) const {
  out.gauge("ferry_cni_chain_installed",
            "1 when ferry-cni's entry is last in the CNI configuration the runtime uses", chained() ? 1 : 0);
  out.counter("ferry_cni_rechained_total",
              "Times ferry-cni was chained again after the file was rewritten or another file became the first",
              static_cast<double>(rechains()));
  out.counter("ferry_cni_chain_errors_total",
              "Failed attempts to chain ferry-cni (a file that cannot be read, parsed or written; the plugin that "
              "cannot be copied)",
              static_cast<double>(errors()));
}

}  // namespace ferry::server
