// ferry-ca: the cluster CA (docs/ferry-ca.md). Signs node daemons' CSRs on 15012 (HTTPS) for
// identities of pods on the caller's node; /metrics and /healthz/ready on 15014 (HTTP).
// Audit lines go to standard output, logs to standard error.
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "proxy/ca/audit.h"
#include "proxy/ca/authorizer.h"
#include "proxy/ca/bundle_publisher.h"
#include "proxy/ca/https_server.h"
#include "proxy/ca/protocol.h"
#include "proxy/ca/rate_limit.h"
#include "proxy/ca/signing_service.h"
#include "proxy/ca/token_reviewer.h"
#include "proxy/common/duration.h"
#include "proxy/common/log.h"
#include "proxy/common/net.h"
#include "proxy/common/strings.h"
#include "proxy/config/kubeconfig.h"
#include "proxy/identity/spiffe_id.h"
#include "proxy/identity/watched_ca_source.h"
#include "proxy/k8s/client.h"
#include "proxy/server/http_server.h"
#include "proxy/telemetry/metrics.h"

namespace {
namespace asio = boost::asio;
using namespace ferry;

constexpr const char* kUsage =
    "usage: ferry-ca --trust-domain TD --ca-cert FILE --ca-key FILE --bundle FILE [options]\n"
    "  --listen ADDR:PORT            signing (HTTPS), default 0.0.0.0:15012\n"
    "  --monitoring-listen ADDR:PORT /metrics, /healthz/ready (HTTP), default 0.0.0.0:15014\n"
    "  --agent-namespace NS          ferryd's namespace (default: $POD_NAMESPACE)\n"
    "  --agent-service-account SA    ferryd's service account (default ferryd)\n"
    "  --audience AUD                the callers' token audience (default ferry-ca)\n"
    "  --service-name NAME           ferry-ca's Service, for its certificate's DNS names (default ferry-ca)\n"
    "  --namespace NS                ferry-ca's namespace, for the same (default: $POD_NAMESPACE)\n"
    "  --server-name NAME            another DNS name of the certificate (repeatable)\n"
    "  --default-validity DURATION   when the request says none (default 24h)\n"
    "  --max-validity DURATION       the longest certificate signed (default 24h)\n"
    "  --node-rate N                 signings per second per node (default 20)\n"
    "  --node-burst N                signings a node may make at once (default 100)\n"
    "  --max-connections N           open signing connections (default 1024)\n"
    "  --max-connections-per-client N  of them from one address (default 64)\n"
    "  --bundle-configmap NAME       publish the bundle's roots to this ConfigMap of --namespace\n"
    "                                and keep it current (default: none)\n"
    "  --bundle-configmap-key KEY    its key (default bundle.pem)\n"
    "  --kubeconfig FILE             the API server (default: in-cluster)\n"
    "  --log-level LEVEL             trace, debug, info, warn, error (default info)\n";

// The CA files are looked at this often: a renewed intermediate (a Secret's update reaches
// the pod's volume within about a minute) is picked up without a restart.
constexpr auto kCaPollInterval = std::chrono::seconds(1);

struct Flags {
  std::string trust_domain, ca_cert, ca_key, bundle;
  common::HostPort listen{asio::ip::make_address("0.0.0.0"), ca::kSigningPort};
  common::HostPort monitoring{asio::ip::make_address("0.0.0.0"), ca::kMonitoringPort};
  std::string agent_namespace, agent_service_account = "ferryd", audience = std::string(ca::kDefaultAudience);
  std::string service_name = "ferry-ca", namespace_name;
  std::vector<std::string> server_names;
  std::chrono::seconds default_validity{24 * 3600}, max_validity{24 * 3600};
  double node_rate = 20, node_burst = 100;
  size_t max_connections = 1024, max_connections_per_client = 64;
  std::string kubeconfig;
  std::string bundle_config_map, bundle_config_map_key = "bundle.pem";
  common::LogLevel log_level = common::LogLevel::kInfo;
};

bool helpAsked(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--help" || std::string_view(argv[i]) == "-h") return true;
  }
  return false;
}

int usageError(const std::string& what) {
  std::fprintf(stderr, "ferry-ca: %s\n%s", what.c_str(), kUsage);
  return 2;
}

// Each flag's setter: it parses the value into its field of Flags; a message on error.
using FlagSetter = std::function<std::string(std::string_view)>;
using FlagTable = std::map<std::string_view, FlagSetter>;

FlagSetter textFlag(std::string& out) {
  return [&out](std::string_view v) { out = v; return std::string(); };
}

FlagSetter addressFlag(common::HostPort& out) {
  return [&out](std::string_view v) -> std::string {
    auto hp = common::parseHostPort(v, /*allow_zero_port=*/true);
    if (!hp.ok()) return std::string(hp.status().message());
    out = *hp;
    return {};
  };
}

FlagSetter durationFlag(std::chrono::seconds& out) {
  return [&out](std::string_view v) -> std::string {
    auto d = common::parseDuration(v);
    if (!d.ok()) return std::string(d.status().message());
    if (*d < std::chrono::minutes(1)) return "must be at least 1m";
    out = std::chrono::duration_cast<std::chrono::seconds>(*d);
    return {};
  };
}

FlagSetter numberFlag(double& out) {
  return [&out](std::string_view v) -> std::string {
    if (!absl::SimpleAtod(common::toAbsl(v), &out) || !(out > 0)) return "must be a number above 0";
    return {};
  };
}

FlagSetter countFlag(size_t& out) {
  return [&out](std::string_view v) -> std::string {
    if (!absl::SimpleAtoi(common::toAbsl(v), &out) || out == 0) return "must be a whole number above 0";
    return {};
  };
}

// Every flag of kUsage but --help, setting its field of `f`.
FlagTable flagTable(Flags& f) {
  FlagTable flags;
  for (auto [name, field] : {std::pair{"--trust-domain", &f.trust_domain}, {"--ca-cert", &f.ca_cert},
                             {"--ca-key", &f.ca_key}, {"--bundle", &f.bundle}, {"--agent-namespace", &f.agent_namespace},
                             {"--agent-service-account", &f.agent_service_account}, {"--audience", &f.audience},
                             {"--service-name", &f.service_name}, {"--namespace", &f.namespace_name},
                             {"--kubeconfig", &f.kubeconfig}, {"--bundle-configmap", &f.bundle_config_map},
                             {"--bundle-configmap-key", &f.bundle_config_map_key}}) {
    flags[name] = textFlag(*field);
  }
  flags["--listen"] = addressFlag(f.listen);
  flags["--monitoring-listen"] = addressFlag(f.monitoring);
  flags["--server-name"] = [&f](std::string_view v) {
    f.server_names.emplace_back(v);
    return std::string();
  };
  flags["--default-validity"] = durationFlag(f.default_validity);
  flags["--max-validity"] = durationFlag(f.max_validity);
  flags["--node-rate"] = numberFlag(f.node_rate);
  flags["--node-burst"] = numberFlag(f.node_burst);
  flags["--max-connections"] = countFlag(f.max_connections);
  flags["--max-connections-per-client"] = countFlag(f.max_connections_per_client);
  flags["--log-level"] = [&f](std::string_view v) -> std::string {
    auto level = common::parseLogLevel(v);
    if (!level.ok()) return std::string(level.status().message());
    f.log_level = *level;
    return {};
  };
  return flags;
}

// Applies argv's flags (`--name value` or `--name=value`) in order; a message at the first
// that is unknown, lacks its value or has a bad one.
std::string applyArgs(int argc, char** argv, const FlagTable& flags) {
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i], value;
    bool inline_value = false;
    if (auto eq = arg.find('='); arg.substr(0, 2) == "--" && eq != std::string_view::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      inline_value = true;
    }
    auto it = flags.find(arg);
    if (it == flags.end()) return absl::StrCat("unknown argument '", common::toAbsl(arg), "'");
    if (!inline_value) {
      if (i + 1 >= argc) return absl::StrCat(common::toAbsl(arg), " needs a value");
      value = argv[++i];
    }
    if (std::string err = it->second(value); !err.empty()) return absl::StrCat(common::toAbsl(arg), " ", common::toAbsl(value), ": ", err);
  }
  return {};
}

// The flags as a whole: the required ones given, the trust domain valid, the namespaces
// known (--namespace defaults to the agents'), the validities in order; a message if not.
std::string checkFlags(Flags& f) {
  for (auto [name, value] : {std::pair{"--trust-domain", &f.trust_domain}, {"--ca-cert", &f.ca_cert},
                             {"--ca-key", &f.ca_key}, {"--bundle", &f.bundle}}) {
    if (value->empty()) return absl::StrCat(name, " is required");
  }
  if (auto st = identity::validateTrustDomain(f.trust_domain); !st.ok()) {
    return absl::StrCat("--trust-domain: ", st.message());
  }
  if (f.agent_namespace.empty()) return "--agent-namespace is required (POD_NAMESPACE is not set)";
  if (f.namespace_name.empty()) f.namespace_name = f.agent_namespace;
  if (f.default_validity > f.max_validity) return "--default-validity is longer than --max-validity";
  if (!f.bundle_config_map.empty() && f.bundle_config_map_key.empty()) return "--bundle-configmap-key is empty";
  return {};
}

// Parses argv into `f`; a message on error.
std::string parseFlags(int argc, char** argv, Flags& f) {
  FlagTable flags = flagTable(f);
  const char* pod_namespace = std::getenv("POD_NAMESPACE");
  if (pod_namespace != nullptr) f.agent_namespace = f.namespace_name = pod_namespace;
  if (std::string err = applyArgs(argc, argv, flags); !err.empty()) return err;
  return checkFlags(f);
}

absl::StatusOr<k8s::ClusterAccess> clusterAccess(const std::string& kubeconfig) {
  if (kubeconfig.empty()) {
    auto in_cluster = k8s::inClusterAccess([](const char* name) { return std::getenv(name); });
    if (!in_cluster.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("in-cluster credentials: ", in_cluster.status().message(), " (outside a cluster, pass --kubeconfig)"));
    }
    return in_cluster;
  }
  auto file = config::loadKubeconfig(kubeconfig);
  if (!file.ok()) return absl::FailedPreconditionError(absl::StrCat("--kubeconfig: ", file.status().message()));
  return k8s::accessFrom(*file);
}

// The API client, in-cluster or from --kubeconfig.
absl::StatusOr<std::unique_ptr<k8s::ApiClient>> apiClient(asio::io_context& io, const std::string& kubeconfig) {
  auto access = clusterAccess(kubeconfig);
  if (!access.ok()) return access.status();
  k8s::Options k8s_options;
  k8s_options.user_agent = "ferry-ca";
  auto client = k8s::ApiClient::create(io, *std::move(access), k8s_options);
  if (!client.ok()) return absl::Status(client.status().code(), absl::StrCat("kubernetes: ", client.status().message()));
  return client;
}

ca::HttpsServerOptions signingServerOptions(const Flags& f) {
  ca::HttpsServerOptions options;
  options.listen = f.listen;
  options.max_connections = f.max_connections;
  options.max_connections_per_client = f.max_connections_per_client;
  return options;
}

ca::SigningSettings signingSettings(const Flags& f) {
  ca::SigningSettings settings;
  settings.authorizer = ca::AuthorizerSettings{f.trust_domain, f.agent_namespace, f.agent_service_account, f.audience};
  settings.default_validity = f.default_validity;
  settings.max_validity = f.max_validity;
  return settings;
}

// /metrics: the signing service's, the signing port's, the serving certificate's, the API
// client's, and the CA's expiry; each registration lives as long as what it reads.
std::vector<telemetry::Registry::Registration> registerMetrics(telemetry::Registry& registry,
                                                               ca::SigningService& service, ca::HttpsServer& signing,
                                                               ca::ServingCertificate& serving,
                                                               k8s::ApiClient& client,
                                                               identity::WatchedCaSource& ca) {
  std::vector<telemetry::Registry::Registration> registrations;
  registrations.push_back(registry.add([&service](telemetry::Exposition& out) { service.collect(out); }));
  registrations.push_back(registry.add([&signing](telemetry::Exposition& out) { signing.collect(out); }));
  registrations.push_back(registry.add([&serving](telemetry::Exposition& out) {
    out.counter("ferry_ca_serving_certificates_total", "Serving certificates issued (start, CA change, half life)",
                static_cast<double>(serving.issued()));
  }));
  registrations.push_back(registry.add([&client](telemetry::Exposition& out) { client.collect(out); }));
  // When the CA stops signing (its certificate or chain expires) and when the roots do: the
  // chart's alerts warn ahead of both (docs/operations.md, "Alerts").
  registrations.push_back(registry.add([&ca](telemetry::Exposition& out) {
    identity::CertificateExpiry expiry;
    if (auto source = ca.current()) expiry.addIssuer(source->authorityNotAfter());
    if (auto bundle = ca.bundle(); bundle.ok()) expiry.addRoots(**bundle);
    auto family = out.gauge(identity::CertificateExpiry::kMetric, identity::CertificateExpiry::kHelp);
    for (const auto& [kind, at] : expiry.samples()) family.add(at, {{"kind", kind}});
  }));
  return registrations;
}

// The monitoring port's pages: /metrics and /healthz/ready (ready once a CA is loaded and the
// pod view has synced).
void routeMonitoring(server::HttpServer& monitoring, telemetry::Registry& registry, ca::SigningService& service) {
  monitoring.route("/metrics", [&registry] {
    return server::HttpResponse{200, "text/plain; version=0.0.4; charset=utf-8", registry.render()};
  });
  monitoring.route("/healthz/ready", [&service] {
    absl::Status st = service.ready();
    if (st.ok()) return server::HttpResponse{200, "text/plain; charset=utf-8", "ready\n"};
    return server::HttpResponse{503, "text/plain; charset=utf-8", absl::StrCat("not ready: ", st.message(), "\n")};
  });
}

void pollCa(asio::steady_timer& timer, identity::WatchedCaSource& ca, ca::BundlePublisher* bundle) {
  timer.expires_after(kCaPollInterval);
  timer.async_wait([&timer, &ca, bundle](const boost::system::error_code& ec) {
    if (ec) return;
    ca.poll();
    if (bundle != nullptr) bundle->poll();
    pollCa(timer, ca, bundle);
  });
}

// SIGTERM or SIGINT stops the ports, the API client and the polling, then the io loop.
void stopOnSignal(asio::signal_set& signals, asio::io_context& io, ca::HttpsServer& signing,
                  server::HttpServer& monitoring, k8s::ApiClient& client, asio::steady_timer& poll_timer) {
  signals.async_wait([&io, &signing, &monitoring, &client, &poll_timer](const boost::system::error_code& ec,
                                                                        int signal) {
    if (ec) return;
    FERRY_LOG(kInfo, "ferry-ca: signal %d: stopping", signal);
    signing.stop();
    monitoring.stop();
    client.stop();
    poll_timer.cancel();
    // What is in flight ends at its next step; nothing new starts.
    io.stop();
  });
}

}  // namespace

int main(int argc, char** argv) {
  if (helpAsked(argc, argv)) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  Flags f;
  if (std::string err = parseFlags(argc, argv, f); !err.empty()) return usageError(err);
  common::setLogLevel(f.log_level);
  std::signal(SIGPIPE, SIG_IGN);

  asio::io_context io(1);
  identity::WatchedCaSource ca(identity::CaFiles{f.ca_cert, f.ca_key, f.bundle}, f.trust_domain, f.max_validity);
  // Missing or broken files are not fatal: ferry-ca starts not ready (503) until they are good.
  ca.poll();
  if (auto st = ca.status(); !st.ok()) FERRY_LOG(kWarn, "ferry-ca: not ready: %s", st.message());

  auto client = apiClient(io, f.kubeconfig);
  if (!client.ok()) {
    std::fprintf(stderr, "ferry-ca: %s\n", std::string(client.status().message()).c_str());
    return 1;
  }
  ca::PodIndex pods;
  (*client)->pods(pods);
  auto limiter = ca::NodeRateLimiter::create(f.node_rate, f.node_burst);
  if (!limiter.ok()) return usageError(std::string(limiter.status().message()));
  auto reviewer = ca::apiTokenReviewer(**client, f.audience);
  ca::AuditLog audit(ca::stdoutAuditSink());
  ca::SigningService service(signingSettings(f), ca, pods, *reviewer, **limiter, audit);
  ca::ServingCertificate serving(ca, ca::servingNames(f.service_name, f.namespace_name, f.server_names), f.max_validity);

  ca::HttpsServer signing(io, signingServerOptions(f), [&serving] { return serving.current(); }, service);

  telemetry::Registry registry;
  std::vector<telemetry::Registry::Registration> registrations =
      registerMetrics(registry, service, signing, serving, **client, ca);
  // The trust bundle ConfigMap ferryd mounts, kept by ferry-ca (docs/ferry-ca.md).
  std::unique_ptr<ca::BundlePublisher> bundle;
  if (!f.bundle_config_map.empty()) {
    bundle = std::make_unique<ca::BundlePublisher>(
        io, **client,
        ca::BundlePublisherOptions{f.namespace_name, f.bundle_config_map, f.bundle_config_map_key, f.bundle,
                                   f.trust_domain});
    registrations.push_back(registry.add([&bundle](telemetry::Exposition& out) { bundle->collect(out); }));
  }
  server::HttpServer monitoring(io, "monitoring");
  routeMonitoring(monitoring, registry, service);

  if (auto st = signing.listen(); !st.ok()) {
    std::fprintf(stderr, "%s\n", std::string(st.message()).c_str());
    return 1;
  }
  if (auto st = monitoring.listen(f.monitoring); !st.ok()) {
    std::fprintf(stderr, "ferry-ca: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  (*client)->start();
  asio::steady_timer poll_timer(io);
  if (bundle) bundle->poll();
  pollCa(poll_timer, ca, bundle.get());

  asio::signal_set signals(io, SIGTERM, SIGINT);
  stopOnSignal(signals, io, signing, monitoring, **client, poll_timer);
  FERRY_LOG(kInfo, "ferry-ca: signing on %s (trust domain %s, agents %s/%s), monitoring on %s",
            common::formatHostPort(f.listen), f.trust_domain, f.agent_namespace, f.agent_service_account,
            common::formatHostPort(f.monitoring));
  io.run();
  FERRY_LOG(kInfo, "ferry-ca: stopped");
  return 0;
}
