#pragma once
// What a connection handler can reach: process-wide shared state (thread-safe or
// immutable) and the worker it runs on (single-threaded, no locks).
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "proxy/config/config.h"
#include "proxy/hbone/pool.h"
#include "proxy/identity/cert_source.h"
#include "proxy/identity/tls_context.h"
#include "proxy/session/relay.h"
#include "proxy/session/socket_factory.h"
#include "proxy/session/stats.h"
#include "proxy/workloads/registry.h"

namespace ferry::session {

class Worker;

// An outbound connection whose HBONE pool key belongs to another worker is handed over
// before any byte is read from it; this is everything the new worker needs.
struct OutboundPlan {
  common::HostPort source;        // the application's address (a local pod)
  common::HostPort destination;   // original destination (pod ip:app port)
  std::shared_ptr<const workloads::Registry> registry;  // keeps the two pointers below alive
  const workloads::Workload* source_workload = nullptr;
  const workloads::Workload* destination_workload = nullptr;
  hbone::PoolKey key;
};

struct Shared {
  const config::Config& config;
  workloads::Watcher& workloads;
  identity::TlsContextCache& tls;
  SocketFactory& sockets;
  Stats& stats;
  // Ports that are never a valid application target (ferry's own listeners).
  std::vector<uint16_t> ferry_ports;
  std::atomic<bool> draining{false};
  // Set by the server: moves an accepted socket (as a raw fd) to another worker.
  std::function<void(size_t worker, int fd, OutboundPlan plan)> handoff;
  size_t worker_count = 1;
};

class Worker {
 public:
  Worker(Shared& shared, size_t index)
      : shared_(shared), index_(index), pool_(io_.get_executor()) {}

  Shared& shared() { return shared_; }
  size_t index() const { return index_; }
  boost::asio::io_context& io() { return io_; }
  hbone::Pool& pool() { return pool_; }
  Scratch& scratch() { return scratch_; }
  // Live proxied connections on this worker (drain waits for zero).
  std::atomic<int64_t>& live() { return live_; }

 private:
  Shared& shared_;
  size_t index_;
  boost::asio::io_context io_{1};
  hbone::Pool pool_;
  Scratch scratch_;
  std::atomic<int64_t> live_{0};
};

// Handlers, one coroutine per accepted connection. Each owns its socket for life.
boost::asio::awaitable<void> serveOutbound(Worker& worker, boost::asio::ip::tcp::socket socket);
boost::asio::awaitable<void> serveOutboundPlanned(Worker& worker,
                                                  boost::asio::ip::tcp::socket socket,
                                                  OutboundPlan plan);
boost::asio::awaitable<void> serveHbone(Worker& worker, boost::asio::ip::tcp::socket socket);
boost::asio::awaitable<void> servePlaintext(Worker& worker, boost::asio::ip::tcp::socket socket);

// Which worker owns a pool key (stable for the life of the process).
size_t ownerOf(const hbone::PoolKey& key, size_t worker_count);

}  // namespace ferry::session
