#pragma once
// ferry-ca's wire protocol, version 1 (docs/ferry-ca.md): one HTTPS request per certificate.
// A node daemon sends a CSR it made with a key that never leaves its node, authenticated by
// a projected service-account token; ferry-ca answers with the signed chain. Both sides
// encode and decode through this file only, so the field names live in one place.
#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace ferry::ca {

// The port ferry-ca serves signing on (istiod's CA port, where operators expect a mesh CA).
inline constexpr uint16_t kSigningPort = 15012;
// Plain HTTP: /metrics and /healthz/ready (istiod's monitoring port).
inline constexpr uint16_t kMonitoringPort = 15014;
// The one signing route; a new version gets a new path and the old one keeps working.
inline constexpr std::string_view kSignPath = "/v1/certificates";
// The audience the caller's projected token must be minted for: a token made for the API
// server (or any other audience) is refused, so a token stolen from elsewhere is useless here.
inline constexpr std::string_view kDefaultAudience = "ferry-ca";
// A request body larger than this is refused (413) before it is parsed: a P-256 CSR in PEM is
// ~500 bytes, an RSA-4096 one ~1.7 KB.
inline constexpr size_t kMaxRequestBytes = 16 * 1024;
// A response body larger than this is refused by the client: a chain of a leaf and a few
// intermediates is a few KB.
inline constexpr size_t kMaxResponseBytes = 64 * 1024;

struct SignRequest {
  std::string csr_pem;                  // "csr": PKCS#10, PEM
  std::chrono::seconds validity{0};     // "validity_seconds": wanted lifetime; 0 = the server's default
};

struct SignResponse {
  std::vector<std::string> cert_chain_pem;  // "cert_chain": leaf first, then intermediates (no root)
};

// Why a request was not signed: a stable code (the audit line's and the metric's `reason`)
// with a sentence for people. Sent as {"error": code, "message": text}.
struct ErrorBody {
  std::string code;
  std::string message;
};

std::string encode(const SignRequest& request);
std::string encode(const SignResponse& response);
std::string encode(const ErrorBody& error);

// Each refuses what is not exactly its shape (not JSON, a field of the wrong type, a missing
// field), saying which field; unknown fields are ignored so that a newer peer can add some.
absl::StatusOr<SignRequest> decodeSignRequest(std::string_view body);
absl::StatusOr<SignResponse> decodeSignResponse(std::string_view body);
absl::StatusOr<ErrorBody> decodeErrorBody(std::string_view body);

}  // namespace ferry::ca
