#include "proxy/session/connect_target.h"

#include "absl/strings/str_cat.h"

namespace ferry::session {

ConnectTarget validateConnect(const std::vector<hbone::Header>& request, const common::IpAddress& local_ip,
                              const workloads::Registry& registry, const std::vector<uint16_t>& ferry_ports) {
  ConnectTarget out;
  static_cast<hbone::ConnectVerdict&>(out) = hbone::parseConnect(request, local_ip, ferry_ports);
  if (out.status != 200) return out;
  out.workload = registry.findLocalByIp(out.target.ip);
  if (out.workload == nullptr) {
    out.status = 503;
    out.code = "unknown_destination";
    out.reason = absl::StrCat(out.target.ip.to_string(), " is not a workload on this node");
  }
  return out;
}

}  // namespace ferry::session
