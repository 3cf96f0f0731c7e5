#pragma once
// ferryd's enrolment endpoint for ferry-cni (docs/install.md, "The CNI chain"): a unix
// socket on the node (cni.socket, mode 0600, and the peer must be root: SO_PEERCRED), one
// request and one answer per connection (proxy/cni/protocol.h). An ADD is answered once
// the pod's programs are attached, or when ferryd knows it stays out of the mesh; while
// ferryd cannot tell (the API server's copy of the pod has not arrived) it asks again every
// few milliseconds for up to cni.pod_wait, then answers "retry". Each enrolled sandbox is
// recorded in cni.state_dir so that a restarted ferryd knows the sandboxes it enrolled.
// Runs on the control thread.
#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "proxy/cni/protocol.h"
#include "proxy/common/histogram.h"
#include "proxy/common/log.h"
#include "proxy/config/config.h"

namespace ferry::telemetry {
class Exposition;
}  // namespace ferry::telemetry

namespace ferry::server {

// What the endpoint asks of ferryd (the Server; tests use a fake).
class CniEnrolment {
 public:
  virtual ~CniEnrolment() = default;
  // One attempt at an ADD: the answer, or nullopt with *pending saying why not yet.
  virtual std::optional<cni::Answer> add(const cni::Request& request, std::string* pending) = 0;
  virtual cni::Answer del(const cni::Request& request) = 0;
  virtual cni::Answer check(const cni::Request& request) = 0;
};

class CniEndpoint {
 public:
  CniEndpoint(boost::asio::io_context& io, config::Cni config, CniEnrolment& enrolment);
  ~CniEndpoint();

  // Start-up, before start(): the records a previous ferryd left. Those whose sandbox
  // `still_exists` are added again (one attempt each; the source keeps the sandbox until the
  // pod's object arrives); the others are removed.
  void restore(const std::function<bool(const cni::Request&)>& still_exists);
  // Binds the socket (replacing a stale one) and accepts.
  absl::Status start();
  // `unlink`: the socket file goes too (false: it is the next ferryd's, bound since).
  void stop(bool unlink = true);

  // ferry_cni_* metrics.
  void collect(telemetry::Exposition& out) const;

 private:
  boost::asio::awaitable<void> acceptLoop();
  boost::asio::awaitable<void> serve(boost::asio::local::stream_protocol::socket socket);
  boost::asio::awaitable<cni::Answer> answer(const cni::Request& request);
  void logAnswer(const cni::Request& request, const cni::Answer& answer, std::chrono::nanoseconds took);
  std::string recordPath(const std::string& container_id) const;
  void writeRecord(const cni::Request& request);
  void removeRecord(const std::string& container_id);

  boost::asio::io_context& io_;
  config::Cni config_;
  CniEnrolment& enrolment_;
  std::unique_ptr<boost::asio::local::stream_protocol::acceptor> acceptor_;
  common::LogLimiter refusal_log_{5, std::chrono::seconds(10)};
  // Container ids of ADDs waiting for ferryd's decision, and those a DEL came for meanwhile.
  absl::flat_hash_set<std::string> adds_waiting_, cancelled_adds_;
  // [verb][verdict] (protocol.h's enums), read by /metrics from a worker.
  std::atomic<uint64_t> requests_[3][5] = {};
  std::atomic<uint64_t> bad_requests_{0}, refused_peers_{0}, restored_{0}, records_dropped_{0};
  common::DurationHistogram add_seconds_{{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}};
};

// Whether `id` may name a record file (runtimes use hex ids; nothing with a '/').
bool validContainerId(const std::string& id);

}  // namespace ferry::server
