#pragma once
// The tc datapath as ferryd runs it: probes the kernel, loads the programs with their
// load-time constants, pins the maps (adopting pins a previous ferryd left), attaches
// from_proxy / to_proxy once and pod_egress / pod_ingress per local pod, and keeps the
// maps in step with the workload registry. Runs on the control thread, in the node netns.
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "proxy/config/config.h"
#include "proxy/datapath/attach.h"
#include "proxy/datapath/kernel_probe.h"
#include "proxy/datapath/netns.h"
#include "proxy/datapath/pod_sync.h"
#include "proxy/workloads/registry.h"

struct ferry_datapath;

namespace ferry::telemetry {
class Exposition;
}  // namespace ferry::telemetry

namespace ferry::datapath {

struct DatapathCounters {
  // [program][verdict] packets, summed over CPUs and reasons.
  uint64_t packets[4][3] = {};
  // packets by reason (all programs).
  std::map<std::string, uint64_t> by_reason;
};

class Datapath : private PodSteering {
 public:
  // `proxy_netns` is where ferryd's sockets live; the caller stays in the node netns.
  // `taking_over`: the listeners came from the running ferryd (a handover): they exist, so
  // HBONE is not paused, and its pinned links are adopted whatever the failure mode.
  static absl::StatusOr<std::unique_ptr<Datapath>> create(const config::Config& config,
                                                          const NetnsFd& proxy_netns, bool taking_over = false);
  ~Datapath();
  Datapath(const Datapath&) = delete;
  Datapath& operator=(const Datapath&) = delete;

  // Start-up: local pods join (programs attached on their host-side device, the pods map
  // updated) and capture destinations follow the whole registry; capture entries a
  // previous ferryd left that no workload wants are removed. A pod that cannot be enrolled
  // (device missing) is logged and retried (retryFailed); the others are unaffected.
  absl::Status sync(const workloads::Registry& registry);
  // A registry change: only the pods and capture IPs the delta touches (docs/architecture.md,
  // "Workload registry"); enrolled pods get their mode (STRICT) rewritten when it changed.
  void apply(const workloads::Registry& after, const workloads::Delta& delta);
  // The ClusterIPs of Services with mesh endpoints are capture destinations (their SYNs
  // reach ferryd before kube-proxy's DNAT): a ClusterIP is in the map while any of its
  // ports is captured. Applies the store's changes only.
  void applyServices(const std::vector<workloads::ServiceChange>& changes);
  // Whether new plaintext connections to a local pod go through ferryd (15006: STRICT
  // refuses them, policies judge them) or straight to the pod (FERRY_POD_STRICT); by
  // default the workload's own tls_mode. refreshModes() applies a change of the answer.
  void setPlaintextCapture(std::function<bool(const workloads::Workload&)> captured);
  void refreshModes(const workloads::Registry& current) {
    if (!handed_over_) sync_.refreshFlags(current);
  }
  // Local pods whose enrolment failed are tried again (called every workloads_poll).
  void retryFailed(const workloads::Registry& current) {
    if (!handed_over_) sync_.retryFailed(current);
  }
  // Offered to the next ferryd on the node (docs/operations.md, "Upgrades and restarts"),
  // which adopts the pinned maps and links: from now on this one changes nothing in the
  // kernel, and at exit leaves programs, links, pins and neighbour entries as they are,
  // whatever the failure mode. false: the handover failed; the links run this process's
  // programs again and it manages the datapath as before.
  void setHandedOver(bool handed_over);
  bool handedOver() const { return handed_over_; }

  // Puts back programs (and link pins) that someone took off an enrolled pod's device or
  // the proxy's devices underneath ferryd; counted and logged. Called on every workloads
  // poll, so a detached pod is re-attached within `workloads_poll`. Until then the pod's
  // traffic is not steered (see docs/datapath.md, "Programs detached underneath ferryd").
  void checkAttachments();
  // While paused (from create() until the server listens, and from the start of a drain)
  // to_proxy drops peers' SYNs to 15008 that find no listener, so that they reach the next
  // ferryd; a ferryd that died never paused, and those SYNs are reset (fail fast).
  void setHbonePaused(bool paused);
  // The node leaves the mesh (ferryd's DaemonSet was deleted: an uninstall): at exit,
  // whatever the failure mode, every program is detached and every link and map pin and
  // the pin directory are removed, instead of being left for the next ferryd.
  void removeEverythingAtExit() {
    if (!handed_over_) remove_everything_ = true;
  }

  // The device an enrolled pod's programs are on (ip in network order); nullptr when the
  // pod is not enrolled. With why its last enrolment failed, when it did (the CNI endpoint
  // answers with it).
  const std::string* enrolledDevice(uint32_t ip) const;
  std::string enrolmentFailure(uint32_t ip) const { return sync_.failure(ip); }
  // Once the source's first whole state is in (after a restart): the pins and ferry_pods
  // entries an earlier ferryd left for pods that are no local workload any more are removed,
  // so that no pod that left the mesh (or the node) while ferryd was down stays steered.
  void releaseStale(const workloads::Registry& registry);

  const KernelFeatures& features() const { return features_; }
  const InjectionChoice& injection() const { return injection_; }
  size_t enrolledPods() const { return pods_.size(); }
  DatapathCounters counters() const;
  // ferry_datapath_* metrics, stated at scrape time.
  void collect(telemetry::Exposition& out) const;

 private:
  Datapath() = default;
  // from_proxy on the host side of the proxy link, to_proxy on the proxy netns's side.
  absl::Status attachProxyPrograms(const NetnsFd& proxy_netns, int host_proxy_ifindex, int proxy_ifindex);
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
  // PodSteering: the kernel side of PodSync.
  absl::StatusOr<std::string> deviceOf(uint32_t ip, const workloads::Workload& w) override;
  absl::Status enroll(uint32_t ip, const workloads::Workload& w, const std::string& device, uint32_t flags) override;
  void release(uint32_t ip) override;
  absl::Status setFlags(uint32_t ip, uint32_t flags) override;
  void setCapture(uint32_t ip, bool capture) override;

  config::Datapath cfg_;
  bool remove_everything_ = false;
  void removePinDir();
  ferry_datapath* skel_ = nullptr;
  // How each discovered pod device was found ("route", "bridge cni0"): logged when it changes.
  absl::flat_hash_map<uint32_t, std::string> found_how_;
  // Managed neighbour entries ferryd asked for (findPodInterface), by pod IP: the bridge.
  // Removed when the pod is released or ferryd stops, so no entry keeps probing a gone IP.
  absl::flat_hash_map<uint32_t, int> managed_neighbours_;
  // ClusterIPs in the capture map as Services, with how many of their ports are captured.
  absl::flat_hash_map<uint32_t, uint32_t> service_vips_;
  void forgetNeighbour(uint32_t ip);
  // ferry_pods and ferry_pod_netns entries of a pod.
  void forgetPodEntries(uint32_t ip);
  KernelFeatures features_;
  InjectionChoice injection_;
  std::string pin_dir_;
  std::unique_ptr<Attachment> from_proxy_;
  std::unique_ptr<Attachment> to_proxy_;
  bool handed_over_ = false;
  std::map<uint32_t, Pod> pods_;  // by IPv4 (network order)
  PodSync sync_{*this};
  // ferry_datapath_reattached_total / _reattach_failures_total (read by the metrics page).
  std::atomic<uint64_t> reattached_{0};
  std::atomic<uint64_t> reattach_failures_{0};
};

}  // namespace ferry::datapath
