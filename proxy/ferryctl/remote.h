#pragma once
// ferryctl --node NAME / --pod NAMESPACE/NAME: any admin command asked of the ferryd of a
// node, from anywhere a kubeconfig reaches the API server (docs/operations.md, "ferryctl").
// The command runs as `ferryctl ...` in that node's ferryd pod through the exec subresource,
// as `kubectl exec` would: ferryd's admin endpoint stays on the node's loopback.
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ferry::ferryctl {

struct RemoteTarget {
  std::string node;             // --node
  std::string pod;              // --pod NAMESPACE/NAME: the node that runs it
  std::string kubeconfig;       // --kubeconfig, else $KUBECONFIG, else ~/.kube/config
  std::string ferry_namespace;  // --ferry-namespace, else ferry-system (the chart's)
};

// Takes --node, --pod, --kubeconfig and --ferry-namespace (`--flag VALUE` or `--flag=VALUE`)
// out of `args`, wherever they are. nullopt when neither --node nor --pod is there (the
// command asks the local ferryd); an error names a flag without its value, both --node and
// --pod, or a --pod that is not NAMESPACE/NAME.
absl::StatusOr<std::optional<RemoteTarget>> takeRemoteFlags(std::vector<std::string>& args);

// Runs `ferryctl <args>` in the ferryd pod of the target's node and prints what it printed:
// its exit status, or 4 (printed on stderr why) when the API server, the pod or the command
// could not be reached.
int runRemote(const RemoteTarget& target, const std::vector<std::string>& args);

// `ferryctl explain --from NAMESPACE/POD --to ...` (docs/troubleshooting.md): finds the pods
// and the Service through the API server, asks the /explain of the source's node and of the
// destination's (`ferryctl explain --node-view` in their ferryd pods) and prints the story.
// Exit status: 0 nothing wrong, 1 a cause found (or a name that does not resolve), 4 a ferryd
// or the API server not reached.
int runExplain(const std::string& kubeconfig, const std::string& ferry_namespace, const std::string& from,
               const std::string& to, bool json_output);

}  // namespace ferry::ferryctl
