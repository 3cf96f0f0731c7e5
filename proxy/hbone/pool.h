#pragma once
// The HBONE client pool of one worker: one HTTP/2 connection per (source workload,
// destination workload) key, shared by up to `max_streams` proxied connections. Outbound
// connections are handed to the worker that owns their key, so a key has one pool entry in
// the whole process. A burst of first connections to a key waits on a single handshake.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "proxy/common/net.h"
#include "proxy/hbone/h2_connection.h"
#include "proxy/net/signal.h"

namespace ferry::hbone {

struct PoolKey {
  std::string source_id;        // SPIFFE ID presented
  common::IpAddress source_ip;  // outer TCP source (the source pod)
  std::string destination_id;   // SPIFFE ID required of the server
  common::HostPort destination; // destination pod ip:15008

  std::string str() const;
  friend bool operator==(const PoolKey&, const PoolKey&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const PoolKey& k) {
    return H::combine(std::move(h), k.source_id, k.source_ip.to_string(), k.destination_id,
                      k.destination.ip.to_string(), k.destination.port);
  }
};

class Pool {
 public:
  using Connector =
      std::function<boost::asio::awaitable<absl::StatusOr<std::shared_ptr<H2Connection>>>()>;

  explicit Pool(boost::asio::any_io_executor ex) : executor_(std::move(ex)) {}

  // A connection with room for one more stream, opening one with `connect` if needed.
  // Concurrent callers for the same key wait for the handshake already in flight.
  boost::asio::awaitable<absl::StatusOr<std::shared_ptr<H2Connection>>> acquire(
      const PoolKey& key, const Connector& connect);

  size_t connectionCount() const;
  size_t keyCount() const { return entries_.size(); }
  // Lets go of connections that closed (and of keys left without any): a closed tunnel's
  // TLS and HTTP/2 state (~200 KB) is otherwise held until the key's next acquire, which
  // may never come. Call it from a connection's close handler through a post (never
  // from inside the connection).
  void dropClosed() { sweep(); }
  // GOAWAY to every pooled connection (shutdown).
  void drainAll();
  // GOAWAY to the pooled connections from `source_ip` (a pod that left the mesh: its
  // packets are no longer steered, so a keepalive PING meanwhile kills the tunnel's other
  // end and a later stream on it would fail). New streams open new connections. Returns
  // how many were drained.
  size_t drainSource(const common::IpAddress& source_ip);
  uint64_t handshakes() const { return handshakes_; }

 private:
  struct Entry {
    std::vector<std::shared_ptr<H2Connection>> connections;
    std::shared_ptr<net::Event> connecting;  // set while a handshake is in flight
    absl::Status last_error;
  };
  void prune(Entry& entry);
  // Drops entries with no live connection and no handshake in flight.
  void sweep();
  // Sweeping is O(keys); every 256 acquisitions keeps it off the per-connection path.
  static constexpr uint64_t kSweepEvery = 256;
  uint64_t acquires_ = 0;

  boost::asio::any_io_executor executor_;
  absl::flat_hash_map<PoolKey, Entry> entries_;
  uint64_t handshakes_ = 0;
};

}  // namespace ferry::hbone
