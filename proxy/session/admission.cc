#include "proxy/session/admission.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "proxy/telemetry/metrics.h"

namespace ferry::session {

namespace {

// Below this the data plane could not hold even a few proxied connections (two
// descriptors each, plus pooled tunnels and the workers' event loops).
constexpr int kMinDataPlaneDescriptors = 64;

std::array<uint8_t, 16> sourceKey(const common::IpAddress& ip) {
  // IPv4 and its v4-mapped IPv6 form are one source.
  if (ip.is_v4()) return boost::asio::ip::make_address_v6(boost::asio::ip::v4_mapped, ip.to_v4()).to_bytes();
  return ip.to_v6().to_bytes();
}

}  // namespace

const char* listenerLabel(Listener l) {
  switch (l) {
    case Listener::kOutbound: return "outbound";
    case Listener::kHbone: return "hbone";
    case Listener::kPlaintext: return "inbound_plaintext";
    case Listener::kCount: break;
  }
  return "unknown";
}

const char* refusalLabel(Refusal r) {
  switch (r) {
#define FERRY_X(name, label, help) \
  case Refusal::name:              \
    return label;
    FERRY_REFUSALS(FERRY_X)
#undef FERRY_X
    case Refusal::kCount:
      break;
  }
  return "unknown";
}

AcceptError classifyAcceptError(const boost::system::error_code& ec) {
  if (ec.category() != boost::system::system_category()) return AcceptError::kOther;
  switch (ec.value()) {
    case EMFILE:
    case ENFILE:
      return AcceptError::kDescriptors;
    case ENOBUFS:
    case ENOMEM:
      return AcceptError::kMemory;
    default:
      return AcceptError::kOther;
  }
}

const char* acceptErrorLabel(AcceptError e) {
  switch (e) {
    case AcceptError::kDescriptors: return "descriptors";
    case AcceptError::kMemory: return "memory";
    case AcceptError::kOther: return "other";
    case AcceptError::kCount: break;
  }
  return "unknown";
}

AdmissionTicket::~AdmissionTicket() { admission_.release(*this); }

void AdmissionTicket::handshakeDone() { admission_.finishHandshake(*this); }

void AdmissionTicket::setEvictor(std::function<void()> evict) { admission_.setEvictor(*this, std::move(evict)); }

bool LogThrottle::allow(uint64_t& suppressed) {
  int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
  int64_t next = next_.load(std::memory_order_relaxed);
  if (now < next || !next_.compare_exchange_strong(next, now + interval_.count())) {
    held_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  suppressed = held_.exchange(0, std::memory_order_relaxed);
  return true;
}

Admission::Admission(const config::Limits& limits, Clock clock)
    : clock_(clock ? std::move(clock) : Clock([] { return std::chrono::steady_clock::now(); })) {
  setLimits(limits);
}

void Admission::setLimits(const config::Limits& limits) {
  for (auto [listener, l] : {std::pair{Listener::kOutbound, &limits.outbound}, std::pair{Listener::kHbone, &limits.hbone},
                             std::pair{Listener::kPlaintext, &limits.inbound_plaintext}}) {
    auto& s = state_[static_cast<size_t>(listener)];
    std::lock_guard lock(s.mu);
    s.limits = *l;
    if (l->max_new_per_source_per_second == 0) {
      std::vector<RateSlot>().swap(s.rates);
    } else if (s.rates.empty()) {
      s.rates.resize(kRateSlots);
    }
  }
}

Admission::RateSlot* Admission::rateSlot(State& s, const std::array<uint8_t, 16>& key) {
  if (s.rates.empty()) return nullptr;  // no rate (setLimits)
  const auto& l = s.limits;
  const double burst = std::max(l.max_new_per_source_per_second, l.max_connections_per_source);
  RateSlot& slot = s.rates[absl::Hash<std::array<uint8_t, 16>>{}(key) % s.rates.size()];
  auto now = clock_();
  if (!slot.used || slot.source != key) {
    slot = RateSlot{key, true, burst, now};
    return &slot;
  }
  double elapsed = std::chrono::duration<double>(now - slot.at).count();
  slot.tokens = std::min(burst, slot.tokens + elapsed * l.max_new_per_source_per_second);
  slot.at = now;
  return &slot;
}

Admitted Admission::admit(Listener listener, const common::IpAddress& source, Refusal& why, DescriptorUse descriptors,
                          SourceKind kind) {
  const bool at_cap = descriptors != DescriptorUse::kWithinCap;
  auto& s = state_[static_cast<size_t>(listener)];
  auto key = sourceKey(source);
  {
    std::lock_guard lock(s.mu);
    const auto& l = s.limits;
    auto it = s.sources.find(key);
    uint32_t from_source = it == s.sources.end() ? 0 : it->second.connections;
    uint32_t pending_from_source = it == s.sources.end() ? 0 : it->second.pending;
    RateSlot* rate = rateSlot(s, key);
    // The most specific limit is the one to name: a flood from one source reads as such.
    if (from_source >= l.max_connections_per_source) {
      why = Refusal::kConnectionsPerSource;
    } else if (pending_from_source >= l.max_pending_per_source) {
      why = Refusal::kPendingPerSource;
    } else if (rate != nullptr && rate->tokens < 1) {
      why = Refusal::kRatePerSource;
    } else if (s.connections >= l.max_connections) {
      // Before any eviction: ending a pending handshake would not make this room.
      why = Refusal::kConnections;
    } else if (at_cap && (from_source > 0 || !evictOne(s, pending_from_source, kind))) {
      // Only a source holding nothing here yet (a new client) may take an evicted one's
      // place at the cap: the flooding sources would otherwise fill the slack themselves,
      // or take back the descriptors the evicted ones gave back (kAtCap).
      why = Refusal::kDescriptors;
    } else if (s.pending - s.evicting >= l.max_pending && !evictOne(s, pending_from_source, kind)) {
      why = Refusal::kPending;
    } else {
      if (rate != nullptr) rate->tokens -= 1;
      auto& per = s.sources[key];
      ++per.connections;
      ++per.pending;
      ++s.connections;
      ++s.pending;
      s.connections_gauge.store(s.connections, std::memory_order_relaxed);
      s.pending_gauge.store(s.pending, std::memory_order_relaxed);
      auto ticket = std::make_shared<AdmissionTicket>(*this, listener, key);
      ticket->kind_ = kind;
      if (descriptors == DescriptorUse::kInSlack) {
        ticket->in_slack_ = true;
        in_slack_.fetch_add(1, std::memory_order_relaxed);
      }
      ticket->since_ = clock_();
      ticket->queue_pos_ = s.queue.insert(s.queue.end(), ticket.get());
      ticket->queued_ = true;
      return ticket;
    }
  }
  countRefusal(listener, why);
  return nullptr;
}

// Under s.mu. The oldest pending ticket that may make room for a connection from a source
// holding `newcomer_pending` pending ones: its connection can be ended (an evictor is set),
// and it is an unknown address's while the newcomer is a workload, or, of the same kind,
// its source holds more pending ones than the newcomer's; a source's only pending one then
// keeps its place for kEvictAfter (a client's handshake in progress), one of a source
// holding several does not. A workload's is never ended for an unknown address. A bounded
// walk from the oldest.
bool Admission::evictOne(State& s, uint32_t newcomer_pending, SourceKind newcomer) {
  constexpr int kMaxLooked = 64;
  auto now = clock_();
  int looked = 0;
  // The first ticket of the newcomer's kind that may go, kept while the walk looks on for
  // one of a lower kind, which goes first.
  auto victim = s.queue.end();
  for (auto it = s.queue.begin(); it != s.queue.end() && looked < kMaxLooked; ++it, ++looked) {
    AdmissionTicket& t = **it;
    if (!t.evict_ || t.kind_ > newcomer) continue;
    if (t.kind_ < newcomer) {
      victim = it;
      break;
    }
    if (victim != s.queue.end()) continue;
    auto src = s.sources.find(t.source_);
    if (src == s.sources.end() || src->second.pending <= newcomer_pending) continue;
    if (src->second.pending < 2 && now - t.since_ < kEvictAfter) continue;
    victim = it;
    if (newcomer == SourceKind::kUnknown) break;  // nothing ranks lower
  }
  if (victim == s.queue.end()) return false;
  AdmissionTicket& t = **victim;
  s.queue.erase(victim);
  t.queued_ = false;
  t.evicted_ = true;
  ++s.evicting;
  s.evicted.fetch_add(1, std::memory_order_relaxed);
  auto evict = std::move(t.evict_);
  t.evict_ = nullptr;
  evict();  // posts the close to the connection's worker
  return true;
}

void Admission::setEvictor(AdmissionTicket& t, std::function<void()> evict) {
  auto& s = state_[static_cast<size_t>(t.listener_)];
  std::lock_guard lock(s.mu);
  if (t.queued_) t.evict_ = std::move(evict);
}

// Under s.mu: the ticket no longer counts as pending.
void Admission::unqueue(State& s, AdmissionTicket& t) {
  if (t.queued_) {
    s.queue.erase(t.queue_pos_);
    t.queued_ = false;
  }
  t.evict_ = nullptr;
  if (t.evicted_) {
    t.evicted_ = false;
    if (s.evicting > 0) --s.evicting;
  }
  if (auto it = s.sources.find(t.source_); it != s.sources.end() && it->second.pending > 0) --it->second.pending;
  if (s.pending > 0) --s.pending;
  s.pending_gauge.store(s.pending, std::memory_order_relaxed);
}

void Admission::finishHandshake(AdmissionTicket& t) {
  auto& s = state_[static_cast<size_t>(t.listener_)];
  std::lock_guard lock(s.mu);
  if (!t.pending_) return;
  t.pending_ = false;
  unqueue(s, t);
}

void Admission::release(AdmissionTicket& t) {
  auto& s = state_[static_cast<size_t>(t.listener_)];
  {
    std::lock_guard lock(s.mu);
    if (t.pending_) {
      t.pending_ = false;
      unqueue(s, t);
    }
    if (auto it = s.sources.find(t.source_); it != s.sources.end()) {
      auto& per = it->second;
      if (per.connections > 0) --per.connections;
      if (per.connections == 0) s.sources.erase(it);
    }
    if (s.connections > 0) --s.connections;
    s.connections_gauge.store(s.connections, std::memory_order_relaxed);
  }
  if (t.in_slack_) in_slack_.fetch_sub(1, std::memory_order_relaxed);
  released_.fetch_add(1, std::memory_order_relaxed);
}

DescriptorUse Admission::descriptorUse(int fd, int cap) const {
  if (fd >= cap) return DescriptorUse::kInSlack;
  const int above = in_slack_.load(std::memory_order_relaxed);
  if (above <= 0) return DescriptorUse::kWithinCap;
  // The kernel gives the lowest free number: count the free ones above `fd` and below the
  // cap by taking them (F_DUPFD), until there are as many as are open above the cap. A
  // socket another worker accepts meanwhile is numbered higher than it would be; it is
  // judged by the same rule, so at worst it is held to the cap a moment early.
  std::vector<int> taken;
  int free_below = 0;
  for (int from = fd + 1; free_below < above; ++free_below) {
    int dup = ::fcntl(fd, F_DUPFD_CLOEXEC, from);
    if (dup < 0) break;
    taken.push_back(dup);
    if (dup >= cap) break;
    from = dup + 1;
  }
  for (int dup : taken) ::close(dup);
  return free_below >= above ? DescriptorUse::kWithinCap : DescriptorUse::kAtCap;
}

uint64_t Admission::evicted(Listener listener) const {
  return state_[static_cast<size_t>(listener)].evicted.load(std::memory_order_relaxed);
}

void Admission::countRefusal(Listener listener, Refusal why) {
  state_[static_cast<size_t>(listener)].refused[static_cast<size_t>(why)].fetch_add(1, std::memory_order_relaxed);
}

void Admission::countAcceptError(Listener listener, AcceptError error) {
  state_[static_cast<size_t>(listener)].accept_errors[static_cast<size_t>(error)].fetch_add(
      1, std::memory_order_relaxed);
}

uint64_t Admission::refused(Listener listener, Refusal why) const {
  return state_[static_cast<size_t>(listener)].refused[static_cast<size_t>(why)].load(std::memory_order_relaxed);
}

uint64_t Admission::acceptErrors(Listener listener, AcceptError error) const {
  return state_[static_cast<size_t>(listener)].accept_errors[static_cast<size_t>(error)].load(
      std::memory_order_relaxed);
}

int64_t Admission::connections(Listener listener) const {
  return state_[static_cast<size_t>(listener)].connections_gauge.load(std::memory_order_relaxed);
}

int64_t Admission::pending(Listener listener) const {
  return state_[static_cast<size_t>(listener)].pending_gauge.load(std::memory_order_relaxed);
}

void Admission::collect(telemetry::Exposition& out) const {
  auto per_listener = [&](telemetry::Family family, auto value) {
    for (size_t l = 0; l < static_cast<size_t>(Listener::kCount); ++l) {
      family.add(static_cast<double>(value(static_cast<Listener>(l))),
                 {{"listener", listenerLabel(static_cast<Listener>(l))}});
    }
  };
  per_listener(out.gauge("ferry_admitted_connections", "Connections admitted on each data-plane listener and open now"),
               [&](Listener l) { return connections(l); });
  per_listener(out.gauge("ferry_pending_handshakes",
                         "Admitted connections whose handshake (TLS, PROXY header) is not done"),
               [&](Listener l) { return pending(l); });
  auto refusals = out.counter("ferry_admission_refused_total",
                              "Connections refused at accept (closed with a reset), by listener and the limit that "
                              "refused them");
  for (size_t l = 0; l < static_cast<size_t>(Listener::kCount); ++l) {
    for (size_t r = 0; r < static_cast<size_t>(Refusal::kCount); ++r) {
      refusals.add(static_cast<double>(refused(static_cast<Listener>(l), static_cast<Refusal>(r))),
                   {{"listener", listenerLabel(static_cast<Listener>(l))},
                    {"reason", refusalLabel(static_cast<Refusal>(r))}});
    }
  }
  per_listener(out.counter("ferry_admission_evicted_total",
                           "Pending connections ended to make room for a new one at max_pending_handshakes or the "
                           "descriptor cap (an unknown address's for a mesh workload's; else held longest, by a "
                           "source holding more pending ones than the newcomer's)"),
               [&](Listener l) { return evicted(l); });
  auto errors = out.counter("ferry_accept_errors_total",
                            "accept() failures (each followed by a short back-off), by listener and kind");
  for (size_t l = 0; l < static_cast<size_t>(Listener::kCount); ++l) {
    for (size_t e = 0; e < static_cast<size_t>(AcceptError::kCount); ++e) {
      errors.add(static_cast<double>(acceptErrors(static_cast<Listener>(l), static_cast<AcceptError>(e))),
                 {{"listener", listenerLabel(static_cast<Listener>(l))},
                  {"error", acceptErrorLabel(static_cast<AcceptError>(e))}});
    }
  }
}

absl::StatusOr<int> dataPlaneDescriptorCap(uint32_t reserve) {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
    return absl::InternalError(absl::StrCat("getrlimit(RLIMIT_NOFILE): ", strerror(errno)));
  }
  // RLIM_INFINITY or a limit beyond int: the kernel's own nr_open cap applies long before.
  uint64_t limit = rl.rlim_cur == RLIM_INFINITY ? uint64_t{1} << 30 : rl.rlim_cur;
  if (limit > (uint64_t{1} << 30)) limit = uint64_t{1} << 30;
  if (limit < uint64_t{reserve} + kMinDataPlaneDescriptors) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the descriptor limit (RLIMIT_NOFILE ", limit, ") leaves fewer than ", kMinDataPlaneDescriptors,
        " to the data plane after limits.descriptor_reserve (", reserve,
        "); raise the limit (ulimit -n, LimitNOFILE=) or lower the reserve"));
  }
  return static_cast<int>(limit - reserve);
}

uint64_t raiseDescriptorLimit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 0;
  if (rl.rlim_cur < rl.rlim_max) {
    rlimit raised = rl;
    raised.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) return raised.rlim_cur;
  }
  return rl.rlim_cur;
}

}  // namespace ferry::session
