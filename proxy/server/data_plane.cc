#include "proxy/server/data_plane.h"

#include <malloc.h>
#include <unistd.h>

#include <algorithm>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "absl/strings/str_cat.h"
#include "proxy/common/log.h"
#include "proxy/config/memory_budget.h"
#include "proxy/net/buffer_chain.h"
#include "proxy/net/socket_io.h"
#include "proxy/session/original_destination.h"

namespace ferry::server {

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);

// After the drain deadline reset the live connections, how long their coroutines get to
// record them (a pass of each worker; they only finish what was cancelled).
constexpr auto kDrainAbortGrace = std::chrono::seconds(1);
// While connections are left, the drain looks again this often.
constexpr auto kDrainCheckInterval = std::chrono::milliseconds(50);

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

handover::Role roleOf(session::Listener l) {
  return l == session::Listener::kOutbound    ? handover::Role::kOutbound
         : l == session::Listener::kPlaintext ? handover::Role::kPlaintext
                                              : handover::Role::kHbone;
}

Handler handlerOf(session::Listener l) {
  return l == session::Listener::kOutbound    ? &session::acceptOutbound
         : l == session::Listener::kPlaintext ? &session::acceptPlaintext
                                              : &session::acceptHbone;
}

}  // namespace

DataPlane::DataPlane(const config::Config& config, asio::io_context& control)
    : config_(config),
      control_(control),
      sockets_(config.transparent),
      admission_(config.limits),
      drain_timer_(control),
      housekeeping_(*this, config, control) {}

DataPlane::~DataPlane() {
  stopWorkers();
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
  // A worker's queue may still hold the answer of an admin request (/connections) whose
  // connection belongs to the control loop: it goes while that loop still exists (the
  // server's data plane goes before its control loop); the listeners before their workers.
  acceptors_.clear();
  workers_.clear();
}

absl::Status DataPlane::start(const Sources& sources) {
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
      .workloads = sources.workloads,
      .policies = sources.policies,
      .tls = sources.tls,
      .sockets = sockets_,
      .stats = stats_,
      .admission = admission_,
      .ferry_ports = ferryPorts(config_),
      .workers = n,
      .descriptor_cap = *cap,
      .descriptor_slack = descriptor_slack,
      .policies_loaded = sources.policies_loaded,
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

void DataPlane::preallocateSocketStates(int descriptor_cap) {
  // Never more than half the data plane's descriptors: they are all open at once here.
  size_t total = std::min<size_t>(config_.limits.preallocated_sockets, static_cast<size_t>(descriptor_cap) / 2);
  for (auto& w : workers_) net::warmSocketStates(w->io(), total / workers_.size());
}

absl::Status DataPlane::bindListeners(const handover::TakenSockets& taken, bool defer_accepting) {
  acceptors_.resize(workers_.size());
  const struct {
    const std::vector<common::HostPort>* addrs;
    session::Listener listener;
  } kinds[] = {{&config_.listen.outbound, session::Listener::kOutbound},
               {&config_.listen.inbound_plaintext, session::Listener::kPlaintext},
               {&config_.listen.hbone, session::Listener::kHbone}};
  for (const auto& kind : kinds) {
    if (auto st = bindListenersOf(*kind.addrs, kind.listener, taken, defer_accepting); !st.ok()) return st;
  }
  recordSelfAddresses();
  return absl::OkStatus();
}

absl::Status DataPlane::bindListenersOf(const std::vector<common::HostPort>& addrs, session::Listener listener,
                                        const handover::TakenSockets& taken_sockets, bool defer_accepting) {
  const size_t n = workers_.size();
  for (const auto& addr : addrs) {
    // Handed over: the previous ferryd's listeners of this address (one per its worker, a
    // SO_REUSEPORT group), spread over the workers; a worker without one binds its own in
    // the same group.
    auto taken = taken_sockets(roleOf(listener), &addr);
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
          return absl::InternalError(absl::StrCat(session::listenerLabel(listener),
                                                  " listener handed over: ", ec.message()));
        }
      } else {
        auto bound = sockets_.listen(ex.get_executor(), addr);
        if (!bound.ok()) {
          return absl::Status(bound.status().code(), absl::StrCat(session::listenerLabel(listener),
                                                                  " listener: ", bound.status().message()));
        }
        acceptor = std::make_unique<tcp::acceptor>(std::move(*bound));
      }
      boost::system::error_code ec;
      auto ep = acceptor->local_endpoint(ec);
      bound_listeners_.push_back({roleOf(listener),
                                  ec ? common::formatHostPort(addr) : common::formatHostPort(session::toHostPort(ep)),
                                  acceptor->native_handle()});
      acceptors_[i].push_back(std::move(acceptor));
      auto accept = [&ex, w = workers_[i].get(), a = acceptors_[i].back().get(), listener,
                     handler = handlerOf(listener)] {
        asio::co_spawn(ex, acceptLoop(*w, *a, listener, handler), session::logTaskError);
      };
      if (defer_accepting) {
        deferred_accepts_.push_back(std::move(accept));
      } else {
        accept();
      }
    }
  }
  return absl::OkStatus();
}

void DataPlane::recordSelfAddresses() {
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
}

void DataPlane::startThreads(const datapath::NetnsFd* netns) {
  for (auto& w : workers_) {
    threads_.emplace_back([w = w.get(), netns] {
      // Upstream sockets opened by this worker must be in the proxy netns too.
      if (netns != nullptr) {
        if (auto st = datapath::enterNetns(*netns); !st.ok()) {
          FERRY_LOG(kError, "worker %d: %s", w->index(), st.message());
          return;
        }
      }
      auto guard = asio::make_work_guard(w->io());
      w->io().run();
    });
  }
}

void DataPlane::acceptDeferred() {
  // What arrived meanwhile waits in the listen queues, which are the same sockets.
  for (auto& accept : deferred_accepts_) accept();
  deferred_accepts_.clear();
}

void DataPlane::stopAccepting(bool notice_tunnels) {
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

void DataPlane::stopWorkers() {
  for (auto& w : workers_) w->io().stop();
}

bool DataPlane::drainPass(bool accepted_too, std::function<void()> again) {
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
  int64_t accepted = 0;
  if (accepted_too) {
    for (auto l : {session::Listener::kOutbound, session::Listener::kPlaintext, session::Listener::kHbone}) {
      accepted += admission_.connections(l);
    }
  }
  if ((live > 0 || accepted > 0) && now < drain_deadline_) {
    drain_timer_.expires_after(kDrainCheckInterval);
    drain_timer_.async_wait([again = std::move(again)](const boost::system::error_code& ec) {
      if (!ec) again();
    });
    return false;
  }
  return true;
}

int64_t DataPlane::liveConnections() {
  int64_t live = 0;
  for (auto& w : workers_) live += w->live().load(std::memory_order_relaxed);
  return live;
}

void DataPlane::reauthorize(const char* why) {
  if (!shared_) return;  // before start-up has made the workers: nothing is open
  auto policies = shared_->policies.current();
  auto registry = shared_->workloads.current();
  for (auto& w : workers_) {
    asio::post(w->io(), [w = w.get(), policies, registry, why] {
      if (size_t closed = w->reauthorize(*policies, *registry); closed > 0) {
        FERRY_LOG(kInfo, "policy: closed %u open connections that %s denies now", static_cast<unsigned>(closed), why);
      }
    });
  }
}

void DataPlane::drainTunnelsFrom(std::vector<common::IpAddress> left) {
  if (left.empty()) return;
  for (auto& w : workers_) {
    asio::post(w->io(), [w = w.get(), left] {
      size_t drained = 0;
      for (const auto& ip : left) drained += w->pool().drainSource(ip);
      w->shared().stats.hbone_connections_drained_source_left += drained;
    });
  }
}

void DataPlane::applyMemoryBudget() { shared_->receive_budget->setLimit(config_.memory_budget.receive_buffer); }

void DataPlane::applyConfig(const config::Config& before) {
  if (!(config_.limits == before.limits)) admission_.setLimits(config_.limits);
  // Each worker picks the new settings up at its next record (session::AccessLogger).
  if (!(config_.access_log == before.access_log)) shared_->access_log.set(config_.access_log);
  // Timeouts, pool and HBONE settings: each worker takes the new config on its own thread;
  // what it starts from then on (a handshake, a connect, a relay, a pooled tunnel) uses it.
  auto snapshot = std::make_shared<const config::Config>(config_);
  for (auto& w : workers_) {
    asio::post(w->io(), [w = w.get(), snapshot] { w->setConfig(snapshot); });
  }
}

void DataPlane::markPoliciesLoaded() {
  if (shared_) shared_->policies_loaded.store(true, std::memory_order_release);
}

bool DataPlane::policiesLoaded() const {
  return shared_ != nullptr && shared_->policies_loaded.load(std::memory_order_acquire);
}

// Istio's TCP metrics, and how many series they hold and dropped.
void DataPlane::collectIstio(telemetry::Exposition& out) {
  if (!istio_) return;
  istio_->collect(out);
  out.gauge("ferry_istio_series", "Istio TCP metric series held (a pair on two workers counts twice)",
            static_cast<double>(istio_->size()));
  out.counter("ferry_istio_series_dropped_total",
              "Istio TCP metric series dropped after telemetry.series_expiry without a connection or a byte",
              static_cast<double>(housekeeping_.seriesDropped()));
}

// Descriptors, memory, the HBONE receive budget.
void DataPlane::collectResources(telemetry::Exposition& out) {
  out.gauge("ferry_descriptor_limit", "RLIMIT_NOFILE in force", static_cast<double>(descriptor_limit_));
  out.gauge("ferry_data_plane_descriptor_cap",
            "Descriptors the data plane may use (the limit minus limits.descriptor_reserve)",
            shared_ ? shared_->descriptor_cap : 0);
  out.counter("ferry_memory_trims_total", "Heap trims (malloc_trim) after bursts of closes",
              static_cast<double>(housekeeping_.trims()));
  const auto& budget = config_.memory_budget;
  out.gauge("ferry_memory_limit_bytes", "The memory limit the admission limits are fitted to (0: none)",
            static_cast<double>(budget.limit));
  out.gauge("ferry_memory_admission_worst_case_bytes",
            "What the admission limits in force cost at worst (docs/configuration.md, \"Memory\")",
            static_cast<double>(budget.worst_case));
  if (!shared_) return;
  const auto& received = *shared_->receive_budget;
  out.gauge("ferry_hbone_receive_budget_bytes",
            "Bytes received over HBONE that may wait for the applications, all connections together "
            "(limits.receive_buffer; 0: no bound but the HTTP/2 windows)",
            static_cast<double>(received.limit()));
  out.gauge("ferry_hbone_received_unwritten_bytes",
            "Bytes received over HBONE and not yet written to the applications",
            static_cast<double>(received.held()));
  out.counter("ferry_hbone_read_pauses_total",
              "Times an HBONE connection stopped reading because the receive budget was exceeded while it "
              "held unwritten bytes",
              static_cast<double>(received.pauses()));
}

// Workers and their load, buffer blocks.
void DataPlane::collectWorkers(telemetry::Exposition& out) {
  out.gauge("ferry_workers", "Worker threads", static_cast<double>(workers_.size()));
  auto load = out.gauge("ferry_worker_load",
                        "Connections and inbound streams running on each worker (where new connections are placed)");
  for (size_t i = 0; i < workers_.size(); ++i) {
    std::string worker = std::to_string(i);
    load.add(static_cast<double>(shared_->placement.load(i)), {{"worker", worker}});
  }
  auto blocks = net::BufferChain::blocks();
  auto buffers = out.gauge("ferry_buffer_blocks",
                           "64 KiB buffer blocks: holding queued bytes, or spare on the workers' free lists");
  buffers.add(static_cast<double>(blocks.in_use), {{"state", "in_use"}});
  buffers.add(static_cast<double>(blocks.spare), {{"state", "spare"}});
}

// How often the control thread looks at the close counts to decide on a trim.
constexpr auto kTrimCheckInterval = std::chrono::seconds(1);
// While closes keep coming (steady churn rather than a burst), trim no more often than
// this: malloc_trim() walks every arena under its lock, and workers allocating from that
// arena wait for it (a few milliseconds after a flood; docs/security.md, Memory).
constexpr auto kTrimMinInterval = std::chrono::seconds(10);

Housekeeping::Housekeeping(DataPlane& data_plane, const config::Config& config, asio::io_context& control)
    : data_plane_(data_plane), config_(config), control_(control), timer_(control) {}

void Housekeeping::start() {
  last_trim_ = std::chrono::steady_clock::now();
  schedule();  // limits.trim_after_closes may be 0 now and set by a reload
}

void Housekeeping::stop() {
  stopped_ = true;
  timer_.cancel();
}

void Housekeeping::schedule() {
  if (stopped_) return;
  timer_.expires_after(kTrimCheckInterval);
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    sweepIstioSeries();
    maybeTrimMemory();
    schedule();
  });
}

// Each worker drops its Istio series that have been idle for telemetry.series_expiry; swept
// every half of it (at most every 30 s), so a series goes between one and one and a half
// expiries after its last connection closed.
void Housekeeping::sweepIstioSeries() {
  auto* istio = data_plane_.istio_.get();
  if (istio == nullptr) return;
  const auto now = std::chrono::steady_clock::now();
  const auto every = std::min<std::chrono::steady_clock::duration>(config_.telemetry.series_expiry / 2,
                                                                  std::chrono::seconds(30));
  if (now - last_series_sweep_ < every) return;
  last_series_sweep_ = now;
  for (auto& w : data_plane_.workers_) {
    asio::post(w->io(), [this, istio, w = w.get(), now] {
      istio_series_dropped_.fetch_add(istio->sweep(w->index(), now), std::memory_order_relaxed);
    });
  }
}

// glibc keeps what a flood freed: each worker allocates from its own arena, and memory
// freed below a live chunk (an Asio descriptor state, a TLS context that stayed) is never
// returned by free(). malloc_trim(0) walks every arena and gives back each free page
// (madvise), which is what brings RSS back to its baseline after 2,000 silent connections
// or 5,000 closed proxied ones (docs/security.md, Memory: M_ARENA_MAX alone did not).
// It runs once a burst of closes is over, so a steady stream of connections is not taxed.
void Housekeeping::maybeTrimMemory() {
  // Tickets (listener connections), proxied connections and pooled HBONE tunnels: a
  // tunnel's TLS and HTTP/2 state is the largest single thing a close frees.
  const auto& stats = data_plane_.stats_;
  uint64_t closes = data_plane_.admission_.released() + stats.hbone_connections_closed.load(std::memory_order_relaxed);
  for (const auto& per_direction : stats.closed) {
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
  auto remaining = std::make_shared<std::atomic<size_t>>(data_plane_.workers_.size());
  for (auto& w : data_plane_.workers_) {
    asio::post(w->io(), [this, remaining, since_trim] {
      net::BufferChain::releaseFreeBlocks();
      if (remaining->fetch_sub(1) == 1) asio::post(control_, [this, since_trim] { trimHeap(since_trim); });
    });
  }
}

void Housekeeping::trimHeap(uint64_t closes) {
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

}  // namespace ferry::server
