#pragma once
// Where workloads come from (config `workload_source`). A source feeds the Store: a full
// state with Store::replaceAll (the file on each change, a Kubernetes list), single changes
// with Store::apply (a Kubernetes watch event: one pod, without touching the others). The
// Store publishes snapshots to readers and Deltas to subscribers (the datapath, identity).
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "proxy/workloads/registry.h"

namespace ferry::workloads {

// A pod sandbox as ferry-cni reports it on ADD (docs/install.md, "The CNI chain"): who the
// pod is, the addresses its CNI gave it and the host-side device it sits behind -- before
// the API server knows any of it.
struct CniSandbox {
  std::string key;           // "<namespace>/<name>"
  std::string container_id;
  std::string pod_uid;       // "" when the runtime passed none
  IpList ips;                // canonical
  std::string device;        // host-side device
};
struct CniDecision {
  enum Kind {
    kEnrolled,     // the workload is published with the sandbox's addresses and device
    kNotEnrolled,  // the pod is not in the mesh (labels, not in the file)
    kNotYet,       // cannot tell yet (the pod's object has not arrived): ask again
    kRefused,      // it is in the mesh and cannot be enrolled as reported: `reason`
  };
  Kind kind = kNotYet;
  std::string reason;
};

class Source {
 public:
  virtual ~Source() = default;
  // Control thread. Brings the first consistent state into `store`; an error is a start-up
  // error (ferryd does not serve with a registry it could not load).
  virtual absl::Status start(Store& store) = 0;
  // Control thread, every `workloads_poll` and on SIGHUP: applies what changed since the
  // last call. True when something was published. A source pushed events by a server
  // applies them as they arrive (on the control thread) and may do nothing here.
  virtual bool poll(Store& store) = 0;
  // Changes refused since start (a broken file version, an invalid object), each logged.
  virtual uint64_t failures() const = 0;
  // Whether the state can be trusted now (a Kubernetes source: not older than
  // kubernetes.max_state_age); readiness reports the reason. The last good state keeps
  // serving either way.
  virtual absl::Status health() const { return absl::OkStatus(); }
  // Control thread. Whether the pod would be enrolled (kEnrolled), stays out (kNotEnrolled)
  // or cannot be told yet (kNotYet), without changing anything: asked first, so that a pod
  // outside the mesh is never refused for what its sandbox looks like.
  virtual CniDecision cniDecide(const Store& store, const std::string& key, const std::string& pod_uid) const = 0;
  // Control thread. ferry-cni's ADD: the sandbox's addresses and device join what the
  // source knows of the pod (kept until cniDel; a later ADD of the pod replaces them) and
  // the source decides, publishing the workload when it is in the mesh.
  virtual CniDecision cniAdd(Store& store, const CniSandbox& sandbox) = 0;
  // ferry-cni's DEL: the sandbox is gone; the pod stops being steered at once (a DEL of an
  // older sandbox than the one the source holds changes nothing).
  virtual void cniDel(Store& store, const std::string& key, const std::string& container_id) = 0;
  // For logs and /config_dump: "file /etc/ferry/workloads.yaml".
  virtual std::string describe() const = 0;
};

}  // namespace ferry::workloads
