#pragma once
// Policy objects that more than one test loads, as a policy file holds them (YAML).
namespace ferry::testing {

// s1 (app: server) takes callers with service account `client` only.
inline constexpr char kAllowClient[] = R"(apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: allow-client, namespace: default}
spec:
  selector: {matchLabels: {app: server}}
  action: ALLOW
  rules:
  - from: [{source: {principals: [cluster.local/ns/default/sa/client]}}]
)";

// kAllowClient made invalid (a /33): refused, naming spec.rules[0].from[0].source.ipBlocks[0].
inline constexpr char kAllowClientBroken[] = R"(apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: allow-client, namespace: default}
spec:
  selector: {matchLabels: {app: server}}
  rules:
  - from: [{source: {ipBlocks: [10.0.0.0/33]}}]
)";

// Only sa other may call app: server: set while sa client has connections open to it, it
// revokes them (policy_revoked).
inline constexpr char kAllowOtherOnly[] = R"(apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: only-other, namespace: default}
spec:
  selector: {matchLabels: {app: server}}
  rules:
  - from: [{source: {principals: [cluster.local/ns/default/sa/other]}}]
)";

// STRICT mTLS for the whole mesh (the root namespace istio-system).
inline constexpr char kMeshStrict[] = R"(apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: mesh, namespace: istio-system}
spec: {mtls: {mode: STRICT}}
)";

}  // namespace ferry::testing
