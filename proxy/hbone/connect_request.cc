#include "proxy/hbone/connect_request.h"

#include <openssl/rand.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proxy/common/strings.h"

namespace ferry::hbone {

std::string makeTraceparent() {
  unsigned char bytes[24];
  RAND_bytes(bytes, sizeof(bytes));
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "00-";
  for (int i = 0; i < 24; ++i) {
    if (i == 16) out += '-';
    out += kHex[bytes[i] >> 4];
    out += kHex[bytes[i] & 0xf];
  }
  out += "-00";
  return out;
}

std::vector<Header> buildConnectHeaders(const ConnectParams& params) {
  std::vector<Header> headers;
  headers.push_back({":method", "CONNECT"});
  headers.push_back({":authority", common::formatHostPort(params.target)});
  headers.push_back({"forwarded", absl::StrCat("for=\"", common::formatHostPort(params.client), "\"")});
  if (!params.source_name.empty()) {
    // The keys ztunnel sends; metrics on the server side attribute traffic with them.
    headers.push_back(
        {"baggage", absl::StrCat("k8s.namespace.name=", common::toAbsl(params.source_namespace),
                                 ",k8s.pod.name=", common::toAbsl(params.source_name),
                                 ",service.name=", common::toAbsl(params.source_name), ",service.version=latest")});
  }
  headers.push_back({"traceparent", makeTraceparent()});
  return headers;
}

namespace {
ConnectVerdict reject(int status, std::string code, std::string reason) {
  ConnectVerdict v;
  v.status = status;
  v.code = std::move(code);
  v.reason = std::move(reason);
  return v;
}
}  // namespace

ConnectVerdict parseConnect(const std::vector<Header>& request, const IpAddress& local_ip,
                            const std::vector<uint16_t>& ferry_ports) {
  const std::string* method = nullptr;
  const std::string* authority = nullptr;
  int methods = 0;
  int authorities = 0;
  for (const auto& h : request) {
    if (h.name == ":method") {
      method = &h.value;
      ++methods;
    } else if (h.name == ":authority") {
      authority = &h.value;
      ++authorities;
    } else if (h.name == ":scheme" || h.name == ":path" || h.name == ":protocol") {
      return reject(400, "bad_pseudo_header",
                    absl::StrCat("CONNECT must not carry ", h.name, " (extended CONNECT is not supported)"));
    }
  }
  if (methods != 1 || *method != "CONNECT") {
    return reject(400, "not_connect",
                  absl::StrCat("method '", method ? *method : "", "' is not CONNECT"));
  }
  if (authorities != 1) return reject(400, "bad_authority", "missing or repeated :authority");
  auto target = common::parseHostPort(*authority);
  if (!target.ok()) {
    return reject(400, "bad_authority",
                  absl::StrCat("malformed :authority: ", target.status().message()));
  }
  if (target->ip != local_ip) {
    return reject(400, "authority_mismatch",
                  absl::StrCat(":authority ", *authority, " is not the connection's destination ",
                               local_ip.to_string()));
  }
  if (std::find(ferry_ports.begin(), ferry_ports.end(), target->port) != ferry_ports.end()) {
    return reject(400, "ferry_port",
                  absl::StrCat(":authority ", *authority, " targets a ferry port"));
  }
  ConnectVerdict v;
  v.target = *target;
  return v;
}

}  // namespace ferry::hbone
