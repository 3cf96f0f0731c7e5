// What the BPF program tests need from the OS: the root policy, a private
// network namespace per test, and sockets that stand in for ferryd's.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include <gtest/gtest.h>

namespace ferry::bpftest {

// CI runs as root, so a BPF test that cannot run there is a failure, not a skip.
inline bool inCi() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && std::strcmp(ci, "true") == 0;
}

// Skips the test when not root (loading BPF, unsharing a netns and TCP_REPAIR
// need it), or fails it under CI=true. Use in SetUp() or at the top of a test.
#define FERRY_BPF_REQUIRE_ROOT()                                                            \
  do {                                                                                      \
    if (::geteuid() != 0) {                                                                 \
      if (::ferry::bpftest::inCi()) {                                                       \
        FAIL() << "BPF tests need root (bpf(), unshare, TCP_REPAIR) and CI=true runs as root"; \
      }                                                                                     \
      GTEST_SKIP() << "needs root: loads BPF programs, unshares a netns, uses TCP_REPAIR";  \
    }                                                                                       \
  } while (0)

// The id that the test's netns gives itself. The node-side programs look up
// ferryd's sockets "in the proxy netns by id"; in the tests the proxy netns is
// the test's own, so the id must resolve to it from itself.
inline constexpr int32_t kTestNsid = 42;

// Moves the calling thread into a new network namespace with loopback up and
// kTestNsid assigned to itself. Returns an empty string or what failed.
// Programs run by BPF_PROG_TEST_RUN see this netns as "current".
std::string enterFreshNetns();

// An owned file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(other.release()) {}
  Fd& operator=(Fd&& other) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd();

  int get() const { return fd_; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_ = -1;
};

// A TCP listener on 0.0.0.0:port, as ferryd binds its listeners. Throws
// std::system_error.
Fd tcpListener(uint16_t port);

// A TCP socket in ESTABLISHED state with exactly this tuple and no peer socket
// (TCP_REPAIR: connect() hashes it without sending a packet), as one side of a
// ferryd connection. Addresses in network order, ports in host order; the
// addresses must be local (127.0.0.0/8 is). Throws std::system_error.
Fd tcpConnection(uint32_t local_ip, uint16_t local_port, uint32_t remote_ip, uint16_t remote_port);

}  // namespace ferry::bpftest
