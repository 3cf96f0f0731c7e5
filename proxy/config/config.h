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

namespace ferry::common {
class WatchedFile;
}  // namespace ferry::common

namespace ferry::config {

using common::HostPort;
using Millis = std::chrono::milliseconds;

// An enum's spelling in the file. Each enum key has one table: the parser reads with it and
// /config_dump (config/config_dump.h) writes with it.
template <typename E>
struct EnumName {
  const char* name;
  E value;
};
template <typename E, size_t N>
constexpr const char* nameOf(const EnumName<E> (&names)[N], E value) {
  for (const auto& n : names) {
    if (n.value == value) return n.name;
  }
  return "?";
}

// How a captured connection's original destination is learned on 15001 / 15006.
enum class OriginalDestination {
  // getsockname() of the accepted socket: the tc datapath (bpf_sk_assign) or TPROXY keep
  // the pod's original destination as the socket's local address. The production mode.
  kSocket,
  // A PROXY protocol v2 header sent by a trusted redirector in front of ferryd; its source
  // must equal the TCP peer (anti-spoofing), only the destination is taken from it.
  kProxyProtocol,
};
inline constexpr EnumName<OriginalDestination> kOriginalDestinationNames[] = {
    {"socket", OriginalDestination::kSocket}, {"proxy_protocol", OriginalDestination::kProxyProtocol}};

struct Listen {
  std::vector<HostPort> outbound;           // default 0.0.0.0:15001
  std::vector<HostPort> inbound_plaintext;  // default 0.0.0.0:15006
  std::vector<HostPort> hbone;              // default 0.0.0.0:15008
  HostPort admin;                           // default 127.0.0.1:15000
  HostPort metrics;                         // default 0.0.0.0:15020
  HostPort readiness;                       // default 0.0.0.0:15021
  bool operator==(const Listen&) const = default;
};

struct Timeouts {
  Millis connect{10'000};    // TCP connect, outer (15008) and upstream (ztunnel's; docs/hbone.md)
  Millis handshake{10'000};  // TLS handshake incl. first CONNECT answer (slowloris bound)
  Millis idle{3'600'000};    // a proxied connection with no bytes either way is closed
  Millis drain{5'000};       // on shutdown, how long live connections may finish
  bool operator==(const Timeouts&) const = default;
};

// Upgrades and restarts (docs/operations.md, "Upgrades and restarts"): the next ferryd on the
// node takes the listening sockets of the running one over `socket`, and the running one
// carries the connections it holds until they end, or at most `deadline`.
struct Handover {
  std::string socket;  // a unix socket path; "" = no handover (a restart drains)
  Millis deadline{4 * 3'600'000};
  // This process's readiness for a probe that must reach it and not the generation beside
  // it (common/readiness_file.h); "" = none.
  std::string readiness_file;
  // After handing over and once it holds nothing, wait for SIGTERM before exiting: in a
  // container whose exit the kubelet would answer with a restart (and the restarted ferryd
  // would take the node back from the new one).
  bool wait_for_signal = false;
  bool operator==(const Handover&) const = default;
};

struct Pool {
  uint32_t max_streams = 100;             // per HTTP/2 connection (ztunnel's pool cap)
  Millis idle_release{300'000};           // a connection with no streams is closed after
  Millis ping_interval{10'000};           // keepalive PING period
  Millis ping_timeout{20'000};            // silence after which a connection is dead
  // Workers, each with its own pooled connection, that the connections of one source and
  // destination pair may spread over (capped at `workers`): a busy pair uses that many
  // cores at each end; a quiet one keeps one tunnel. 1 = one tunnel per pair (ztunnel).
  uint32_t workers_per_pair = 4;
  bool operator==(const Pool&) const = default;
};

// Limits on what one HBONE client connection (15008) may make this node do (docs/security.md,
// "HTTP/2 abuse").
struct Hbone {
  // Upstream connects one HBONE connection may have in flight at once; further CONNECTs wait
  // their turn (FIFO). A connect to a pod on this node takes well under a millisecond, so a
  // pool opening a burst of streams waits a few connect times at most; a workload that stops
  // accepting sees this many SYNs per tunnel instead of one per open stream (100).
  uint32_t max_pending_connects = 16;
  // GOAWAY(ENHANCE_YOUR_CALM) once the client has reset this many streams before they were
  // answered (each one an upstream connect started for nothing) and such resets are at least
  // half of the streams that ended, counted per window of 10x this many ended streams.
  // Envoy's premature-reset rule; nghttp2's own limit (1,000 resets, then 33/s) stays behind it.
  uint32_t max_premature_resets = 100;
  bool operator==(const Hbone&) const = default;
};

// The tc datapath (docs/datapath.md). Disabled, ferryd is a plain proxy whose listeners get
// connections some other way (tests on loopback, TPROXY).
enum class Injection { kAuto, kPeerEgress, kIngressRedirect, kNone };
enum class Capture { kHbone, kAll };
enum class FailureMode { kClosed, kOpen };
inline constexpr EnumName<Injection> kInjectionNames[] = {{"auto", Injection::kAuto},
                                                          {"peer-egress", Injection::kPeerEgress},
                                                          {"ingress-redirect", Injection::kIngressRedirect},
                                                          {"none", Injection::kNone}};
inline constexpr EnumName<Capture> kCaptureNames[] = {{"hbone", Capture::kHbone}, {"all", Capture::kAll}};
inline constexpr EnumName<FailureMode> kFailureModeNames[] = {{"closed", FailureMode::kClosed},
                                                              {"open", FailureMode::kOpen}};

struct Datapath {
  bool enabled = false;
  Injection injection = Injection::kAuto;  // auto = the probe decides
  // Numeric value of the proposed BPF_F_EGRESS flag for bpf_redirect_peer: not settled
  // upstream (docs/datapath.md, "Injection modes"), so it is configurable. Bit 5 is what the
  // kernel lab's patch uses.
  uint32_t egress_flag = 1u << 5;
  std::string proxy_netns;           // path, e.g. /run/netns/fy-n1-proxy, or "auto" (required)
  // "auto": ferryd creates the proxy netns itself (proxy/datapath/proxy_netns.h), with
  // proxy_address on its device and proxy_address + 1 on the node's side.
  bool proxy_netns_auto = false;
  std::string proxy_address = "169.254.77.1";
  // ferryd's device inside proxy_netns. The chart sets proxy_netns: auto, which names the
  // pair itself (docs/install.md, "How ferryd sits on a node").
  std::string proxy_interface = "eth0";
  // Its peer in the node netns (required; with auto "ferry-proxy", the chart's name too).
  std::string host_proxy_interface;
  std::string bpffs = "/run/ferry/bpffs";  // pins live here (ip netns exec hides /sys/fs/bpf)
  Capture capture = Capture::kHbone;  // which SYNs leaving a pod are captured
  FailureMode failure_mode = FailureMode::kClosed;  // pods without ferryd: cut off or routed
  // Connections from sockets of the node's own netns (the kubelet's probes) reach STRICT and
  // policy-judged pods without ferryd (docs/security.md, "Probes").
  bool exempt_node = true;
  // skb->mark that makes the proxy netns route captured packets `local` (bpf_sk_assign
  // needs it): ip rule fwmark <mark>/<mark> lookup <table>; ip route add local 0/0 dev lo.
  uint32_t mark = 0x539;  // FERRY_DEFAULT_PROXY_MARK (bpf/shared/datapath.h), Istio's TPROXY mark
  bool operator==(const Datapath&) const = default;
};

// Admission limits of one data-plane listener (docs/configuration.md, "Limits", says how
// the defaults were sized). "Pending" is a connection accepted whose first protocol step is
// not done yet: the TLS handshake on 15008, the PROXY header on 15001/15006 (none with
// `original_destination: socket`). A limit only ever refuses a new connection; one that
// was admitted is never cut by it.
inline constexpr uint8_t kWrittenConnections = 1, kWrittenConnectionsPerSource = 2, kWrittenPending = 4,
                         kWrittenPendingPerSource = 8;
struct ListenerLimits {
  uint32_t max_connections = 0;             // open at once on this listener kind
  uint32_t max_connections_per_source = 0;  // from one source IP
  uint32_t max_pending = 0;                 // not yet past the handshake
  uint32_t max_pending_per_source = 0;      // of those, from one source IP
  // New connections a second from one source IP (a token bucket holding up to
  // max(this, max_connections_per_source)); 0: no rate.
  uint32_t max_new_per_source_per_second = 0;
  // Which were written in the file (kWritten*): the others are defaults, which ferryd lowers
  // to fit its memory limit (proxy/config/memory_budget.h).
  uint8_t written = 0;
  bool operator==(const ListenerLimits&) const = default;
};

// limits.memory: the cgroup's limit (auto), this many bytes, or none (no fitting). The same
// three for limits.receive_buffer.
struct MemorySetting {
  enum class Source { kAuto, kBytes, kNone };
  Source source = Source::kAuto;
  uint64_t bytes = 0;  // with kBytes
  bool operator==(const MemorySetting&) const = default;
};

// What the admission limits were fitted to (proxy/config/memory_budget.h).
struct MemoryBudget {
  uint64_t limit = 0;        // bytes; 0: no limit (none found, or limits.memory: none)
  std::string source;        // the cgroup file, "limits.memory" or "none"
  uint64_t headroom = 0;     // kept for ferryd's own state
  uint64_t available = 0;    // limit - headroom: what the admission limits may cost
  uint64_t worst_case = 0;   // what the limits in force cost at worst
  uint64_t default_worst_case = 0;  // what they would, left as the file has them
  uint64_t receive_buffer = 0;      // the receive budget in force; 0: none (limits.receive_buffer)
  bool lowered = false;      // limits left at their defaults were lowered to fit
  bool operator==(const MemoryBudget&) const = default;
};

struct Limits {
  // 15008: sources are pods of any node (each pooled tunnel is one connection).
  ListenerLimits hbone{4096, 512, 2048, 256, 256};
  // 15001: sources are this node's pods (one connection per application connection). Its
  // pending phase is the PROXY header (original_destination: proxy_protocol); with the
  // datapath (socket) it ends at accept, and a pod's burst of connects must not be cut.
  ListenerLimits outbound{65536, 16384, 8192, 4096};
  // 15006: sources are any client of a local pod that is not in the mesh.
  ListenerLimits inbound_plaintext{65536, 16384, 8192, 4096};
  // Descriptors kept back from the data plane (of RLIMIT_NOFILE) so that readiness,
  // metrics, admin and the control thread's files always have one.
  uint32_t descriptor_reserve = 256;
  // Socket states (~200 bytes each, kept by Asio for ever) made at start, spread over the
  // workers, so that a flood's leftovers do not pin the pages it freed (server/data_plane.cc). 16,384:
  // a node carrying 10,000 proxied connections holds ~10,100 sockets, and the workers do
  // not share them evenly (docs/benchmarks/soak.md); 8,192 left RSS +40 % after it.
  uint32_t preallocated_sockets = 16384;
  // malloc_trim() after this many closes (and the burst is over); 0 = never.
  uint32_t trim_after_closes = 32;
  // The memory the admission limits must fit (docs/configuration.md, "Memory").
  MemorySetting memory;
  // Bytes received over HBONE and not yet written to the applications, all connections
  // together (proxy/hbone/receive_budget.h): auto (an eighth of what the memory limit leaves
  // for connections; 256 MiB without a limit), a size, or none (only the HTTP/2 windows).
  MemorySetting receive_buffer;
  bool operator==(const Limits&) const = default;
};

// Where workload certificates come from (docs/security.md, "Trust model").
enum class CertSourceKind {
  kFiles,  // cert_dir/<ns>/<sa>/{cert,key}.pem written by an agent (cert-manager, SPIRE helper)
  kCa,     // issued in-process by ferryd from a CA (the lab: a per-node intermediate)
  kClusterCa,  // signed by ferry-ca for CSRs ferryd makes (docs/ferry-ca.md): no CA key on the node
};

inline constexpr EnumName<CertSourceKind> kCertSourceNames[] = {
    {"files", CertSourceKind::kFiles}, {"ca", CertSourceKind::kCa}, {"cluster-ca", CertSourceKind::kClusterCa}};
// The config file's spelling of a source ("files", "ca", "cluster-ca").
inline const char* identitySourceName(CertSourceKind kind) { return nameOf(kCertSourceNames, kind); }

// identity.source: cluster-ca (docs/ferry-ca.md, "ferryd as the client").
struct ClusterCa {
  std::string address;      // host:port of ferry-ca's signing port; required with cluster-ca
  std::string server_name;  // the name its certificate must carry; defaulted to address's host
  std::string token_file;   // projected token (audience ferry-ca); required with cluster-ca
  Millis request_timeout{10'000};
  bool operator==(const ClusterCa&) const = default;
};

struct Identity {
  // Outside Kubernetes there is no ferry-ca to ask: files by default. The chart's default is
  // cluster-ca (charts/ferry/values.yaml, identity.source).
  CertSourceKind source = CertSourceKind::kFiles;
  std::string ca_cert;  // PEM: the issuing CA first, then its chain up to (not incl.) the root
  std::string ca_key;   // PEM private key of the issuing CA
  Millis leaf_lifetime{24 * 3600 * 1000};  // 24 h: ztunnel's and Istio's default
  // How often ca_cert, ca_key and cert_dir/bundle.pem are checked for changes (source: ca).
  Millis poll_interval{1'000};
  ClusterCa cluster_ca;
  bool operator==(const Identity&) const = default;
};

// The Istio metrics' cluster and Service names (docs/operations.md, "Istio TCP metrics").
struct Telemetry {
  std::string cluster_id = "Kubernetes";         // source_cluster, destination_cluster (Istio's default)
  std::string cluster_domain = "cluster.local";  // destination_service: <name>.<namespace>.svc.<domain>
  // An Istio series whose pair of workloads has had no open connection and no new byte for
  // this long is dropped (Deployment churn would grow them until restart).
  Millis series_expiry{std::chrono::minutes(10)};
  friend bool operator==(const Telemetry&, const Telemetry&) = default;
};

// Shorter leaves would be refreshed (half life) more often than every second, i.e. on nearly
// every handshake; seconds-long lifetimes are only for tests that rotate many times.
inline constexpr Millis kMinLeafLifetime{2'000};

// Where the workload registry comes from (docs/configuration.md, "Workload sources").
enum class WorkloadSourceKind {
  kFile,        // workloads_file, watched (labs; clusters where a controller writes it)
  kKubernetes,  // the API server: Pods, Namespaces, Services, EndpointSlices
};
inline constexpr EnumName<WorkloadSourceKind> kWorkloadSourceNames[] = {
    {"file", WorkloadSourceKind::kFile}, {"kubernetes", WorkloadSourceKind::kKubernetes}};

struct Kubernetes {
  std::string kubeconfig;  // empty: in-cluster (service-account token, KUBERNETES_SERVICE_HOST)
  bool istio_ambient = false;  // also enrol istio.io/dataplane-mode=ambient
  // Readiness fails once the state is older than this without a good sync; the last good
  // state keeps serving meanwhile. 5 min: several watch timeouts and re-lists.
  Millis max_state_age{300'000};
  // ferryd's own DaemonSet ("<namespace>/<name>"; the chart sets it): once ferryd has seen
  // it deleted, a stop is an uninstall and removes every program and pin. Empty: every
  // stop is a restart (pins stay for the next ferryd).
  std::string daemonset_namespace, daemonset_name;
  bool operator==(const Kubernetes&) const = default;
};

// `cni`: ferry-cni's enrolment endpoint on the node and the chain entry ferryd keeps in the
// node's CNI configuration (docs/install.md, "The CNI chain").
enum class CniFailurePolicy {
  kClosed,  // ferryd unreachable: ADD fails (code 11) for every pod outside exclude_namespaces
  kOpen,    // ferryd unreachable: ADD succeeds unenrolled (discovery enrols the pod later)
};
inline constexpr EnumName<CniFailurePolicy> kCniFailurePolicyNames[] = {{"closed", CniFailurePolicy::kClosed},
                                                                        {"open", CniFailurePolicy::kOpen}};
struct Cni {
  bool enabled = false;  // serve the endpoint
  // A path socket (not abstract): the plugin runs in the node's netns, ferryd may not.
  std::string socket = "/var/run/ferry/cni.sock";
  // One record per enrolled sandbox, read back after a restart (tmpfs: gone with a reboot,
  // as the sandboxes are).
  std::string state_dir = "/var/run/ferry/cni";
  // How long an ADD waits for the API server's copy of the pod (the kubelet and ferryd watch
  // the same server: usually already there). Past it the plugin answers "try again later".
  Millis pod_wait{2'000};
  // Installation: ferryd copies the plugin into bin_dir and keeps its entry last in the
  // first configuration list of conf_dir, re-chaining when the primary CNI rewrites it.
  bool install = false;
  std::string bin_dir = "/opt/cni/bin";
  std::string conf_dir = "/etc/cni/net.d";
  std::string plugin_binary;  // empty: ferry-cni beside ferryd's own executable
  // What the chain entry tells the plugin (each call reads it afresh).
  CniFailurePolicy failure_policy = CniFailurePolicy::kClosed;
  // Never sent to ferryd: kube-system's pods and ferryd's own (a ferryd that is down must
  // be able to start). kubernetes.daemonset's namespace is added to these.
  std::vector<std::string> exclude_namespaces{"kube-system"};
  Millis plugin_timeout{5'000};  // one plugin call, connect to answer
  // conf_dir as the node sees it (ferryd may have it mounted elsewhere); empty: conf_dir.
  std::string node_conf_dir;
  // The plugin's own ServiceAccount, "<namespace>/<name>" (get pods and namespaces): with
  // install and workload_source kubernetes, ferryd keeps a token of it in
  // <conf_dir>/ferry-cni.kubeconfig, which the plugin uses while ferryd is unreachable to let
  // pods ferry would not enrol start (docs/install.md, "When ferryd is down"). Empty: none;
  // under `closed` every pod outside exclude_namespaces then waits for ferryd.
  std::string service_account;
  Millis token_lifetime{172'800'000};  // 48 h; renewed at half life
  const std::string& nodeConfDir() const { return node_conf_dir.empty() ? conf_dir : node_conf_dir; }
  bool operator==(const Cni&) const = default;
};

// `policy`: where AuthorizationPolicy and PeerAuthentication objects come from
// (docs/policy.md).
struct Policy {
  // Istio's meshConfig.rootNamespace: its policies without a selector apply mesh-wide.
  std::string root_namespace = "istio-system";
  // YAML files of policy objects (multi-document), watched every workloads_poll.
  std::vector<std::string> files;
  // With workload_source kubernetes: watch both kinds in the cluster (security.istio.io).
  bool kubernetes = true;
  bool operator==(const Policy&) const = default;
};

// `access_log` (docs/operations.md, "Access log"): one record per proxied connection at
// close. Live settings: the session layer reads them per record (session::AccessLogSettings).
enum class AccessLogFormat { kText, kJson };
inline constexpr EnumName<AccessLogFormat> kAccessLogFormatNames[] = {{"text", AccessLogFormat::kText},
                                                                      {"json", AccessLogFormat::kJson}};
struct AccessLog {
  bool enabled = true;
  AccessLogFormat format = AccessLogFormat::kText;
  // Fraction (0..1, to 1e-6) of the connections that end `ok` written, evenly spaced;
  // connections that fail are always written, within the limit below.
  double sample_success = 1.0;
  // Failure records each worker may write: `failures_burst` at once, then
  // `failures_per_second`. Per worker, so that no lock is shared on the data path: the
  // node's bound is this times `workers`. 100 a second (~25 KB/s of log per worker) keeps
  // a storm of failures readable without letting it fill the disk.
  uint32_t failures_per_second = 100;
  uint32_t failures_burst = 200;
  friend bool operator==(const AccessLog&, const AccessLog&) = default;
};

// A state age bound below one second would flap readiness on an ordinary re-list.
inline constexpr Millis kMinMaxStateAge{1'000};

struct Config {
  std::string node;               // `node`, else env NODE_NAME; matches workloads' `node`
  std::string trust_domain;       // required; e.g. cluster.local
  WorkloadSourceKind workload_source = WorkloadSourceKind::kFile;
  std::string workloads_file;     // required with source file; relative paths resolve against the config file
  Kubernetes kubernetes;
  Cni cni;
  Policy policy;
  std::string cert_dir;           // required; see identity/dir_cert_source.h
  Listen listen;
  Timeouts timeouts;
  Handover handover;
  Pool pool;
  Hbone hbone;
  uint32_t workers = 0;           // 0 = one per CPU core
  common::LogLevel log_level = common::LogLevel::kInfo;
  bool transparent = true;        // IP_TRANSPARENT on listeners and upstream sockets
  OriginalDestination original_destination = OriginalDestination::kSocket;
  uint16_t hbone_port = 15008;    // port of peers' HBONE listeners (destination pod IP:port)
  Millis workloads_poll{1'000};   // how often the workloads file is checked for changes
  Datapath datapath;
  Identity identity;
  Limits limits;  // trust roots always come from cert_dir/bundle.pem
  // Not read from the file: the memory limit the admission limits were fitted to, at start
  // and at each reload (proxy/config/memory_budget.h).
  MemoryBudget memory_budget;
  AccessLog access_log;
  Telemetry telemetry;
  bool operator==(const Config&) const = default;  // config/reload.h compares versions
};

// Parses and validates. `source_name` (usually the path) prefixes every error, which also
// names the key and its line: "ferry.yaml:12: timeouts.connect: '10' is not a duration...".
// Relative paths in the file are resolved against `base_dir` (the config file's folder).
// `env_node_name` stands for the environment variable NODE_NAME (the Downward API's
// spec.nodeName in a DaemonSet), used when `node` is absent or empty.
absl::StatusOr<Config> parseConfig(std::string_view yaml_text, std::string_view source_name,
                                   std::string_view base_dir = "", std::string_view env_node_name = "");
// Reads the file; NODE_NAME comes from the process environment.
absl::StatusOr<Config> loadConfigFile(const std::string& path);
// The same through `file`, whose first poll it is: the text read stays the file's baseline,
// so that a later poll reports a change against exactly the version parsed (a reload).
absl::StatusOr<Config> loadConfigFile(common::WatchedFile& file);
// The same for the file's text already read (a reload reads it through common::WatchedFile).
absl::StatusOr<Config> parseConfigFile(std::string_view text, const std::string& path);

}  // namespace ferry::config
