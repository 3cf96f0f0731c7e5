#pragma once
// The admin endpoint's read-only pages (docs/operations.md, "Admin endpoint"), one function
// per page over the state it shows: the workload registry, the identities, the datapath,
// the log level. Server::routeAdmin (server_admin.cc) only routes to them.
#include <string>
#include <string_view>

#include <boost/json/object.hpp>

#include "absl/status/status.h"
#include "proxy/config/config.h"
#include "proxy/server/http_server.h"
#include "proxy/workloads/registry.h"

namespace ferry::datapath {
class Datapath;
}

namespace ferry::server {

class IdentityRuntime;

// /workloads (?format=text|json), sorted by namespace/name: the registry keeps no order.
boost::json::object workloadsJson(const workloads::Registry& registry, std::string_view trust_domain);
HttpResponse workloadsPage(const workloads::Registry& registry, std::string_view trust_domain,
                           const std::string& query);

// /certs: the bundle's roots and the SVIDs held for local workloads (public facts only).
// `ready`: ferryd's readiness, which names what identity is missing.
boost::json::object certsJson(IdentityRuntime& identity, const config::Config& config, const absl::Status& ready);
HttpResponse certsPage(IdentityRuntime& identity, const config::Config& config, const absl::Status& ready,
                       const std::string& query);

// /datapath: the kernel probe's report, the injection mode and why, enrolled pods; null:
// datapath disabled.
boost::json::object datapathJson(const datapath::Datapath* datapath);
HttpResponse datapathPage(const datapath::Datapath* datapath, const std::string& query);

// /logging: GET the level, POST ?level= to change it (logged whatever the new level).
HttpResponse loggingPage(const HttpRequest& request);

}  // namespace ferry::server
