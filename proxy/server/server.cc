#include "proxy/server/server.h"

#include <csignal>

#include <boost/asio/post.hpp>

#include "absl/strings/str_cat.h"
#include "proxy/common/log.h"
#include "proxy/config/memory_budget.h"
#include "proxy/datapath/netns.h"
#include "proxy/hbone/receive_budget.h"
#include "proxy/session/context.h"

namespace ferry::server {

// The memory budget counts what a tunnel may read past the receive budget as hbone reads it.
static_assert(config::kHboneReceiveOvershootBytes == hbone::kPressuredRead);
namespace asio = boost::asio;

Server::Server(config::Config config, std::optional<common::WatchedFile> config_file)
    : config_(std::move(config)),
      config_file_(std::move(config_file)),
      reloads_(config_file_ ? config_file_->path() : std::string()),
      workloads_(std::make_unique<WorkloadRuntime>(config_, control_)),
      policy_(config_.policy),
      data_plane_(std::make_unique<DataPlane>(config_, control_)),
      handover_(std::make_unique<HandoverRuntime>(config_, control_, static_cast<HandoverHost&>(*this))) {
  registerMetrics();
}

Server::~Server() {
  handover_->removeReadinessFile();  // also after a failed start
  // The workers stop and their threads are joined before anything they use goes.
  data_plane_.reset();
  // The identity runtime's poll timer and ferry-ca's client live on control_: they go while
  // it runs no more, before the sources they read.
  if (identity_ != nullptr) identity_->stop();
  identity_.reset();
  // Handed over, or taken over and failed to start: the other ferryd uses the node's proxy
  // netns, its veth pair and its datapath.
  if (handover_->handedOver() || (!started_ && handover_->status().taken > 0)) workloads_->leaveNode();
}

absl::Status Server::start() {
  common::setLogLevel(config_.log_level);
  started_at_ = std::chrono::steady_clock::now();
  handover_->publishReadinessFile();  // "starting" until the end of start-up
  if (auto st = startSources(); !st.ok()) return st;
  if (auto st = data_plane_->start({.workloads = workloads_->store(),
                                    .policies = policy_.store(),
                                    .tls = identity_->tls(),
                                    .policies_loaded = policy_.loaded()});
      !st.ok()) {
    return st;
  }
  // The running ferryd's sockets (an upgrade or restart), before anything binds or loads.
  if (auto st = handover_->takeOverFromPrevious(); !st.ok()) return st;
  if (config_.datapath.enabled) {
    if (auto st = startDatapath(); !st.ok()) return st;
  }
  followWorkloads();
  if (auto st = bindAllListeners(); !st.ok()) return st;
  if (auto* datapath = workloads_->datapath()) datapath->setHbonePaused(false);
  if (auto st = handover_->startEndpoint(); !st.ok()) return st;
  // Pods are enrolled once ferryd listens: an answer "enrolled" means their first SYN finds it.
  if (auto st = workloads_->startCniEndpoint(/*taking_over=*/handover_->tookOver()); !st.ok()) return st;
  routeOperatorEndpoints();
  // After the endpoint is up: the chain makes every new pod's ADD call it.
  if (auto st = workloads_->installCni(); !st.ok()) return st;
  startControlLoop();
  data_plane_->startThreads(workloads_->proxyNetns());
  if (handover_->tookOver()) {
    // The previous ferryd serves until this one is ready (its workloads listed, its
    // certificates loaded): then it stops accepting and retires (handover_runtime.cc).
    FERRY_LOG(kInfo, "ferryd started: node=%s trust_domain=%s workers=%d; takes over from %s once ready",
              config_.node, config_.trust_domain, workerCount(), handover_->previousName());
    handover_->takeOverWhenReady();
    return absl::OkStatus();
  }
  started_ = true;
  handover_->publishReadinessFile();
  if (absl::Status ready = readiness(); !ready.ok()) {
    FERRY_LOG(kWarn, "ferryd started but not ready: %s", ready.message());
  }
  auto registry = workloads_->store().current();
  FERRY_LOG(kInfo, "ferryd started: node=%s trust_domain=%s workers=%d workloads=%d (local %d)", config_.node,
            config_.trust_domain, workerCount(), registry->size(), registry->localCount());
  return absl::OkStatus();
}

absl::Status Server::startSources() {
  auto policies_synced = [this] {
    data_plane_->markPoliciesLoaded();
    FERRY_LOG(kInfo, "policy: the cluster's AuthorizationPolicies and PeerAuthentications are loaded");
  };
  if (auto st = workloads_->startSource(policy_, policies_synced); !st.ok()) return st;
  if (auto st = policy_.start([this](const policy::PolicySet& after) { onPoliciesChanged(after); }); !st.ok()) {
    return st;
  }
  auto identity = IdentityRuntime::create(config_, control_, workloads_->store(), workloads_->serviceIpLookup());
  if (!identity.ok()) return identity.status();
  identity_ = *std::move(identity);
  return absl::OkStatus();
}

absl::Status Server::startDatapath() {
  // Plaintext to a pod goes through ferryd when a port of it is STRICT or policies apply.
  return workloads_->startDatapath(handover_->taken(), /*taking_over=*/handover_->tookOver(),
                                   [this](const workloads::Workload& w) {
                                     return policy_.store().current()->capturesPlaintext(w, session::fallbackMode(w));
                                   });
}

void Server::followWorkloads() {
  workloads_->follow();  // the datapath first
  workloads_->store().subscribe([this](const workloads::Registry& after, const workloads::Delta& delta) {
    onWorkloadsChanged(after, delta);
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
  if (const auto* netns = workloads_->proxyNetns()) {
    auto scoped = datapath::ScopedNetns::enter(*netns);
    if (!scoped.ok()) return scoped.status();
    in_proxy.emplace(std::move(*scoped));
  }
  if (auto st = data_plane_->bindListeners(handover_->taken(), handover_->waitingToServe()); !st.ok()) return st;
  if (!operator_in_proxy) in_proxy.reset();
  return bindOperatorListeners();
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
    auto taken = handover_->takenSockets(e.role, e.addr);
    if (!taken.empty() && handover_->waitingToServe()) {
      // The running ferryd answers on them until this one takes over: what answers on the
      // node's operator ports is always the generation that serves.
      handover_->deferEndpoint([server = e.server, fd = std::make_shared<common::UniqueFd>(std::move(taken[0]))] {
        return server->adopt(fd->release());
      });
      continue;
    }
    absl::Status st = taken.empty() ? e.server->listen(*e.addr) : e.server->adopt(taken[0].release());
    if (!st.ok()) return st;
  }
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
  data_plane_->housekeeping().start();
}

absl::Status Server::readiness() {
  if (stopping_.load()) return absl::UnavailableError("draining");
  if (!started_.load()) {
    // Taking over, this is what it waits for.
    absl::Status h = identity_ != nullptr ? health() : absl::OkStatus();
    return absl::UnavailableError(h.ok() ? std::string("starting") : absl::StrCat("starting (", h.message(), ")"));
  }
  return health();
}

absl::Status Server::health() {
  if (absl::Status s = workloads_->health(); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("not ready: workloads: ", s.message()));
  }
  return identity_->health();
}

void Server::onPoliciesChanged(const policy::PolicySet& after) {
  FERRY_LOG(kInfo, "policy: generation %u: %u AuthorizationPolicies, %u PeerAuthentications",
            static_cast<unsigned>(after.generation()), static_cast<unsigned>(after.authorizationCount()),
            static_cast<unsigned>(after.peerAuthenticationCount()));
  workloads_->refreshModes();
  data_plane_->reauthorize("a policy change");
}

void Server::onWorkloadsChanged(const workloads::Registry& after, const workloads::Delta& delta) {
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
  data_plane_->drainTunnelsFrom(std::move(left));
  if (local) identity_->forgetUnused();
  // A local workload's labels decide which policies apply to the connections it serves:
  // those are judged again. (Other nodes' pods change nothing here: a client's identity was
  // checked against its IP when its tunnel was made.)
  auto policies = policy_.store().current();
  if (local && policies->authorizationCount() + policies->peerAuthenticationCount() > 0) {
    data_plane_->reauthorize("a workload change");
  }
}

void Server::pollOnce(bool reread_config) {
  reloadConfig(reread_config);
  auto& stats = data_plane_->stats();
  if (workloads_->poll()) stats.workloads_reloads.fetch_add(1, std::memory_order_relaxed);
  policy_.poll();
  stats.workloads_reload_failures.store(workloads_->failures(), std::memory_order_relaxed);
}

void Server::pollWorkloads() {
  pollOnce();
  if (auto st = workloads_->syncDatapathOnceSourceListed(); !st.ok()) FERRY_LOG(kWarn, "datapath: %s", st.message());
  if (stopping_.load()) return;
  poll_timer_.expires_after(config_.workloads_poll);
  poll_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) pollWorkloads();
  });
}

void Server::armSignals() {
  signals_.async_wait([this](const boost::system::error_code& ec, int sig) {
    if (!ec) onSignal(sig);
  });
}

void Server::onSignal(int sig) {
  if (sig == SIGHUP) {
    FERRY_LOG(kInfo, "SIGHUP: re-reading the config file, the workloads file and the identity files");
    pollOnce(/*reread_config=*/true);
    identity_->poll();
    armSignals();
    return;
  }
  if (handover_->waitingToServe()) {
    // Not serving yet: nothing to drain, and nothing shared (the datapath's HBONE pause,
    // the CNI socket) may be touched on the way out.
    FERRY_LOG(kInfo, "signal %d before this ferryd took over: it exits, and the running one goes on serving", sig);
    exitWithoutServing(absl::OkStatus());
    return;
  }
  if (handover_->retiring()) {
    // Handed over: the connections this process carries end on their own, or at
    // handover.deadline (a pod's SIGTERM must not cut them: docs/operations.md).
    FERRY_LOG(kInfo, "signal %d: handed over already; carrying %d connections until they end or handover.deadline",
              sig, liveConnections());
    const bool holding_nothing = handover_->signalWhileRetiring();
    armSignals();
    if (holding_nothing) finishDrain();  // exits now
    return;
  }
  FERRY_LOG(kInfo, "signal %d: draining", sig);
  beginDrain();
}

void Server::run() { control_.run(); }

void Server::shutdown() {
  asio::post(control_, [this] {
    // As a signal would (onSignal): a ferryd that has not taken over exits without a drain.
    if (handover_->waitingToServe()) {
      exitWithoutServing(absl::OkStatus());
      return;
    }
    beginDrain();
  });
}

void Server::beginDrain() {
  if (stopping_.exchange(true)) return;
  data_plane_->refuseNewConnections();
  workloads_->beginDrain();
  stopPeriodicWork();
  // Readiness keeps answering, 503 `draining` (readiness()), so that a probe tells a
  // draining ferryd from a dead one; it stops with the rest in finishDrain.
  // Stop accepting and send GOAWAY on pooled connections; live connections may finish.
  data_plane_->stopAccepting(/*notice_tunnels=*/false);
  data_plane_->setDrainDeadline(std::chrono::steady_clock::now() + config_.timeouts.drain);
  finishDrain();
}

void Server::finishDrain() {
  // Retiring after a handover, also every connection accepted and not yet relaying (a
  // handshake, an HBONE tunnel between its handshake and its first CONNECT, a connection on
  // its way to its worker): the successor serves the node, so nothing may be reset for this
  // process leaving early. Their clients close idle tunnels at the GOAWAY (stopAccepting);
  // handshakes are bounded by timeouts.handshake.
  const bool retiring = handover_->retiring();
  if (!data_plane_->drainPass(/*accepted_too=*/retiring, [this] { finishDrain(); })) return;
  // Handed over, holding nothing: an exit now would be answered by the kubelet with a
  // restart, and the restarted ferryd would take the node back. The signal handler comes
  // back here.
  if (retiring && handover_->waitForSignal()) return;
  // What is still open now (a connection still dialling its tunnel) is reset by the
  // kernel when the process exits: every data-plane socket is armed for it.
  if (int64_t live = liveConnections(); live > 0) FERRY_LOG(kWarn, "drain: %d connections still open at exit", live);
  FERRY_LOG(kInfo, "ferryd stopped");
  handover_->removeReadinessFile();
  data_plane_->stopWorkers();
  stopOperatorEndpoints();
  signals_.cancel();
  control_.stop();
}

void Server::stopPeriodicWork() {
  poll_timer_.cancel();
  identity_->stopPolling();
  data_plane_->housekeeping().stop();
}

void Server::stopOperatorEndpoints() {
  readiness_.stop();
  metrics_.stop();
  admin_.stop();
}

// HandoverHost: what the handover asks of the rest of ferryd.

absl::Status Server::readyToServe() {
  absl::Status h = health();
  // Inbound connections are refused until the policies are known (session::authorize).
  if (h.ok() && !data_plane_->policiesLoaded()) {
    h = absl::UnavailableError("waiting for the first list of policies from the API server");
  }
  return h;
}

absl::Status Server::offerSockets(const handover::OfferSocket& add) {
  for (const auto& l : data_plane_->boundListeners()) {
    if (auto st = add(l.role, l.address, l.fd); !st.ok()) return st;
  }
  const struct {
    handover::Role role;
    const HttpServer* server;
    const common::HostPort* addr;
  } endpoints[] = {{handover::Role::kReadiness, &readiness_, &config_.listen.readiness},
                   {handover::Role::kMetrics, &metrics_, &config_.listen.metrics},
                   {handover::Role::kAdmin, &admin_, &config_.listen.admin}};
  for (const auto& e : endpoints) {
    if (auto st = add(e.role, common::formatHostPort(*e.addr), e.server->listenerFd()); !st.ok()) return st;
  }
  return workloads_->offer(add);
}

void Server::retire(std::chrono::steady_clock::time_point deadline) {
  stopping_ = true;  // a drain cannot start over it
  data_plane_->setDrainDeadline(deadline);
  stopOperatorEndpoints();
  workloads_->retire();
  stopPeriodicWork();
  // Clients of its tunnels open new streams on the successor's; its own pooled tunnels take
  // no new streams; what runs on them goes on.
  data_plane_->stopAccepting(/*notice_tunnels=*/true);
}

absl::Status Server::startServing() {
  if (auto st = workloads_->syncDatapathOnceSourceListed(); !st.ok()) FERRY_LOG(kWarn, "datapath: %s", st.message());
  // The plugin's socket path is this one's from here (a ferryd that fails to announce leaves
  // it to the running one, which binds it again).
  return workloads_->serveCni();
}

void Server::serving() {
  data_plane_->acceptDeferred();
  started_ = true;
  auto registry = workloads_->store().current();
  FERRY_LOG(kInfo, "ferryd serving: node=%s workloads=%d (local %d)", config_.node, registry->size(),
            registry->localCount());
}

void Server::exitWithoutServing(absl::Status why) {
  if (!why.ok()) FERRY_LOG(kError, "%s", why.message());
  exit_status_ = std::move(why);
  handover_->removeReadinessFile();
  data_plane_->stopWorkers();
  control_.stop();
}

}  // namespace ferry::server
