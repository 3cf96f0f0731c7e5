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
  headers.push_back({"forwarded", params.service_host.empty()
                                      ? absl::StrCat("for=\"", common::formatHostPort(params.client), "\"")
                                      : absl::StrCat("for=\"", common::formatHostPort(params.client), "\";host=",
                                                     common::toAbsl(params.service_host))});
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

std::string_view forwardedHost(const std::vector<Header>& request) {
  for (const auto& h : request) {
    if (h.name != "forwarded") continue;
    std::string_view value = h.value;
    // RFC 7239: pairs separated by ';' (',' starts another hop: the first hop's is read).
    value = value.substr(0, value.find(','));
    while (!value.empty()) {
      size_t end = value.find(';');
      std::string_view pair = value.substr(0, end);
      while (!pair.empty() && pair.front() == ' ') pair.remove_prefix(1);
      if (pair.size() > 5 && (pair.substr(0, 5) == "host=" || pair.substr(0, 5) == "Host=")) {
        std::string_view host = pair.substr(5);
        if (host.size() >= 2 && host.front() == '"' && host.back() == '"') host = host.substr(1, host.size() - 2);
        return host;
      }
      if (end == std::string_view::npos) break;
      value.remove_prefix(end + 1);
    }
    return {};
  }
  return {};
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
