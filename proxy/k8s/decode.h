#pragma once
// Internal to proxy/k8s (and its tests): Kubernetes JSON to ferry's cut-down objects. Only
// the fields in objects.h are read; unknown fields are ignored (the API grows), but a field
// ferry uses that has the wrong type, or a missing name, makes the whole object malformed:
// it is skipped, never applied half.
#include <string>

#include <boost/json/fwd.hpp>

#include "absl/status/statusor.h"
#include "proxy/k8s/objects.h"

namespace ferry::k8s::internal {

absl::StatusOr<Pod> decodePod(const boost::json::value& v);
absl::StatusOr<Namespace> decodeNamespace(const boost::json::value& v);
absl::StatusOr<Service> decodeService(const boost::json::value& v);
// v1 and v1beta1 (whose node is topology["kubernetes.io/hostname"] unless nodeName is set).
absl::StatusOr<EndpointSlice> decodeEndpointSlice(const boost::json::value& v);

absl::StatusOr<DaemonSet> decodeDaemonSet(const boost::json::value& v);

// Any namespaced object: metadata.namespace and .name, and the whole object serialized.
absl::StatusOr<CustomObject> decodeCustomObject(const boost::json::value& v);

// A TokenReview as the API server answers it: its status. Refused when it is not an object of
// kind TokenReview or a field ferry reads has the wrong type.
absl::StatusOr<TokenReviewStatus> decodeTokenReview(const boost::json::value& v);

// metadata.resourceVersion of an object or a list ("" when absent).
std::string resourceVersionOf(const boost::json::value& v);

// A Status object (`kind: Status`, also inside a watch ERROR event): its code and message.
struct ApiStatus {
  int code = 0;
  std::string reason;
  std::string message;
};
ApiStatus decodeStatus(const boost::json::value& v);

}  // namespace ferry::k8s::internal
