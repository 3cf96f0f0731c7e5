#include "proxy/server/server.h"

#include <arpa/inet.h>
#include <malloc.h>

#include <algorithm>
#include <csignal>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proxy/common/duration.h"
#include "proxy/common/file.h"
#include "proxy/common/log.h"
#include "proxy/rtnetlink/rtnetlink.h"
#include "proxy/datapath/proxy_netns.h"
#include "proxy/net/buffer_chain.h"
#include "proxy/net/socket_io.h"
#include "proxy/policy/kubernetes.h"
#include "proxy/server/policy_admin.h"
#include "proxy/session/common.h"
#include "proxy/config/kubeconfig.h"
#include "proxy/config/memory_budget.h"
#include "proxy/hbone/receive_budget.h"
#include "proxy/k8s/client.h"
#include "proxy/workloads/file_source.h"
#include "proxy/workloads/kubernetes_source.h"

namespace ferry::server {

// The memory budget counts what a tunnel may read past the receive budget as hbone reads it.
static_assert(config::kHboneReceiveOvershootBytes == hbone::kPressuredRead);
namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);

// After the drain deadline reset the live connections, how long their coroutines get to
// record them (a pass of each worker; they only finish what was cancelled).
constexpr auto kDrainAbortGrace = std::chrono::seconds(1);

// Starts a connection's work: places it on a worker and runs it there (session/context.h).
using Handler = void (*)(session::Worker&, tcp::socket, session::Admitted);

// After an accept() failure (EMFILE and friends) the listener pauses instead of spinning:
// the connection that failed stays in the kernel's queue and is taken after the pause.
// Short, because the failure is usually a momentary peak (a reserve descriptor in use).
constexpr auto kAcceptBackoff = std::chrono::milliseconds(50);
// One warning per listener and kind of event at most this often; metrics count them all.
constexpr auto kAcceptLogInterval = std::chrono::seconds(10);

struct AcceptLogThrottles {
  session::LogThrottle errors{kAcceptLogInterval};
  session::LogThrottle refusals{kAcceptLogInterval};
};

// On 15008 tunnels come from the clients' pod addresses: one the registry knows ranks before
// an unknown address in the pending queue (Admission::admit). The other listeners' sources
// are this node's pods (15001) or any client outside the mesh (15006): all of one kind.
session::SourceKind sourceKind(const session::Shared& shared, session::Listener listener,
                               const common::IpAddress& source) {
  if (listener != session::Listener::kHbone) return session::SourceKind::kUnknown;
  return shared.workloads.current()->findByIp(source) != nullptr ? session::SourceKind::kWorkload
                                                              : session::SourceKind::kUnknown;
}

asio::awaitable<void> acceptLoop(session::Worker& worker, tcp::acceptor& acceptor, session::Listener kind,
                                 Handler handler) {
  auto& shared = worker.shared();
  static AcceptLogThrottles throttles[static_cast<size_t>(session::Listener::kCount)];
  auto& throttle = throttles[static_cast<size_t>(kind)];
  uint64_t suppressed = 0;
  for (;;) {
    auto [ec, socket] = co_await acceptor.async_accept(kTuple);
    if (!acceptor.is_open() || ec == asio::error::operation_aborted) co_return;
    if (ec) {
      shared.admission.countAcceptError(kind, session::classifyAcceptError(ec));
      if (throttle.errors.allow(suppressed)) {
        FERRY_LOG(kWarn, "accept on the %s listener: %s (pausing %dms; %d more since the last warning)",
                  session::listenerLabel(kind), ec.message(), kAcceptBackoff.count(), suppressed);
      }
      asio::steady_timer backoff(worker.io(), kAcceptBackoff);
      co_await backoff.async_wait(kTuple);
      continue;
    }
    if (shared.draining.load(std::memory_order_relaxed)) {
      net::abortSocket(socket);
      continue;
    }
    // Refused connections are closed with a reset at once: no byte is read, nothing is
    // allocated for them, and the client learns it now rather than at a timeout.
    session::Refusal why{};
    session::Admitted admitted;
    boost::system::error_code peer_ec;
    auto peer = socket.remote_endpoint(peer_ec);
    if (peer_ec) {
      net::abortSocket(socket);  // gone already
      continue;
    }
    // At the descriptor cap a newcomer takes the place of a pending connection (Admission::
    // admit), within the slack; beyond it, refused. The cap counts descriptors: a socket
    // numbered below it while others are open above it may still be at it (descriptorUse).
    const int fd = socket.native_handle();
    const auto source = session::toHostPort(peer).ip;
    if (fd >= shared.descriptor_cap + shared.descriptor_slack) {
      why = session::Refusal::kDescriptors;
      shared.admission.countRefusal(kind, why);
    } else {
      admitted = shared.admission.admit(kind, source, why, shared.admission.descriptorUse(fd, shared.descriptor_cap),
                                        sourceKind(shared, kind, source));
    }
    if (!admitted) {
      if (throttle.refusals.allow(suppressed)) {
        FERRY_LOG(kWarn, "refused a connection from %s on the %s listener: %s (%d more since the last warning)",
                  source.to_string(), session::listenerLabel(kind), session::refusalLabel(why),
                  suppressed);
      }
      net::abortSocket(socket);
      continue;
    }
    handler(worker, std::move(socket), std::move(admitted));
  }
}

// How often the control thread looks at the close counts to decide on a trim.
constexpr auto kTrimCheckInterval = std::chrono::seconds(1);
// While closes keep coming (steady churn rather than a burst), trim no more often than
// this: malloc_trim() walks every arena under its lock, and workers allocating from that
// arena wait for it (a few milliseconds after a flood; docs/security.md, Memory).
constexpr auto kTrimMinInterval = std::chrono::seconds(10);

std::vector<uint16_t> ferryPorts(const config::Config& c) {
  std::vector<uint16_t> ports = {c.hbone_port, c.listen.admin.port, c.listen.metrics.port,
                                 c.listen.readiness.port};
  for (const auto* list : {&c.listen.outbound, &c.listen.inbound_plaintext, &c.listen.hbone}) {
    for (const auto& hp : *list) ports.push_back(hp.port);
  }
  std::sort(ports.begin(), ports.end());
  ports.erase(std::unique(ports.begin(), ports.end()), ports.end());
  return ports;
}

}  // namespace

Server::Server(config::Config config, std::optional<common::WatchedFile> config_file)
    : config_(std::move(config)),
      config_file_(std::move(config_file)),
      workloads_(config_.node),
      policy_(config_.policy),
      sockets_(config_.transparent),
      admission_(config_.limits) {
  if (config_file_) reload_.path = config_file_->path();
  registerMetrics();
}

Server::~Server() {
  removeReadinessFile();  // also after a failed start
  for (auto& w : workers_) w->io().stop();
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
  // A worker's queue may still hold the answer of an admin request (/connections) whose
  // connection belongs to the control loop: it goes while that loop still exists (members
  // go in reverse order, control_ before workers_); the listeners before their workers.
  acceptors_.clear();
  workers_.clear();
  // The identity runtime's poll timer and ferry-ca's client live on control_, which goes
  // before identity_ (members go in reverse order): it goes now, while control_ exists.
  if (identity_ != nullptr) identity_->stop();
  identity_.reset();
  // A proxy netns of ferryd's own outlives the process while closing sockets still hold it
  // (a FIN_WAIT orphan: up to tcp_fin_timeout), and with it its veth pair: the next ferryd
  // would find the name taken. Deleting the node's side takes the pair at once.
  // Handed over, or taken over and failed to start: the other ferryd uses that netns, that
  // pair and that datapath.
  bool leave_node = handed_over_ || (!started_ && handoverStatus().taken > 0);
  if (leave_node && datapath_) datapath_->setHandedOver(true);
  if (config_.datapath.proxy_netns_auto && proxy_netns_ && !leave_node) {
    datapath_.reset();  // its programs on the device first
    if (auto st = rtnetlink::deleteLink(config_.datapath.host_proxy_interface); !st.ok()) {
      FERRY_LOG(kWarn, "datapath: removing %s: %s", config_.datapath.host_proxy_interface, st.message());
    }
  }
}

absl::Status Server::start() {
  common::setLogLevel(config_.log_level);
  started_at_ = std::chrono::steady_clock::now();
  publishReadinessFile();  // "starting" until the end of start-up
  if (auto st = startSources(); !st.ok()) return st;
  if (auto st = startWorkers(); !st.ok()) return st;
  // The running ferryd's sockets (an upgrade or restart), before anything binds or loads.
  if (auto st = takeOverFromPrevious(); !st.ok()) return st;
  // Taken over: nothing is accepted from the shared listeners until this one is ready
  // (takeOverWhenReady); the running one serves them meanwhile.
  defer_accepting_ = taken_.has_value();
  if (config_.datapath.enabled) {
    if (auto st = startDatapath(); !st.ok()) return st;
  }
  followWorkloads();
  if (auto st = bindAllListeners(); !st.ok()) return st;
  if (datapath_) datapath_->setHbonePaused(false);
  if (auto st = startHandoverEndpoint(); !st.ok()) return st;
  // Pods are enrolled once ferryd listens: an answer "enrolled" means their first SYN finds it.
  if (auto st = startCniEndpoint(); !st.ok()) return st;
  routeOperatorEndpoints();
  // After the endpoint is up: the chain makes every new pod's ADD call it.
  if (config_.cni.install) {
    cni_installer_.emplace(config_.cni, std::vector<std::string>{config_.kubernetes.daemonset_namespace},
                           config_.kubernetes.istio_ambient);
    if (auto st = cni_installer_->install(); !st.ok()) return st;
    if (cni_credentials_) cni_credentials_->start();
  }
  startControlLoop();
  startWorkerThreads();
  if (taken_) {
    // The previous ferryd serves until this one is ready (its workloads listed, its
    // certificates loaded): then it stops accepting and retires (server_handover.cc).
    FERRY_LOG(kInfo, "ferryd started: node=%s trust_domain=%s workers=%d; takes over from %s once ready",
              config_.node, config_.trust_domain, workers_.size(), handover::describe(taken_->old_pid, taken_->old_name));
    asio::co_spawn(control_, takeOverWhenReady(), session::logTaskError);
    return absl::OkStatus();
  }
  started_ = true;
  publishReadinessFile();
  if (absl::Status ready = readiness(); !ready.ok()) {
    FERRY_LOG(kWarn, "ferryd started but not ready: %s", ready.message());
  }
  FERRY_LOG(kInfo, "ferryd started: node=%s trust_domain=%s workers=%d workloads=%d (local %d)",
            config_.node, config_.trust_domain, workers_.size(), workloads_.current()->size(),
            workloads_.current()->localCount());
  return absl::OkStatus();
}

absl::Status Server::startSources() {
  if (auto st = makeWorkloadSource(); !st.ok()) return st;
  if (auto st = source_->start(workloads_); !st.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("workloads: ", st.message()));
  }
  if (auto st = policy_.start([this](const policy::PolicySet& after) { onPoliciesChanged(after); }); !st.ok()) {
    return st;
  }
  IdentityRuntime::ServiceIpLookup service_ip;
  if (k8s_source_ != nullptr) {
    service_ip = [k8s = k8s_source_](std::string_view ns, std::string_view name) { return k8s->clusterIpOf(ns, name); };
  }
  auto identity = IdentityRuntime::create(config_, control_, workloads_, std::move(service_ip));
  if (!identity.ok()) return identity.status();
  identity_ = *std::move(identity);
  return absl::OkStatus();
}

absl::Status Server::startWorkers() {
  size_t n = config_.workers != 0 ? config_.workers : std::max(1u, std::thread::hardware_concurrency());
  FERRY_LOG(kInfo, "memory: %s", config::describeBudget(config_.memory_budget));
  uint64_t descriptor_limit = session::raiseDescriptorLimit();
  auto cap = session::dataPlaneDescriptorCap(config_.limits.descriptor_reserve);
  if (!cap.ok()) return cap.status();
  descriptor_limit_ = descriptor_limit;
  // A quarter of the reserve is lent to new clients over the cap (Shared::descriptor_slack),
  // and upstream legs may reach into it too: a client let in there needs its own.
  const int descriptor_slack = static_cast<int>(config_.limits.descriptor_reserve / 4);
  sockets_.setDescriptorCap(*cap + descriptor_slack);
  istio_ = std::make_unique<session::IstioMetrics>(n, config_);
  // access_log: a reload sets the new file's (applyConfig).
  shared_ = std::make_unique<session::Shared>(session::Shared::Parts{
      .workloads = workloads_,
      .policies = policy_.store(),
      .tls = identity_->tls(),
      .sockets = sockets_,
      .stats = stats_,
      .admission = admission_,
      .ferry_ports = ferryPorts(config_),
      .workers = n,
      .descriptor_cap = *cap,
      .descriptor_slack = descriptor_slack,
      .policies_loaded = policy_.loaded(),
      .access_log = config_.access_log,
      .istio = istio_.get(),
  });
  shared_->receive_budget->setLimit(config_.memory_budget.receive_buffer);
  auto worker_config = std::make_shared<const config::Config>(config_);
  for (size_t i = 0; i < n; ++i) {
    workers_.push_back(std::make_unique<session::Worker>(*shared_, i, worker_config));
    shared_->workers.push_back(workers_.back().get());
  }
  preallocateSocketStates(*cap);
  return absl::OkStatus();
}

absl::Status Server::startDatapath() {
  auto ns = config_.datapath.proxy_netns_auto ? createProxyNetns() : datapath::NetnsFd::open(config_.datapath.proxy_netns);
  if (!ns.ok()) return absl::FailedPreconditionError(absl::StrCat("datapath.proxy_netns: ", ns.status().message()));
  proxy_netns_.emplace(std::move(*ns));
  auto dp = datapath::Datapath::create(config_, *proxy_netns_, /*taking_over=*/taken_.has_value());
  if (!dp.ok()) return absl::Status(dp.status().code(), absl::StrCat("datapath: ", dp.status().message()));
  datapath_ = std::move(*dp);
  // Plaintext to a pod goes through ferryd when a port of it is STRICT or policies apply.
  datapath_->setPlaintextCapture([this](const workloads::Workload& w) {
    return policy_.store().current()->capturesPlaintext(w, session::fallbackMode(w));
  });
  return syncDatapathOnceSourceListed();
}

void Server::followWorkloads() {
  workloads_.subscribe([this](const workloads::Registry& after, const workloads::Delta& delta) {
    onWorkloadsChanged(after, delta);
  });
  workloads_.subscribeServices(
      [this](const workloads::ServiceTable& services, const std::vector<workloads::ServiceChange>& changes) {
        if (datapath_) datapath_->applyServices(changes);
        size_t added = 0, removed = 0;
        for (const auto& c : changes) added += !c.before && c.after, removed += c.before && !c.after;
        // A line when the captured set changes, not when only backends do; Service churn
        // (hundreds a second in a big cluster) is summed into one line a second.
        service_log_added_ += added;
        service_log_removed_ += removed;
        if (added + removed > 0 && service_log_.allow()) {
          FERRY_LOG(kInfo, "workloads: %d Service ports with mesh endpoints are captured (+%d -%d)", services.size(),
                    service_log_added_, service_log_removed_);
          service_log_added_ = service_log_removed_ = 0;
        }
      });
}

absl::Status Server::bindAllListeners() {
  // Every socket of the data plane lives in the proxy netns; the control thread returns to
  // the node netns afterwards. The operator endpoints live there too, except in a proxy
  // netns ferryd made itself (on a real node): there they belong where ferryd runs, the
  // node's netns (a host-network pod), where the kubelet probes and Prometheus scrapes the
  // pod's IP.
  const bool operator_in_proxy = !config_.datapath.proxy_netns_auto;
  std::optional<datapath::ScopedNetns> in_proxy;
  if (proxy_netns_) {
    auto scoped = datapath::ScopedNetns::enter(*proxy_netns_);
    if (!scoped.ok()) return scoped.status();
    in_proxy.emplace(std::move(*scoped));
  }
  if (auto st = bindListeners(operator_in_proxy); !st.ok()) return st;
  in_proxy.reset();
  if (!operator_in_proxy) return bindOperatorListeners();
  return absl::OkStatus();
}

void Server::routeOperatorEndpoints() {
  readiness_.route("/healthz/ready", [this] {
    absl::Status ready = readiness();
    if (ready.ok()) return HttpResponse{200, "text/plain; charset=utf-8", "ready\n"};
    return HttpResponse{503, "text/plain; charset=utf-8", absl::StrCat(ready.message(), "\n")};
  });
  // Compressed as it is written when the scraper accepts gzip (Prometheus does): a scrape of
  // many Istio series never holds its whole text (docs/benchmarks/telemetry.md).
  metrics_.routeRequest("/metrics", {HttpMethod::kGet}, [this](const HttpRequest& request) {
    if (request.accepts_gzip) {
      HttpResponse r{200, "text/plain; version=0.0.4; charset=utf-8", metrics_registry_.renderGzip()};
      r.content_encoding = "gzip";
      return r;
    }
    return HttpResponse{200, "text/plain; version=0.0.4; charset=utf-8", renderMetrics()};
  });
  routeAdmin();
}

void Server::startControlLoop() {
  signals_.add(SIGINT);
  signals_.add(SIGTERM);
  signals_.add(SIGHUP);
  armSignals();
  poll_timer_.expires_after(config_.workloads_poll);
  poll_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) pollWorkloads();
  });
  identity_->start();
  last_trim_ = std::chrono::steady_clock::now();
  scheduleMemoryTrim();  // limits.trim_after_closes may be 0 now and set by a reload
}

void Server::startWorkerThreads() {
  for (auto& w : workers_) {
    threads_.emplace_back([w = w.get(), ns = proxy_netns_ ? &*proxy_netns_ : nullptr] {
      // Upstream sockets opened by this worker must be in the proxy netns too.
      if (ns != nullptr) {
        if (auto st = datapath::enterNetns(*ns); !st.ok()) {
          FERRY_LOG(kError, "worker %d: %s", w->index(), st.message());
          return;
        }
      }
      auto guard = asio::make_work_guard(w->io());
      w->io().run();
    });
  }
}

void Server::preallocateSocketStates(int descriptor_cap) {
  // Never more than half the data plane's descriptors: they are all open at once here.
  size_t total = std::min<size_t>(config_.limits.preallocated_sockets, static_cast<size_t>(descriptor_cap) / 2);
  for (auto& w : workers_) net::warmSocketStates(w->io(), total / workers_.size());
}

absl::Status Server::readiness() {
  if (stopping_.load()) return absl::UnavailableError("draining");
  if (!started_.load()) {
    // Taking over, this is what it waits for.
    absl::Status h = source_ != nullptr && identity_ != nullptr ? health() : absl::OkStatus();
    return absl::UnavailableError(h.ok() ? std::string("starting") : absl::StrCat("starting (", h.message(), ")"));
  }
  return health();
}

absl::Status Server::health() {
  if (absl::Status s = source_->health(); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("not ready: workloads: ", s.message()));
  }
  return identity_->health();
}

absl::Status Server::makeWorkloadSource() {
  if (config_.workload_source == config::WorkloadSourceKind::kFile) {
    source_ = std::make_unique<workloads::FileSource>(config_.workloads_file);
    return absl::OkStatus();
  }
  const auto& kc = config_.kubernetes;
  k8s::ClusterAccess access;
  std::string where;
  if (kc.kubeconfig.empty()) {
    auto in_cluster = k8s::inClusterAccess([](const char* name) { return std::getenv(name); });
    if (!in_cluster.ok()) {
      return absl::FailedPreconditionError(absl::StrCat("kubernetes: in-cluster credentials: ", in_cluster.status().message(),
                                                        " (outside a cluster, set kubernetes.kubeconfig)"));
    }
    access = *std::move(in_cluster);
    where = "the in-cluster API server";
  } else {
    auto file = config::loadKubeconfig(kc.kubeconfig);
    if (!file.ok()) return absl::FailedPreconditionError(absl::StrCat("kubernetes.kubeconfig: ", file.status().message()));
    access = k8s::accessFrom(*file);
    where = absl::StrCat("the API server of ", kc.kubeconfig);
  }
  std::string describe = absl::StrCat("kubernetes ", access.server);
  // ferry-cni's fallback reaches the same API server, from the node (ferryd's netns).
  const bool plugin_credentials = config_.cni.install && !config_.cni.service_account.empty();
  std::string plugin_server = access.server, plugin_ca;
  if (plugin_credentials) {
    auto ca = pluginApiServerCa(access.ca_pem, access.ca_file, where);
    if (!ca.ok()) return ca.status();
    plugin_ca = *std::move(ca);
  }
  auto client = k8s::ApiClient::create(control_, std::move(access), k8s::Options{});
  if (!client.ok()) return absl::FailedPreconditionError(absl::StrCat("kubernetes: ", client.status().message()));
  workloads::KubernetesSourceOptions options{kc.istio_ambient, kc.max_state_age, kc.daemonset_namespace,
                                             kc.daemonset_name, /*add_informers=*/{}};
  if (config_.policy.kubernetes) {
    // The cluster's AuthorizationPolicies and PeerAuthentications, on the same connection;
    // inbound connections are refused until both kinds have delivered a first state.
    options.add_informers = policy_.followCluster([this] {
      if (shared_) shared_->policies_loaded.store(true, std::memory_order_release);
      FERRY_LOG(kInfo, "policy: the cluster's AuthorizationPolicies and PeerAuthentications are loaded");
    });
  }
  auto source = std::make_unique<workloads::KubernetesSource>(*std::move(client), options, describe);
  k8s_source_ = source.get();
  if (plugin_credentials) {
    cni_credentials_ = std::make_unique<CniCredentials>(
        control_, *source->client(), plugin_server, plugin_ca, config_.cni.service_account, config_.cni.token_lifetime,
        CniInstaller::kubeconfigPathIn(config_.cni.conf_dir));
  }
  source_ = std::move(source);
  FERRY_LOG(kInfo, "workloads: from %s (%s)", where, describe);
  return absl::OkStatus();
}

absl::Status Server::startCniEndpoint() {
  if (!config_.cni.enabled) return absl::OkStatus();
  // The parser refuses cni.enabled without the datapath; a Config built in code may not.
  if (!datapath_) return absl::FailedPreconditionError("cni.enabled needs the tc datapath (datapath.enabled: true)");
  cni_enrolment_ = std::make_unique<PodEnrolment>(workloads_, *source_, *datapath_);
  cni_endpoint_ = std::make_unique<CniEndpoint>(control_, config_.cni, *cni_enrolment_);
  cni_endpoint_->restore(&PodEnrolment::sandboxExists);
  // Taking over: the running ferryd answers the plugin until this one is ready
  // (takeOverWhenReady binds the socket then).
  return taken_ ? absl::OkStatus() : cni_endpoint_->start();
}

void Server::onPoliciesChanged(const policy::PolicySet& after) {
  FERRY_LOG(kInfo, "policy: generation %u: %u AuthorizationPolicies, %u PeerAuthentications",
            static_cast<unsigned>(after.generation()), static_cast<unsigned>(after.authorizationCount()),
            static_cast<unsigned>(after.peerAuthenticationCount()));
  if (datapath_) datapath_->refreshModes(*workloads_.current());
  reauthorizeLive("a policy change");
}

void Server::reauthorizeLive(const char* why) {
  if (!shared_) return;  // before start-up has made the workers: nothing is open
  auto policies = policy_.store().current();
  auto registry = workloads_.current();
  for (auto& w : workers_) {
    asio::post(w->io(), [w = w.get(), policies, registry, why] {
      if (size_t closed = w->reauthorize(*policies, *registry); closed > 0) {
        FERRY_LOG(kInfo, "policy: closed %u open connections that %s denies now", static_cast<unsigned>(closed), why);
      }
    });
  }
}

void Server::onWorkloadsChanged(const workloads::Registry& after, const workloads::Delta& delta) {
  if (datapath_) datapath_->apply(after, delta);
  // A local pod that left (or moved off its IP): its pooled tunnels go (hbone::Pool::drainSource).
  std::vector<common::IpAddress> left;
  bool local = false;
  for (const auto& change : delta.changes) {
    const auto* before = change.before.get();
    local = local || (change.after != nullptr && after.isLocal(*change.after));
    if (before == nullptr || !after.isLocal(*before)) continue;
    local = true;
    for (const auto& ip : before->ips) {
      const auto* now = after.findLocalByIp(ip);
      if (now == nullptr || !now->hbone) left.push_back(ip);
    }
  }
  if (!left.empty()) {
    for (auto& w : workers_) {
      asio::post(w->io(), [w = w.get(), left] {
        size_t drained = 0;
        for (const auto& ip : left) drained += w->pool().drainSource(ip);
        w->shared().stats.hbone_connections_drained_source_left += drained;
      });
    }
  }
  if (local) identity_->forgetUnused();
  // A local workload's labels decide which policies apply to the connections it serves:
  // those are judged again. (Other nodes' pods change nothing here: a client's identity was
  // checked against its IP when its tunnel was made.)
  auto policies = policy_.store().current();
  if (local && policies->authorizationCount() + policies->peerAuthenticationCount() > 0) {
    reauthorizeLive("a workload change");
  }
}

void Server::pollOnce(bool reread_config) {
  reloadConfig(reread_config);
  if (source_->poll(workloads_)) stats_.workloads_reloads.fetch_add(1, std::memory_order_relaxed);
  policy_.poll();
  if (datapath_) {
    datapath_->retryFailed(*workloads_.current());
    datapath_->checkAttachments();
    if (!stale_released_ && source_->health().ok()) {
      stale_released_ = true;
      datapath_->releaseStale(*workloads_.current());
    }
  }
  if (cni_installer_) cni_installer_->check();
  stats_.workloads_reload_failures.store(source_->failures() + workloads_.rejected(), std::memory_order_relaxed);
}

void Server::scheduleMemoryTrim() {
  if (stopping_.load()) return;
  trim_timer_.expires_after(kTrimCheckInterval);
  trim_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    sweepIstioSeries();
    maybeTrimMemory();
    scheduleMemoryTrim();
  });
}

// glibc keeps what a flood freed: each worker allocates from its own arena, and memory
// freed below a live chunk (an Asio descriptor state, a TLS context that stayed) is never
// returned by free(). malloc_trim(0) walks every arena and gives back each free page
// (madvise), which is what brings RSS back to its baseline after 2,000 silent connections
// or 5,000 closed proxied ones (docs/security.md, Memory: M_ARENA_MAX alone did not).
// It runs once a burst of closes is over, so a steady stream of connections is not taxed.
// Each worker drops its Istio series that have been idle for telemetry.series_expiry; swept
// every half of it (at most every 30 s), so a series goes between one and one and a half
// expiries after its last connection closed.
void Server::sweepIstioSeries() {
  if (!istio_) return;
  const auto now = std::chrono::steady_clock::now();
  const auto every = std::min<std::chrono::steady_clock::duration>(config_.telemetry.series_expiry / 2,
                                                                  std::chrono::seconds(30));
  if (now - last_series_sweep_ < every) return;
  last_series_sweep_ = now;
  for (auto& w : workers_) {
    asio::post(w->io(), [this, w = w.get(), now] {
      istio_series_dropped_.fetch_add(istio_->sweep(w->index(), now), std::memory_order_relaxed);
    });
  }
}

void Server::maybeTrimMemory() {
  // Tickets (listener connections), proxied connections and pooled HBONE tunnels: a
  // tunnel's TLS and HTTP/2 state is the largest single thing a close frees.
  uint64_t closes = admission_.released() + stats_.hbone_connections_closed.load(std::memory_order_relaxed);
  for (const auto& per_direction : stats_.closed) {
    for (const auto& count : per_direction) closes += count.load(std::memory_order_relaxed);
  }
  const uint64_t threshold = config_.limits.trim_after_closes;
  if (threshold == 0) return;  // never (until a reload sets it)
  uint64_t since_trim = closes - closes_at_trim_;
  uint64_t this_tick = closes - closes_at_check_;
  closes_at_check_ = closes;
  auto now = std::chrono::steady_clock::now();
  bool burst_over = this_tick < std::max<uint64_t>(1, threshold / 8);
  // A burst: trim once it is over (or every kTrimMinInterval while it goes on).
  bool after_burst = since_trim >= threshold && (burst_over || now - last_trim_ >= kTrimMinInterval);
  // Stragglers: what a burst leaves behind closes later and in ones (the pool releases the
  // burst's tunnels after pool.idle_release, each the largest thing a close frees), so a
  // few closes since the last trim are trimmed too, once quiet, no more often than
  // kTrimMinInterval (a soak of 1,000 connections stayed 33 % above its baseline without).
  bool stragglers = since_trim > 0 && this_tick == 0 && now - last_trim_ >= kTrimMinInterval;
  if (!after_burst && !stragglers) return;
  closes_at_trim_ = closes;
  last_trim_ = now;
  // Each worker first lets go of its spare relay blocks (thread-local, up to 4 MiB each);
  // the last one to finish asks the control thread to trim.
  auto remaining = std::make_shared<std::atomic<size_t>>(workers_.size());
  for (auto& w : workers_) {
    asio::post(w->io(), [this, remaining, since_trim] {
      net::BufferChain::releaseFreeBlocks();
      if (remaining->fetch_sub(1) == 1) asio::post(control_, [this, since_trim] { trimHeap(since_trim); });
    });
  }
}

void Server::trimHeap(uint64_t closes) {
  auto start = std::chrono::steady_clock::now();
  malloc_trim(0);
  auto took = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start);
  memory_trims_.fetch_add(1, std::memory_order_relaxed);
  if (common::logEnabled(common::LogLevel::kDebug)) {
    struct mallinfo2 heap = mallinfo2();
    FERRY_LOG(kDebug, "memory: trimmed the heap after %d closes in %dus (in use %d KB, free %d KB, arenas %d KB)",
              closes, took.count(), heap.uordblks / 1024, heap.fordblks / 1024, heap.arena / 1024);
  }
}

absl::Status Server::syncDatapathOnceSourceListed() {
  if (!datapath_ || datapath_synced_) return absl::OkStatus();
  // The first sync removes what no workload wants from maps a previous ferryd pinned: with a
  // source that has not listed yet, that would be every pod (Kubernetes), and its traffic
  // would pass uncaptured until the list came. Until then the pinned state stays as it is.
  if (!source_->health().ok()) {
    if (!datapath_sync_waiting_logged_) {
      FERRY_LOG(kInfo, "datapath: the pinned state stays as it is until the workload source has listed");
      datapath_sync_waiting_logged_ = true;
    }
    return absl::OkStatus();
  }
  datapath_synced_ = true;
  return datapath_->sync(*workloads_.current());
}

void Server::pollWorkloads() {
  pollOnce();
  if (auto st = syncDatapathOnceSourceListed(); !st.ok()) FERRY_LOG(kWarn, "datapath: %s", st.message());
  if (stopping_.load()) return;
  poll_timer_.expires_after(config_.workloads_poll);
  poll_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) pollWorkloads();
  });
}

absl::StatusOr<datapath::NetnsFd> Server::createProxyNetns() {
  const auto& d = config_.datapath;
  datapath::ProxyNetnsSpec spec;
  spec.host_interface = d.host_proxy_interface;
  spec.proxy_interface = d.proxy_interface;
  inet_pton(AF_INET, d.proxy_address.c_str(), &spec.proxy_address);  // validated by config
  spec.mark = d.mark;
  // Inside ferryd's own netns: nothing else has tables or rules there to collide with.
  spec.table = 100;
  spec.rule_priority = 1000;
  // Handed over: the running ferryd's netns, plumbed already, and its claim.
  auto netns = takenSockets(handover::Role::kProxyNetns);
  auto claim = takenSockets(handover::Role::kHostInterfaceClaim);
  if (!netns.empty() && !claim.empty()) {
    proxy_claim_.emplace(datapath::HostInterfaceClaim::adopt(claim[0].release(), spec.host_interface));
    FERRY_LOG(kInfo, "datapath: the proxy netns of the previous ferryd: %s %s/32 <-> %s (node side)",
              d.proxy_interface, d.proxy_address, d.host_proxy_interface);
    return datapath::NetnsFd::adopt(netns[0].release(), "(handed over)");
  }
  if (!proxy_claim_) {
    auto claim = datapath::HostInterfaceClaim::take(spec.host_interface);
    if (!claim.ok()) return claim.status();
    proxy_claim_.emplace(std::move(*claim));
  }
  auto ns = datapath::createProxyNetns(spec, *proxy_claim_);
  if (ns.ok()) {
    FERRY_LOG(kInfo, "datapath: created the proxy netns: %s %s/32 <-> %s (node side)", d.proxy_interface,
              d.proxy_address, d.host_proxy_interface);
  }
  return ns;
}

absl::Status Server::bindOperatorListeners() {
  const struct {
    HttpServer* server;
    const common::HostPort* addr;
    handover::Role role;
  } endpoints[] = {{&readiness_, &config_.listen.readiness, handover::Role::kReadiness},
                   {&metrics_, &config_.listen.metrics, handover::Role::kMetrics},
                   {&admin_, &config_.listen.admin, handover::Role::kAdmin}};
  for (const auto& e : endpoints) {
    auto taken = takenSockets(e.role, e.addr);
    if (!taken.empty() && defer_accepting_) {
      // The running ferryd answers on them until this one takes over: what answers on the
      // node's operator ports is always the generation that serves.
      deferred_endpoints_.push_back([server = e.server, fd = std::make_shared<common::UniqueFd>(std::move(taken[0]))] {
        return server->adopt(fd->release());
      });
      continue;
    }
    absl::Status st = taken.empty() ? e.server->listen(*e.addr) : e.server->adopt(taken[0].release());
    if (!st.ok()) return st;
  }
  return absl::OkStatus();
}

absl::Status Server::bindListeners(bool operator_too) {
  size_t n = workers_.size();
  acceptors_.resize(n);
  struct Kind {
    const std::vector<common::HostPort>* addrs;
    Handler handler;
    session::Listener listener;
  };
  const Kind kinds[] = {{&config_.listen.outbound, &session::acceptOutbound, session::Listener::kOutbound},
                        {&config_.listen.inbound_plaintext, &session::acceptPlaintext, session::Listener::kPlaintext},
                        {&config_.listen.hbone, &session::acceptHbone, session::Listener::kHbone}};
  auto roleOf = [](session::Listener l) {
    return l == session::Listener::kOutbound    ? handover::Role::kOutbound
           : l == session::Listener::kPlaintext ? handover::Role::kPlaintext
                                                : handover::Role::kHbone;
  };
  for (const auto& kind : kinds) {
    for (const auto& addr : *kind.addrs) {
      // Handed over: the previous ferryd's listeners of this address (one per its worker, a
      // SO_REUSEPORT group), spread over the workers; a worker without one binds its own in
      // the same group.
      auto taken = takenSockets(roleOf(kind.listener), &addr);
      for (size_t j = 0; j < std::max(n, taken.size()); ++j) {
        size_t i = j % n;
        auto& ex = workers_[i]->io();
        std::unique_ptr<tcp::acceptor> acceptor;
        if (j < taken.size()) {
          boost::system::error_code ec;
          int fd = taken[j].release();
          acceptor = std::make_unique<tcp::acceptor>(ex);
          acceptor->assign(addr.ip.is_v6() ? tcp::v6() : tcp::v4(), fd, ec);
          if (ec) {
            ::close(fd);
            return absl::InternalError(absl::StrCat(session::listenerLabel(kind.listener),
                                                    " listener handed over: ", ec.message()));
          }
        } else {
          auto bound = sockets_.listen(ex.get_executor(), addr);
          if (!bound.ok()) {
            return absl::Status(bound.status().code(), absl::StrCat(session::listenerLabel(kind.listener),
                                                                    " listener: ", bound.status().message()));
          }
          acceptor = std::make_unique<tcp::acceptor>(std::move(*bound));
        }
        boost::system::error_code ec;
        auto ep = acceptor->local_endpoint(ec);
        bound_listeners_.push_back({roleOf(kind.listener), ec ? common::formatHostPort(addr) : common::formatHostPort(session::toHostPort(ep)),
                                    acceptor->native_handle()});
        acceptors_[i].push_back(std::move(acceptor));
        auto accept = [&ex, w = workers_[i].get(), a = acceptors_[i].back().get(), listener = kind.listener,
                       handler = kind.handler] {
          asio::co_spawn(ex, acceptLoop(*w, *a, listener, handler), session::logTaskError);
        };
        if (defer_accepting_) {
          deferred_accepts_.push_back(std::move(accept));
        } else {
          accept();
        }
      }
    }
  }

  if (operator_too) {
    if (auto st = bindOperatorListeners(); !st.ok()) return st;
  }

  // What ferryd must never connect to: every listener (as bound), and with the datapath
  // every address of the proxy netns, which is ferryd's alone. Called in that netns.
  std::vector<common::HostPort> listeners = {config_.listen.admin, config_.listen.metrics,
                                             config_.listen.readiness};
  for (const auto& per_worker : acceptors_) {
    for (const auto& a : per_worker) {
      boost::system::error_code ec;
      auto ep = a->local_endpoint(ec);
      if (!ec) listeners.push_back(session::toHostPort(ep));
    }
  }
  shared_->self = session::SelfAddresses(std::move(listeners), session::SelfAddresses::interfaceAddresses(),
                                         config_.datapath.enabled);
  return absl::OkStatus();
}

void Server::armSignals() {
  signals_.async_wait([this](const boost::system::error_code& ec, int sig) {
    if (ec) return;
    if (sig == SIGHUP) {
      FERRY_LOG(kInfo, "SIGHUP: re-reading the config file, the workloads file and the identity files");
      pollOnce(/*reread_config=*/true);
      identity_->poll();
      armSignals();
      return;
    }
    if (defer_accepting_) {
      // Not serving yet: nothing to drain, and nothing shared (the datapath's HBONE pause,
      // the CNI socket) may be touched on the way out.
      FERRY_LOG(kInfo, "signal %d before this ferryd took over: it exits, and the running one goes on serving", sig);
      exitWithoutServing(absl::OkStatus());
      return;
    }
    if (generation_ == Generation::kRetiring) {
      // Handed over: the connections this process carries end on their own, or at
      // handover.deadline (a pod's SIGTERM must not cut them: docs/operations.md).
      const int64_t live = liveConnections();
      FERRY_LOG(kInfo, "signal %d: handed over already; carrying %d connections until they end or handover.deadline",
                sig, live);
      exit_signalled_ = true;
      armSignals();
      if (waiting_for_signal_) finishDrain();  // it holds nothing: exits now
      return;
    }
    FERRY_LOG(kInfo, "signal %d: draining", sig);
    beginDrain();
  });
}

void Server::run() { control_.run(); }

void Server::shutdown() {
  asio::post(control_, [this] {
    // As a signal would (armSignals): a ferryd that has not taken over exits without a drain.
    if (defer_accepting_) {
      exitWithoutServing(absl::OkStatus());
      return;
    }
    beginDrain();
  });
}

void Server::beginDrain() {
  if (stopping_.exchange(true)) return;
  shared_->draining = true;
  // A planned stop: peers' new tunnels are held (dropped SYNs) for the next ferryd, not
  // refused as if this node had no ferryd (bpf/to_proxy.bpf.c).
  if (datapath_) datapath_->setHbonePaused(true);
  // ferry-cni finds no socket and answers at once by its failure policy, rather than
  // enrolling pods with a ferryd on its way out.
  if (cni_endpoint_) cni_endpoint_->stop();
  if (datapath_ && k8s_source_ != nullptr && k8s_source_->uninstalling()) {
    // No next ferryd is coming: leave the node as it was before ferry (docs/install.md).
    FERRY_LOG(kInfo, "uninstall: ferryd's DaemonSet was deleted; every program and pin goes at exit");
    datapath_->removeEverythingAtExit();
  }
  if (cni_credentials_) cni_credentials_->stop();
  if (cni_installer_ && k8s_source_ != nullptr && k8s_source_->uninstalling()) {
    // Before the drain: pods created from now on must not wait for a ferryd that is going.
    cni_installer_->uninstall();
  }
  poll_timer_.cancel();
  identity_->stopPolling();
  trim_timer_.cancel();
  // Readiness keeps answering, 503 `draining` (readiness()), so that a probe tells a
  // draining ferryd from a dead one; it stops with the rest in finishDrain.
  // Stop accepting and send GOAWAY on pooled connections; live connections may finish.
  stopAccepting(/*notice_tunnels=*/false);
  drain_deadline_ = std::chrono::steady_clock::now() + config_.timeouts.drain;
  finishDrain();
}

void Server::stopAccepting(bool notice_tunnels) {
  for (size_t i = 0; i < workers_.size(); ++i) {
    auto* w = workers_[i].get();
    auto* acceptors = &acceptors_[i];
    asio::post(w->io(), [w, acceptors, notice_tunnels] {
      for (auto& a : *acceptors) {
        boost::system::error_code ignored;
        a->close(ignored);
      }
      w->pool().drainAll();
      if (notice_tunnels) w->noticeShutdownToTunnels();
    });
  }
}

void Server::finishDrain() {
  const int64_t live = liveConnections();
  auto now = std::chrono::steady_clock::now();
  if (live > 0 && now >= drain_deadline_ && !drain_aborted_) {
    // The deadline: every live connection is reset, never closed: a FIN would tell an
    // application whose protocol has no framing that the reply was complete. Each is
    // recorded as `shutdown` by its own coroutine, which needs a pass of its worker.
    drain_aborted_ = true;
    FERRY_LOG(kWarn, "drain timeout: resetting %d live connections", live);
    for (auto& w : workers_) {
      asio::post(w->io(), [w = w.get()] { w->abortLive(); });
    }
    drain_deadline_ = now + kDrainAbortGrace;
  }
  // Retiring after a handover, also every connection accepted and not yet relaying (a
  // handshake, an HBONE tunnel between its handshake and its first CONNECT, a connection on
  // its way to its worker): the successor serves the node, so nothing may be reset for this
  // process leaving early. Their clients close idle tunnels at the GOAWAY (stopAccepting);
  // handshakes are bounded by timeouts.handshake.
  int64_t accepted = 0;
  if (generation_ == Generation::kRetiring) {
    for (auto l : {session::Listener::kOutbound, session::Listener::kPlaintext, session::Listener::kHbone}) {
      accepted += admission_.connections(l);
    }
  }
  if ((live > 0 || accepted > 0) && now < drain_deadline_) {
    drain_timer_.expires_after(std::chrono::milliseconds(50));
    drain_timer_.async_wait([this](const boost::system::error_code& ec) {
      if (!ec) finishDrain();
    });
    return;
  }
  if (generation_ == Generation::kRetiring && config_.handover.wait_for_signal && !exit_signalled_) {
    // Handed over, holding nothing: an exit now would be answered by the kubelet with a
    // restart, and the restarted ferryd would take the node back. The signal handler comes
    // back here.
    if (!waiting_for_signal_) {
      waiting_for_signal_ = true;
      FERRY_LOG(kInfo, "handover: this ferryd holds nothing any more; it exits at SIGTERM (handover.wait_for_signal)");
      publishReadinessFile();
    }
    return;
  }
  // What is still open now (a connection still dialling its tunnel) is reset by the
  // kernel when the process exits: every data-plane socket is armed for it.
  if (live > 0) FERRY_LOG(kWarn, "drain: %d connections still open at exit", live);
  FERRY_LOG(kInfo, "ferryd stopped");
  removeReadinessFile();
  for (auto& w : workers_) w->io().stop();
  readiness_.stop();
  metrics_.stop();
  admin_.stop();
  signals_.cancel();
  control_.stop();
}


}  // namespace ferry::server
