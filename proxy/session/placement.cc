#include "proxy/session/placement.h"

#include <algorithm>

namespace ferry::session {

Placement::Placement(size_t workers)
    : workers_(workers == 0 ? 1 : workers), loads_(new std::atomic<int64_t>[workers_]) {
  for (size_t i = 0; i < workers_; ++i) loads_[i].store(0, std::memory_order_relaxed);
}

LoadUnit Placement::place(size_t first, size_t count) {
  first %= workers_;
  count = count == 0 ? 1 : std::min(count, workers_);
  size_t best = first;
  int64_t best_load = load(first);
  for (size_t i = 1; i < count; ++i) {
    size_t w = (first + i) % workers_;
    int64_t l = load(w);
    if (l < best_load) {
      best = w;
      best_load = l;
    }
  }
  return LoadUnit::add(*this, best);
}

}  // namespace ferry::session
