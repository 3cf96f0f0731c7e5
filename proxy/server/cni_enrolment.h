#pragma once
// Where ferry-cni's requests meet the rest of ferryd (docs/install.md, "The CNI chain"):
// the workload source decides from the pod's labels (or the workloads file) and publishes
// it with the sandbox's addresses and device; the registry change enrols it in the datapath
// at once (WorkloadRuntime::follow); an ADD is answered "enrolled" only when the
// datapath holds the pod on that device.
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "proxy/datapath/datapath.h"
#include "proxy/server/cni_endpoint.h"
#include "proxy/workloads/registry.h"
#include "proxy/workloads/source.h"

namespace ferry::server {

class PodEnrolment : public CniEnrolment {
 public:
  PodEnrolment(workloads::Store& store, workloads::Source& source, datapath::Datapath& datapath)
      : store_(store), source_(source), datapath_(datapath) {}

  std::optional<cni::Answer> add(const cni::Request& request, std::string* pending) override;
  cni::Answer del(const cni::Request& request) override;
  cni::Answer check(const cni::Request& request) override;

  // A recorded sandbox that a restarted ferryd can still enrol: its netns and its device exist.
  static bool sandboxExists(const cni::Request& request);

 private:
  workloads::Store& store_;
  workloads::Source& source_;
  datapath::Datapath& datapath_;
};

// The pod's host-side device among the interfaces the previous plugin reported outside the
// sandbox: the veth or netkit device whose peer is in the pod's netns `netns` (any other
// netns when it is empty; the bridge plugin also reports its bridge, which is not the pod's).
absl::StatusOr<std::string> choosePodDevice(const std::vector<std::string>& candidates, const std::string& netns);

}  // namespace ferry::server
