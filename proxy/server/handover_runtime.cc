#include "proxy/server/handover_runtime.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "absl/strings/str_cat.h"
#include "proxy/common/duration.h"
#include "proxy/common/readiness_file.h"
#include "proxy/net/deadline.h"
#include "proxy/session/context.h"

namespace ferry::server {

namespace asio = boost::asio;
using Local = asio::local::stream_protocol;
using Clock = std::chrono::steady_clock;

namespace {

constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);
// The new ferryd's start-up, from its hello to its ready (loading the workloads, the
// certificates and the datapath): past this the running one takes its datapath back.
constexpr std::chrono::seconds kReadyTimeout{120};
// The new ferryd's own wait to be ready before it takes over: short of kReadyTimeout, so
// that it gives up first and the running one takes its datapath back when the link closes.
constexpr std::chrono::seconds kSuccessorReadyTimeout = kReadyTimeout - std::chrono::seconds(5);
// One exchange of the protocol (hello, offer) between two processes on one node.
constexpr std::chrono::seconds kExchangeTimeout{5};
constexpr std::chrono::seconds kStatusInterval{1};

// The next message on `link`, or why there is none by `deadline`.
asio::awaitable<absl::StatusOr<handover::Message>> readMessage(Local::socket& link, handover::FrameReader& reader,
                                                               net::Deadline deadline) {
  for (;;) {
    auto more = reader.fill(link.native_handle());
    if (!more.ok()) co_return more.status();
    auto m = reader.next();
    if (!m.ok()) co_return m.status();
    if (*m) co_return **std::move(m);
    if (!*more) co_return absl::UnavailableError("the link closed");
    auto waited = co_await net::withDeadline(link.async_wait(Local::socket::wait_read, kTuple), deadline);
    if (!waited) co_return absl::DeadlineExceededError("no message in time");
    if (auto ec = std::get<0>(*waited)) co_return absl::UnavailableError(ec.message());
  }
}

bool sameAddress(int fd, const common::HostPort& want) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return false;
  asio::ip::tcp::endpoint ep;
  std::memcpy(ep.data(), &ss, std::min<size_t>(len, ep.capacity()));
  ep.resize(len);
  return common::canonicalIp(ep.address()) == common::canonicalIp(want.ip) && (want.port == 0 || ep.port() == want.port);
}

}  // namespace

HandoverRuntime::HandoverRuntime(const config::Config& config, asio::io_context& control, HandoverHost& host)
    : config_(config), control_(control), host_(host), readiness_file_timer_(control) {}

HandoverRuntime::~HandoverRuntime() = default;

HandoverStatus HandoverRuntime::status() const {
  std::lock_guard lock(mu_);
  return status_;
}

absl::Status HandoverRuntime::takeOverFromPrevious() {
  const std::string& path = config_.handover.socket;
  if (path.empty()) return absl::OkStatus();
  auto taken = handover::takeOver(path, kExchangeTimeout);
  if (!taken.ok()) {
    // A ferryd runs and holds the listeners: binding beside it would split new connections
    // between a process that serves and one that leaves.
    return absl::FailedPreconditionError(
        absl::StrCat("handover.socket: ", taken.status().message(), "; it keeps serving (stop it first, or retry)"));
  }
  if (!*taken) {
    FERRY_LOG(kInfo, "handover: no ferryd to take over from on %s; binding the listeners", path);
    return absl::OkStatus();
  }
  taken_ = std::move(**taken);
  // Nothing is accepted from the shared listeners until this one is ready
  // (takeOverWhenReady); the running one serves them meanwhile.
  waiting_to_serve_ = true;
  FERRY_LOG(kInfo, "handover: took %d sockets from %s", taken_->sockets.size(), previousName());
  std::lock_guard lock(mu_);
  status_.taken = 1;
  status_.previous_pid = taken_->old_pid;
  status_.previous_name = taken_->old_name;
  return absl::OkStatus();
}

std::vector<common::UniqueFd> HandoverRuntime::takenSockets(handover::Role role, const common::HostPort* addr) {
  std::vector<common::UniqueFd> out;
  if (!taken_) return out;
  for (auto& s : taken_->sockets) {
    if (s.role != role || !s.fd) continue;
    if (addr != nullptr && !sameAddress(s.fd.get(), *addr)) continue;
    out.push_back(std::move(s.fd));
  }
  return out;
}

absl::Status HandoverRuntime::startEndpoint() {
  const std::string& path = config_.handover.socket;
  if (path.empty()) return absl::OkStatus();
  auto acceptor = std::make_unique<Local::acceptor>(control_);
  boost::system::error_code ec;
  auto taken = takenSockets(handover::Role::kHandover);
  if (!taken.empty()) {
    acceptor->assign(Local(), taken[0].release(), ec);
  } else {
    std::error_code fec;
    std::filesystem::create_directories(std::filesystem::path(path).parent_path(), fec);
    if (fec) return absl::FailedPreconditionError(absl::StrCat("handover.socket: creating its folder: ", fec.message()));
    // What is left at the path is a stale socket (takeOverFromPrevious found nobody on it).
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0) {
      if (!S_ISSOCK(st.st_mode)) return absl::FailedPreconditionError(absl::StrCat("handover.socket ", path, " exists and is not a socket"));
      ::unlink(path.c_str());
    }
    acceptor->open(Local(), ec);
    // Root only from the start: whoever connects receives every listening socket.
    mode_t old = ::umask(0177);
    if (!ec) acceptor->bind(Local::endpoint(path), ec);
    ::umask(old);
    if (!ec) acceptor->listen(4, ec);
  }
  if (ec) return absl::FailedPreconditionError(absl::StrCat("handover.socket ", path, ": ", ec.message()));
  acceptor_ = std::move(acceptor);
  asio::co_spawn(control_, acceptLoop(), asio::detached);
  // What was handed over and not taken: a listen address the new config dropped.
  if (taken_) {
    for (const auto& s : taken_->sockets) {
      if (s.fd) {
        FERRY_LOG(kWarn, "handover: the %s socket %s of ferryd pid %d is not in this config; its queued connections "
                  "are reset when that ferryd stops accepting",
                  handover::roleName(s.role), s.address, taken_->old_pid);
      }
    }
  }
  return absl::OkStatus();
}

absl::Status HandoverRuntime::announceReady() {
  if (!taken_) return absl::OkStatus();
  handover::Message ready;
  ready.type = handover::Message::Type::kReady;
  ready.pid = static_cast<int>(::getpid());
  ready.name = handover::selfName();
  int pid = taken_->old_pid;
  const std::string previous = handover::describe(pid, taken_->old_name);
  auto st = handover::sendMessage(taken_->link.get(), ready, Clock::now() + kExchangeTimeout);
  if (!st.ok()) {
    // It gave up waiting and took its datapath back: two processes must not manage one.
    return absl::UnavailableError(absl::StrCat("handover: telling ", previous, " that this one serves: ",
                                               st.message(), "; it goes on serving"));
  }
  FERRY_LOG(kInfo, "handover: serving; %s stops accepting and carries its connections until they end", previous);
  Local::socket link(control_);
  boost::system::error_code ec;
  link.assign(Local(), taken_->link.release(), ec);
  handover::FrameReader reader = std::move(taken_->reader);
  taken_.reset();
  if (!ec) asio::co_spawn(control_, followPrevious(std::move(link), std::move(reader), pid), asio::detached);
  return absl::OkStatus();
}

asio::awaitable<void> HandoverRuntime::followPrevious(Local::socket link, handover::FrameReader reader, int pid) {
  for (;;) {
    // Status comes every second; three missed is a previous generation that hangs.
    auto m = co_await readMessage(link, reader, Clock::now() + 3 * kStatusInterval + std::chrono::seconds(2));
    if (!m.ok() || m->type != handover::Message::Type::kStatus) {
      std::lock_guard lock(mu_);
      if (!m.ok() && m.status().code() == absl::StatusCode::kUnavailable) {
        FERRY_LOG(kInfo, "handover: ferryd pid %d (the previous generation) has exited", pid);
      } else {
        FERRY_LOG(kWarn, "handover: no status from ferryd pid %d any more: %s", pid,
                  m.ok() ? "an unexpected message" : m.status().message());
      }
      status_.previous_pid = 0;
      status_.previous_name.clear();
      status_.previous_live = 0;
      status_.previous_deadline_ms = 0;
      co_return;
    }
    std::lock_guard lock(mu_);
    status_.previous_pid = m->pid;
    status_.previous_name = m->name;
    status_.previous_live = m->live;
    status_.previous_deadline_ms = m->deadline_ms;
  }
}

asio::awaitable<void> HandoverRuntime::acceptLoop() {
  for (;;) {
    if (!acceptor_ || !acceptor_->is_open()) co_return;
    auto [ec, link] = co_await acceptor_->async_accept(kTuple);
    if (ec == asio::error::operation_aborted || !acceptor_ || !acceptor_->is_open()) co_return;
    if (ec) {
      FERRY_LOG(kWarn, "handover: accept: %s", ec.message());
      asio::steady_timer backoff(control_, std::chrono::milliseconds(100));
      co_await backoff.async_wait(kTuple);
      continue;
    }
    // One successor at a time, and none while this one stops.
    if (generation_ != Generation::kServing || host_.stopping()) continue;
    co_await serveSuccessor(std::move(link));
  }
}

absl::StatusOr<handover::Message> HandoverRuntime::makeOffer() {
  handover::Message offer;
  offer.type = handover::Message::Type::kOffer;
  offer.pid = static_cast<int>(::getpid());
  offer.name = handover::selfName();
  auto add = [&offer](handover::Role role, std::string address, int fd) -> absl::Status {
    if (fd < 0) return absl::OkStatus();
    int copy = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
    if (copy < 0) return absl::ResourceExhaustedError(absl::StrCat("duplicating a socket: ", std::strerror(errno)));
    offer.sockets.push_back({role, std::move(address), common::UniqueFd(copy)});
    return absl::OkStatus();
  };
  if (auto st = host_.offerSockets(add); !st.ok()) return st;
  if (auto st = add(handover::Role::kHandover, config_.handover.socket, acceptor_->native_handle()); !st.ok()) {
    return st;
  }
  return offer;
}

asio::awaitable<void> HandoverRuntime::serveSuccessor(Local::socket link) {
  handover::FrameReader reader;
  auto hello = co_await readMessage(link, reader, Clock::now() + kExchangeTimeout);
  if (!hello.ok() || hello->type != handover::Message::Type::kHello) {
    FERRY_LOG(kWarn, "handover: a connection to %s that is not a ferryd's hello: %s", config_.handover.socket,
              hello.ok() ? "another message" : hello.status().message());
    co_return;
  }
  int pid = hello->pid;
  const std::string who = handover::describe(pid, hello->name);
  auto offer = makeOffer();
  if (!offer.ok()) {
    FERRY_LOG(kWarn, "handover: %s asked for the sockets; cannot offer them: %s", who, offer.status().message());
    co_return;
  }
  // From the offer on, the datapath is the successor's to load and adopt.
  generation_ = Generation::kOffered;
  host_.offered();
  {
    std::lock_guard lock(mu_);
    status_.state = "offered";
    status_.successor_pid = pid;
    status_.successor_name = hello->name;
  }
  FERRY_LOG(kInfo, "handover: offering %d sockets to %s", offer->sockets.size(), who);
  if (auto st = handover::sendMessage(link.native_handle(), *offer, Clock::now() + kExchangeTimeout); !st.ok()) {
    offerFailed(who, st.message());
    co_return;
  }
  offer->sockets.clear();  // our copies of the descriptors
  auto ready = co_await readMessage(link, reader, Clock::now() + kReadyTimeout);
  if (!ready.ok() || ready->type != handover::Message::Type::kReady) {
    offerFailed(who, ready.ok() ? "it sent something other than ready" : ready.status().message());
    co_return;
  }
  retire(pid);
  co_await reportUntilExit(link, who);
}

void HandoverRuntime::offerFailed(const std::string& who, absl::string_view why) {
  FERRY_LOG(kWarn, "handover: %s did not take over (%s); this one (pid %d) goes on serving", who, why,
            static_cast<int>(::getpid()));
  generation_ = Generation::kServing;
  host_.offerFailed();
  std::lock_guard lock(mu_);
  status_.state = "serving";
  status_.successor_pid = 0;
  status_.successor_name.clear();
  ++status_.failed;
}

// Until this process exits (the link closes with it): how much it still carries.
asio::awaitable<void> HandoverRuntime::reportUntilExit(Local::socket& link, const std::string& who) {
  asio::steady_timer tick(control_);
  for (;;) {
    const int64_t live = host_.liveConnections();
    handover::Message status;
    status.type = handover::Message::Type::kStatus;
    status.pid = static_cast<int>(::getpid());
    status.name = handover::selfName();
    status.live = live;
    status.deadline_ms = std::max<int64_t>(
        0, std::chrono::duration_cast<std::chrono::milliseconds>(host_.drainDeadline() - Clock::now()).count());
    if (auto st = handover::sendMessage(link.native_handle(), status, Clock::now() + kStatusInterval); !st.ok()) {
      FERRY_LOG(kInfo, "handover: %s no longer follows this one: %s", who, st.message());
      co_return;
    }
    tick.expires_after(kStatusInterval);
    co_await tick.async_wait(kTuple);
  }
}

void HandoverRuntime::retire(int successor_pid) {
  generation_ = Generation::kRetiring;
  handed_over_ = true;
  const auto deadline = Clock::now() + config_.handover.deadline;
  const int64_t live = host_.liveConnections();
  std::string successor;
  {
    std::lock_guard lock(mu_);
    status_.state = "retiring";
    ++status_.given;
    successor = handover::describe(successor_pid, status_.successor_name);
  }
  FERRY_LOG(kInfo, "handover: %s serves from now on; this one carries its %d connections until they end, "
            "for at most %s (handover.deadline)", successor, live, common::formatDuration(config_.handover.deadline));
  // The sockets stay open in the successor: closing them here only stops this process
  // accepting. Its endpoints and the CNI socket file are the successor's now.
  if (acceptor_) {
    boost::system::error_code ignored;
    acceptor_->close(ignored);
  }
  host_.retire(deadline);
  publishReadinessFile();
  host_.finishDrain();
}

bool HandoverRuntime::signalWhileRetiring() {
  exit_signalled_ = true;
  return waiting_for_signal_;
}

bool HandoverRuntime::waitForSignal() {
  if (!config_.handover.wait_for_signal || exit_signalled_) return false;
  if (!waiting_for_signal_) {
    waiting_for_signal_ = true;
    FERRY_LOG(kInfo, "handover: this ferryd holds nothing any more; it exits at SIGTERM (handover.wait_for_signal)");
    publishReadinessFile();
  }
  return true;
}

void HandoverRuntime::takeOverWhenReady() { asio::co_spawn(control_, waitUntilReady(), session::logTaskError); }

asio::awaitable<void> HandoverRuntime::waitUntilReady() {
  const std::string previous = previousName();
  const auto deadline = Clock::now() + kSuccessorReadyTimeout;
  asio::steady_timer tick(control_);
  std::string said;
  for (;;) {
    absl::Status h = host_.readyToServe();
    if (h.ok()) break;
    if (Clock::now() >= deadline) {
      host_.exitWithoutServing(absl::UnavailableError(
          absl::StrCat("handover: not ready within ", common::formatDuration(kSuccessorReadyTimeout),
                       " (", h.message(), "); ", previous, " goes on serving")));
      co_return;
    }
    if (said != h.message()) {
      said = std::string(h.message());
      FERRY_LOG(kInfo, "handover: %s serves until this one is ready: %s", previous, said);
    }
    tick.expires_after(std::chrono::milliseconds(50));
    co_await tick.async_wait(kTuple);
  }
  // The operator endpoints, the datapath's first sync and ferry-cni's socket path are this
  // one's from here (a ferryd that fails to announce leaves them to the running one, which
  // binds the plugin's socket again: offerFailed).
  absl::Status st = absl::OkStatus();
  for (auto& adopt : deferred_endpoints_) {
    if (st.ok()) st = adopt();
  }
  deferred_endpoints_.clear();
  if (st.ok()) st = host_.startServing();
  if (st.ok()) st = announceReady();
  if (!st.ok()) {
    host_.exitWithoutServing(st);
    co_return;
  }
  waiting_to_serve_ = false;
  host_.serving();
  publishReadinessFile();
}

std::string HandoverRuntime::readinessLine() {
  if (generation_ == Generation::kRetiring) {
    HandoverStatus h = status();
    const int64_t live = host_.liveConnections();
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(host_.drainDeadline() - Clock::now());
    if (waiting_for_signal_) {
      return absl::StrCat("retiring: ", handover::describe(h.successor_pid, h.successor_name),
                          " serves; this one holds nothing and exits at SIGTERM");
    }
    return absl::StrCat("retiring: ", handover::describe(h.successor_pid, h.successor_name), " serves; this one carries ", live,
                        " connections until they end, for at most ",
                        common::formatDuration(std::max(left, std::chrono::milliseconds(0))));
  }
  absl::Status ready = host_.readiness();
  return ready.ok() ? std::string(common::kReadyLine) : std::string(ready.message());
}

void HandoverRuntime::publishReadinessFile() {
  const std::string& path = config_.handover.readiness_file;
  if (path.empty()) return;
  if (auto st = common::publishReadiness(path, readinessLine(), &readiness_file_line_); !st.ok()) {
    // The probe then reports a stale or missing file: the pod shows why it is not ready.
    FERRY_LOG(kWarn, "handover.readiness_file: %s", st.message());
  }
  readiness_file_timer_.expires_after(common::kReadinessFileInterval);
  readiness_file_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) publishReadinessFile();
  });
}

void HandoverRuntime::removeReadinessFile() {
  const std::string& path = config_.handover.readiness_file;
  if (path.empty()) return;
  readiness_file_timer_.cancel();
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    FERRY_LOG(kWarn, "handover.readiness_file: removing %s: %s", path, std::strerror(errno));
  }
}

void HandoverRuntime::collect(telemetry::Exposition& out) const {
  HandoverStatus h = status();
  out.counter("ferry_handovers_total", "Handovers of the listening sockets between generations of ferryd")
      .add(static_cast<double>(h.taken), {{"result", "taken"}})
      .add(static_cast<double>(h.given), {{"result", "given"}})
      .add(static_cast<double>(h.failed), {{"result", "failed"}});
  out.gauge("ferry_handover_previous_generation_pid",
            "The previous ferryd, still carrying connections after handing over (0: none)",
            static_cast<double>(h.previous_pid));
  out.gauge("ferry_handover_previous_generation_connections",
            "Connections the previous ferryd still carries", static_cast<double>(h.previous_live));
  out.gauge("ferry_handover_previous_generation_deadline_seconds",
            "Until the previous ferryd resets what it still carries (handover.deadline)",
            static_cast<double>(h.previous_deadline_ms) / 1000.0);
}

}  // namespace ferry::server
