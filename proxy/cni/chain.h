#pragma once
// ferry-cni's place in the node's CNI configuration (docs/install.md, "The CNI chain"): the
// entry ferryd appends to the network configuration list the runtime uses, how it is put in
// and taken out again, and which file of the configuration folder that list is. Pure (text
// in, text out, no I/O): ferryd's installer (proxy/server/cni_install.h) does the files, and
// every shape of a primary CNI's file is a unit test (tests/unit/cni_chain_test.cc).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::cni {

// The plugin's executable name in the runtime's bin folder, and so its `type`.
inline constexpr char kPluginType[] = "ferry-cni";
// The plugin's own API server credentials, which ferryd keeps in the configuration folder
// (proxy/server/cni_credentials.h). Not a configuration file name (isConfigFileName).
inline constexpr char kPluginKubeconfig[] = "ferry-cni.kubeconfig";

enum class FailurePolicy {
  kClosed,  // ferryd unreachable: ADD fails with "try again later"
  kOpen,    // ferryd unreachable: ADD succeeds, the pod unenrolled until discovery finds it
};

// What the entry tells the plugin; the plugin reads it afresh on every call.
struct ChainEntry {
  std::string socket;  // ferryd's endpoint as the node sees it (the plugin runs there)
  FailurePolicy failure_policy = FailurePolicy::kClosed;
  std::vector<std::string> exclude_namespaces;
  int64_t timeout_ms = 5'000;
  std::string kubeconfig;  // the plugin's credentials as the node sees them; empty: none
  bool istio_ambient = false;
};

// {"type":"ferry-cni","socket":...,"failurePolicy":"closed"|"open","excludeNamespaces":[...],
// "timeoutMs":...[,"kubeconfig":...][,"istioAmbient":true]}, compact.
std::string chainEntryJson(const ChainEntry& entry);

// An edit of one configuration file.
struct ChainEdit {
  std::string error;       // not empty: the file cannot be edited, and why (nothing else is set)
  bool changed = false;    // false: the file already is as wanted; write nothing
  bool converted = false;  // a single-plugin file became a list: write `text` as .conflist
  std::string text;        // the new file, when changed
  bool ok() const { return error.empty(); }
};

// Puts `entry` last in the file's plugins, removing every other `type: ferry-cni` entry
// wherever it is, so that there is exactly one. Every other key and plugin stays as it was
// (unknown keys included). A file that already has exactly this entry last, and no other,
// is unchanged: rewriting it would wake the watchers of the folder (the runtime, ferryd's
// own check) for nothing.
//  - `is_conflist` (a .conflist file): a list, {"cniVersion", "name", "plugins": [...]}.
//  - otherwise (.conf, .json: one plugin's configuration, which the runtime turns into a
//    one-plugin list itself): it becomes {"cniVersion", "name", "plugins": [<the file as it
//    was>, entry]}, `converted`. A .conf that holds a list already is edited as a list.
// Errors: not JSON, not an object, no `plugins` list (a .conflist) or no `type` (a .conf),
// a missing or non-string `cniVersion` or `name`, a cniVersion ferry-cni cannot read (see
// spec.h, kSupportedVersions): chaining would make every ADD fail.
ChainEdit chainIn(std::string_view text, bool is_conflist, const ChainEntry& entry);

// Removes every `type: ferry-cni` plugin of a list. Unchanged when there is none (or the
// file is no list: a single plugin's file is never ferry's). Errors: not JSON, and a list
// that would be left without plugins (ferry's entry was all it had: not a file to keep).
ChainEdit chainOut(std::string_view text);

// The CNI configuration folder as a runtime reads it: files named *.conflist, *.conf or
// *.json (the extension after the last dot, as libcni's ConfFiles compares it), in byte-wise
// lexical order (Go's sort.Strings); containerd's CRI takes the first as the pod network
// (go-cni's loadFromConfDir, max_conf_num 1 by default).
bool isConfigFileName(std::string_view name);
bool isConflistFileName(std::string_view name);
// The first configuration file among `names` (plain file names, folders already left out),
// or none.
std::optional<std::string> firstConfigFile(const std::vector<std::string>& names);
// `name` with its extension replaced by .conflist ("10-bridge.conf" -> "10-bridge.conflist").
std::string conflistFileName(std::string_view name);

}  // namespace ferry::cni
