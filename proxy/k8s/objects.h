#pragma once
// The Kubernetes objects ferryd reads, cut down to the fields it uses (docs/kubernetes.md).
// Everything else the API server sends is ignored on decode: a workload registry for
// 150,000 pods must not carry their specs.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ferry::k8s {

using Labels = std::vector<std::pair<std::string, std::string>>;  // sorted by key

// Value of `key` in labels, or nullptr.
const std::string* findLabel(const Labels& labels, const std::string& key);

struct Pod {
  std::string namespace_name;
  std::string name;
  std::string uid;
  bool generated_name = false;       // metadata.generateName is set (a controller made it)
  // metadata.ownerReferences[] with controller: true (the workload name: docs/operations.md).
  std::string controller_kind, controller_name;
  std::string node_name;             // spec.nodeName; empty until scheduled
  std::string service_account;       // spec.serviceAccountName ("default" when absent)
  std::vector<std::string> pod_ips;  // status.podIPs[].ip, else status.podIP; may be empty
  Labels labels;
  std::string phase;                 // status.phase: Pending, Running, Succeeded, Failed, Unknown
  bool host_network = false;         // spec.hostNetwork
  bool deleting = false;             // metadata.deletionTimestamp is set
  // The annotation kubernetes.io/config.mirror is set: the API's copy of a static pod, which
  // a kubelet may create for its own node (ferry-ca never signs for one: docs/security.md).
  bool mirror = false;
};

struct Namespace {
  std::string name;
  Labels labels;
};

struct ServicePort {
  std::string name;
  int32_t port = 0;
  // spec.ports[].targetPort is an int-or-string: a number, or the name of a container port
  // that each endpoint resolves (EndpointSlice ports carry the resolved number).
  int32_t target_port = 0;
  std::string target_port_name;
  std::string protocol;  // TCP (default), UDP, SCTP
};

struct Service {
  std::string namespace_name;
  std::string name;
  std::vector<std::string> cluster_ips;  // spec.clusterIPs, else spec.clusterIP; "None" dropped
  std::vector<ServicePort> ports;
};

struct Endpoint {
  std::vector<std::string> addresses;
  bool ready = true;  // conditions.ready; absent means ready (the API's own rule)
  std::string node_name;
  std::string pod_name;  // targetRef.name when targetRef.kind is Pod
};

struct EndpointPort {
  std::string name;
  int32_t port = 0;
  std::string protocol;
};

struct EndpointSlice {
  std::string namespace_name;
  std::string name;
  std::string service_name;  // label kubernetes.io/service-name
  std::string address_type;  // IPv4, IPv6, FQDN
  std::vector<Endpoint> endpoints;
  std::vector<EndpointPort> ports;
};

// ferryd's own DaemonSet: its deletion is an uninstall, its absence at a stop is not a
// restart (docs/install.md, Uninstall).
struct DaemonSet {
  std::string namespace_name;
  std::string name;
  bool deleting = false;  // metadata.deletionTimestamp is set (a foreground deletion)
};

// One object of a namespaced custom resource (ApiClient::customObjects), kept whole: its
// consumer decodes it (proxy/policy reads Istio's AuthorizationPolicy and PeerAuthentication).
struct CustomObject {
  std::string namespace_name;
  std::string name;
  std::string json;  // the object serialized, every field as the API server sent it
};

// The API server's verdict on a bearer token (TokenReview, authentication.k8s.io/v1, its
// status). A token that did not authenticate is an answer, not a failure: `authenticated`
// false and `error` says why. A bound, projected token's pod comes in `user.extra`.
struct TokenReviewStatus {
  bool authenticated = false;
  std::string username;  // "system:serviceaccount:<namespace>:<name>"
  std::string uid;
  std::vector<std::string> pod_names;  // extra["authentication.kubernetes.io/pod-name"]
  std::vector<std::string> pod_uids;   // extra["authentication.kubernetes.io/pod-uid"]
  std::vector<std::string> audiences;  // those of the request the token is valid for
  std::string error;
};

}  // namespace ferry::k8s
