#pragma once
// The datapath's view of the registry, without the kernel: which local pods are enrolled
// (on which device, in which mode) and which IPs are capture destinations. It turns a
// registry Delta into the few kernel operations it needs (enrol or release one pod, add or
// remove one capture IP) through the PodSteering seam: BPF maps and tc programs in
// production (Datapath), a recording fake in tests. IPv4 only (IPv6 steering is not
// implemented yet).
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "proxy/workloads/registry.h"

namespace ferry::datapath {

class PodSteering {
 public:
  virtual ~PodSteering() = default;
  // The pod's host-side device: the workload's `host_interface` when it names one (the
  // workloads file), else found from the node's routes or bridge (netlink.h,
  // findPodInterface: the Kubernetes source names no devices). NotFound: not there yet.
  virtual absl::StatusOr<std::string> deviceOf(uint32_t ip, const workloads::Workload& w) = 0;
  // Attaches the programs to the pod's device and writes its map entries.
  virtual absl::Status enroll(uint32_t ip, const workloads::Workload& w, const std::string& device,
                              uint32_t flags) = 0;
  // Detaches and forgets the pod; it is no longer steered.
  virtual void release(uint32_t ip) = 0;
  // Rewrites an enrolled pod's flags (FERRY_POD_*: STRICT).
  virtual absl::Status setFlags(uint32_t ip, uint32_t flags) = 0;
  // Adds or removes one capture destination.
  virtual void setCapture(uint32_t ip, bool capture) = 0;
};

class PodSync {
 public:
  explicit PodSync(PodSteering& kernel) : kernel_(kernel) {}

  // FERRY_POD_* flags of a local workload; podFlags (the workload's own tls_mode) until set.
  // ferryd sets one that asks the policies in force (docs/policy.md, "Plaintext").
  using FlagsOf = std::function<uint32_t(const workloads::Workload&)>;
  void setFlagsOf(FlagsOf flags_of) { flags_of_ = std::move(flags_of); }
  // The policies changed: every enrolled pod's flags are computed again (rewritten when
  // they differ).
  void refreshFlags(const workloads::Registry& current);

  // Start-up: the whole registry. `capture_in_kernel` are the entries a previous ferryd
  // left in the (pinned) capture map: those no workload wants are removed.
  void syncAll(const workloads::Registry& registry, const std::vector<uint32_t>& capture_in_kernel);
  // Only the IPs the delta touches (before and after), each set to what the registry says
  // now: an IP that moved between two workloads of one delta ends up right in any order.
  void apply(const workloads::Registry& after, const workloads::Delta& delta);
  // Pods whose enrolment failed (device not there yet) are tried again; logged once each.
  void retryFailed(const workloads::Registry& current);

  size_t enrolled() const { return pods_.size(); }
  size_t captured() const { return capture_.size(); }
  size_t failed() const { return failed_.size(); }
  // Why the pod's last enrolment failed ("" when it did not).
  std::string failure(uint32_t ip) const {
    auto it = failed_.find(ip);
    return it == failed_.end() ? std::string() : it->second;
  }

 private:
  void reconcile(uint32_t ip, const workloads::Registry& registry);

  struct Enrolled {
    std::string ifname;
    uint32_t flags = 0;
  };
  uint32_t flagsOf(const workloads::Workload& w) const;
  // Rewrites an enrolled pod's flags when they differ (logged).
  void setFlags(uint32_t ip, Enrolled& pod, const workloads::Workload& w, uint32_t flags);
  PodSteering& kernel_;
  FlagsOf flags_of_;
  absl::flat_hash_map<uint32_t, Enrolled> pods_;  // by IPv4 (network order)
  absl::flat_hash_set<uint32_t> capture_;         // what the capture map holds
  absl::flat_hash_map<uint32_t, std::string> failed_;  // local pods whose enrolment failed, why
};

// FERRY_POD_* flags of a local workload.
uint32_t podFlags(const workloads::Workload& w);
// The capture/pod map key of an IPv4 address (network order).
uint32_t ipv4Key(const common::IpAddress& ip);

}  // namespace ferry::datapath
