#pragma once
// The plugin's one HTTPS GET to the API server (api.h): blocking, bounded by a deadline, the
// server's certificate verified against the kubeconfig's CA and its host name or address.
// In the plugin binary only (it links OpenSSL statically); ferryd never calls it.
#include <chrono>
#include <string>
#include <variant>

#include "proxy/cni/api.h"

namespace ferry::cni {

// The answer whatever its status, or why there was none (connect, TLS, timeout, a cut answer).
std::variant<ApiReply, std::string> apiGet(const ApiAccess& access, const std::string& path,
                                           std::chrono::steady_clock::time_point deadline);

}  // namespace ferry::cni
