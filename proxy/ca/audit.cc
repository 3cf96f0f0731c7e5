#include "proxy/ca/audit.h"

#include <openssl/bn.h>
#include <unistd.h>

#include <cerrno>

#include "proxy/common/json_text.h"
#include "proxy/common/log.h"

namespace ferry::ca {
namespace {

// RFC 3339 UTC with milliseconds: the log's microsecond stamp cut to three digits.
std::string millisecondStamp(std::chrono::system_clock::time_point t) {
  std::string stamp = common::formatTimestamp(t);  // 2026-12-02T05:40:00.123456Z
  constexpr size_t kDroppedDigits = 3;
  stamp.erase(stamp.size() - 1 - kDroppedDigits, kDroppedDigits);
  return stamp;
}

void field(std::string& out, std::string_view key, std::string_view value) {
  out += ',';
  common::appendJsonString(out, key);
  out += ':';
  common::appendJsonString(out, value);
}

}  // namespace

void describeLeaf(AuditRecord& record, X509* leaf) {
  record.not_after = identity::asn1TimeToTimePoint(X509_get0_notAfter(leaf));
  identity::BignumPtr bn(ASN1_INTEGER_to_BN(X509_get0_serialNumber(leaf), nullptr));
  char* hex = bn ? BN_bn2hex(bn.get()) : nullptr;
  record.serial = hex != nullptr ? hex : "";
  OPENSSL_free(hex);
}

std::string auditLine(const AuditRecord& record) {
  std::string out = "{\"audit\":\"ferry-ca\"";
  field(out, "time", millisecondStamp(record.time));
  field(out, "decision", record.signed_cert ? "signed" : "refused");
  field(out, "reason", record.reason);
  field(out, "message", record.message);
  field(out, "identity", record.identity);
  field(out, "caller", record.caller);
  field(out, "caller_pod", record.caller_pod);
  field(out, "node", record.node);
  field(out, "remote", record.remote);
  if (record.signed_cert) {
    field(out, "serial", record.serial);
    field(out, "not_after", identity::formatTime(record.not_after));
  }
  out += '}';
  return out;
}

AuditSink stdoutAuditSink() {
  return [](std::string_view line) {
    std::string buf;
    buf.reserve(line.size() + 1);
    buf.append(line);
    buf += '\n';
    size_t done = 0;
    // One write(2) for the line; a short write (a full pipe, a signal) continues it.
    while (done < buf.size()) {
      ssize_t n = ::write(STDOUT_FILENO, buf.data() + done, buf.size() - done);
      if (n < 0) {
        if (errno == EINTR) continue;
        return;  // stdout is gone: nothing left to tell, and the decision itself stands
      }
      done += static_cast<size_t>(n);
    }
  };
}

void AuditLog::write(const AuditRecord& record) {
  std::string line = auditLine(record);  // formatted before the lock: it covers only the sink
  std::lock_guard<std::mutex> lock(mu_);
  sink_(line);
}

}  // namespace ferry::ca
