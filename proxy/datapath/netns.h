#pragma once
// Network namespaces: ferryd's control thread lives in the node netns (netlink, BPF
// attach, map updates); its data-plane sockets live in the proxy netns (docs/datapath.md,
// "Where things run").
// setns() is per thread, so workers enter the proxy netns once at start, and the control
// thread enters it only around socket creation.
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "proxy/common/unique_fd.h"

namespace ferry::datapath {

// An open netns file (e.g. /run/netns/fy-n1-proxy), closed on destruction.
class NetnsFd {
 public:
  static absl::StatusOr<NetnsFd> open(const std::string& path);
  static absl::StatusOr<NetnsFd> current();
  // A netns descriptor received from another process (a handover); owned from now on.
  static NetnsFd adopt(int fd, std::string path) { return NetnsFd(fd, std::move(path)); }
  int fd() const { return fd_.get(); }
  const std::string& path() const { return path_; }

 private:
  NetnsFd(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  common::UniqueFd fd_;
  std::string path_;
};

// Moves the calling thread into `ns` for good.
absl::Status enterNetns(const NetnsFd& ns);

// Enters `ns` for the lifetime of the object, then returns the thread to where it was.
class ScopedNetns {
 public:
  static absl::StatusOr<ScopedNetns> enter(const NetnsFd& ns);
  ScopedNetns(ScopedNetns&&) = default;
  ~ScopedNetns();

 private:
  explicit ScopedNetns(NetnsFd original) : original_(std::move(original)) {}
  NetnsFd original_;
};

// The id by which the calling thread's netns knows `peer` (RTM_GETNSID), assigning one
// first if it has none (RTM_NEWNSID, like `ip netns set`). bpf_skc_lookup_tcp takes this
// id to look up sockets of the proxy netns from a program running in the node netns.
absl::StatusOr<int32_t> netnsIdOf(const NetnsFd& peer);

}  // namespace ferry::datapath
