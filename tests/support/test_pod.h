#pragma once
// A workload of namespace `default` as a registry holds it, for tests that fill a
// workloads::Store by hand: header-only, linked by tests only.
#include <utility>

#include "proxy/common/net.h"
#include "proxy/workloads/workload.h"

namespace ferry::test_support {

// On `node` with one IP, accepting HBONE.
inline workloads::Workload testPod(const char* name, const char* service_account, const char* node, const char* ip,
                                   workloads::LabelSet::Labels labels = {}) {
  workloads::Workload w;
  w.name = name;
  w.namespace_name = workloads::intern("default");
  w.service_account = workloads::intern(service_account);
  w.node = workloads::intern(node);
  w.ips = {common::canonicalIp(*common::parseIp(ip))};
  w.hbone = true;
  w.labels = workloads::LabelSet(std::move(labels));
  return w;
}

}  // namespace ferry::test_support
