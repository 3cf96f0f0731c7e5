#include "proxy/config/config.h"

#include <arpa/inet.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "proxy/common/cgroup.h"
#include "proxy/common/duration.h"
#include "proxy/common/file.h"
#include "proxy/common/strings.h"
#include "proxy/config/workloads_file.h"
#include "proxy/config/yaml_reader.h"

namespace ferry::config {
namespace {

// SPIFFE-ID spec §2.1 caps the trust domain at 255 bytes.
constexpr size_t kMaxTrustDomainBytes = 255;
// ztunnel's default is 100 streams per HTTP/2 connection; far beyond 1000 a single TCP
// connection's head-of-line blocking costs more than the TLS handshake it saves.
constexpr int64_t kMaxStreamsLimit = 1000;
// One worker per core; more than 256 is a typo on any node ferryd runs on.
constexpr int64_t kMaxWorkers = 256;
// Above any descriptor limit a kernel hands out by default (fs.nr_open is 1,048,576).
constexpr int64_t kMaxAdmissionLimit = 1 << 20;
// The operator endpoints need one descriptor per request, the control thread a few for
// files (workloads, certificates) and the worker event loops one each: below 16 the
// reserve would not even cover those.
constexpr int64_t kMinDescriptorReserve = 16;

bool isTrustDomain(std::string_view name) {
  if (name.empty() || name.size() > kMaxTrustDomainBytes) return false;
  return name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789._-") ==
         std::string_view::npos;
}

std::string resolvePath(std::string_view base_dir, const std::string& path) {
  std::filesystem::path p(path);
  if (p.is_absolute() || base_dir.empty()) return path;
  return (std::filesystem::path(base_dir) / p).lexically_normal().string();
}

class ConfigParser {
 public:
  ConfigParser(std::string_view source_name, std::string_view base_dir, std::string_view env_node_name)
      : reader_(source_name), base_dir_(base_dir), env_node_name_(env_node_name) {}

  absl::StatusOr<Config> parse(std::string_view yaml_text) {
    auto root = reader_.parseDocument(yaml_text);
    if (!root.ok()) return root.status();
    auto top = reader_.map(*root, {"node", "trust_domain", "workload_source", "workloads_file",
                                   "kubernetes", "cni", "policy", "cert_dir", "listen",
                                   "timeouts", "handover", "pool", "hbone", "workers", "log_level", "transparent",
                                   "original_destination", "hbone_port", "workloads_poll", "datapath",
                                   "identity", "limits", "access_log", "telemetry"});
    if (!top.ok()) return top.status();
    if (auto s = parseTop(*top); !s.ok()) return s;
    return std::move(config_);
  }

 private:
  // Where a listen address came from, to name both sides of a clash.
  struct Bound {
    HostPort address;
    std::string path;
    int line = 1;
    bool is_default = false;
  };

  absl::Status parseNode(const YamlMap& top) {
    static constexpr char kRules[] = "' is not a valid node name (use lowercase letters, digits, '.' and '-')";
    auto field = top.find("node");
    // `node:` with nothing after it is empty too (a Helm value left blank).
    if (field && field->node->kind != Value::Kind::kNull) {
      auto text = reader_.string(*field);
      if (!text.ok()) return text.status();
      if (!text->empty()) {
        if (!isObjectName(*text)) return reader_.error(*field, absl::StrCat("'", *text, kRules));
        config_.node = *std::move(text);
        return absl::OkStatus();
      }
    }
    if (env_node_name_.empty()) {
      return reader_.error(field ? field->line : top.line(), "node",
                           "required key is missing or empty and NODE_NAME is not set (a DaemonSet sets it "
                           "from spec.nodeName)");
    }
    if (!isObjectName(env_node_name_)) {
      return reader_.error(field ? field->line : top.line(), "node",
                           absl::StrCat("from NODE_NAME: '", env_node_name_, kRules));
    }
    config_.node = env_node_name_;
    return absl::OkStatus();
  }

  absl::Status parseWorkloadSource(const YamlMap& top) {
    if (auto s = optionalEnum(top, "workload_source", kWorkloadSourceNames, config_.workload_source);
        !s.ok()) {
      return s;
    }
    if (auto field = top.find("workloads_file")) {
      auto text = reader_.string(*field);
      if (!text.ok()) return text.status();
      if (text->empty()) return reader_.error(*field, "must not be empty");
      config_.workloads_file = resolvePath(base_dir_, *text);
    } else if (config_.workload_source == WorkloadSourceKind::kFile) {
      return reader_.error(top.line(), "workloads_file", "required key is missing (workload_source is file)");
    }
    auto field = top.find("kubernetes");
    if (!field) return absl::OkStatus();
    auto map = reader_.map(*field, {"kubeconfig", "istio_ambient", "max_state_age", "daemonset"});
    if (!map.ok()) return map.status();
    Kubernetes& k = config_.kubernetes;
    if (auto kubeconfig = map->find("kubeconfig")) {
      auto text = reader_.string(*kubeconfig);
      if (!text.ok()) return text.status();
      // Empty means in-cluster, as absent does (a Helm value left blank).
      if (!text->empty()) k.kubeconfig = resolvePath(base_dir_, *text);
    }
    if (auto ambient = map->find("istio_ambient")) {
      auto v = reader_.boolean(*ambient);
      if (!v.ok()) return v.status();
      k.istio_ambient = *v;
    }
    if (auto ds = map->find("daemonset")) {
      auto text = reader_.string(*ds);
      if (!text.ok()) return text.status();
      if (!text->empty()) {
        std::vector<std::string> parts = absl::StrSplit(*text, '/');
        if (parts.size() != 2 || !isObjectName(parts[0]) || !isObjectName(parts[1])) {
          return reader_.error(*ds, absl::StrCat("'", *text, "' is not <namespace>/<name> of a DaemonSet"));
        }
        k.daemonset_namespace = parts[0];
        k.daemonset_name = parts[1];
      }
    }
    if (auto s = optionalDuration(*map, "max_state_age", k.max_state_age); !s.ok()) return s;
    if (auto age = map->find("max_state_age"); age && k.max_state_age < kMinMaxStateAge) {
      return reader_.error(*age, absl::StrCat(common::formatDuration(k.max_state_age), " is shorter than ",
                                              common::formatDuration(kMinMaxStateAge)));
    }
    return absl::OkStatus();
  }

  absl::Status parseTop(const YamlMap& top) {
    if (auto s = parseNode(top); !s.ok()) return s;

    auto trust_domain = requiredString(top, "trust_domain");
    if (!trust_domain.ok()) return trust_domain.status();
    if (!isTrustDomain(trust_domain->second)) {
      return reader_.error(trust_domain->first,
                           absl::StrCat("'", trust_domain->second,
                                        "' is not a valid SPIFFE trust domain (1 to 255 lowercase "
                                        "letters, digits, '.', '-', '_')"));
    }
    config_.trust_domain = std::move(trust_domain->second);

    if (auto s = parseWorkloadSource(top); !s.ok()) return s;

    auto cert_dir = requiredString(top, "cert_dir");
    if (!cert_dir.ok()) return cert_dir.status();
    if (cert_dir->second.empty()) return reader_.error(cert_dir->first, "must not be empty");
    config_.cert_dir = resolvePath(base_dir_, cert_dir->second);

    if (auto s = parseListen(top); !s.ok()) return s;
    if (auto s = parseTimeouts(top.find("timeouts")); !s.ok()) return s;
    if (auto s = parseHandover(top.find("handover")); !s.ok()) return s;
    if (auto s = parsePool(top.find("pool")); !s.ok()) return s;
    if (auto s = parseHbone(top.find("hbone")); !s.ok()) return s;
    if (auto s = parseDatapath(top.find("datapath")); !s.ok()) return s;
    if (auto s = parseIdentity(top.find("identity")); !s.ok()) return s;
    if (auto s = parseLimits(top.find("limits")); !s.ok()) return s;
    if (auto s = parseCni(top.find("cni")); !s.ok()) return s;
    if (auto s = parsePolicy(top.find("policy")); !s.ok()) return s;
    if (auto s = parseAccessLog(top.find("access_log")); !s.ok()) return s;
    if (auto s = parseTelemetry(top.find("telemetry")); !s.ok()) return s;

    if (auto field = top.find("workers")) {
      auto workers = reader_.integer(*field, 0, kMaxWorkers);
      if (!workers.ok()) return workers.status();
      config_.workers = static_cast<uint32_t>(*workers);
    }
    if (auto field = top.find("log_level")) {
      auto text = reader_.string(*field);
      if (!text.ok()) return text.status();
      auto level = common::parseLogLevel(*text);
      if (!level.ok()) return reader_.error(*field, level.status().message());
      config_.log_level = *level;
    }
    if (auto field = top.find("transparent")) {
      auto transparent = reader_.boolean(*field);
      if (!transparent.ok()) return transparent.status();
      config_.transparent = *transparent;
    }
    if (auto field = top.find("original_destination")) {
      auto text = reader_.string(*field);
      if (!text.ok()) return text.status();
      if (*text == "socket") {
        config_.original_destination = OriginalDestination::kSocket;
      } else if (*text == "proxy_protocol") {
        config_.original_destination = OriginalDestination::kProxyProtocol;
      } else {
        return reader_.error(*field, absl::StrCat("unknown original_destination '", *text,
                                                  "' (expected socket or proxy_protocol)"));
      }
    }
    if (auto field = top.find("hbone_port")) {
      auto port = reader_.integer(*field, 1, 65535);
      if (!port.ok()) return port.status();
      config_.hbone_port = static_cast<uint16_t>(*port);
    }
    if (auto s = optionalDuration(top, "workloads_poll", config_.workloads_poll); !s.ok()) return s;
    return absl::OkStatus();
  }

  absl::StatusOr<std::pair<YamlField, std::string>> requiredString(const YamlMap& map,
                                                                   std::string_view key) {
    auto field = reader_.require(map, key);
    if (!field.ok()) return field.status();
    auto text = reader_.string(*field);
    if (!text.ok()) return text.status();
    return std::pair{*std::move(field), *std::move(text)};
  }

  absl::Status optionalDuration(const YamlMap& map, std::string_view key, Millis& out) {
    auto field = map.find(key);
    if (!field) return absl::OkStatus();
    auto duration = reader_.positiveDuration(*field);
    if (!duration.ok()) return duration.status();
    out = *duration;
    return absl::OkStatus();
  }

  absl::Status parseListen(const YamlMap& top) {
    // Defaults are ztunnel's ports (docs/architecture.md, "Ports"); the struct itself stays
    // empty so code that builds a Config by hand gets exactly the listeners it asks for.
    const auto any = common::IpAddress(boost::asio::ip::address_v4::any());
    const auto loopback = common::IpAddress(boost::asio::ip::address_v4::loopback());
    Listen& listen = config_.listen;
    listen.outbound = {HostPort{any, 15001}};
    listen.inbound_plaintext = {HostPort{any, 15006}};
    listen.hbone = {HostPort{any, 15008}};
    listen.admin = HostPort{loopback, 15000};
    listen.metrics = HostPort{any, 15020};
    listen.readiness = HostPort{any, 15021};

    std::optional<YamlMap> map;
    int line = 1;
    if (auto field = top.find("listen")) {
      auto parsed = reader_.map(
          *field, {"outbound", "inbound_plaintext", "hbone", "admin", "metrics", "readiness"});
      if (!parsed.ok()) return parsed.status();
      map = *std::move(parsed);
      line = map->line();
    }
    auto list = [&](std::string_view key, std::vector<HostPort>& out) -> absl::Status {
      std::optional<YamlField> field = map ? map->find(key) : std::nullopt;
      if (!field) {
        for (const auto& address : out) {
          bound_.push_back(
              Bound{address, absl::StrCat("listen.", common::toAbsl(key)), line, true});
        }
        return absl::OkStatus();
      }
      auto items = reader_.scalarOrSequence(*field);
      if (!items.ok()) return items.status();
      if (items->empty()) return reader_.error(*field, "needs at least one address");
      out.clear();
      for (const auto& item : *items) {
        auto address = hostPort(item);
        if (!address.ok()) return address.status();
        out.push_back(*address);
      }
      return absl::OkStatus();
    };
    auto single = [&](std::string_view key, HostPort& out) -> absl::Status {
      std::optional<YamlField> field = map ? map->find(key) : std::nullopt;
      if (!field) {
        bound_.push_back(Bound{out, absl::StrCat("listen.", common::toAbsl(key)), line, true});
        return absl::OkStatus();
      }
      auto address = hostPort(*field);
      if (!address.ok()) return address.status();
      out = *address;
      return absl::OkStatus();
    };
    if (auto s = list("outbound", listen.outbound); !s.ok()) return s;
    if (auto s = list("inbound_plaintext", listen.inbound_plaintext); !s.ok()) return s;
    if (auto s = list("hbone", listen.hbone); !s.ok()) return s;
    if (auto s = single("admin", listen.admin); !s.ok()) return s;
    if (!listen.admin.ip.is_loopback()) {
      // The admin endpoint changes ferryd (/logging, /quitquitquit) and shows its state:
      // only this host may reach it (docs/operations.md, "Endpoints").
      return reader_.error(*map->find("admin"), absl::StrCat("'", common::formatHostPort(listen.admin),
                                                             "' is not a loopback address (127.0.0.0/8 or ::1): "
                                                             "the admin endpoint is served to this host only"));
    }
    if (auto s = single("metrics", listen.metrics); !s.ok()) return s;
    if (auto s = single("readiness", listen.readiness); !s.ok()) return s;
    return checkDistinctListeners();
  }

  absl::StatusOr<HostPort> hostPort(const YamlField& field) {
    auto text = reader_.string(field);
    if (!text.ok()) return text.status();
    auto address = common::parseHostPort(*text);
    if (!address.ok()) return reader_.error(field, address.status().message());
    bound_.push_back(Bound{*address, field.path, field.line, false});
    return *address;
  }

  // Two listeners on one address would fail at bind() far from the line that caused it.
  absl::Status checkDistinctListeners() {
    for (size_t i = 0; i < bound_.size(); ++i) {
      for (size_t j = i + 1; j < bound_.size(); ++j) {
        if (!(bound_[i].address == bound_[j].address)) continue;
        // Point at the explicit entry; a default is only the other half of the clash.
        const Bound& here = bound_[j].is_default ? bound_[i] : bound_[j];
        const Bound& other = bound_[j].is_default ? bound_[j] : bound_[i];
        return reader_.error(
            here.line, here.path,
            absl::StrCat(
                common::formatHostPort(here.address), " is already used by ", other.path,
                other.is_default ? " (its default)" : absl::StrCat(" (line ", other.line, ")")));
      }
    }
    return absl::OkStatus();
  }

  absl::Status parseTimeouts(const std::optional<YamlField>& field) {
    if (!field) return absl::OkStatus();
    auto map = reader_.map(*field, {"connect", "handshake", "idle", "drain"});
    if (!map.ok()) return map.status();
    Timeouts& t = config_.timeouts;
    if (auto s = optionalDuration(*map, "connect", t.connect); !s.ok()) return s;
    if (auto s = optionalDuration(*map, "handshake", t.handshake); !s.ok()) return s;
    if (auto s = optionalDuration(*map, "idle", t.idle); !s.ok()) return s;
    return optionalDuration(*map, "drain", t.drain);
  }

  absl::Status parseHandover(const std::optional<YamlField>& field) {
    if (!field) return absl::OkStatus();
    auto map = reader_.map(*field, {"socket", "deadline", "readiness_file", "wait_for_signal"});
    if (!map.ok()) return map.status();
    Handover& h = config_.handover;
    if (auto f = map->find("socket")) {
      auto text = reader_.string(*f);
      if (!text.ok()) return text.status();
      if (!text->empty() && (*text)[0] != '/') return reader_.error(*f, "must be an absolute path (or \"\" for none)");
      // sockaddr_un's sun_path is 108 bytes with its terminator.
      if (text->size() > 107) return reader_.error(*f, "longer than 107 bytes (a unix socket path)");
      h.socket = *std::move(text);
    }
    if (auto f = map->find("readiness_file")) {
      auto text = reader_.string(*f);
      if (!text.ok()) return text.status();
      if (!text->empty() && (*text)[0] != '/') return reader_.error(*f, "must be an absolute path (or \"\" for none)");
      h.readiness_file = *std::move(text);
    }
    if (auto f = map->find("wait_for_signal")) {
      auto value = reader_.boolean(*f);
      if (!value.ok()) return value.status();
      h.wait_for_signal = *value;
    }
    return optionalDuration(*map, "deadline", h.deadline);  // positive
  }

  absl::Status parsePool(const std::optional<YamlField>& field) {
    if (!field) return absl::OkStatus();
    auto map =
        reader_.map(*field, {"max_streams", "idle_release", "ping_interval", "ping_timeout",
                             "workers_per_pair"});
    if (!map.ok()) return map.status();
    Pool& pool = config_.pool;
    if (auto max_streams = map->find("max_streams")) {
      auto value = reader_.integer(*max_streams, 1, kMaxStreamsLimit);
      if (!value.ok()) return value.status();
      pool.max_streams = static_cast<uint32_t>(*value);
    }
    if (auto spread = map->find("workers_per_pair")) {
      auto value = reader_.integer(*spread, 1, kMaxWorkers);
      if (!value.ok()) return value.status();
      pool.workers_per_pair = static_cast<uint32_t>(*value);
    }
    if (auto s = optionalDuration(*map, "idle_release", pool.idle_release); !s.ok()) return s;
    if (auto s = optionalDuration(*map, "ping_interval", pool.ping_interval); !s.ok()) return s;
    if (auto s = optionalDuration(*map, "ping_timeout", pool.ping_timeout); !s.ok()) return s;
    // A timeout no longer than the interval would declare a healthy peer dead between two
    // PINGs. Blame the key the operator wrote (the timeout when both were written).
    if (pool.ping_timeout <= pool.ping_interval) {
      if (auto timeout = map->find("ping_timeout")) {
        return reader_.error(*timeout,
                             absl::StrCat(common::formatDuration(pool.ping_timeout),
                                          " must be longer than pool.ping_interval (",
                                          common::formatDuration(pool.ping_interval), ")"));
      }
      return reader_.error(
          *map->find("ping_interval"),
          absl::StrCat(common::formatDuration(pool.ping_interval),
                       " must be shorter than pool.ping_timeout (",
                       common::formatDuration(pool.ping_timeout), ", the default)"));
    }
    return absl::OkStatus();
  }

  absl::Status parseHbone(const std::optional<YamlField>& field) {
    if (!field) return absl::OkStatus();
    auto map = reader_.map(*field, {"max_pending_connects", "max_premature_resets"});
    if (!map.ok()) return map.status();
    Hbone& hbone = config_.hbone;
    // Past the stream limit (pool.max_streams' bound) a larger value changes nothing.
    if (auto pending = map->find("max_pending_connects")) {
      auto value = reader_.integer(*pending, 1, kMaxStreamsLimit);
      if (!value.ok()) return value.status();
      hbone.max_pending_connects = static_cast<uint32_t>(*value);
    }
    // At least 10: a handful of resets before an answer is normal (applications abort).
    if (auto resets = map->find("max_premature_resets")) {
      auto value = reader_.integer(*resets, 10, 100'000);
      if (!value.ok()) return value.status();
      hbone.max_premature_resets = static_cast<uint32_t>(*value);
    }
    return absl::OkStatus();
  }

  absl::Status parseAccessLog(const std::optional<YamlField>& field) {
    if (!field) return absl::OkStatus();
    auto map = reader_.map(*field, {"enabled", "format", "sample_success", "failures_per_second", "failures_burst"});
    if (!map.ok()) return map.status();
    AccessLog& a = config_.access_log;
    if (auto s = optionalBool(*map, "enabled", a.enabled); !s.ok()) return s;
    if (auto s = optionalEnum(*map, "format", kAccessLogFormatNames, a.format);
        !s.ok()) {
      return s;
    }
    if (auto sample = map->find("sample_success")) {
      auto text = reader_.string(*sample);
      if (!text.ok()) return text.status();
      double v = 0;
      if (!absl::SimpleAtod(*text, &v) || !(v >= 0.0 && v <= 1.0)) {
        return reader_.error(*sample, absl::StrCat("'", *text, "' is not a fraction from 0 to 1 (0.1 writes one "
                                                   "successful connection in ten)"));
      }
      a.sample_success = v;
    }
    // Up to a million a second: beyond that the limit limits nothing a disk could take.
    if (auto s = optionalCount(*map, "failures_per_second", 1, 1'000'000, a.failures_per_second); !s.ok()) return s;
    return optionalCount(*map, "failures_burst", 1, 1'000'000, a.failures_burst);
  }

  absl::Status parsePolicy(const std::optional<YamlField>& field) {
    if (!field) return absl::OkStatus();
    auto map = reader_.map(*field, {"root_namespace", "files", "kubernetes"});
    if (!map.ok()) return map.status();
    Policy& p = config_.policy;
    if (auto f = map->find("root_namespace")) {
      auto text = reader_.string(*f);
      if (!text.ok()) return text.status();
      if (!isObjectName(*text)) return reader_.error(*f, absl::StrCat("'", *text, "' is not a namespace name"));
      p.root_namespace = *std::move(text);
    }
    if (auto f = map->find("files")) {
      auto items = reader_.scalarOrSequence(*f);
      if (!items.ok()) return items.status();
      for (const auto& item : *items) {
        auto text = reader_.string(item);
        if (!text.ok()) return text.status();
        if (text->empty()) return reader_.error(item, "must not be empty");
        p.files.push_back(resolvePath(base_dir_, *text));
      }
    }
    if (auto f = map->find("kubernetes")) {
      auto v = reader_.boolean(*f);
      if (!v.ok()) return v.status();
      p.kubernetes = *v;
    }
    return absl::OkStatus();
  }

  absl::Status parseCni(const std::optional<YamlField>& field) {
    if (!field) return absl::OkStatus();
    auto map = reader_.map(*field, {"enabled", "socket", "state_dir", "pod_wait", "install", "bin_dir", "conf_dir",
                                    "plugin_binary", "failure_policy", "exclude_namespaces", "plugin_timeout",
                                    "node_conf_dir", "service_account", "token_lifetime"});
    if (!map.ok()) return map.status();
    Cni& cni = config_.cni;
    for (auto [key, out] : {std::pair{"enabled", &cni.enabled}, std::pair{"install", &cni.install}}) {
      if (auto f = map->find(key)) {
        auto v = reader_.boolean(*f);
        if (!v.ok()) return v.status();
        *out = *v;
      }
    }
    for (auto [key, out] : {std::pair{"socket", &cni.socket}, std::pair{"state_dir", &cni.state_dir},
                            std::pair{"bin_dir", &cni.bin_dir}, std::pair{"conf_dir", &cni.conf_dir},
                            std::pair{"plugin_binary", &cni.plugin_binary},
                            std::pair{"node_conf_dir", &cni.node_conf_dir}}) {
      if (auto f = map->find(key)) {
        auto text = reader_.string(*f);
        if (!text.ok()) return text.status();
        // The plugin and the runtime see these paths from the node: relative ones mean nothing there.
        if (text->empty() || (*text)[0] != '/') return reader_.error(*f, "must be an absolute path");
        // sockaddr_un's sun_path is 108 bytes with its terminator.
        if (out == &cni.socket && text->size() > 107) return reader_.error(*f, "longer than 107 bytes (a unix socket path)");
        *out = *std::move(text);
      }
    }
    if (auto s = optionalEnum(*map, "failure_policy", kCniFailurePolicyNames, cni.failure_policy);
        !s.ok()) {
      return s;
    }
    if (auto f = map->find("exclude_namespaces")) {
      auto items = reader_.scalarOrSequence(*f);
      if (!items.ok()) return items.status();
      cni.exclude_namespaces.clear();
      for (const auto& item : *items) {
        auto text = reader_.string(item);
        if (!text.ok()) return text.status();
        if (!isObjectName(*text)) return reader_.error(item, absl::StrCat("'", *text, "' is not a namespace name"));
        cni.exclude_namespaces.push_back(*std::move(text));
      }
    }
    if (auto s = optionalDuration(*map, "pod_wait", cni.pod_wait); !s.ok()) return s;
    if (auto s = optionalDuration(*map, "plugin_timeout", cni.plugin_timeout); !s.ok()) return s;
    // The plugin accepts 100 ms to 5 min (proxy/cni/plugin.cc): a value outside would make
    // every call on the node fail as a bad configuration.
    if (cni.plugin_timeout < Millis{100} || cni.plugin_timeout > Millis{300'000}) {
      return reader_.error(*map->find("plugin_timeout"), absl::StrCat(common::formatDuration(cni.plugin_timeout),
                                                                      " is outside 100ms to 5m"));
    }
    // The plugin's bound must leave room for the wait it may be answered after.
    if (cni.plugin_timeout <= cni.pod_wait) {
      return reader_.error(*field, absl::StrCat("plugin_timeout (", common::formatDuration(cni.plugin_timeout),
                                                ") must be longer than pod_wait (", common::formatDuration(cni.pod_wait), ")"));
    }
    if (cni.install && !cni.enabled) return reader_.error(*field, "install needs enabled: true (the plugin talks to the endpoint)");
    // The endpoint enrols pods into the tc datapath (parsed before this section).
    if (cni.enabled && !config_.datapath.enabled) {
      return reader_.error(*field, "enabled needs the tc datapath (datapath.enabled: true)");
    }
    if (auto f = map->find("service_account")) {
      auto text = reader_.string(*f);
      if (!text.ok()) return text.status();
      size_t slash = text->find('/');
      if (!text->empty() && (slash == std::string::npos || !isObjectName(text->substr(0, slash)) ||
                             !isObjectName(text->substr(slash + 1)))) {
        return reader_.error(*f, absl::StrCat("'", *text, "' is not <namespace>/<serviceaccount>"));
      }
      cni.service_account = *std::move(text);
      if (!cni.service_account.empty() && !cni.install) {
        return reader_.error(*f, "needs install: true (ferryd writes the plugin's kubeconfig beside its chain entry)");
      }
      if (!cni.service_account.empty() && config_.workload_source != WorkloadSourceKind::kKubernetes) {
        return reader_.error(*f, "needs workload_source: kubernetes (the token comes from the API server)");
      }
    }
    if (auto s = optionalDuration(*map, "token_lifetime", cni.token_lifetime); !s.ok()) return s;
    // The API server refuses a TokenRequest under 10 minutes.
    if (cni.token_lifetime < Millis{600'000}) {
      return reader_.error(*map->find("token_lifetime"), absl::StrCat(common::formatDuration(cni.token_lifetime),
                                                                      " is shorter than the API server's minimum, 10m"));
    }
    return absl::OkStatus();
  }

  // One of `names` (the config spelling), mapped to the enum value at the same index.
  template <typename E, size_t N>
  absl::Status optionalEnum(const YamlMap& map, std::string_view key, const EnumName<E> (&names)[N], E& out) {
    auto field = map.find(key);
    if (!field) return absl::OkStatus();
    auto text = reader_.string(*field);
    if (!text.ok()) return text.status();
    std::string expected;
    for (const auto& [name, value] : names) {
      if (*text == name) {
        out = value;
        return absl::OkStatus();
      }
      absl::StrAppend(&expected, expected.empty() ? "" : ", ", name);
    }
    return reader_.error(*field, absl::StrCat("'", *text, "' is not one of: ", expected));
  }

  absl::Status optionalBool(const YamlMap& map, std::string_view key, bool& out) {
    auto field = map.find(key);
    if (!field) return absl::OkStatus();
    auto v = reader_.boolean(*field);
    if (!v.ok()) return v.status();
    out = *v;
    return absl::OkStatus();
  }

  absl::Status optionalCount(const YamlMap& map, std::string_view key, int64_t min, int64_t max, uint32_t& out) {
    auto field = map.find(key);
    if (!field) return absl::OkStatus();
    auto v = reader_.integer(*field, min, max);
    if (!v.ok()) return v.status();
    out = static_cast<uint32_t>(*v);
    return absl::OkStatus();
  }

  absl::Status optionalString(const YamlMap& map, std::string_view key, std::string& out) {
    auto field = map.find(key);
    if (!field) return absl::OkStatus();
    auto text = reader_.string(*field);
    if (!text.ok()) return text.status();
    if (text->empty()) return reader_.error(*field, "must not be empty");
    out = *text;
    return absl::OkStatus();
  }

  absl::Status parseTelemetry(const std::optional<YamlField>& field) {
    if (!field) return absl::OkStatus();
    auto map = reader_.map(*field, {"cluster_id", "cluster_domain", "series_expiry"});
    if (!map.ok()) return map.status();
    if (auto s = optionalString(*map, "cluster_id", config_.telemetry.cluster_id); !s.ok()) return s;
    if (auto s = optionalString(*map, "cluster_domain", config_.telemetry.cluster_domain); !s.ok()) return s;
    return optionalDuration(*map, "series_expiry", config_.telemetry.series_expiry);
  }

  absl::Status parseIdentity(const std::optional<YamlField>& field) {
    if (!field) return absl::OkStatus();
    auto map = reader_.map(*field, {"source", "ca_cert", "ca_key", "leaf_lifetime", "poll_interval", "cluster_ca"});
    if (!map.ok()) return map.status();
    Identity& id = config_.identity;
    if (auto s = optionalEnum(*map, "source", kCertSourceNames, id.source);
        !s.ok()) {
      return s;
    }
    if (auto s = optionalString(*map, "ca_cert", id.ca_cert); !s.ok()) return s;
    if (auto s = optionalString(*map, "ca_key", id.ca_key); !s.ok()) return s;
    if (auto s = optionalDuration(*map, "leaf_lifetime", id.leaf_lifetime); !s.ok()) return s;
    if (auto lifetime = map->find("leaf_lifetime")) {
      if (id.leaf_lifetime < kMinLeafLifetime) {
        return reader_.error(*lifetime, absl::StrCat(common::formatDuration(id.leaf_lifetime), " is shorter than ",
                                                     common::formatDuration(kMinLeafLifetime)));
      }
      if (id.leaf_lifetime.count() % 1000 != 0) {
        return reader_.error(*lifetime, absl::StrCat(common::formatDuration(id.leaf_lifetime),
                                                     " is not a whole number of seconds (X.509 times are)"));
      }
    }
    if (auto s = optionalDuration(*map, "poll_interval", id.poll_interval); !s.ok()) return s;
    if (id.source == CertSourceKind::kCa) {
      if (id.ca_cert.empty()) return reader_.error(*field, "identity.ca_cert is required with source: ca");
      if (id.ca_key.empty()) return reader_.error(*field, "identity.ca_key is required with source: ca");
      id.ca_cert = resolvePath(base_dir_, id.ca_cert);
      id.ca_key = resolvePath(base_dir_, id.ca_key);
    }
    return parseClusterCa(*field, *map);
  }

  absl::Status parseClusterCa(const YamlField& identity, const YamlMap& parent) {
    ClusterCa& c = config_.identity.cluster_ca;
    auto field = parent.find("cluster_ca");
    if (field) {
      auto map = reader_.map(*field, {"address", "server_name", "token_file", "request_timeout"});
      if (!map.ok()) return map.status();
      if (auto address = map->find("address")) {
        auto text = reader_.string(*address);
        if (!text.ok()) return text.status();
        auto host = hostOfAddress(*text);
        if (!host.ok()) return reader_.error(*address, host.status().message());
        c.address = *text;
        c.server_name = *host;
      }
      if (auto s = optionalString(*map, "server_name", c.server_name); !s.ok()) return s;
      if (auto s = optionalString(*map, "token_file", c.token_file); !s.ok()) return s;
      if (auto s = optionalDuration(*map, "request_timeout", c.request_timeout); !s.ok()) return s;
    }
    if (config_.identity.source != CertSourceKind::kClusterCa) return absl::OkStatus();
    const YamlField& where = field ? *field : identity;
    if (c.address.empty()) return reader_.error(where, "identity.cluster_ca.address is required with source: cluster-ca");
    if (c.token_file.empty()) {
      return reader_.error(where, "identity.cluster_ca.token_file is required with source: cluster-ca");
    }
    c.token_file = resolvePath(base_dir_, c.token_file);
    return absl::OkStatus();
  }

  // The host of "host:port" or "[v6]:port", the form ferry-ca is dialled by.
  static absl::StatusOr<std::string> hostOfAddress(std::string_view text) {
    const std::string whole(text);
    std::string_view host, port;
    if (!text.empty() && text[0] == '[') {
      size_t close = text.find("]:");
      if (close == std::string_view::npos) return absl::InvalidArgumentError(absl::StrCat("'", whole, "' is not [ipv6]:port"));
      host = text.substr(1, close - 1);
      port = text.substr(close + 2);
    } else {
      size_t colon = text.rfind(':');
      if (colon == std::string_view::npos || text.find(':') != colon) {
        return absl::InvalidArgumentError(absl::StrCat("'", whole, "' is not host:port (e.g. ferry-ca.ferry-system.svc:15012)"));
      }
      host = text.substr(0, colon);
      port = text.substr(colon + 1);
    }
    int number = 0;
    if (!absl::SimpleAtoi(common::toAbsl(port), &number) || number < 1 || number > 65535) {
      return absl::InvalidArgumentError(absl::StrCat("'", whole, "': the port must be 1 to 65535"));
    }
    if (host.empty() || host.find_first_of(" /?#@") != std::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("'", whole, "': the host is empty or not a name or address"));
    }
    return std::string(host);
  }

  absl::Status parseListenerLimits(const YamlMap& limits, std::string_view key, ListenerLimits& out) {
    auto field = limits.find(key);
    if (!field) return absl::OkStatus();
    auto map = reader_.map(*field, {"max_connections", "max_connections_per_source", "max_pending_handshakes",
                                    "max_pending_handshakes_per_source", "max_new_connections_per_source_per_second"});
    if (!map.ok()) return map.status();
    auto read = [&](std::string_view name, uint32_t& value, uint8_t bit) -> absl::Status {
      auto f = map->find(name);
      if (!f) return absl::OkStatus();
      // 0 would refuse everything; no limit at all is what the descriptor cap is for.
      auto v = reader_.integer(*f, 1, kMaxAdmissionLimit);
      if (!v.ok()) return v.status();
      value = static_cast<uint32_t>(*v);
      out.written |= bit;
      return absl::OkStatus();
    };
    if (auto s = read("max_connections", out.max_connections, kWrittenConnections); !s.ok()) return s;
    if (auto s = read("max_connections_per_source", out.max_connections_per_source, kWrittenConnectionsPerSource);
        !s.ok()) {
      return s;
    }
    if (auto s = read("max_pending_handshakes", out.max_pending, kWrittenPending); !s.ok()) return s;
    if (auto s = read("max_pending_handshakes_per_source", out.max_pending_per_source, kWrittenPendingPerSource);
        !s.ok()) {
      return s;
    }
    if (auto f = map->find("max_new_connections_per_source_per_second")) {
      auto v = reader_.integer(*f, 0, kMaxAdmissionLimit);  // 0: no rate
      if (!v.ok()) return v.status();
      out.max_new_per_source_per_second = static_cast<uint32_t>(*v);
    }
    // A per-source or pending limit above the one it is part of could never be reached:
    // written so, it is almost certainly a typo (say which); left at its default under a
    // lower written limit, it follows that limit down.
    auto bound = [&](std::string_view name, uint32_t& value, std::string_view whole_name,
                     uint32_t whole) -> absl::Status {
      if (value <= whole) return absl::OkStatus();
      if (auto f = map->find(name)) {
        return reader_.error(*f, absl::StrCat(value, " is above ", common::toAbsl(whole_name), " (", whole, ")"));
      }
      value = whole;
      return absl::OkStatus();
    };
    if (auto s = bound("max_connections_per_source", out.max_connections_per_source, "max_connections",
                       out.max_connections);
        !s.ok()) {
      return s;
    }
    if (auto s = bound("max_pending_handshakes", out.max_pending, "max_connections", out.max_connections);
        !s.ok()) {
      return s;
    }
    if (auto s = bound("max_pending_handshakes_per_source", out.max_pending_per_source, "max_pending_handshakes",
                       out.max_pending);
        !s.ok()) {
      return s;
    }
    if (auto s = bound("max_pending_handshakes_per_source", out.max_pending_per_source,
                       "max_connections_per_source", out.max_connections_per_source);
        !s.ok()) {
      return s;
    }
    return absl::OkStatus();
  }

  // auto, none or a size.
  absl::StatusOr<MemorySetting> memorySetting(const YamlField& f) {
    auto v = reader_.string(f);
    if (!v.ok()) return v.status();
    if (*v == "auto") return MemorySetting{};
    if (*v == "none") return MemorySetting{MemorySetting::Source::kNone, 0};
    if (auto bytes = common::parseByteSize(*v); bytes && *bytes > 0) {
      return MemorySetting{MemorySetting::Source::kBytes, *bytes};
    }
    return reader_.error(f, absl::StrCat("'", common::toAbsl(*v),
                                         "' is not auto, none or a size (bytes, or with Ki, Mi, Gi)"));
  }

  absl::Status parseLimits(const std::optional<YamlField>& field) {
    if (!field) return absl::OkStatus();
    auto map = reader_.map(*field, {"hbone", "outbound", "inbound_plaintext", "descriptor_reserve",
                                    "preallocated_sockets", "trim_after_closes", "memory", "receive_buffer"});
    if (!map.ok()) return map.status();
    Limits& l = config_.limits;
    if (auto s = parseListenerLimits(*map, "hbone", l.hbone); !s.ok()) return s;
    if (auto s = parseListenerLimits(*map, "outbound", l.outbound); !s.ok()) return s;
    if (auto s = parseListenerLimits(*map, "inbound_plaintext", l.inbound_plaintext); !s.ok()) return s;
    if (auto f = map->find("descriptor_reserve")) {
      auto v = reader_.integer(*f, kMinDescriptorReserve, kMaxAdmissionLimit);
      if (!v.ok()) return v.status();
      l.descriptor_reserve = static_cast<uint32_t>(*v);
    }
    if (auto f = map->find("preallocated_sockets")) {
      auto v = reader_.integer(*f, 0, kMaxAdmissionLimit);
      if (!v.ok()) return v.status();
      l.preallocated_sockets = static_cast<uint32_t>(*v);
    }
    if (auto f = map->find("memory")) {
      auto v = memorySetting(*f);
      if (!v.ok()) return v.status();
      l.memory = *v;
    }
    if (auto f = map->find("receive_buffer")) {
      auto v = memorySetting(*f);
      if (!v.ok()) return v.status();
      l.receive_buffer = *v;
    }
    if (auto f = map->find("trim_after_closes")) {
      auto v = reader_.integer(*f, 0, kMaxAdmissionLimit);
      if (!v.ok()) return v.status();
      l.trim_after_closes = static_cast<uint32_t>(*v);
    }
    return absl::OkStatus();
  }

  absl::Status parseDatapath(const std::optional<YamlField>& field) {
    if (!field) return absl::OkStatus();
    auto map = reader_.map(*field, {"enabled", "injection", "egress_flag", "proxy_netns",
                                    "proxy_interface", "host_proxy_interface", "bpffs", "capture",
                                    "failure_mode", "mark", "proxy_address", "exempt_node"});
    if (!map.ok()) return map.status();
    Datapath& d = config_.datapath;
    if (auto enabled = map->find("enabled")) {
      auto v = reader_.boolean(*enabled);
      if (!v.ok()) return v.status();
      d.enabled = *v;
    }
    if (auto s = optionalEnum(*map, "injection", kInjectionNames, d.injection);
        !s.ok()) {
      return s;
    }
    if (auto s = optionalEnum(*map, "capture", kCaptureNames, d.capture);
        !s.ok()) {
      return s;
    }
    if (auto s = optionalEnum(*map, "failure_mode", kFailureModeNames, d.failure_mode);
        !s.ok()) {
      return s;
    }
    if (auto exempt = map->find("exempt_node")) {
      auto v = reader_.boolean(*exempt);
      if (!v.ok()) return v.status();
      d.exempt_node = *v;
    }
    if (auto flag = map->find("egress_flag")) {
      // A single bit above the ones bpf_redirect_peer already knows (BPF_F_INGRESS = 1).
      auto v = reader_.integer(*flag, 2, int64_t{1} << 31);
      if (!v.ok()) return v.status();
      if ((*v & (*v - 1)) != 0) return reader_.error(*flag, "must be a single bit (a power of two)");
      d.egress_flag = static_cast<uint32_t>(*v);
    }
    if (auto mark = map->find("mark")) {
      auto v = reader_.integer(*mark, 1, 0xffffffffLL);
      if (!v.ok()) return v.status();
      d.mark = static_cast<uint32_t>(*v);
    }
    if (auto s = optionalString(*map, "proxy_netns", d.proxy_netns); !s.ok()) return s;
    if (auto s = optionalString(*map, "proxy_interface", d.proxy_interface); !s.ok()) return s;
    if (auto s = optionalString(*map, "host_proxy_interface", d.host_proxy_interface); !s.ok()) return s;
    if (auto s = optionalString(*map, "bpffs", d.bpffs); !s.ok()) return s;
    if (auto f = map->find("proxy_address")) {
      if (auto s = optionalString(*map, "proxy_address", d.proxy_address); !s.ok()) return s;
      in_addr a{};
      // The node's side takes the next address: the last one of the space cannot be used.
      if (inet_pton(AF_INET, d.proxy_address.c_str(), &a) != 1 || a.s_addr == 0xffffffffu) {
        return reader_.error(*f, absl::StrCat("'", d.proxy_address, "' is not an IPv4 address (e.g. 169.254.77.1)"));
      }
    }
    d.proxy_netns_auto = d.proxy_netns == "auto";
    if (d.proxy_netns_auto && d.host_proxy_interface.empty()) d.host_proxy_interface = "ferry-proxy";
    if (d.enabled) {
      if (d.proxy_netns.empty()) return reader_.error(*field, "datapath.proxy_netns is required when enabled");
      if (d.host_proxy_interface.empty()) {
        return reader_.error(*field, "datapath.host_proxy_interface is required when enabled");
      }
      if (!d.proxy_netns_auto) d.proxy_netns = resolvePath(base_dir_, d.proxy_netns);
      d.bpffs = resolvePath(base_dir_, d.bpffs);
    }
    return absl::OkStatus();
  }

  YamlReader reader_;
  std::string base_dir_;
  std::string env_node_name_;
  Config config_;
  std::vector<Bound> bound_;
};

}  // namespace

absl::StatusOr<Config> parseConfig(std::string_view yaml_text, std::string_view source_name,
                                   std::string_view base_dir, std::string_view env_node_name) {
  return ConfigParser(source_name, base_dir, env_node_name).parse(yaml_text);
}

absl::StatusOr<Config> loadConfigFile(const std::string& path) {
  common::WatchedFile file(path);
  return loadConfigFile(file);
}

absl::StatusOr<Config> loadConfigFile(common::WatchedFile& file) {
  if (file.poll() == common::WatchedFile::Result::kFailed) {
    return absl::InvalidArgumentError(absl::StrCat("cannot read the config file: ", file.error().message()));
  }
  return parseConfigFile(file.content(), file.path());
}

absl::StatusOr<Config> parseConfigFile(std::string_view text, const std::string& path) {
  const char* env_node = std::getenv("NODE_NAME");
  return parseConfig(text, path, std::filesystem::path(path).parent_path().string(),
                     env_node != nullptr ? env_node : "");
}

}  // namespace ferry::config
