#pragma once
// The tc datapath as ferryd runs it: probes the kernel, loads the programs with their
// load-time constants, pins the maps (adopting pins a previous ferryd left), attaches
// from_proxy / to_proxy once and pod_egress / pod_ingress per local pod, and keeps the
// maps in step with the workload registry. Runs on the control thread, in the node netns.
#include <atomic>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "proxy/config/config.h"
#include "proxy/datapath/attach.h"
#include "proxy/datapath/kernel_probe.h"
#include "proxy/datapath/netns.h"
#include "proxy/workloads/registry.h"

struct ferry_datapath;

namespace ferry::datapath {

struct DatapathCounters {
  // [program][verdict] packets, summed over CPUs and reasons.
  uint64_t packets[4][3] = {};
  // packets by reason (all programs).
  std::map<std::string, uint64_t> by_reason;
};

class Datapath {
 public:
  // `proxy_netns` is where ferryd's sockets live; the caller stays in the node netns.
  static absl::StatusOr<std::unique_ptr<Datapath>> create(const config::Config& config,
                                                          const NetnsFd& proxy_netns);
  ~Datapath();
  Datapath(const Datapath&) = delete;
  Datapath& operator=(const Datapath&) = delete;

  // Local pods join and leave (programs attached/detached on their host-side device,
  // the pods map updated), pods already enrolled get their mode (STRICT) rewritten when
  // it changed, and capture destinations follow the registry. A pod that cannot be
  // enrolled (device missing) is logged and skipped; the others are unaffected.
  absl::Status sync(const workloads::Registry& registry);

  // Puts back programs (and link pins) that someone took off an enrolled pod's device or
  // the proxy's devices underneath ferryd; counted and logged. Called on every workloads
  // poll, so a detached pod is re-attached within `workloads_poll`. Until then the pod's
  // traffic is not steered (see docs/datapath.md, "Programs detached underneath ferryd").
  void checkAttachments();
  // While paused (from create() until the server listens, and from the start of a drain)
  // to_proxy drops peers' SYNs to 15008 that find no listener, so that they reach the next
  // ferryd; a ferryd that died never paused, and those SYNs are reset (fail fast).
  void setHbonePaused(bool paused);

  const KernelFeatures& features() const { return features_; }
  const InjectionChoice& injection() const { return injection_; }
  size_t enrolledPods() const { return pods_.size(); }
  DatapathCounters counters() const;
  // Prometheus text: ferry_datapath_* metrics.
  std::string renderPrometheus() const;

 private:
  Datapath() = default;
  struct Pod {
    std::string ifname;
    int ifindex = 0;
    bool netkit = false;
    // FERRY_POD_* as last written to ferry_pods: a change of mode rewrites the entry.
    uint32_t flags = 0;
    // veth: pod_egress on tc ingress of the host-side device. netkit: pod_egress_netkit as
    // the pair's peer program (the pod's own transmit path).
    Attachment egress_side;
    // pod_ingress on tc egress of the host-side device, for both kinds: a netkit primary
    // program runs with skb->dev already in the pod's netns, where the proxy netns id the
    // socket lookups use means nothing.
    Attachment ingress_side;
  };
  absl::Status enroll(uint32_t ip, const workloads::Workload& w, Pod& pod);
  // Rewrites an enrolled pod's ferry_pods entry when its mode changed.
  absl::Status updateMode(uint32_t ip, const workloads::Workload& w, Pod& pod);

  config::Datapath cfg_;
  ferry_datapath* skel_ = nullptr;
  KernelFeatures features_;
  InjectionChoice injection_;
  std::string pin_dir_;
  std::unique_ptr<Attachment> from_proxy_;
  std::unique_ptr<Attachment> to_proxy_;
  std::map<uint32_t, Pod> pods_;  // by IPv4 (network order)
  // ferry_datapath_reattached_total / _reattach_failures_total (read by the metrics page).
  std::atomic<uint64_t> reattached_{0};
  std::atomic<uint64_t> reattach_failures_{0};
};

}  // namespace ferry::datapath
