#pragma once
// The enrolment rule (docs/install.md, "Enrolling workloads"), with no dependency: ferryd's
// Kubernetes source (kubernetes_source.h) and ferry-cni, which applies it from the API
// server's copy of a pod while ferryd is down (proxy/cni/api.h), decide alike.
//
// A pod is in the mesh when it carries `ferry.io/dataplane: enabled`, or its namespace does
// and the pod does not say `disabled`. With `kubernetes.istio_ambient`,
// `istio.io/dataplane-mode: ambient` on the pod or its namespace counts as well, and
// `istio.io/dataplane-mode: none` on the pod opts it out.
#include <string>

namespace ferry::workloads {

inline constexpr char kFerryLabel[] = "ferry.io/dataplane";
inline constexpr char kIstioLabel[] = "istio.io/dataplane-mode";

// The label values that decide (null: the label is absent).
struct EnrolmentLabels {
  const std::string* pod_ferry = nullptr;       // ferry.io/dataplane on the pod
  const std::string* pod_istio = nullptr;       // istio.io/dataplane-mode on the pod
  const std::string* namespace_ferry = nullptr;
  const std::string* namespace_istio = nullptr;
};

inline bool enrolled(const EnrolmentLabels& l, bool istio_ambient) {
  auto is = [](const std::string* value, const char* want) { return value != nullptr && *value == want; };
  // The pod's own word first: an explicit opt-out wins over its namespace.
  if (is(l.pod_ferry, "disabled")) return false;
  if (istio_ambient && is(l.pod_istio, "none")) return false;
  if (is(l.pod_ferry, "enabled")) return true;
  if (istio_ambient && is(l.pod_istio, "ambient")) return true;
  if (is(l.namespace_ferry, "enabled")) return true;
  return istio_ambient && is(l.namespace_istio, "ambient");
}

}  // namespace ferry::workloads
