#pragma once
// The HBONE CONNECT request: what a client sends and whether a server can take its form
// (docs/hbone.md). Whether its target may be called is the session's to judge
// (session/connect_target.h). Pure functions, no I/O: unit-tested on their own.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "proxy/common/net.h"
#include "proxy/hbone/h2_connection.h"

namespace ferry::hbone {

using common::HostPort;
using common::IpAddress;

struct ConnectParams {
  HostPort target;             // destination pod ip:port (the application port)
  HostPort client;             // the application's own address (forwarded: for=)
  // The calling workload, for baggage (server-side metrics attribute traffic with it);
  // empty when unknown.
  std::string_view source_namespace;
  std::string_view source_name;
  // The Service the application called, as its hostname ("cart.shop.svc.cluster.local"),
  // when it called one: `forwarded: ...;host=`, as ztunnel sends it (docs/hbone.md). Empty:
  // none.
  std::string_view service_host;
};

// `:method CONNECT`, `:authority`, `forwarded`, `baggage`, `traceparent` (random).
std::vector<Header> buildConnectHeaders(const ConnectParams& params);
// The `host=` parameter of the request's `forwarded` header (quotes removed), or empty:
// what the client says it called. A claim, never trusted alone (session/connect_target.h).
std::string_view forwardedHost(const std::vector<Header>& request);
// "00-<32 hex>-<16 hex>-00", random per call.
std::string makeTraceparent();

// What the server decided about one request.
struct ConnectVerdict {
  int status = 200;            // 200, or 400 / 503 to answer with
  std::string reason;          // why (logged, and counted by `code`)
  std::string code;            // short machine-readable reason, e.g. "authority_mismatch"
  HostPort target;             // valid when status == 200
};

// Checks the form of a request received on a connection whose original destination IP is
// `local_ip`: CONNECT only; no :scheme/:path/:protocol; :authority is ip:port with port
// 1..65535; its IP equals `local_ip`; the port is not one of `ferry_ports`. 400 otherwise.
ConnectVerdict parseConnect(const std::vector<Header>& request, const IpAddress& local_ip,
                            const std::vector<uint16_t>& ferry_ports);

}  // namespace ferry::hbone
