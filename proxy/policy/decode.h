#pragma once
// Policy objects from their Kubernetes form (YAML files, the API server's JSON) to the
// validated structs of policy.h. Every error names the object, the field and the reason:
// "AuthorizationPolicy shop/allow-frontend: policies.yaml:14: spec.rules[0].from[0].source.
// ipBlocks[1]: '10.0.0.0/33' is not an IP address or CIDR block" (docs/policy.md, "Refused
// objects" lists what is refused).
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "proxy/policy/policy.h"

namespace ferry::policy {

// One document of a policy file, or one object from the API server.
struct Decoded {
  std::string kind;  // as written ("AuthorizationPolicy"); "" when unreadable
  std::string key;   // "<namespace>/<name>" when the object says it, else ""
  absl::StatusOr<Object> object;
};

// A file of policy objects, YAML with `---` between documents (JSON is YAML too). A syntax
// error refuses the whole file; otherwise each document is decoded on its own. A document
// without `metadata.namespace` is in `default`, as kubectl does.
absl::StatusOr<std::vector<Decoded>> decodeYamlFile(std::string_view text, std::string_view source_name,
                                                    std::string_view origin);
// One object as the API server sends it (JSON). Unknown fields outside `spec` are ignored
// (the API server adds many); inside `spec` they are refused: a misspelt field must never
// widen a policy in silence.
Decoded decodeJsonObject(std::string_view json, std::string_view source_name, std::string_view origin);

// Istio's pattern rules for one principals / namespaces / `when` value: exact, "x*", "*x",
// "*"; empty values and a '*' anywhere else are refused.
absl::StatusOr<StringMatch> parseStringMatch(std::string_view text);
// "10.1.0.0/16", "10.1.2.3", "fd00::/8".
absl::StatusOr<IpBlock> parseIpBlock(std::string_view text);

}  // namespace ferry::policy
