#include "proxy/session/recent_closes.h"

#include <algorithm>

namespace ferry::session {

ClosedConnection& RecentCloses::next(bool success) { return success ? successes_.next() : failures_.next(); }

std::vector<ClosedConnection> RecentCloses::snapshot() const {
  std::vector<ClosedConnection> out;
  out.reserve(size());
  failures_.copyTo(out);
  successes_.copyTo(out);
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.time > b.time; });
  return out;
}

}  // namespace ferry::session
