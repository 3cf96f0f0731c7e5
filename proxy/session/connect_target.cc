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

workloads::InternedString calledService(std::string_view forwarded_host, std::string_view cluster_domain,
                                        const workloads::ServiceTable& services,
                                        const workloads::ServicePort& endpoint) {
  const auto& backed = services.servicesOf(endpoint);
  if (backed.empty()) return {};
  // "<name>.<namespace>.svc.<cluster_domain>" -> "<namespace>/<name>".
  std::string key;
  if (size_t dot = forwarded_host.find('.'); dot != std::string_view::npos && dot > 0) {
    std::string_view rest = forwarded_host.substr(dot + 1);
    size_t ns_end = rest.find('.');
    if (ns_end != std::string_view::npos && ns_end > 0 && rest.substr(ns_end + 1, 4) == "svc." &&
        rest.substr(ns_end + 5) == cluster_domain) {
      key.append(rest.substr(0, ns_end)).append("/").append(forwarded_host.substr(0, dot));
    }
  }
  const workloads::InternedString* first = &backed.front();
  for (const auto& name : backed) {
    if (!key.empty() && name == std::string_view(key)) return name;
    if (name.str() < first->str()) first = &name;
  }
  return *first;
}

}  // namespace ferry::session
