#pragma once
// The workload registry: who is on which IP, with which identity, on which node.
// A Registry is an immutable snapshot; the Watcher swaps whole snapshots atomically.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "proxy/common/net.h"

namespace ferry::workloads {

using common::IpAddress;

// For captured plaintext arriving on 15006 (design §6; full policy engine comes later).
enum class TlsMode { kPermissive, kStrict };

struct Workload {
  std::string name;
  std::string namespace_name;
  std::string service_account;
  std::string node;
  std::vector<IpAddress> ips;
  bool hbone = false;           // accepts HBONE on <ip>:15008
  std::string host_interface;   // host-side device of a local pod (datapath attach point)
  TlsMode tls_mode = TlsMode::kPermissive;

  // spiffe://<trust_domain>/ns/<namespace>/sa/<service_account>
  std::string spiffeId(std::string_view trust_domain) const;
  // "<namespace>/<name>", for logs.
  std::string displayName() const;
};

class Registry {
 public:
  // Parses a workloads YAML document. `local_node` decides which workloads are local.
  // Errors name the entry, the key and the line.
  static absl::StatusOr<std::shared_ptr<const Registry>> parse(std::string_view yaml_text,
                                                               std::string_view source_name,
                                                               std::string_view local_node);
  static std::shared_ptr<const Registry> empty(std::string_view local_node);

  // nullptr when unknown. An IPv4-mapped IPv6 address (::ffff:a.b.c.d, as dual-stack
  // sockets report IPv4 peers) finds the workload of a.b.c.d.
  const Workload* findByIp(const IpAddress& ip) const;
  // Only workloads whose node is the local node.
  const Workload* findLocalByIp(const IpAddress& ip) const;
  const std::vector<Workload>& all() const { return workloads_; }
  const std::string& localNode() const { return local_node_; }
  size_t localCount() const;

 private:
  std::string local_node_;
  std::vector<Workload> workloads_;
  absl::flat_hash_map<IpAddress, size_t> by_ip_;
};

// Watches the workloads file (polling its mtime/size/inode) from the control thread and
// publishes new snapshots. A broken file keeps the previous snapshot and logs why.
class Watcher {
 public:
  using OnChange = std::function<void(const std::shared_ptr<const Registry>&)>;
  Watcher(std::string path, std::string local_node);

  // Loads the file now; an error here is a start-up error.
  absl::Status loadInitial();
  // Re-reads if the file changed since the last check. Returns true when a new snapshot
  // was published; a parse error is logged and counted, the old snapshot stays.
  bool poll();
  std::shared_ptr<const Registry> current() const {
    std::lock_guard lock(current_mu_);
    return current_;
  }
  void setOnChange(OnChange cb) { on_change_ = std::move(cb); }
  uint64_t reloadFailures() const { return reload_failures_.load(); }
  uint64_t generation() const { return generation_.load(); }

 private:
  // Reads and parses the file if its stamp changed, publishing the result. Returns false
  // when unchanged; an error once per broken (or unreadable) version of the file.
  absl::StatusOr<bool> reloadIfChanged();

  std::string path_;
  std::string local_node_;
  // A mutex, not std::atomic<std::shared_ptr>: libstdc++ 12 implements that with a lock
  // bit ThreadSanitizer cannot see, so every reader was reported as a race (make
  // test-tsan); the critical section is one reference-count increment either way.
  mutable std::mutex current_mu_;
  std::shared_ptr<const Registry> current_;
  OnChange on_change_;
  struct FileStamp {
    int64_t mtime_ns = -1;
    int64_t size = -1;
    uint64_t inode = 0;
    friend bool operator==(const FileStamp&, const FileStamp&) = default;
  } stamp_;
  std::atomic<uint64_t> reload_failures_{0};
  std::atomic<uint64_t> generation_{0};
};

}  // namespace ferry::workloads
