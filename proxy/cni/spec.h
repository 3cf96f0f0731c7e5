#pragma once
// The CNI 1.0.0 contract of a chained plugin (github.com/containernetworking/cni SPEC.md,
// "Plugin Calling Conventions", "Result Types", "Error"), as ferry-cni needs it: the
// environment and the network configuration a runtime passes, the previous plugin's result
// in the shapes of 0.3.x, 0.4.0 and 1.0.0, and the error and VERSION answers. Pure: no I/O,
// so that every input shape and error path is a unit test (tests/unit/cni_spec_test.cc).
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace ferry::cni {

// The spec's well-known error codes (SPEC.md, "Error"); 100 and up are the plugin's own.
enum class ErrorCode : int {
  kIncompatibleVersion = 1,
  kUnsupportedField = 2,
  kContainerUnknown = 3,
  kInvalidEnvironment = 4,
  kIoFailure = 5,
  kDecodeFailure = 6,
  kInvalidConfig = 7,
  kTryAgainLater = 11,
};

struct Error {
  int code = 0;
  std::string msg;
  std::string details;
};

// A value or the CNI error that replaces it (the plugin prints the error and exits 1).
template <class T>
using Result = std::variant<T, Error>;
template <class T>
bool ok(const Result<T>& r) {
  return std::holds_alternative<T>(r);
}

// The versions whose configuration and prevResult ferry-cni reads. 0.3.0 and 0.3.1 share
// 0.4.0's result shape (with `ips[].version`); 1.0.0 dropped `version`.
inline constexpr const char* kSupportedVersions[] = {"0.3.0", "0.3.1", "0.4.0", "1.0.0"};
bool supportedVersion(std::string_view version);

enum class Command { kAdd, kDel, kCheck, kVersion };

// CNI_* environment variables (`getenv` is the seam).
struct Environment {
  Command command = Command::kVersion;
  std::string container_id;
  std::string netns;   // CNI_NETNS: a path; may be empty on DEL
  std::string ifname;  // CNI_IFNAME
  std::string path;    // CNI_PATH
  // CNI_ARGS: "K=V;K=V". Runtimes for Kubernetes pass K8S_POD_NAMESPACE, K8S_POD_NAME,
  // K8S_POD_UID (and IgnoreUnknown=1, which plugins that refuse unknown keys honour).
  std::map<std::string, std::string> args;
  const std::string* arg(const std::string& key) const {
    auto it = args.find(key);
    return it == args.end() ? nullptr : &it->second;
  }
};
// Code 4 when a variable the command needs is missing or CNI_ARGS is not "K=V;...".
Result<Environment> readEnvironment(const std::function<const char*(const char*)>& getenv);

// The previous plugin's result (prevResult), cut to what ferry-cni uses.
struct Interface {
  std::string name;
  std::string mac;
  std::string sandbox;  // the netns path: set for the pod's own interfaces, empty on the host
};
struct IpConfig {
  std::string address;  // CIDR, e.g. "10.244.0.5/24"
  std::string gateway;
  std::optional<int> interface;  // index into `interfaces`
  int family = 4;                // 4 or 6 (from the address; 0.3/0.4's `version` must agree)
};
struct PrevResult {
  std::string cni_version;
  std::vector<Interface> interfaces;
  std::vector<IpConfig> ips;
  // The pod's addresses without prefix length: the IPs on its sandboxed interface named
  // `ifname`, or with no interface index when the result names none.
  std::vector<std::string> podAddresses(const std::string& ifname) const;
  // Candidates for the pod's host-side device: interfaces outside any sandbox (the veth,
  // and with the bridge plugin the bridge too: the caller tells them apart).
  std::vector<std::string> hostInterfaces() const;
};

// One plugin entry of a network configuration list, as the runtime passes it on stdin.
struct NetworkConfig {
  std::string cni_version;
  std::string name;
  std::string type;
  std::optional<PrevResult> prev_result;
  std::string prev_result_json;  // verbatim, to pass through unchanged on ADD
};
// Code 6 for bad JSON, 1 for an unsupported cniVersion, 7 for a missing name/type or a
// malformed prevResult; `require_prev` (ADD, CHECK of a chained plugin): 7 without one.
Result<NetworkConfig> parseNetworkConfig(std::string_view stdin_text, bool require_prev);

// What the plugin prints.
std::string versionJson(std::string_view cni_version);
std::string errorJson(const Error& error, std::string_view cni_version);

}  // namespace ferry::cni
