#pragma once
// The last connections a worker closed (docs/troubleshooting.md, "Start here"): what an
// operator asks after the fact ("what happened between A and B?"), with or without an access
// log. Failures and successes are kept apart, so that a stream of good connections never
// pushes the last failures out. Worker thread only: no locks; a slot's strings are assigned
// over, so once the rings are full a close allocates nothing here.
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "proxy/session/stats.h"

namespace ferry::session {

struct ClosedConnection {
  Direction direction = Direction::kOutbound;
  CloseReason reason = CloseReason::kOk;
  std::string src, dst;  // ip:port, as the access log writes them
  std::string source_principal, destination_principal;
  std::string detail;  // why it failed
  std::string policy;  // the authorization decision, when one was made
  std::chrono::system_clock::time_point time;  // of the close
  std::chrono::milliseconds duration{0};
  uint64_t sent = 0, received = 0;  // client -> server, server -> client
};

class RecentCloses {
 public:
  static constexpr size_t kFailures = 64;
  static constexpr size_t kSuccesses = 32;

  // The slot the next close of this kind is written to: the oldest of its ring.
  ClosedConnection& next(bool success);
  // Every record held, the newest first.
  std::vector<ClosedConnection> snapshot() const;
  size_t size() const { return failures_.used + successes_.used; }

 private:
  template <size_t N>
  struct Ring {
    std::array<ClosedConnection, N> slots;
    size_t head = 0;  // where the next one goes
    size_t used = 0;
    ClosedConnection& next() {
      ClosedConnection& slot = slots[head];
      head = (head + 1) % N;
      if (used < N) ++used;
      return slot;
    }
    void copyTo(std::vector<ClosedConnection>& out) const {
      for (size_t i = 0; i < used; ++i) out.push_back(slots[(head + N - 1 - i) % N]);
    }
  };
  Ring<kFailures> failures_;
  Ring<kSuccesses> successes_;
};

}  // namespace ferry::session
