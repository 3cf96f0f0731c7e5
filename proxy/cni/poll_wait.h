#pragma once
// ferry-cni's blocking I/O with a deadline: both of its peers (ferryd's socket, the API
// server) are driven over non-blocking sockets, with poll() waiting for the next step.
#include <poll.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

namespace ferry::cni {

// Waits for `events` on fd until the deadline; false on timeout or error, with *why set
// when given.
inline bool waitFor(int fd, short events, std::chrono::steady_clock::time_point deadline, std::string* why = nullptr) {
  for (;;) {
    auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) {
      if (why != nullptr) *why = "no answer within timeoutMs";
      return false;
    }
    pollfd p{fd, events, 0};
    int n = ::poll(&p, 1, static_cast<int>(left));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) {
      if (why != nullptr) *why = std::string("poll: ") + std::strerror(errno);
      return false;
    }
  }
}

}  // namespace ferry::cni
