#pragma once
// The seam between ferryd and the kernel's sockets: every socket option the data plane
// depends on is set here and nowhere else (ztunnel's SocketFactory).
#include <chrono>
#include <limits>
#include <system_error>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "absl/status/statusor.h"
#include "proxy/common/net.h"

namespace ferry::net {

using Tcp = boost::asio::ip::tcp;
using common::HostPort;
using common::IpAddress;

class SocketFactory {
 public:
  virtual ~SocketFactory() = default;

  // A listening socket on `addr`: SO_REUSEADDR, SO_REUSEPORT (one listener per worker on
  // the same address, the kernel spreads connections), IP_TRANSPARENT when transparent
  // (accepts connections for any destination that the datapath assigns to it), and
  // SO_LINGER {1, 0}, inherited by every accepted socket (see closeGracefully).
  virtual absl::StatusOr<Tcp::acceptor> listen(const boost::asio::any_io_executor& ex,
                                               const HostPort& addr) = 0;

  // Connects `socket` from `source` (port chosen by the kernel) to `destination`, with
  // IP_TRANSPARENT so that the source may be a pod's address, and gives up after
  // `timeout` (returns boost::asio::error::timed_out). The socket is armed with
  // SO_LINGER {1, 0} like the accepted ones.
  virtual boost::asio::awaitable<boost::system::error_code> connect(
      Tcp::socket& socket, const IpAddress& source, const HostPort& destination,
      std::chrono::milliseconds timeout) = 0;
};

// The source ports of ferryd's transparent connections (from a pod's own address): below
// the ephemeral range pods use by default (32768-60999). A port the pod's own kernel also
// picked for a connection to the same destination would make the two legs of one same-node
// connection the same 4-tuple, and the datapath would steer the server's answer to the
// wrong end (found in the Kubernetes lab: up to 7% of new same-node connections under load
// reset or timed out). The netns's own range cannot do it (a container's /proc/sys is
// read-only, and IP_LOCAL_PORT_RANGE only narrows that range): ferryd binds a port of its
// own drawing (docs/datapath.md, "Source ports"). Never a privileged one (below 1024): some
// servers trust those as coming from root (NFS's "secure" ports). 31,744 ports for each
// address pair and destination port: 9,000 idle connections of one pod to one server, the
// benchmark's idle step, take 28 % of them.
inline constexpr uint16_t kTransparentPortLow = 1024;
inline constexpr uint16_t kTransparentPortHigh = 32767;

class KernelSocketFactory : public SocketFactory {
 public:
  explicit KernelSocketFactory(bool transparent) : transparent_(transparent) {}
  // Upstream sockets numbered at or above `cap` fail with EMFILE at once: the descriptors
  // above it are kept for the operator endpoints (session/admission.h). The server sets the
  // data plane's cap plus the slack admission may lend to new clients.
  void setDescriptorCap(int cap) { descriptor_cap_ = cap; }
  absl::StatusOr<Tcp::acceptor> listen(const boost::asio::any_io_executor& ex,
                                       const HostPort& addr) override;
  boost::asio::awaitable<boost::system::error_code> connect(
      Tcp::socket& socket, const IpAddress& source, const HostPort& destination,
      std::chrono::milliseconds timeout) override;

 private:
  bool transparent_;
  int descriptor_cap_ = std::numeric_limits<int>::max();
};

// Closes with SO_LINGER {1, 0}: the peer sees a TCP RST, not a FIN. Used to carry a reset
// or a refusal to the application (ztunnel cannot; docs/hbone.md, "Differences from ztunnel").
void abortSocket(Tcp::socket& socket);

// Every socket ferryd carries a connection on is armed with SO_LINGER {1, 0} from its
// creation, so that whenever the kernel closes it for us (SIGKILL, a crash, exit at the
// drain deadline) the peer sees a RST and never a FIN that looks like a complete reply.
// Only a connection whose both directions ended with FIN is closed this way: the option is
// cleared (one setsockopt) and the close sends a FIN as usual.
void closeGracefully(Tcp::socket& socket);
// Arms `fd` as above (listeners pass it on to what they accept).
void armResetOnClose(int fd);

}  // namespace ferry::net
