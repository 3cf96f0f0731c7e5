#pragma once
// Upgrades and restarts without dropping connections (docs/operations.md, "Upgrades and
// restarts"): the server's two sides of proxy/server/handover.h. The new side takes the
// running ferryd's sockets at start (before the datapath and the listeners), tells it when
// this one serves, then follows its retirement. The old side offers its sockets to the next
// ferryd and retires once it is ready, or goes on serving when it fails. Also the
// readiness file (handover.readiness_file) and the handover's metrics.
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>

#include "absl/status/status.h"
#include "proxy/config/config.h"
#include "proxy/server/handover.h"
#include "proxy/telemetry/metrics.h"

namespace ferry::server {

// This generation and the one before it, while both run. For /status and the metrics.
struct HandoverStatus {
  std::string state = "serving";  // "offered": a successor is starting; "retiring"
  int successor_pid = 0;          // offered, retiring
  std::string successor_name;     // handover::Message::name
  int previous_pid = 0;           // a previous generation still carrying connections; 0: none
  std::string previous_name;
  int64_t previous_live = 0;
  int64_t previous_deadline_ms = 0;  // until it resets what it still carries
  uint64_t taken = 0;   // handovers taken at start (0 or 1)
  uint64_t given = 0;   // to a successor that became ready
  uint64_t failed = 0;  // offers whose successor failed before it was ready
};

// What the handover asks of the rest of ferryd (the server implements it).
class HandoverHost {
 public:
  virtual ~HandoverHost() = default;
  // What the successor waits for before it takes over: the workloads listed, the
  // certificates and the policies loaded.
  virtual absl::Status readyToServe() = 0;
  // /healthz/ready's answer, for the readiness file.
  virtual absl::Status readiness() = 0;
  virtual int64_t liveConnections() = 0;
  // A drain began: a successor that asks now is not answered.
  virtual bool stopping() = 0;
  virtual std::chrono::steady_clock::time_point drainDeadline() = 0;
  // The old side: every socket a successor takes (listeners, operator endpoints, the proxy
  // netns), each added to the offer.
  virtual absl::Status offerSockets(const handover::OfferSocket& add) = 0;
  // The offer went out (the datapath is the successor's to adopt), or it failed and this one
  // serves on (the datapath and the plugin's socket are its own again).
  virtual void offered() = 0;
  virtual void offerFailed() = 0;
  // The successor serves: this one stops polling and accepting, and lets its endpoints go;
  // what it carries may go on until `deadline`.
  virtual void retire(std::chrono::steady_clock::time_point deadline) = 0;
  virtual void finishDrain() = 0;
  // The new side, ready: the datapath's first sync, ferry-cni's socket; then (serving) the
  // accept loops start.
  virtual absl::Status startServing() = 0;
  virtual void serving() = 0;
  // Stops the control loop and the workers without a drain: nothing was accepted.
  virtual void exitWithoutServing(absl::Status why) = 0;
};

class HandoverRuntime {
 public:
  HandoverRuntime(const config::Config& config, boost::asio::io_context& control, HandoverHost& host);
  ~HandoverRuntime();

  // The new side, at start: the running ferryd's sockets, before anything binds or loads.
  absl::Status takeOverFromPrevious();
  bool tookOver() const { return taken_.has_value(); }
  // The ferryd taken over from ("ferryd pid N (pod)"), while taking over.
  std::string previousName() const { return taken_ ? handover::describe(taken_->old_pid, taken_->old_name) : ""; }
  // Taken over and not serving yet: nothing is accepted, signals exit without a drain.
  bool waitingToServe() const { return waiting_to_serve_; }
  // The descriptors taken over for `role`, for `addr` when given, each given out once.
  std::vector<common::UniqueFd> takenSockets(handover::Role role, const common::HostPort* addr = nullptr);
  handover::TakenSockets taken() {
    return [this](handover::Role role, const common::HostPort* addr) { return takenSockets(role, addr); };
  }
  // An operator endpoint taken over: adopted once this ferryd serves.
  void deferEndpoint(std::function<absl::Status()> adopt) { deferred_endpoints_.push_back(std::move(adopt)); }
  // The old side's socket (handover.socket), on which the next ferryd asks.
  absl::Status startEndpoint();
  // Taken over: waits until readyToServe (at most kSuccessorReadyTimeout), then serves and
  // tells the previous ferryd; else exits and the previous one goes on.
  void takeOverWhenReady();
  // A successor took the sockets: at exit nothing of the node is undone.
  bool handedOver() const { return handed_over_; }
  bool retiring() const { return generation_ == Generation::kRetiring; }
  // Retiring: a signal came; true when this one holds nothing and waits for it to exit.
  bool signalWhileRetiring();
  // Retiring and drained: with handover.wait_for_signal, true while it waits for SIGTERM
  // (an exit now would be answered with a restart that takes the node back).
  bool waitForSignal();

  HandoverStatus status() const;
  void collect(telemetry::Exposition& out) const;
  // handover.readiness_file: this process's readiness line, written now and refreshed every
  // common::kReadinessFileInterval until exit, when the file goes.
  void publishReadinessFile();
  void removeReadinessFile();

 private:
  enum class Generation { kServing, kOffered, kRetiring };
  absl::Status announceReady();
  boost::asio::awaitable<void> followPrevious(boost::asio::local::stream_protocol::socket link,
                                              handover::FrameReader reader, int pid);
  boost::asio::awaitable<void> acceptLoop();
  boost::asio::awaitable<void> serveSuccessor(boost::asio::local::stream_protocol::socket link);
  boost::asio::awaitable<void> reportUntilExit(boost::asio::local::stream_protocol::socket& link, const std::string& who);
  boost::asio::awaitable<void> waitUntilReady();
  absl::StatusOr<handover::Message> makeOffer();
  void offerFailed(const std::string& who, absl::string_view why);
  void retire(int successor_pid);
  std::string readinessLine();

  const config::Config& config_;
  boost::asio::io_context& control_;
  HandoverHost& host_;
  std::optional<handover::TakeOver> taken_;  // during start: what the previous ferryd handed over
  std::unique_ptr<boost::asio::local::stream_protocol::acceptor> acceptor_;
  Generation generation_ = Generation::kServing;  // control thread
  bool handed_over_ = false;
  bool waiting_to_serve_ = false;
  bool exit_signalled_ = false;      // SIGTERM/SIGINT came while retiring
  bool waiting_for_signal_ = false;  // retiring, holding nothing, handover.wait_for_signal
  std::vector<std::function<absl::Status()>> deferred_endpoints_;  // operator listeners taken over
  mutable std::mutex mu_;
  HandoverStatus status_;  // under mu_
  boost::asio::steady_timer readiness_file_timer_;
  std::string readiness_file_line_;  // what handover.readiness_file holds
};

}  // namespace ferry::server
