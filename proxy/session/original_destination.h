#pragma once
// Where a captured connection meant to go: getsockname() (tc sk_assign and TPROXY keep the
// original destination), or a PROXY v2 header.
#include <boost/asio/awaitable.hpp>

#include "absl/status/statusor.h"
#include "proxy/common/net.h"
#include "proxy/session/context.h"

namespace ferry::session {

struct Endpoints {
  common::HostPort peer;         // who connected (the application or the HBONE client)
  common::HostPort destination;  // where it meant to go
};

// getsockname() (tc sk_assign / TPROXY keep the original destination), or a PROXY v2
// header in `original_destination: proxy_protocol` mode.
boost::asio::awaitable<absl::StatusOr<Endpoints>> originalEndpoints(Worker& worker,
                                                                    Tcp::socket& socket);

common::HostPort toHostPort(const Tcp::endpoint& ep);

}  // namespace ferry::session
