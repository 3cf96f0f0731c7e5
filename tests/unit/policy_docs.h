#pragma once
// Policy objects as YAML text, for the policy tests: a row states only what it is about; and
// that text decoded as a policy file.
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "absl/status/status.h"
#include "proxy/policy/decode.h"

namespace ferry::policy::testing_docs {

// One object: `spec` is flow YAML ("{rules: [{}]}"), or block YAML when it starts with a
// newline (the documented examples, as the pages write them); `metadata` adds lines.
inline std::string object(const std::string& kind, const std::string& ns, const std::string& name,
                          const std::string& spec, const std::string& metadata = "") {
  return "apiVersion: security.istio.io/v1\nkind: " + kind + "\nmetadata:\n  name: " + name + "\n  namespace: " + ns +
         "\n" + metadata + "spec:" + (spec.rfind("\n", 0) == 0 ? spec : " " + spec + "\n");
}

// An AuthorizationPolicy; `annotations` is a flow map.
inline std::string ap(const std::string& ns, const std::string& name, const std::string& spec,
                      const std::string& annotations = "") {
  return object("AuthorizationPolicy", ns, name, spec,
                annotations.empty() ? "" : "  annotations: " + annotations + "\n");
}

// A PeerAuthentication; `created` is metadata.creationTimestamp ("" = none, as in files).
inline std::string pa(const std::string& ns, const std::string& name, const std::string& spec,
                      const std::string& created = "") {
  return object("PeerAuthentication", ns, name, spec,
                created.empty() ? "" : "  creationTimestamp: \"" + created + "\"\n");
}

// "{action: <action>, rules: [<rules>]}".
inline std::string rules(const std::string& action, const std::string& rule_list) {
  return "{action: " + action + ", rules: [" + rule_list + "]}";
}

// Rule shorthands (flow YAML): one source, one operation, one condition.
inline std::string from(const std::string& source) { return "{from: [{source: {" + source + "}}]}"; }
inline std::string to(const std::string& operation) { return "{to: [{operation: {" + operation + "}}]}"; }
inline std::string when(const std::string& condition) { return "{when: [{" + condition + "}]}"; }

// The objects of `yaml` read as the file case.yaml from `origin`. A file that does not parse
// fails the test and gives none.
inline constexpr char kCaseFile[] = "case.yaml";
inline constexpr char kCaseOrigin[] = "file case.yaml";
inline std::vector<Decoded> decode(const std::string& yaml, const std::string& origin = kCaseOrigin) {
  auto docs = decodeYamlFile(yaml, kCaseFile, origin);
  EXPECT_TRUE(docs.ok()) << docs.status();
  return docs.ok() ? *std::move(docs) : std::vector<Decoded>{};
}

// The one object of a one-document file; any other count fails the test.
inline Decoded decodeOne(const std::string& yaml, const std::string& origin = kCaseOrigin) {
  auto docs = decode(yaml, origin);
  if (docs.size() != 1) {
    ADD_FAILURE() << "expected one document, got " << docs.size();
    return Decoded{"", "", absl::InternalError("not one document")};
  }
  return std::move(docs.front());
}

}  // namespace ferry::policy::testing_docs
