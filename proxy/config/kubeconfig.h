#pragma once
// A kubeconfig file (kubectl's format), reduced to what ferryd needs to reach the API server
// of its current-context. yaml-cpp stays here: the Kubernetes client gets this plain struct.
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace ferry::config {

// The current-context's cluster and user. Relative paths are resolved against the
// kubeconfig's directory (kubectl's rule); `*-data` fields are base64-decoded into `*_pem`.
struct Kubeconfig {
  std::string server;
  std::string ca_file;
  std::string ca_pem;
  std::string client_cert_file;
  std::string client_cert_pem;
  std::string client_key_file;
  std::string client_key_pem;
  std::string token;
  std::string token_file;
};

// Unknown keys are ignored (kubeconfigs carry preferences, extensions and other tools'
// settings); what ferryd cannot honour is an error rather than a silent downgrade:
// insecure-skip-tls-verify, exec and auth-provider credentials.
absl::StatusOr<Kubeconfig> parseKubeconfig(std::string_view yaml_text, std::string_view source_name,
                                           std::string_view base_dir);
absl::StatusOr<Kubeconfig> loadKubeconfig(const std::string& path);

}  // namespace ferry::config
