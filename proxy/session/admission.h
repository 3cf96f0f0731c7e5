#pragma once
// Admission control for the data-plane listeners (15001, 15006, 15008): how many
// connections each may hold, from one source and in all, and how many of them may still be
// in their handshake. A connection is admitted once, at accept, and holds its ticket for
// life: a limit only ever refuses a new connection, never touches one it admitted.
// docs/security.md ("Admission limits") says why, docs/configuration.md how the defaults
// were sized.
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <boost/system/error_code.hpp>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "proxy/common/net.h"
#include "proxy/config/config.h"

namespace ferry::telemetry {
class Exposition;
}  // namespace ferry::telemetry

namespace ferry::session {

// The data-plane listener kinds, named as their config keys (listen.*).
enum class Listener { kOutbound, kHbone, kPlaintext, kCount };
const char* listenerLabel(Listener l);

// Why a connection was refused at accept: one counter per listener and reason.
#define FERRY_REFUSALS(X)                                                                           \
  X(kConnections, "connections", "the listener's max_connections reached")                         \
  X(kConnectionsPerSource, "connections_per_source", "max_connections_per_source reached")         \
  X(kPending, "pending_handshakes", "max_pending_handshakes reached")                              \
  X(kPendingPerSource, "pending_handshakes_per_source", "max_pending_handshakes_per_source reached")\
  X(kDescriptors, "descriptors", "the data plane's descriptor cap reached (RLIMIT_NOFILE - reserve)")   \
  X(kRatePerSource, "new_connections_per_source_rate", "max_new_connections_per_source_per_second reached")

enum class Refusal {
#define FERRY_X(name, label, help) name,
  FERRY_REFUSALS(FERRY_X)
#undef FERRY_X
  kCount
};
const char* refusalLabel(Refusal r);

// What the workload registry says of a connection's source address. On 15008 a legitimate
// client is a mesh workload (tunnels are opened from the pod's own address), so a pending
// handshake of an address the registry does not know yields to one of a workload: however
// many addresses a flood comes from, a workload's new tunnel gets a pending place at once.
enum class SourceKind { kUnknown, kWorkload };

// Where an accepted socket stands against the data plane's descriptor cap
// (dataPlaneDescriptorCap), which counts descriptors, not their numbers.
enum class DescriptorUse {
  kWithinCap,
  // Numbered below the cap but filling a hole while sockets admitted above it are still
  // open: with it the data plane holds at least cap descriptors. Without this, each
  // connection a newcomer evicted over the cap was replaced by the flood at once (its
  // descriptor numbered below the cap), and the newcomers used up the slack.
  kAtCap,
  // Numbered at or above the cap: in the slack lent to new clients.
  kInSlack,
};

// accept() failures, by what they mean for the operator.
enum class AcceptError { kDescriptors, kMemory, kOther, kCount };
AcceptError classifyAcceptError(const boost::system::error_code& ec);
const char* acceptErrorLabel(AcceptError e);

class Admission;

// One per admitted connection: counts it (and, until handshakeDone(), its pending
// handshake) against its listener and source, and gives both back when destroyed.
// Thread-safe against the Admission; one owner at a time.
class AdmissionTicket {
 public:
  AdmissionTicket(Admission& admission, Listener listener, const std::array<uint8_t, 16>& source)
      : admission_(admission), listener_(listener), source_(source) {}
  ~AdmissionTicket();
  AdmissionTicket(const AdmissionTicket&) = delete;
  AdmissionTicket& operator=(const AdmissionTicket&) = delete;
  // The connection finished its handshake (or had none): it no longer counts as pending.
  void handshakeDone();
  // How to end this connection while it is pending, so that a new one can take its place
  // when the listener's pending handshakes are at their limit (Admission::admit). Called at
  // most once, from any thread, under the Admission's lock: it must only post the work.
  void setEvictor(std::function<void()> evict);

 private:
  friend class Admission;
  Admission& admission_;
  Listener listener_;
  std::array<uint8_t, 16> source_;
  SourceKind kind_ = SourceKind::kUnknown;
  bool in_slack_ = false;
  bool pending_ = true;
  // Under the listener's lock: in the pending queue (oldest first) until done, released or
  // evicted.
  std::chrono::steady_clock::time_point since_;
  std::function<void()> evict_;
  bool queued_ = false;
  bool evicted_ = false;
  std::list<AdmissionTicket*>::iterator queue_pos_;
};
// Shared so that it can ride in the copyable tasks that place a connection on a worker.
using Admitted = std::shared_ptr<AdmissionTicket>;

// Rate-limits a repeated warning: at most one line per interval, the others counted and
// reported with the next line (metrics count every event; the log need not).
class LogThrottle {
 public:
  explicit LogThrottle(std::chrono::steady_clock::duration interval) : interval_(interval) {}
  // True when a line may be written now; `suppressed` is then the number held back since.
  bool allow(uint64_t& suppressed);

 private:
  std::chrono::steady_clock::duration interval_;
  std::atomic<int64_t> next_{0};
  std::atomic<uint64_t> held_{0};
};

class Admission {
 public:
  using Clock = std::function<std::chrono::steady_clock::time_point()>;
  // `clock`: steady_clock::now unless a test gives its own.
  explicit Admission(const config::Limits& limits, Clock clock = {});
  // A reload's new limits (docs/configuration.md, "Reloading"). Connections counted under
  // the old ones stay counted and keep their tickets: a lowered limit refuses new
  // connections until enough of them have closed, it never cuts one.
  void setLimits(const config::Limits& limits);

  // Admits a connection from `source` on `listener`, pending until the ticket's
  // handshakeDone(); null, counted, with `why` set, when a limit refuses it. At the
  // listener's max_pending_handshakes, a pending connection is ended to make room (counted
  // as evicted), the oldest that may: of an unknown address when `kind` is a workload, at
  // once; never a workload's for an unknown address; else of a source holding more pending
  // ones than this source does, a source's only pending one being spared for kEvictAfter.
  // Sources holding handshakes open cannot keep a new client out: a workload at once,
  // whatever the flood's spread; another address at once when they hold several each,
  // after kEvictAfter when each holds one (docs/security.md, "Admission limits").
  //
  // `descriptors` (descriptorUse): at the data plane's descriptor cap (kAtCap, kInSlack) a
  // connection is admitted only when its source holds no connection on the listener yet (a
  // new client) and the same rule ends one pending connection to make room; else it is
  // refused (descriptors). A few sources holding every descriptor therefore cannot keep a
  // new client out, and cannot take back the descriptors their evicted connections freed.
  Admitted admit(Listener listener, const common::IpAddress& source, Refusal& why,
                 DescriptorUse descriptors = DescriptorUse::kWithinCap, SourceKind kind = SourceKind::kUnknown);
  // Where a data-plane socket numbered `fd` stands against `cap`: kInSlack at or above it;
  // kAtCap below it when the holes between `fd` and the cap are fewer than the admitted
  // connections still open above it (found with F_DUPFD, at most that many probes, and only
  // while some are open); else kWithinCap.
  DescriptorUse descriptorUse(int fd, int cap) const;
  static constexpr std::chrono::milliseconds kEvictAfter{500};
  // Counts a refusal decided by the caller (the descriptor cap).
  void countRefusal(Listener listener, Refusal why);
  void countAcceptError(Listener listener, AcceptError error);

  uint64_t refused(Listener listener, Refusal why) const;
  uint64_t evicted(Listener listener) const;
  uint64_t acceptErrors(Listener listener, AcceptError error) const;
  int64_t connections(Listener listener) const;
  int64_t pending(Listener listener) const;
  // Tickets given back since start (the memory-trim rule counts closes).
  uint64_t released() const { return released_.load(std::memory_order_relaxed); }
  void collect(telemetry::Exposition& out) const;

 private:
  friend class AdmissionTicket;
  void release(AdmissionTicket& ticket);
  void finishHandshake(AdmissionTicket& ticket);
  void setEvictor(AdmissionTicket& ticket, std::function<void()> evict);
  struct State;
  bool evictOne(State& s, uint32_t newcomer_pending, SourceKind newcomer);
  void unqueue(State& s, AdmissionTicket& ticket);

  struct PerSource {
    uint32_t connections = 0;
    uint32_t pending = 0;
  };
  // One source's token bucket of new connections (max_new_per_source_per_second). They
  // live in a fixed table, a slot per hash of the address, so that their memory is bounded
  // whatever the number of addresses: a source whose slot another took starts afresh (full),
  // which only ever admits more, and every other limit still holds.
  struct RateSlot {
    std::array<uint8_t, 16> source{};
    bool used = false;
    double tokens = 0;
    std::chrono::steady_clock::time_point at{};
  };
  static constexpr size_t kRateSlots = 4096;
  // Under s.mu: the source's slot, its tokens brought up to now.
  RateSlot* rateSlot(State& s, const std::array<uint8_t, 16>& key);
  struct State {
    config::ListenerLimits limits;
    std::mutex mu;
    // Under mu; a source leaves the map when it holds nothing, so the map is bounded by
    // max_connections whatever the number of addresses an attacker uses.
    absl::flat_hash_map<std::array<uint8_t, 16>, PerSource> sources;
    uint32_t connections = 0;
    uint32_t pending = 0;
    // Pending tickets, oldest first; `evicting` of the pending ones were told to end and
    // have not yet given their ticket back (they no longer count against max_pending).
    std::list<AdmissionTicket*> queue;
    uint32_t evicting = 0;
    // Sized when a rate is set (kRateSlots), empty otherwise.
    std::vector<RateSlot> rates;
    std::atomic<uint64_t> evicted{0};
    // Copies for the metrics (read without the lock).
    std::atomic<int64_t> connections_gauge{0};
    std::atomic<int64_t> pending_gauge{0};
    std::array<std::atomic<uint64_t>, static_cast<size_t>(Refusal::kCount)> refused{};
    std::array<std::atomic<uint64_t>, static_cast<size_t>(AcceptError::kCount)> accept_errors{};
  };
  Clock clock_;
  std::array<State, static_cast<size_t>(Listener::kCount)> state_;
  std::atomic<uint64_t> released_{0};
  // Admitted connections open on descriptors numbered at or above the cap (kInSlack).
  std::atomic<int> in_slack_{0};
};

// The data plane's share of the descriptor table: RLIMIT_NOFILE's soft limit minus
// `reserve`. The kernel hands out the lowest free descriptor, so a data-plane socket whose
// number is at or above the cap means every descriptor below it is in use: the data plane
// closes it at once and the numbers above the cap stay free for the operator endpoints and
// the control thread. An error when the limit leaves less than `reserve` to the data plane.
absl::StatusOr<int> dataPlaneDescriptorCap(uint32_t reserve);

// Raises RLIMIT_NOFILE's soft limit to the hard limit (a proxy needs descriptors, and the
// soft limit is often the 1,024 of select()-era defaults). Returns the limit in force.
uint64_t raiseDescriptorLimit();

}  // namespace ferry::session
