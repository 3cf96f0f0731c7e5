#pragma once
// Whether an inbound CONNECT may go where it asks: its form (hbone::parseConnect), then
// its target must be a workload on this node (the registry is the session's, not the
// protocol's). Pure: unit-tested on its own.
#include <cstdint>
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

}  // namespace ferry::session
