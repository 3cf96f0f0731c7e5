#pragma once
// ferry-cni's own credentials for the API server (docs/install.md, "When ferryd is down"):
// while ferryd is unreachable the plugin asks the API server whether ferry would enrol a pod
// at all, so that only mesh pods wait for ferryd. ferryd asks for a token of the plugin's
// ServiceAccount (cni.service_account: get pods and namespaces, nothing else; a TokenRequest,
// bound to no object so that it outlives this ferryd's pod, for cni.token_lifetime) and keeps
// it, with the API server's address and CA, in a kubeconfig beside the chain entry, renewed at
// half its life. Control thread only.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "absl/status/statusor.h"

namespace ferry::k8s {
class ApiClient;
}  // namespace ferry::k8s
namespace ferry::telemetry {
class Exposition;
}  // namespace ferry::telemetry

namespace ferry::server {

// The kubeconfig the plugin reads (proxy/cni/api.h parses it; kubectl reads it too).
std::string pluginKubeconfig(const std::string& server, const std::string& ca_pem, const std::string& token);
// A TokenRequest's answer: the token and its expiry (Unix seconds). Errors: not a TokenRequest
// with a token and an RFC 3339 expirationTimestamp.
struct IssuedToken {
  std::string token;
  int64_t expires_unix = 0;
};
absl::StatusOr<IssuedToken> parseTokenRequest(const std::string& body);
// The CA the plugin verifies the API server with: the one ferryd's own access names
// (`ca_pem`, else the file `ca_file`), from `where` (the kubeconfig or the in-cluster
// account). None is an error: ferry-cni must verify the API server (ferryd's start and
// --check-config alike).
absl::StatusOr<std::string> pluginApiServerCa(const std::string& ca_pem, const std::string& ca_file,
                                              const std::string& where);

class CniCredentials {
 public:
  // `service_account`: "<namespace>/<name>". `path`: where ferryd writes the kubeconfig.
  CniCredentials(boost::asio::io_context& io, k8s::ApiClient& client, std::string server, std::string ca_pem,
                 std::string service_account, std::chrono::milliseconds lifetime, std::string path);
  ~CniCredentials();
  // Asks for the first token at once, then renews it; a failure is logged, counted and tried
  // again in 30 s (the file keeps the last good token).
  void start();
  void stop();

  // ferry_cni_api_token_expiry_timestamp_seconds, ferry_cni_api_token_errors_total.
  void collect(telemetry::Exposition& out) const;

 private:
  boost::asio::awaitable<void> run();
  // One request and write; the time until the next.
  boost::asio::awaitable<std::chrono::milliseconds> renew();

  k8s::ApiClient& client_;
  const std::string server_, ca_pem_, namespace_, name_;
  const std::chrono::milliseconds lifetime_;
  const std::string path_;
  boost::asio::steady_timer timer_;
  bool stopped_ = false;
  std::string last_error_;
  std::atomic<int64_t> expires_unix_{0};
  std::atomic<uint64_t> errors_{0};
};

}  // namespace ferry::server
