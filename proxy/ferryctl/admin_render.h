#pragma once
// `ferryctl status|workloads|certs|connections|config|log-level` (docs/operations.md,
// "ferryctl"): how ferryd's JSON answers (/status, /workloads?format=json,
// /certs?format=json, /connections, /config_dump, /logging; proxy/server/server_admin.cc)
// read for people. Each returns an error when the answer is not the JSON it expects.
#include <string>
#include <vector>

#include <boost/json/array.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ferry::ferryctl {

absl::StatusOr<std::string> renderStatus(absl::string_view json);
absl::StatusOr<std::string> renderWorkloads(absl::string_view json);
absl::StatusOr<std::string> renderCerts(absl::string_view json);
// Open connections, or (state "closed") the last ones closed.
absl::StatusOr<std::string> renderConnections(absl::string_view json);
// The rows of closed connections (/connections?state=closed, /explain's "closed") as a table.
std::string closedRows(const boost::json::array& closed);
absl::StatusOr<std::string> renderConfig(absl::string_view json);
absl::StatusOr<std::string> renderLogLevel(absl::string_view json);

// Columns left-aligned, two spaces apart; the first row is the header.
std::string table(const std::vector<std::vector<std::string>>& rows);
// 0s, 59s, 1m05s, 2h03m, 3d04h: an age for a table.
std::string formatAge(int64_t seconds);
// 512 B, 1.5 KiB, 3.2 MiB, 1.0 GiB.
std::string formatBytes(uint64_t bytes);

}  // namespace ferry::ferryctl
