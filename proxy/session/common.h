#pragma once
// Pieces every handler uses: the original destination of a captured connection, the
// per-connection record that feeds one close counter and one access-log line.
#include <chrono>
#include <exception>
#include <string>

#include <boost/asio/awaitable.hpp>

#include "absl/status/statusor.h"
#include "proxy/common/log.h"
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

// Completion of a connection's coroutine: logs what escaped it (never an aborted operation).
void logTaskError(std::exception_ptr e);

// One per proxied connection: counts it open on construction, and on finish() records
// the close reason, bytes and an access-log line.
class ConnectionRecord {
 public:
  ConnectionRecord(Worker& worker, Direction direction);
  ~ConnectionRecord();
  ConnectionRecord(const ConnectionRecord&) = delete;
  ConnectionRecord& operator=(const ConnectionRecord&) = delete;

  std::string src;
  std::string dst;
  std::string peer_identity;
  std::string detail;  // why it failed, for the log
  // Rate limit for this record's access line when it is a warning (the streams of one HBONE
  // connection share one); nullptr = always written. Must outlive finish().
  common::LogLimiter* warn_limiter = nullptr;
  void finish(CloseReason reason, uint64_t sent = 0, uint64_t received = 0);

 private:
  Worker& worker_;
  Direction direction_;
  std::chrono::steady_clock::time_point start_;
  bool finished_ = false;
};

// Connects from `source` to `destination` and relays `socket` to it as plain TCP; a failed
// connect resets `socket`. Finishes `record` either way.
boost::asio::awaitable<void> forwardTcp(Worker& worker, Tcp::socket& socket,
                                        const common::IpAddress& source,
                                        const common::HostPort& destination,
                                        ConnectionRecord& record);

}  // namespace ferry::session
