#pragma once
// What ferry-cni does with one call, without I/O (docs/install.md, "The CNI chain"): the
// request it sends ferryd and what it prints for each answer, for each way ferryd can be
// unreachable, under each failure policy. The binary (ferry_cni_main.cc) adds the socket,
// stdin and the exit code; tests call run() with a fake transport.
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "proxy/cni/api.h"
#include "proxy/cni/protocol.h"
#include "proxy/cni/spec.h"

namespace ferry::cni {

// Codes of ferry-cni's own errors (SPEC.md: 100 and up belong to the plugin).
inline constexpr int kEnrolmentFailed = 100;   // ferryd tried and failed, or answered nonsense
inline constexpr int kNotAttached = 101;       // CHECK: the pod must be enrolled and is not

// The keys ferryd writes into the plugin's entry of the chain (proxy/cni/chain.h).
struct PluginOptions {
  std::string socket = "/var/run/ferry/cni.sock";
  bool fail_open = false;  // failurePolicy: "open"
  std::vector<std::string> exclude_namespaces;
  int timeout_ms = 5'000;
  // The plugin's own credentials for the API server (a kubeconfig ferryd keeps; empty: none),
  // read only while ferryd is unreachable, and the enrolment rule's istio_ambient.
  std::string kubeconfig;
  bool istio_ambient = false;
};
// Code 7 for a key of the wrong type or an unknown failurePolicy.
Result<PluginOptions> parsePluginOptions(std::string_view stdin_text);

// One exchange with ferryd: its answer, or why there was none (connect refused, timed out).
struct Unreachable {
  std::string why;
};
using Exchange = std::function<std::variant<Answer, Unreachable>(const Request&)>;
// While ferryd is unreachable under failurePolicy closed: whether ferry would enrol the pod,
// from the API server (api.h), or why that cannot be told. Empty: no credentials.
using Lookup = std::function<std::variant<Membership, Unreachable>(const Request&)>;

struct Outcome {
  int exit_code = 0;
  std::string out;  // stdout: the result (ADD) or the error object
  std::string log;  // one line for the runtime's log (stderr); may be empty
};
// A call ferry-cni answers without ferryd and without reading more than the previous result
// (a container that is not a Kubernetes pod; a pod of an excluded namespace): whatever that
// result looks like, such a pod must start. nullopt: ferryd is asked.
std::optional<Outcome> passWithoutFerryd(const Environment& env, std::string_view stdin_text,
                                         const PluginOptions& options);
// The configuration's cniVersion for an error object ("1.0.0" when it cannot be read).
std::string cniVersionOf(std::string_view stdin_text);
// With ferryd unreachable under `closed`, a pod `lookup` says ferry would not enrol starts;
// every other pod fails with code 11 (try again later).
Outcome run(const Environment& env, const NetworkConfig& config, const PluginOptions& options,
            const Exchange& exchange, const Lookup& lookup = {});

}  // namespace ferry::cni
