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
  // For logs and /config_dump: "file /etc/ferry/workloads.yaml".
  virtual std::string describe() const = 0;
};

}  // namespace ferry::workloads
