#include "proxy/server/cni_endpoint.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "proxy/common/file.h"
#include "proxy/net/deadline.h"
#include "proxy/telemetry/metrics.h"

namespace ferry::server {
namespace asio = boost::asio;
using asio::local::stream_protocol;

namespace {
constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);
// How often an ADD that ferryd cannot decide yet is tried again: a watch event takes about
// a millisecond to apply, so the answer follows the pod's object within this.
constexpr auto kRetryStep = std::chrono::milliseconds(5);

std::string shortId(const std::string& id) { return id.substr(0, 12); }
}  // namespace

bool validContainerId(const std::string& id) {
  if (id.empty() || id.size() > 128 || id == "." || id == "..") return false;
  for (char c : id) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) return false;
  }
  return true;
}

CniEndpoint::CniEndpoint(asio::io_context& io, config::Cni config, CniEnrolment& enrolment)
    : io_(io), config_(std::move(config)), enrolment_(enrolment) {}

CniEndpoint::~CniEndpoint() { stop(); }

std::string CniEndpoint::recordPath(const std::string& container_id) const {
  return absl::StrCat(config_.state_dir, "/", container_id, ".json");
}

void CniEndpoint::writeRecord(const cni::Request& request) {
  std::string path = recordPath(request.container_id);
  if (auto st = common::writeFileAtomic(path, cni::encodeRequest(request), 0600); !st.ok()) {
    // The pod is enrolled all the same; only a restart would not know its sandbox.
    FERRY_LOG(kWarn, "cni: cannot record the sandbox of %s: %s", cni::podKey(request), st.message());
  }
}

void CniEndpoint::removeRecord(const std::string& container_id) { ::unlink(recordPath(container_id).c_str()); }

void CniEndpoint::restore(const std::function<bool(const cni::Request&)>& still_exists) {
  std::error_code ec;
  std::filesystem::create_directories(config_.state_dir, ec);
  for (const auto& entry : std::filesystem::directory_iterator(config_.state_dir, ec)) {
    const std::string path = entry.path().string();
    if (entry.path().extension() != ".json") continue;
    auto text = common::readFile(path);
    std::string error;
    std::optional<cni::Request> request;
    if (text.ok()) request = cni::decodeRequest(*text, &error);
    if (!request || !still_exists(*request)) {
      FERRY_LOG(kInfo, "cni: dropped the record %s: %s", path,
                !text.ok() ? std::string(text.status().message())
                           : !request ? error : "its sandbox is gone");
      ::unlink(path.c_str());
      ++records_dropped_;
      continue;
    }
    std::string pending;
    auto a = enrolment_.add(*request, &pending);
    ++restored_;
    FERRY_LOG(kInfo, "cni: restored the sandbox of %s (container %s): %s", cni::podKey(*request), shortId(request->container_id),
              a ? absl::StrCat(cni::verdictName(a->verdict), a->reason.empty() ? "" : ": ", a->reason)
                : absl::StrCat("pending: ", pending));
  }
}

absl::Status CniEndpoint::start() {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(config_.socket).parent_path(), ec);
  if (ec) return absl::FailedPreconditionError(absl::StrCat("cni.socket: creating its folder: ", ec.message()));
  std::filesystem::create_directories(config_.state_dir, ec);
  if (ec) return absl::FailedPreconditionError(absl::StrCat("cni.state_dir ", config_.state_dir, ": ", ec.message()));
  // A socket file left by an earlier ferryd refuses connections; a new one replaces it.
  struct stat st {};
  if (::lstat(config_.socket.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return absl::FailedPreconditionError(absl::StrCat("cni.socket ", config_.socket, " exists and is not a socket"));
    }
    ::unlink(config_.socket.c_str());
  }
  auto acceptor = std::make_unique<stream_protocol::acceptor>(io_);
  boost::system::error_code bec;
  acceptor->open(stream_protocol(), bec);
  // Created 0600 from the start (no window where another user could connect).
  mode_t old = ::umask(0177);
  if (!bec) acceptor->bind(stream_protocol::endpoint(config_.socket), bec);
  ::umask(old);
  if (!bec) acceptor->listen(asio::socket_base::max_listen_connections, bec);
  if (bec) return absl::FailedPreconditionError(absl::StrCat("cni.socket ", config_.socket, ": ", bec.message()));
  acceptor_ = std::move(acceptor);
  asio::co_spawn(io_, acceptLoop(), asio::detached);
  FERRY_LOG(kInfo, "cni: enrolment endpoint on %s (root only); sandboxes recorded in %s", config_.socket,
            config_.state_dir);
  return absl::OkStatus();
}

void CniEndpoint::stop(bool unlink) {
  if (!acceptor_) return;
  boost::system::error_code ignored;
  acceptor_->close(ignored);
  acceptor_.reset();
  // A plugin that finds no socket says "not reachable" at once, rather than waiting.
  if (unlink) ::unlink(config_.socket.c_str());
}

asio::awaitable<void> CniEndpoint::acceptLoop() {
  for (;;) {
    if (!acceptor_) co_return;
    auto [ec, socket] = co_await acceptor_->async_accept(kTuple);
    if (ec == asio::error::operation_aborted || !acceptor_ || !acceptor_->is_open()) co_return;
    if (ec) {
      asio::steady_timer backoff(io_, std::chrono::milliseconds(50));
      co_await backoff.async_wait(kTuple);
      continue;
    }
    asio::co_spawn(io_, serve(std::move(socket)), asio::detached);
  }
}

asio::awaitable<cni::Answer> CniEndpoint::answer(const cni::Request& request) {
  switch (request.verb) {
    case cni::Verb::kDel: {
      // An ADD of this sandbox still waiting must not enrol it after its DEL.
      if (adds_waiting_.contains(request.container_id)) cancelled_adds_.insert(request.container_id);
      cni::Answer a = enrolment_.del(request);
      removeRecord(request.container_id);
      co_return a;
    }
    case cni::Verb::kCheck:
      co_return enrolment_.check(request);
    case cni::Verb::kAdd:
      break;
  }
  auto give_up = std::chrono::steady_clock::now() + config_.pod_wait;
  asio::steady_timer step(io_);
  std::string pending;
  const std::string& id = request.container_id;
  adds_waiting_.insert(id);
  std::optional<cni::Answer> a;
  for (;;) {
    if (cancelled_adds_.erase(id) > 0) {
      a = cni::Answer{cni::Verdict::kError, "the sandbox was deleted while ferryd waited to enrol it", {}};
      break;
    }
    a = enrolment_.add(request, &pending);
    if (a) break;
    if (std::chrono::steady_clock::now() + kRetryStep > give_up) {
      a = cni::Answer{cni::Verdict::kRetry, pending, {}};
      break;
    }
    step.expires_after(kRetryStep);
    co_await step.async_wait(kTuple);
  }
  adds_waiting_.erase(id);
  cancelled_adds_.erase(id);
  if (a->verdict == cni::Verdict::kEnrolled) writeRecord(request);
  co_return *a;
}

asio::awaitable<void> CniEndpoint::serve(stream_protocol::socket socket) {
  auto started = std::chrono::steady_clock::now();
  ucred peer{};
  socklen_t len = sizeof(peer);
  if (::getsockopt(socket.native_handle(), SOL_SOCKET, SO_PEERCRED, &peer, &len) != 0 || peer.uid != 0) {
    ++refused_peers_;
    if (refusal_log_.allow()) {
      FERRY_LOG(kWarn, "cni: refused a connection from pid %d uid %d: only root may enrol pods", peer.pid, peer.uid);
    }
    co_return;
  }
  auto deadline = started + config_.plugin_timeout;
  // One answer per connection, written once at the end. (Named, never a temporary inside a
  // co_await expression: GCC 12 destroys such temporaries twice.)
  cni::Answer reply{cni::Verdict::kError, {}, {}};
  std::optional<cni::Request> request;
  unsigned char header[4];
  auto got = co_await net::withDeadline(asio::async_read(socket, asio::buffer(header), kTuple), deadline);
  if (!got || std::get<0>(*got)) co_return;
  uint32_t size = cni::frameLength(header);
  std::string error;
  if (size == 0 || size > cni::kMaxMessageBytes) {
    error = absl::StrCat("a request of ", size, " bytes (at most ", cni::kMaxMessageBytes, ")");
  } else {
    std::string body(size, '\0');
    got = co_await net::withDeadline(asio::async_read(socket, asio::buffer(body), kTuple), deadline);
    if (!got || std::get<0>(*got)) co_return;
    request = cni::decodeRequest(body, &error);
    if (request && !validContainerId(request->container_id)) {
      request.reset();
      error = "containerId is not a container id";
    }
  }
  if (!request) {
    ++bad_requests_;
    if (refusal_log_.allow()) FERRY_LOG(kWarn, "cni: a request ferryd does not understand: %s", error);
    reply.reason = "ferryd does not understand the request: " + error;
  } else {
    reply = co_await answer(*request);
    auto took = std::chrono::steady_clock::now() - started;
    if (request->verb == cni::Verb::kAdd) add_seconds_.observe(took);
    requests_[static_cast<int>(request->verb)][static_cast<int>(reply.verdict)].fetch_add(1, std::memory_order_relaxed);
    logAnswer(*request, reply, took);
  }
  std::string out = cni::encodeAnswer(reply);
  out.insert(0, cni::frameHeader(static_cast<uint32_t>(out.size())));
  co_await net::withDeadline(asio::async_write(socket, asio::buffer(out), kTuple), deadline);
}

void CniEndpoint::logAnswer(const cni::Request& request, const cni::Answer& a, std::chrono::nanoseconds took) {
  bool quiet = a.verdict == cni::Verdict::kNotEnrolled || request.verb == cni::Verb::kCheck;
  auto level = quiet ? common::LogLevel::kDebug
                     : a.verdict == cni::Verdict::kError ? common::LogLevel::kWarn : common::LogLevel::kInfo;
  if (!common::logEnabled(level)) return;
  common::logLine(level, absl::StrFormat("cni: %s %s (container %s): %s%s%s in %.1f ms", cni::verbName(request.verb),
                                         cni::podKey(request), shortId(request.container_id), cni::verdictName(a.verdict),
                                         a.device.empty() ? "" : " on ",
                                         a.device.empty() ? (a.reason.empty() ? "" : ": " + a.reason) : a.device,
                                         std::chrono::duration<double, std::milli>(took).count()));
}

void CniEndpoint::collect(telemetry::Exposition& out) const {
  auto requests = out.counter("ferry_cni_requests_total", "ferry-cni requests answered, by verb and verdict.");
  for (int v = 0; v < 3; ++v) {
    for (int d = 0; d < 5; ++d) {
      requests.add(static_cast<double>(requests_[v][d].load(std::memory_order_relaxed)),
                   {{"verb", cni::verbName(static_cast<cni::Verb>(v))},
                    {"verdict", cni::verdictName(static_cast<cni::Verdict>(d))}});
    }
  }
  out.counter("ferry_cni_bad_requests_total", "Requests refused as malformed (bad length, JSON, version, id).",
              static_cast<double>(bad_requests_.load(std::memory_order_relaxed)));
  out.counter("ferry_cni_refused_peers_total", "Connections refused because the peer was not root.",
              static_cast<double>(refused_peers_.load(std::memory_order_relaxed)));
  out.counter("ferry_cni_restored_sandboxes_total", "Sandbox records re-enrolled at start-up.",
              static_cast<double>(restored_.load(std::memory_order_relaxed)));
  out.counter("ferry_cni_dropped_records_total", "Sandbox records dropped at start-up (sandbox gone, unreadable).",
              static_cast<double>(records_dropped_.load(std::memory_order_relaxed)));
  out.histogram("ferry_cni_add_seconds", "Time from a ferry-cni ADD's connection to ferryd's answer.")
      .add(add_seconds_);
}

}  // namespace ferry::server
