#pragma once
// The configuration in force as /config_dump shows it (docs/operations.md, "Admin
// endpoint"): one entry per row of the key table (config/reload.h's FERRY_CONFIG_KEYS),
// keyed as the file is, written as the file would write it. A key added to the table is
// dumped without a line here; a member type this file cannot write fails the build.
#include <string>

#include "proxy/config/config.h"

namespace ferry::config {

// A JSON object ({"node": ..., "timeouts": {"connect": "10s", ...}, ...}, plus
// "memory_budget", which is no key: what the admission limits were fitted to). Text, so
// that Boost.JSON stays inside this library; secrets are paths here, never contents.
std::string configDumpJson(const Config& config);

}  // namespace ferry::config
