#pragma once
// `ferryd --check-config FILE` (docs/configuration.md): what ferryd's start would build,
// built through the same builders (the workload runtime, the policy runtime, the identity
// runtime) without serving and without asking the network anything.
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "proxy/config/config.h"

namespace ferry::server {

// An error is what would refuse ferryd's start, naming the setting. `report` gets the lines
// to print: what was loaded, policy objects refused one by one, the memory budget, and as
// warnings what may legitimately appear later (certificates, CA material).
absl::Status checkConfig(const config::Config& config, const std::string& path, std::vector<std::string>& report);

}  // namespace ferry::server
