// SPIFFE IDs come from peer certificates' URI SANs (proxy/identity/spiffe_id.cc): any bytes.
// Checks beyond "does not crash": an accepted ID prints back to itself (with the scheme
// lowercased) and parses again to the same value; a trust domain that passes
// validateTrustDomain makes a valid trust-domain ID.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "absl/strings/ascii.h"
#include "proxy/identity/spiffe_id.h"

using ferry::identity::SpiffeId;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto id = SpiffeId::parse(text);
  if (id.ok()) {
    std::string printed = id->str();
    // Only the scheme may change (to lowercase).
    if (printed.size() != text.size() ||
        printed.substr(9) != text.substr(9) ||
        absl::AsciiStrToLower(std::string(text.substr(0, 9))) != "spiffe://") {
      std::abort();
    }
    auto again = SpiffeId::parse(printed);
    if (!again.ok() || !(*again == *id)) std::abort();
    if (!ferry::identity::validateTrustDomain(id->trustDomain()).ok()) std::abort();
  }
  if (ferry::identity::validateTrustDomain(text).ok()) {
    auto td_id = SpiffeId::parse(std::string("spiffe://") + std::string(text));
    if (!td_id.ok() || td_id->trustDomain() != text || !td_id->path().empty()) std::abort();
  }
  return 0;
}
