#include "proxy/datapath/netns.h"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "proxy/rtnetlink/rtnetlink.h"

namespace ferry::datapath {

absl::StatusOr<NetnsFd> NetnsFd::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrCat("network namespace ", path, ": ", strerror(errno)));
  }
  return NetnsFd(fd, path);
}

absl::StatusOr<NetnsFd> NetnsFd::current() { return open("/proc/thread-self/ns/net"); }

absl::Status enterNetns(const NetnsFd& ns) {
  if (::setns(ns.fd(), CLONE_NEWNET) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("entering network namespace ", ns.path(), ": ", strerror(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<ScopedNetns> ScopedNetns::enter(const NetnsFd& ns) {
  auto original = NetnsFd::current();
  if (!original.ok()) return original.status();
  if (auto st = enterNetns(ns); !st.ok()) return st;
  return ScopedNetns(std::move(*original));
}

ScopedNetns::~ScopedNetns() {
  if (original_.fd() >= 0) ::setns(original_.fd(), CLONE_NEWNET);
}

absl::StatusOr<int32_t> netnsIdOf(const NetnsFd& peer) {
  auto id = rtnetlink::netnsId(peer.fd());
  if (id.ok() && *id >= 0) return id;
  // No id yet: let the kernel pick one, then read it back.
  if (auto assigned = rtnetlink::assignNetnsId(peer.fd()); !assigned.ok()) {
    return absl::Status(assigned.code(), absl::StrCat("assigning an id to ", peer.path(), ": ", assigned.message()));
  }
  id = rtnetlink::netnsId(peer.fd());
  if (!id.ok()) return id.status();
  if (*id < 0) return absl::InternalError(absl::StrCat("no netns id for ", peer.path()));
  return id;
}

}  // namespace ferry::datapath
