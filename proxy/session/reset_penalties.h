#pragma once
// Rapid reset across connections (docs/security.md, "HTTP/2 abuse on 15008"). A connection
// closed with GOAWAY ENHANCE_YOUR_CALM ends its own abuse, but a client that reconnects would
// get hbone.max_pending_connects upstream connects out of each new connection before that one
// is closed too: hundreds of connects a second to the workload from one identity. So the peer
// identity of a connection closed that way is penalized for kPenalty, renewed by each such
// close: its streams' upstream connects, on every connection it has or opens to this node,
// draw from one bucket refilled at hbone.max_pending_connects a second (empty when the penalty
// begins). A stream that finds it empty is answered 503 before anything is connected.
// Thread-safe: the workers share one; nothing is locked while no identity is penalized.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "absl/container/flat_hash_map.h"

namespace ferry::session {

class ResetPenalties {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::seconds kPenalty{30};
  // Identities remembered at once; past it the penalty ending first is forgotten first.
  static constexpr size_t kMaxIdentities = 4096;

  // The connect budget an identity's streams share while it is penalized.
  class Budget {
   public:
    // True when the stream may connect: the penalty is over, or a token was left.
    bool take(Clock::time_point now);

   private:
    friend class ResetPenalties;
    std::mutex mu_;
    Clock::time_point until_{}, refilled_{};
    double tokens_ = 0, rate_ = 1;
  };

  // A connection of `identity` ended in ENHANCE_YOUR_CALM; `rate`: connects a second.
  // True when the identity was not penalized already (the caller says so once).
  bool penalize(const std::string& identity, uint32_t rate, Clock::time_point now);
  // The identity's budget while it is penalized; null otherwise.
  std::shared_ptr<Budget> budgetOf(const std::string& identity, Clock::time_point now);
  // Identities penalized now (for /metrics).
  size_t penalized(Clock::time_point now) const;

 private:
  void forgetExpired(Clock::time_point now);  // mu_ held

  mutable std::mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<Budget>> by_identity_;
  std::atomic<size_t> size_{0};  // by_identity_.size(), read without the lock
};

}  // namespace ferry::session
