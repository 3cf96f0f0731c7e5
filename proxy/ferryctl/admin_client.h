#pragma once
// ferryctl's way to ferryd's admin endpoint (listen.admin, 127.0.0.1:15000 by default): one
// HTTP/1.1 request (GET, or POST for what changes ferryd, with the Ferry-Admin header) per connection, as the endpoint
// serves them (proxy/server/http_server.h).
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

// `method` ("GET", "POST") `target` ("/policy/check?from=..."). When no answer came the
// error is Unavailable and says so for the operator: "ferryd is not running at
// 127.0.0.1:15000 (connection refused)" when nothing listens there, "ferryd at ... is not
// reachable: ..." otherwise (a timeout, no route). An answer that is not HTTP is DataLoss.
absl::StatusOr<AdminAnswer> adminCall(const common::HostPort& admin, absl::string_view method,
                                      const std::string& target);
inline absl::StatusOr<AdminAnswer> adminGet(const common::HostPort& admin, const std::string& target) {
  return adminCall(admin, "GET", target);
}

}  // namespace ferry::ferryctl
