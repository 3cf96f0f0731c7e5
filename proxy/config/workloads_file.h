#pragma once
// The workloads file (docs/configuration.md, "Workloads file"): which pod is on which
// IP, with which identity, on which node. Parsed here, where yaml-cpp lives; the workloads
// library gets plain structs.
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proxy/common/net.h"

namespace ferry::config {

// For captured plaintext arriving on 15006 (docs/policy.md, "PeerAuthentication: mTLS modes").
enum class TlsMode { kPermissive, kStrict };

struct WorkloadEntry {
  std::string name;
  std::string namespace_name;
  std::string service_account;
  std::string node;
  std::vector<common::IpAddress> ips;  // canonical: ::ffff:a.b.c.d is stored as a.b.c.d
  bool hbone = false;                  // accepts HBONE on <ip>:15008
  std::string host_interface;          // host-side device of a local pod (datapath attach point)
  TlsMode tls_mode = TlsMode::kPermissive;
  // The pod's labels (what AuthorizationPolicy and PeerAuthentication selectors match; the
  // Istio metrics' app and version: docs/operations.md).
  std::vector<std::pair<std::string, std::string>> labels;
  // The workload the pod belongs to (its Deployment, say), for the Istio metrics; empty: the
  // pod's name.
  std::string workload_name;
};

enum class FileFormat { kYaml, kJson };
// A path ending in ".json" is JSON (parsed ~20x faster: the format for large clusters);
// anything else is YAML.
FileFormat formatOf(std::string_view path);

// Every entry, in file order, is handed to `each` once the whole entry is valid; any error
// (which names the source, line, key and workload) ends the parse, and the caller must drop
// what it received. Names are unique per namespace and IPs across the file.
absl::Status parseWorkloads(std::string_view text, std::string_view source_name, FileFormat format,
                            const std::function<void(WorkloadEntry&&)>& each);
absl::StatusOr<std::vector<WorkloadEntry>> parseWorkloads(std::string_view text, std::string_view source_name,
                                                          FileFormat format = FileFormat::kYaml);

// Kubernetes object names (lowercase letters, digits, '.', '-'; at most 253 bytes). "." and
// ".." are refused: namespaces and service accounts become SPIFFE ID path segments.
bool isObjectName(std::string_view name);
// The kernel's dev_valid_name() rules (1 to 15 bytes, no '/', ':' or whitespace).
bool isInterfaceName(std::string_view name);

}  // namespace ferry::config
