#pragma once
// ferry-ca's audit trail (docs/ferry-ca.md "Node authorization"): one JSON line per decision
// on standard output, "audit":"ferry-ca", so that a log pipeline can keep who got which
// certificate, and who was refused and why, apart from the daemon's other lines.
#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>

#include "proxy/identity/openssl_util.h"

namespace ferry::ca {

struct AuditRecord {
  std::chrono::system_clock::time_point time;
  bool signed_cert = false;  // "decision": "signed" or "refused"
  std::string reason;        // Decision::code, or a refusal code of the server (rate_limited, ...)
  std::string message;
  std::string identity;      // the SPIFFE ID asked for, when the CSR named one
  std::string caller;        // the token's user name
  std::string caller_pod;    // "<namespace>/<name>"
  std::string node;
  std::string remote;        // "<ip>:<port>" of the connection
  // Signed only: the leaf's serial (hex, as `openssl x509 -serial` prints it) and notAfter.
  std::string serial;
  std::chrono::system_clock::time_point not_after;
};

// Fills serial and not_after from the signed leaf.
void describeLeaf(AuditRecord& record, X509* leaf);

// The record as one line of JSON, without the newline; fields in the order of the doc's
// example; serial and not_after only when signed. time is RFC 3339 UTC with milliseconds.
std::string auditLine(const AuditRecord& record);

// Where lines go: called with one whole line, newline excluded, one call at a time.
using AuditSink = std::function<void(std::string_view line)>;
// Standard output, one write(2) per line (newline included), so that lines of concurrent
// writers in other processes sharing the pipe do not interleave within a line.
AuditSink stdoutAuditSink();

class AuditLog {
 public:
  explicit AuditLog(AuditSink sink) : sink_(std::move(sink)) {}
  // Thread-safe.
  void write(const AuditRecord& record);

 private:
  std::mutex mu_;  // one line at a time into the sink
  AuditSink sink_;
};

}  // namespace ferry::ca
