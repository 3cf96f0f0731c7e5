#pragma once
// The wire between two generations of ferryd on one node (docs/operations.md, "Upgrades and
// restarts without dropping connections"): the next ferryd takes the listening sockets of the
// running one over a unix socket, so that no moment passes without a listener, and the
// running one keeps serving the connections it holds until they end.
//
//   new -> old  hello   {"type":"hello","version":1,"pid":P}
//   old -> new  offer   {"type":"offer","version":1,"pid":P,"sockets":[{"role":..,"address":..},..]}
//                       with one descriptor per entry (SCM_RIGHTS), in that order
//   new -> old  ready   {"type":"ready","pid":P}: the new process accepts on them; the old one
//                       stops accepting and retires
//   old -> new  status  {"type":"status","pid":P,"live":N,"deadline_ms":D} about once a second
//                       while it retires; the link closes when it exits
//
// The link closing before `ready` (the new process failed or died) leaves the old one
// serving as before. A frame is a 4-byte big-endian length and that many bytes of JSON (at
// most kMaxFrame); its descriptors ride with its first byte.
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "proxy/common/net.h"
#include "proxy/common/unique_fd.h"

namespace ferry::server::handover {

constexpr int kVersion = 1;
constexpr size_t kMaxFrame = 64 * 1024;
// Per frame; the kernel's limit (SCM_MAX_FD) is 253.
constexpr size_t kMaxDescriptors = 240;
// A Kubernetes object name at most (a pod's).
constexpr size_t kMaxName = 253;

enum class Role {
  kOutbound,   // 15001, one per worker and address (SO_REUSEPORT)
  kPlaintext,  // 15006
  kHbone,      // 15008
  kReadiness,
  kMetrics,
  kAdmin,
  kHandover,  // the unix listener of this very wire
  kProxyNetns,          // datapath.proxy_netns: auto, the netns ferryd made
  kHostInterfaceClaim,  // and the claim on its node-side interface
};
const char* roleName(Role role);

struct PassedSocket {
  Role role = Role::kOutbound;
  std::string address;  // what it is bound to ("ip:port", a path, an interface name)
  common::UniqueFd fd;
};

struct Message {
  enum class Type { kHello, kOffer, kReady, kStatus };
  Type type = Type::kHello;
  int version = kVersion;
  int pid = 0;
  // Who the process is for an operator beside its pid, which in a container is its own
  // namespace's (both generations may be pid 1): selfName().
  std::string name;
  std::vector<PassedSocket> sockets;  // offer
  int64_t live = 0;                   // status: connections the old process still carries
  int64_t deadline_ms = 0;            // status: until it resets what is left
};

// This process's pod name (env POD_NAME, which the chart sets from the downward API); "" elsewhere.
const std::string& selfName();
// "ferryd pid N", and " (pod NAME)" when a name is known: how logs and states name a generation.
std::string describe(int pid, const std::string& name);

// The frame's JSON, descriptors aside (sendMessage passes them).
std::string encode(const Message& message);
// A frame's JSON and the descriptors that came with it; an error names what is wrong, and
// the descriptors are closed.
absl::StatusOr<Message> decode(std::string_view json, std::vector<common::UniqueFd> fds);

// Writes `message` (and its sockets' descriptors) on the stream socket `fd`, waiting for
// room until `deadline`; an error when the whole frame could not be written by then (the
// link is then unusable).
absl::Status sendMessage(int fd, const Message& message, std::chrono::steady_clock::time_point deadline);

// Collects frames from a non-blocking stream socket.
class FrameReader {
 public:
  // Reads what the socket holds now. False: the peer closed the link (after what was read);
  // an error for a socket error, a frame too long, or descriptors cut short.
  absl::StatusOr<bool> fill(int fd);
  // The next whole frame, decoded; nullopt while it is incomplete.
  absl::StatusOr<std::optional<Message>> next();

 private:
  std::string buffer_;
  std::vector<common::UniqueFd> fds_;  // received, not yet given to a frame
};

// Waits on `fd` until the next whole message or `deadline`.
absl::StatusOr<Message> receiveMessage(int fd, FrameReader& reader, std::chrono::steady_clock::time_point deadline);

// The new side: what the running ferryd handed over.
struct TakeOver {
  int old_pid = 0;
  std::string old_name;
  std::vector<PassedSocket> sockets;
  common::UniqueFd link;  // non-blocking; `ready` goes here, status comes back
  FrameReader reader;
};

// Connects to the running ferryd's handover socket at `path` and takes its sockets. nullopt
// when no ferryd listens there (no file, or a file nobody accepts on: a stale one, which is
// removed); an error when one answered and the exchange failed (it keeps serving).
absl::StatusOr<std::optional<TakeOver>> takeOver(const std::string& path, std::chrono::milliseconds timeout);

// What a component asks of the sockets taken over: those of `role`, for `addr` when given
// (its port 0 matching any), each given out once; none when nothing was taken over.
using TakenSockets = std::function<std::vector<common::UniqueFd>(Role role, const common::HostPort* addr)>;
// What a component adds to the offer to a successor: a socket of `role` at `address`, its
// descriptor duplicated into the offer (fd < 0: none).
using OfferSocket = std::function<absl::Status(Role role, std::string address, int fd)>;

}  // namespace ferry::server::handover
