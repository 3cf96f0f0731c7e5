#pragma once
// Whether an inbound CONNECT may go where it asks: its form (hbone::parseConnect), then
// its target must be a workload on this node (the registry is the session's, not the
// protocol's). Pure: unit-tested on its own.
#include <cstdint>
#include <string_view>
#include <vector>

#include "proxy/hbone/connect_request.h"
#include "proxy/workloads/registry.h"

namespace ferry::session {

struct ConnectTarget : hbone::ConnectVerdict {
  const workloads::Workload* workload = nullptr;  // the local workload called (status 200)
};

// 400 for a malformed request (hbone::parseConnect), 503 when the target is no workload
// on this node (it left, or never was).
ConnectTarget validateConnect(const std::vector<hbone::Header>& request, const common::IpAddress& local_ip,
                              const workloads::Registry& registry, const std::vector<uint16_t>& ferry_ports);

// The Service an inbound connection to `endpoint` (the local pod ip, port) is counted
// under in the Istio metrics (destination_service at the destination reporter): the one the
// client named in `forwarded: ...;host=` (hbone::forwardedHost) when that Service lists the
// endpoint among its backends, else, as ztunnel guesses, the first by name of those that do;
// empty when none does. A hostname is `<name>.<namespace>.svc.<cluster_domain>`. A name the
// endpoint's Services do not include is never counted, so no client can make up series.
workloads::InternedString calledService(std::string_view forwarded_host, std::string_view cluster_domain,
                                        const workloads::ServiceTable& services,
                                        const workloads::ServicePort& endpoint);

}  // namespace ferry::session
