#pragma once
// ferry-cni's own view of a pod while ferryd is unreachable (docs/install.md, "When ferryd is
// down"): the API server's copy of the pod and of its namespace, read with the plugin's own
// narrow credentials (get pods and namespaces; a kubeconfig ferryd keeps on the node), decide
// with ferryd's own rule (proxy/workloads/enrolment.h) whether ferry would enrol the pod.
// Only a pod ferry would not enrol may start without ferryd; whatever cannot be read or
// decided counts as "would enrol". Pure: the plugin binary adds the HTTPS request
// (api_fetch.h), tests feed the API server's answers (tests/unit/cni_plugin_test.cc).
#include <string>
#include <string_view>
#include <variant>

namespace ferry::cni {

// What the plugin's kubeconfig gives it: one cluster, one bearer token.
struct ApiAccess {
  std::string host;  // a name or an IP literal (IPv6 without brackets); the certificate must name it
  std::string port = "443";
  std::string ca_pem;  // certificate-authority-data, decoded
  std::string token;
};
// Reads the kubeconfig ferryd writes (JSON, a kubeconfig kubectl reads too): the first
// cluster's `server` (https only) and `certificate-authority-data`, the first user's `token`.
// The error names what is missing or malformed.
std::variant<ApiAccess, std::string> parseApiAccess(std::string_view kubeconfig_text);

// A DNS label or subdomain, as Kubernetes names namespaces and pods: safe in a URL path.
bool validObjectName(std::string_view name);
std::string podPath(std::string_view namespace_name, std::string_view name);
std::string namespacePath(std::string_view namespace_name);

// One answer of the API server: its HTTP status and body.
struct ApiReply {
  int status = 0;
  std::string body;
};
// A whole HTTP/1.1 response as read up to the connection's close (the request said
// `Connection: close`): Content-Length, chunked, or to the end. Errors: not HTTP, a cut body.
std::variant<ApiReply, std::string> parseHttpResponse(std::string_view raw);

struct Membership {
  bool enrolled = false;
  std::string why;  // which labels decided, for the runtime's log and the error details
};
// Decides from the answers to podPath and namespacePath. Errors (the reason the pod cannot be
// decided): a status other than 200 (a 404 pod is not yet or no longer there; 401/403 are
// expired or missing credentials), a body that is not the object asked for, a pod whose uid is
// not `pod_uid` (another pod of that name), a pod of another namespace.
std::variant<Membership, std::string> decideMembership(const ApiReply& pod, const ApiReply& ns,
                                                       std::string_view pod_uid, bool istio_ambient);

}  // namespace ferry::cni
