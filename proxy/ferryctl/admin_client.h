#pragma once
// ferryctl's way to ferryd's admin endpoint (listen.admin, 127.0.0.1:15000 by default): one
// HTTP/1.1 GET per connection, as the endpoint serves them (proxy/server/http_server.h).
// Hand-written over a blocking socket: ferryctl needs one request and must not link Beast.
#include <string>
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proxy/common/net.h"

namespace ferry::ferryctl {

struct AdminAnswer {
  int status = 0;
  std::string body;
};

// "127.0.0.1:15000", "[::1]:15000" or "localhost:15000".
absl::StatusOr<common::HostPort> parseAdminAddress(absl::string_view text);

// GET `target` ("/policy/check?from=..."). Errors say which address could not be reached
// and why, and what to check ("is ferryd running? is listen.admin elsewhere?").
absl::StatusOr<AdminAnswer> adminGet(const common::HostPort& admin, const std::string& target);

}  // namespace ferry::ferryctl
