#pragma once
// The seam between the data plane and wherever certificates come from: files on disk today
// (DirCertSource), a built-in CA and others later.
#include <memory>

#include "absl/status/statusor.h"
#include "proxy/identity/spiffe_id.h"
#include "proxy/identity/svid.h"

namespace ferry::identity {

class CertSource {
 public:
  virtual ~CertSource() = default;
  // Thread-safe. The SVID for `id`, or an error saying what is missing/broken and where.
  // The same pointer is returned for as long as the underlying material is unchanged, so
  // callers may key caches on it.
  virtual absl::StatusOr<std::shared_ptr<const Svid>> svid(const SpiffeId& id) = 0;
  // Thread-safe. The roots of the local trust domain; same pointer while unchanged.
  virtual absl::StatusOr<std::shared_ptr<const TrustBundle>> bundle() = 0;
};

}  // namespace ferry::identity
