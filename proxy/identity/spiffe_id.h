#pragma once
// SPIFFE IDs (spiffe://<trust-domain>/<path>), validated per SPIFFE-ID.md §2; see
// docs/security.md, "The SPIFFE ID rules", for the rules and why they exist.
#include <ostream>
#include <string>
#include <string_view>
#include <utility>

#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ferry::identity {

// SPIFFE-ID.md §2: implementations must accept IDs up to 2048 bytes; we reject longer ones
// so that a peer cannot make us hash or log arbitrarily long strings.
inline constexpr size_t kMaxSpiffeIdBytes = 2048;
// SPIFFE-ID.md §2.1: a trust domain is at most 255 bytes (a DNS name's limit).
inline constexpr size_t kMaxTrustDomainBytes = 255;

class SpiffeId {
 public:
  // An empty ID (no trust domain, no path); only useful as a placeholder before assignment.
  SpiffeId() = default;

  // Full validation; the error names the rule that failed.
  static absl::StatusOr<SpiffeId> parse(std::string_view uri);
  // Istio form spiffe://<td>/ns/<ns>/sa/<sa>. No validation beyond construction: callers
  // that got the parts from outside must check `parse(id.str())`.
  static SpiffeId forWorkload(std::string_view trust_domain, std::string_view ns,
                              std::string_view sa);

  const std::string& trustDomain() const { return trust_domain_; }
  // Includes the leading '/'; empty for a trust-domain ID.
  const std::string& path() const { return path_; }
  std::string str() const { return "spiffe://" + trust_domain_ + path_; }

  friend bool operator==(const SpiffeId&, const SpiffeId&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const SpiffeId& id) {
    return H::combine(std::move(h), id.trust_domain_, id.path_);
  }
  friend std::ostream& operator<<(std::ostream& os, const SpiffeId& id) { return os << id.str(); }

 private:
  SpiffeId(std::string trust_domain, std::string path)
      : trust_domain_(std::move(trust_domain)), path_(std::move(path)) {}

  std::string trust_domain_;
  std::string path_;
};

// The namespace and service account of an Istio-form workload ID
// (spiffe://<td>/ns/<namespace>/sa/<service account>, nothing more); the error says the ID is
// not of that form.
struct WorkloadName {
  std::string namespace_name;
  std::string service_account;
};
absl::StatusOr<WorkloadName> workloadName(const SpiffeId& id);

// The trust-domain rules of SPIFFE-ID.md §2.1 (lowercase [a-z0-9.-_], 1..255 bytes).
absl::Status validateTrustDomain(std::string_view td);

}  // namespace ferry::identity
