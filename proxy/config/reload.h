#pragma once
// What a reload of the config file may change in a running ferryd (docs/configuration.md,
// "Reloading"): one table says, for each key, whether a new value applies live or only at
// the next start. The running config is never replaced as a whole: a reload takes the live
// keys of the new file into it and reports the others.
#include <string>
#include <vector>

#include "proxy/config/config.h"

namespace ferry::config {

enum class Reload {
  kLive,     // the running ferryd takes the new value (what each key's row says about when)
  kRestart,  // bound at start (sockets, threads, the datapath, identity): reported, not applied
};

// The table: the key as written in the file, how a change applies, the Config member.
// A key held in two members (kubernetes.daemonset) has one row per member; a change is
// reported once. A new Config member needs a row here (and a row in docs/configuration.md);
// ConfigReload.TableCoversEveryKey fails when one is missing.
#define FERRY_CONFIG_KEYS(X)                                                   \
  X("node", kRestart, node)                                                    \
  X("trust_domain", kRestart, trust_domain)                                    \
  X("workload_source", kRestart, workload_source)                              \
  X("workloads_file", kRestart, workloads_file)                                \
  X("kubernetes.kubeconfig", kRestart, kubernetes.kubeconfig)                  \
  X("kubernetes.istio_ambient", kRestart, kubernetes.istio_ambient)            \
  X("kubernetes.max_state_age", kRestart, kubernetes.max_state_age)            \
  X("kubernetes.daemonset", kRestart, kubernetes.daemonset_namespace)          \
  X("kubernetes.daemonset", kRestart, kubernetes.daemonset_name)               \
  X("cert_dir", kRestart, cert_dir)                                            \
  X("listen.outbound", kRestart, listen.outbound)                              \
  X("listen.inbound_plaintext", kRestart, listen.inbound_plaintext)            \
  X("listen.hbone", kRestart, listen.hbone)                                    \
  X("listen.admin", kRestart, listen.admin)                                    \
  X("listen.metrics", kRestart, listen.metrics)                                \
  X("listen.readiness", kRestart, listen.readiness)                            \
  X("timeouts.connect", kLive, timeouts.connect)                               \
  X("timeouts.handshake", kLive, timeouts.handshake)                           \
  X("timeouts.idle", kLive, timeouts.idle)                                     \
  X("timeouts.drain", kLive, timeouts.drain)                                   \
  X("handover.socket", kRestart, handover.socket)                              \
  X("handover.deadline", kLive, handover.deadline)                             \
  X("handover.readiness_file", kRestart, handover.readiness_file)              \
  X("handover.wait_for_signal", kLive, handover.wait_for_signal)               \
  X("pool.max_streams", kLive, pool.max_streams)                               \
  X("pool.idle_release", kLive, pool.idle_release)                             \
  X("pool.ping_interval", kLive, pool.ping_interval)                           \
  X("pool.ping_timeout", kLive, pool.ping_timeout)                             \
  X("pool.workers_per_pair", kLive, pool.workers_per_pair)                     \
  X("hbone.max_pending_connects", kLive, hbone.max_pending_connects)           \
  X("hbone.max_premature_resets", kLive, hbone.max_premature_resets)           \
  X("workers", kRestart, workers)                                              \
  X("log_level", kLive, log_level)                                             \
  X("access_log", kLive, access_log)                                           \
  X("telemetry.cluster_id", kRestart, telemetry.cluster_id)                    \
  X("telemetry.cluster_domain", kRestart, telemetry.cluster_domain)            \
  X("telemetry.series_expiry", kRestart, telemetry.series_expiry)              \
  X("transparent", kRestart, transparent)                                      \
  X("original_destination", kRestart, original_destination)                    \
  X("hbone_port", kRestart, hbone_port)                                        \
  X("workloads_poll", kLive, workloads_poll)                                   \
  X("identity.source", kRestart, identity.source)                              \
  X("identity.ca_cert", kRestart, identity.ca_cert)                            \
  X("identity.ca_key", kRestart, identity.ca_key)                              \
  X("identity.leaf_lifetime", kRestart, identity.leaf_lifetime)                \
  X("identity.poll_interval", kLive, identity.poll_interval)                   \
  X("identity.cluster_ca.address", kRestart, identity.cluster_ca.address)      \
  X("identity.cluster_ca.server_name", kRestart, identity.cluster_ca.server_name) \
  X("identity.cluster_ca.token_file", kRestart, identity.cluster_ca.token_file) \
  X("identity.cluster_ca.request_timeout", kRestart, identity.cluster_ca.request_timeout) \
  X("datapath.enabled", kRestart, datapath.enabled)                            \
  X("datapath.injection", kRestart, datapath.injection)                        \
  X("datapath.egress_flag", kRestart, datapath.egress_flag)                    \
  X("datapath.proxy_netns", kRestart, datapath.proxy_netns)                    \
  X("datapath.proxy_netns", kRestart, datapath.proxy_netns_auto)               \
  X("datapath.proxy_address", kRestart, datapath.proxy_address)                \
  X("datapath.proxy_interface", kRestart, datapath.proxy_interface)            \
  X("datapath.host_proxy_interface", kRestart, datapath.host_proxy_interface)  \
  X("datapath.bpffs", kRestart, datapath.bpffs)                                \
  X("datapath.capture", kRestart, datapath.capture)                            \
  X("datapath.failure_mode", kRestart, datapath.failure_mode)                  \
  X("datapath.exempt_node", kRestart, datapath.exempt_node)                    \
  X("datapath.mark", kRestart, datapath.mark)                                  \
  X("policy.root_namespace", kLive, policy.root_namespace)                     \
  X("policy.files", kLive, policy.files)                                       \
  X("policy.kubernetes", kRestart, policy.kubernetes)                          \
  X("cni.enabled", kRestart, cni.enabled)                                      \
  X("cni.socket", kRestart, cni.socket)                                        \
  X("cni.state_dir", kRestart, cni.state_dir)                                  \
  X("cni.pod_wait", kRestart, cni.pod_wait)                                    \
  X("cni.install", kRestart, cni.install)                                      \
  X("cni.bin_dir", kRestart, cni.bin_dir)                                      \
  X("cni.conf_dir", kRestart, cni.conf_dir)                                    \
  X("cni.plugin_binary", kRestart, cni.plugin_binary)                          \
  X("cni.failure_policy", kRestart, cni.failure_policy)                        \
  X("cni.exclude_namespaces", kRestart, cni.exclude_namespaces)                \
  X("cni.node_conf_dir", kRestart, cni.node_conf_dir)                          \
  X("cni.service_account", kRestart, cni.service_account)                      \
  X("cni.token_lifetime", kRestart, cni.token_lifetime)                        \
  X("cni.plugin_timeout", kRestart, cni.plugin_timeout)                        \
  X("limits.hbone", kLive, limits.hbone)                                       \
  X("limits.outbound", kLive, limits.outbound)                                 \
  X("limits.inbound_plaintext", kLive, limits.inbound_plaintext)               \
  X("limits.descriptor_reserve", kRestart, limits.descriptor_reserve)          \
  X("limits.preallocated_sockets", kRestart, limits.preallocated_sockets)      \
  X("limits.memory", kLive, limits.memory)                                     \
  X("limits.receive_buffer", kLive, limits.receive_buffer)                     \
  X("limits.trim_after_closes", kLive, limits.trim_after_closes)

// How `next` (a new version of the file) differs from `running`, key by key.
struct ConfigChange {
  std::vector<std::string> live;     // applied by a reload, in table order
  std::vector<std::string> restart;  // kept as they run until the next start, in table order
  bool empty() const { return live.empty() && restart.empty(); }
};
ConfigChange diffConfig(const Config& running, const Config& next);

// Takes the live keys of `next` into `running` (what ferryd runs with after reloading
// `next`); restart keys are not touched, not even assigned their own value.
void applyLive(Config& running, const Config& next);

}  // namespace ferry::config
