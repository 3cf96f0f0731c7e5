#pragma once
// One workload (a pod) as ferryd keeps it, sized for 150,000 of them per node: namespace,
// service account and node are interned (a few thousand distinct values in a cluster), the
// usual single IP is stored inline, an interface name fits std::string's inline buffer.
// Immutable once published: a change is a new Workload (registry.h).
#include <string>
#include <string_view>

#include "absl/container/inlined_vector.h"
#include "proxy/common/net.h"
#include "proxy/config/workloads_file.h"

namespace ferry::workloads {

using common::IpAddress;
using TlsMode = config::TlsMode;

// A string kept once for the life of the process, compared by address. Interning is
// thread-safe; the pool never shrinks, which is fine for names drawn from a small set
// (namespaces, service accounts, nodes), never for pod names or IPs.
class InternedString {
 public:
  InternedString();
  const std::string& str() const { return *text_; }
  bool empty() const { return text_->empty(); }
  friend bool operator==(InternedString a, InternedString b) { return a.text_ == b.text_; }
  friend bool operator==(InternedString a, std::string_view b) { return *a.text_ == b; }

 private:
  friend InternedString intern(std::string_view text);
  explicit InternedString(const std::string* text) : text_(text) {}
  const std::string* text_;
};
InternedString intern(std::string_view text);

// Most pods have one IP, dual-stack ones two.
using IpList = absl::InlinedVector<IpAddress, 1>;

struct Workload {
  std::string name;
  InternedString namespace_name;
  InternedString service_account;
  InternedString node;
  IpList ips;                 // canonical (common::canonicalIp)
  std::string host_interface;  // host-side device of a local pod (datapath attach point)
  bool hbone = false;          // accepts HBONE on <ip>:15008
  TlsMode tls_mode = TlsMode::kPermissive;

  static Workload fromEntry(config::WorkloadEntry&& entry);

  // spiffe://<trust_domain>/ns/<namespace>/sa/<service_account>
  std::string spiffeId(std::string_view trust_domain) const;
  // "<namespace>/<name>": the workload's key in the registry, and its name in logs.
  std::string displayName() const;
  friend bool operator==(const Workload&, const Workload&) = default;
};

}  // namespace ferry::workloads
