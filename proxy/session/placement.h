#pragma once
// Which worker runs an accepted connection.
//
// The kernel spreads SYNs over the workers' SO_REUSEPORT listeners by a hash of the
// 4-tuple, so four streams often land three to one, and the outbound connections of one
// pod pair used to follow the pair's single pooled HBONE connection onto one worker: one
// TLS connection, one core at each end, however many streams. Placement sends a connection
// to the least loaded of its candidate workers (Envoy's "exact" connection balance over a
// range): every worker for an inbound tunnel or a plaintext connection, and for an outbound
// mesh connection the `pool.workers_per_pair` workers starting at its pair's home worker,
// each with its own pooled tunnel. Ties go to the first candidate (the accepting worker,
// or the pair's home), so a quiet pair keeps one tunnel and nothing moves without need.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace ferry::session {

class LoadUnit;

class Placement {
 public:
  explicit Placement(size_t workers);

  size_t workers() const { return workers_; }
  // The least loaded of the `count` workers first, first + 1, ... (wrapping), ties to
  // the earliest; one unit of load is counted on it at once, so that a burst of accepts
  // on several threads spreads as well. The unit names the worker.
  LoadUnit place(size_t first, size_t count);
  // Load that does not come through place(): inbound HBONE streams, which run on the
  // worker of their connection.
  void add(size_t worker) { loads_[worker].fetch_add(1, std::memory_order_relaxed); }
  void release(size_t worker) { loads_[worker].fetch_sub(1, std::memory_order_relaxed); }
  int64_t load(size_t worker) const { return loads_[worker].load(std::memory_order_relaxed); }

 private:
  size_t workers_;
  std::unique_ptr<std::atomic<int64_t>[]> loads_;
};

// One unit of load counted on a worker, released when its holder (a connection's coroutine
// frame, or a hand-over in flight) goes away.
class LoadUnit {
 public:
  LoadUnit() = default;
  static LoadUnit add(Placement& placement, size_t worker) {
    placement.add(worker);
    return LoadUnit(placement, worker);
  }
  LoadUnit(LoadUnit&& o) noexcept : placement_(o.placement_), worker_(o.worker_) { o.placement_ = nullptr; }
  LoadUnit& operator=(LoadUnit&& o) noexcept {
    if (this != &o) {
      reset();
      placement_ = o.placement_;
      worker_ = o.worker_;
      o.placement_ = nullptr;
    }
    return *this;
  }
  LoadUnit(const LoadUnit&) = delete;
  LoadUnit& operator=(const LoadUnit&) = delete;
  ~LoadUnit() { reset(); }

  size_t worker() const { return worker_; }
  void reset() {
    if (placement_ != nullptr) placement_->release(worker_);
    placement_ = nullptr;
  }

 private:
  LoadUnit(Placement& placement, size_t worker) : placement_(&placement), worker_(worker) {}

  Placement* placement_ = nullptr;
  size_t worker_ = 0;
};

}  // namespace ferry::session
