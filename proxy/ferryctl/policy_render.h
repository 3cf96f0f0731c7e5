#pragma once
// `ferryctl policy check` and `ferryctl policy list` (docs/operations.md, "ferryctl"): what
// they ask ferryd's admin endpoint (/policy/check, /policies; proxy/server/policy_admin.h)
// and how its JSON answers read for people.
#include <cstdint>
#include <string>
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ferry::ferryctl {

// --to <namespace>/<workload>:<port>.
struct CheckTarget {
  std::string workload;
  uint16_t port = 0;
};
absl::StatusOr<CheckTarget> parseCheckTarget(absl::string_view text);

// "/policy/check?from=...&to=...&port=N[&plaintext=true]", every value percent-encoded.
std::string checkRequestTarget(absl::string_view from, const CheckTarget& to, bool plaintext);

struct CheckVerdict {
  bool allowed = false;
  std::string text;  // for people, one fact per line
};
// ferryd's 200 answer of /policy/check. An answer without a verdict is an error.
absl::StatusOr<CheckVerdict> renderCheck(absl::string_view json);
// ferryd's 200 answer of /policies.
absl::StatusOr<std::string> renderList(absl::string_view json);
// What an error answer (not 200) says: its {"error": ...}, else its first line.
std::string errorMessage(int status, absl::string_view body);

}  // namespace ferry::ferryctl
