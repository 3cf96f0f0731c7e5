#pragma once
// ferryd's own endpoints, which no connection it makes may reach: a passthrough, a CONNECT
// target or a plaintext forward to one of its listeners would make ferryd connect to
// itself (a PROXY header naming 15001 is parsed again, two descriptors per level), and one
// to the admin port would hand an application the operator's endpoint.
#include <vector>

#include "proxy/common/net.h"

namespace ferry::session {

class SelfAddresses {
 public:
  // `listeners`: every address ferryd listens on (an unspecified address stands for every
  // local address). `local`: the addresses of the network namespace ferryd's sockets live
  // in. `own_netns`: that namespace is ferryd's alone (the tc datapath's proxy netns), so
  // each of its addresses is ferryd on every port; otherwise (ferryd shares the namespace,
  // as on the loopback lab) only the listeners are.
  SelfAddresses() = default;
  SelfAddresses(std::vector<common::HostPort> listeners, std::vector<common::IpAddress> local,
                bool own_netns);

  // The addresses of the calling thread's network namespace (getifaddrs).
  static std::vector<common::IpAddress> interfaceAddresses();

  bool contains(const common::HostPort& destination) const;

 private:
  // A local address: one of `local_` or any loopback address (127.0.0.0/8 and ::1 all
  // reach the local stack, whatever the interfaces list).
  bool isLocal(const common::IpAddress& ip) const;

  std::vector<common::HostPort> listeners_;
  std::vector<common::IpAddress> local_;
  bool own_netns_ = false;
};

}  // namespace ferry::session
