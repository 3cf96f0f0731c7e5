#pragma once
// ferryd's node configuration: one YAML file, parsed and validated into an immutable
// value. The runtime objects (listeners, pools, TLS contexts) are built from it elsewhere.
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "proxy/common/log.h"
#include "proxy/common/net.h"

namespace ferry::config {

using common::HostPort;
using Millis = std::chrono::milliseconds;

// How a captured connection's original destination is learned on 15001 / 15006.
enum class OriginalDestination {
  // getsockname() of the accepted socket: the tc datapath (bpf_sk_assign) or TPROXY keep
  // the pod's original destination as the socket's local address. The production mode.
  kSocket,
  // A PROXY protocol v2 header sent by a trusted redirector in front of ferryd; its source
  // must equal the TCP peer (anti-spoofing), only the destination is taken from it.
  kProxyProtocol,
};

struct Listen {
  std::vector<HostPort> outbound;           // default 0.0.0.0:15001
  std::vector<HostPort> inbound_plaintext;  // default 0.0.0.0:15006
  std::vector<HostPort> hbone;              // default 0.0.0.0:15008
  HostPort admin;                           // default 127.0.0.1:15000
  HostPort metrics;                         // default 0.0.0.0:15020
  HostPort readiness;                       // default 0.0.0.0:15021
};

struct Timeouts {
  Millis connect{10'000};    // TCP connect, outer (15008) and upstream (design §4; ztunnel)
  Millis handshake{10'000};  // TLS handshake incl. first CONNECT answer (slowloris bound)
  Millis idle{3'600'000};    // a proxied connection with no bytes either way is closed
  Millis drain{5'000};       // on shutdown, how long live connections may finish
};

struct Pool {
  uint32_t max_streams = 100;             // per HTTP/2 connection (ztunnel's pool cap)
  Millis idle_release{300'000};           // a connection with no streams is closed after
  Millis ping_interval{10'000};           // keepalive PING period
  Millis ping_timeout{20'000};            // silence after which a connection is dead
};

struct Config {
  std::string node;               // required; matches workloads' `node`
  std::string trust_domain;       // required; e.g. cluster.local
  std::string workloads_file;     // required; path, relative paths resolve against the config file
  std::string cert_dir;           // required; see identity/dir_cert_source.h
  Listen listen;
  Timeouts timeouts;
  Pool pool;
  uint32_t workers = 0;           // 0 = one per CPU core
  common::LogLevel log_level = common::LogLevel::kInfo;
  bool transparent = true;        // IP_TRANSPARENT on listeners and upstream sockets
  OriginalDestination original_destination = OriginalDestination::kSocket;
  uint16_t hbone_port = 15008;    // port of peers' HBONE listeners (destination pod IP:port)
  Millis workloads_poll{1'000};   // how often the workloads file is checked for changes
};

// Parses and validates. `source_name` (usually the path) prefixes every error, which also
// names the key and its line: "ferry.yaml:12: timeouts.connect: '10' is not a duration...".
// Relative paths in the file are resolved against `base_dir` (the config file's folder).
absl::StatusOr<Config> parseConfig(std::string_view yaml_text, std::string_view source_name,
                                   std::string_view base_dir = "");
absl::StatusOr<Config> loadConfigFile(const std::string& path);

}  // namespace ferry::config
