#pragma once
// Bytes received over HBONE and not yet written to the application, every connection of the
// process together (docs/configuration.md, "Memory"; docs/architecture.md, "HTTP/2
// settings"). HTTP/2 flow control bounds them per connection only: each connection may be
// sent its whole window (kConnectionWindow, 16 MiB) for a workload that reads nothing, so a
// few peers could hold more than ferryd's memory limit. Past this budget a connection that
// still holds unwritten bytes stops reading its socket until its application took them
// (or the total fell below the budget), and TCP holds the peer back; a connection that holds
// nothing goes on reading, a small read at a time (kPressuredRead), so that one workload
// that does not read stalls its own tunnels, not everybody's.
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace ferry::hbone {

// What a connection reads per pass while the budget is exceeded: one TLS record. Each
// connection may hold this much beyond the budget (config/memory_budget.h counts it in the
// cost of a tunnel).
inline constexpr size_t kPressuredRead = 16 * 1024;

class ReceiveBudget {
 public:
  // 0: unbounded. Live (a reload may change it); connections see it at their next read.
  void setLimit(uint64_t bytes) { limit_.store(bytes, std::memory_order_relaxed); }
  uint64_t limit() const { return limit_.load(std::memory_order_relaxed); }
  // Bytes held now, by every connection.
  uint64_t held() const { return held_.load(std::memory_order_relaxed); }
  bool exceeded() const {
    uint64_t limit = limit_.load(std::memory_order_relaxed);
    return limit != 0 && held_.load(std::memory_order_relaxed) >= limit;
  }

  void add(size_t bytes) { held_.fetch_add(bytes, std::memory_order_relaxed); }
  void release(size_t bytes) { held_.fetch_sub(bytes, std::memory_order_relaxed); }

  // A connection stopped reading because of the budget.
  void countPause() { pauses_.fetch_add(1, std::memory_order_relaxed); }
  uint64_t pauses() const { return pauses_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> limit_{0};
  std::atomic<uint64_t> held_{0};
  std::atomic<uint64_t> pauses_{0};
};

}  // namespace ferry::hbone
