#pragma once
// Reaching the API server without an informer: the credentials (ClusterAccess, shared with
// ApiClient), and ApiSession, one-off requests for a command-line tool (ferryctl --node:
// find a pod, run a command in it). No metrics: ferryctl links this, not ferry_telemetry.
#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/awaitable.hpp>

#include "absl/status/statusor.h"

namespace boost::asio {
class io_context;
namespace ssl {
class context;
}  // namespace ssl
}  // namespace boost::asio

namespace ferry::k8s {

// Where the API server is and how ferryd proves who it is. Both sources fill it: the
// in-cluster service account (inClusterAccess) and a kubeconfig's current context
// (config::Kubeconfig, through accessFrom). `*_pem` wins over `*_file`.
struct ClusterAccess {
  std::string server;  // https://host[:port]; host is the name (or IP) the certificate must carry
  std::string ca_file;
  std::string ca_pem;
  std::string client_cert_file;  // client-certificate (mutual TLS), optional
  std::string client_cert_pem;
  std::string client_key_file;
  std::string client_key_pem;
  std::string token;       // a static bearer token
  std::string token_file;  // a bearer token re-read when the file changes and after a 401
};

// A kubeconfig's current context (config::Kubeconfig, whose fields are spelled the same:
// this library does not depend on config).
template <class Kubeconfig>
ClusterAccess accessFrom(const Kubeconfig& k) {
  return ClusterAccess{k.server,         k.ca_file,         k.ca_pem,         k.client_cert_file, k.client_cert_pem,
                       k.client_key_file, k.client_key_pem, k.token,          k.token_file};
}

// The API server's CA (the system store when the access names none) and the client
// certificate, if any, on a TLS client context; TLS 1.2 at least, the peer verified. The
// error names what could not be read or used.
absl::Status configureTls(boost::asio::ssl::context& tls, const ClusterAccess& access);

// RFC 3986's unreserved characters as they are, every other byte %XX: a path segment or a
// query value.
std::string queryEscape(std::string_view value);

// An answer of ApiClient::call and ApiSession::get.
struct ApiAnswer {
  int status = 0;
  std::string body;     // the JSON text answered (a Status object for an error)
  std::string message;  // an error's Status message, "" on 2xx
};

// What a command run with ApiSession::exec printed, and how it ended.
struct ExecOutput {
  int exit_code = 0;
  std::string out, err;
};

class ApiSession {
 public:
  // The credentials are read now (a token file once); each request opens its own connection.
  static absl::StatusOr<std::unique_ptr<ApiSession>> create(boost::asio::io_context& io, const ClusterAccess& access,
                                                            std::string user_agent);
  ~ApiSession();

  // GET `target`; any status is an answer. Errors: no answer (connect, TLS, timeout).
  boost::asio::awaitable<absl::StatusOr<ApiAnswer>> get(std::string target, std::chrono::milliseconds timeout);
  // Runs `command` in `container` of pod `namespace_name`/`pod`, as `kubectl exec` does (the
  // exec subresource over a WebSocket, v4.channel.k8s.io; RBAC `create` on pods/exec),
  // without stdin or a terminal; bounded by `timeout`. The command's exit status is an
  // answer; errors: no answer, the upgrade refused (the message names the status), or a
  // failure that is not the command's own.
  boost::asio::awaitable<absl::StatusOr<ExecOutput>> exec(std::string namespace_name, std::string pod,
                                                          std::string container, std::vector<std::string> command,
                                                          std::chrono::milliseconds timeout);

 private:
  struct Impl;
  explicit ApiSession(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ferry::k8s
