#include "proxy/session/admission.h"

#include <sys/resource.h>

#include <cerrno>

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

AdmissionTicket::~AdmissionTicket() { admission_.release(listener_, source_, pending_); }

void AdmissionTicket::handshakeDone() {
  if (!pending_) return;
  pending_ = false;
  admission_.finishHandshake(listener_, source_);
}

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

Admission::Admission(const config::Limits& limits) { setLimits(limits); }

void Admission::setLimits(const config::Limits& limits) {
  for (auto [listener, l] : {std::pair{Listener::kOutbound, &limits.outbound}, std::pair{Listener::kHbone, &limits.hbone},
                             std::pair{Listener::kPlaintext, &limits.inbound_plaintext}}) {
    auto& s = state_[static_cast<size_t>(listener)];
    std::lock_guard lock(s.mu);
    s.limits = *l;
  }
}

Admitted Admission::admit(Listener listener, const common::IpAddress& source, Refusal& why) {
  auto& s = state_[static_cast<size_t>(listener)];
  auto key = sourceKey(source);
  {
    std::lock_guard lock(s.mu);
    const auto& l = s.limits;
    auto it = s.sources.find(key);
    uint32_t from_source = it == s.sources.end() ? 0 : it->second.connections;
    uint32_t pending_from_source = it == s.sources.end() ? 0 : it->second.pending;
    // The most specific limit is the one to name: a flood from one source reads as such.
    if (from_source >= l.max_connections_per_source) {
      why = Refusal::kConnectionsPerSource;
    } else if (pending_from_source >= l.max_pending_per_source) {
      why = Refusal::kPendingPerSource;
    } else if (s.connections >= l.max_connections) {
      why = Refusal::kConnections;
    } else if (s.pending >= l.max_pending) {
      why = Refusal::kPending;
    } else {
      auto& per = s.sources[key];
      ++per.connections;
      ++per.pending;
      ++s.connections;
      ++s.pending;
      s.connections_gauge.store(s.connections, std::memory_order_relaxed);
      s.pending_gauge.store(s.pending, std::memory_order_relaxed);
      return std::make_shared<AdmissionTicket>(*this, listener, key);
    }
  }
  countRefusal(listener, why);
  return nullptr;
}

void Admission::finishHandshake(Listener listener, const std::array<uint8_t, 16>& source) {
  auto& s = state_[static_cast<size_t>(listener)];
  std::lock_guard lock(s.mu);
  if (auto it = s.sources.find(source); it != s.sources.end() && it->second.pending > 0) --it->second.pending;
  if (s.pending > 0) --s.pending;
  s.pending_gauge.store(s.pending, std::memory_order_relaxed);
}

void Admission::release(Listener listener, const std::array<uint8_t, 16>& source, bool pending) {
  auto& s = state_[static_cast<size_t>(listener)];
  {
    std::lock_guard lock(s.mu);
    if (auto it = s.sources.find(source); it != s.sources.end()) {
      auto& per = it->second;
      if (per.connections > 0) --per.connections;
      if (pending && per.pending > 0) --per.pending;
      if (per.connections == 0) s.sources.erase(it);
    }
    if (s.connections > 0) --s.connections;
    if (pending && s.pending > 0) --s.pending;
    s.connections_gauge.store(s.connections, std::memory_order_relaxed);
    s.pending_gauge.store(s.pending, std::memory_order_relaxed);
  }
  released_.fetch_add(1, std::memory_order_relaxed);
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
