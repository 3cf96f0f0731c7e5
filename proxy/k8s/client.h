#pragma once
// A Kubernetes API client for ferryd's control thread: list + watch of the four resources
// ferry reads, with client-go's reflector semantics (docs/kubernetes.md). HTTP/1.1 over TLS
// (Boost.Beast, OpenSSL) and JSON (Boost.JSON) stay inside the .cc files: this header is
// what the rest of ferryd compiles against.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/awaitable.hpp>

#include "absl/status/statusor.h"
#include "proxy/common/histogram.h"
#include "proxy/k8s/objects.h"
#include "proxy/k8s/session.h"

namespace boost::asio {
class io_context;
}

namespace ferry::telemetry {
class Exposition;
}  // namespace ferry::telemetry

namespace ferry::k8s {

using Millis = std::chrono::milliseconds;
using TimePoint = std::chrono::steady_clock::time_point;

// KUBERNETES_SERVICE_HOST / _PORT and the projected service-account token and CA under
// `sa_dir`. `getenv` is a seam for tests.
absl::StatusOr<ClusterAccess> inClusterAccess(
    const std::function<const char*(const char*)>& getenv,
    const std::string& sa_dir = "/var/run/secrets/kubernetes.io/serviceaccount");

struct Options {
  // LIST page size (`limit`): bounds the memory of one response; the API server's cache
  // answers 500-object pages cheaply (client-go's default too).
  uint32_t page_size = 500;
  // WATCH `timeoutSeconds`, jittered to [1/2, 1] of this so that the watches of 5,000 nodes do
  // not reconnect in step. A healthy but quiet watch still proves itself at least this often,
  // which keeps the state's age under kubernetes.max_state_age (5 min).
  std::chrono::seconds watch_timeout{240};
  // No byte at all (no event, no bookmark, no chunk) for this long on an open watch: the
  // connection is presumed dead and replaced. Must exceed watch_timeout: an API server of
  // 1.20 sends bookmarks only shortly before a watch's timeout.
  Millis silence_deadline{300'000};
  // Connect + TLS + response header, and each read of a LIST body.
  Millis request_timeout{30'000};
  // Back-off after a failure: doubles from initial up to max, each delay jittered to [1/2, 1];
  // reset by a success. A Retry-After answer (429, 5xx) is honoured when longer.
  Millis backoff_initial{500};
  Millis backoff_max{30'000};
  // A Retry-After above this is capped: a broken proxy must not park ferryd for hours.
  Millis retry_after_max{300'000};
  // One watch event / one LIST page larger than this is refused (a broken or hostile server
  // must not make ferryd buffer without bound). A Pod is typically 5-20 KB of JSON.
  size_t max_event_bytes = 16u << 20;
  size_t max_page_bytes = 128u << 20;
  std::string user_agent = "ferryd";
};

// Time and waiting, a seam so that tests check back-off without sleeping.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual TimePoint now() const = 0;
  // Calls `done` once `delay` has passed (from the io_context the informers run on).
  virtual void sleep(Millis delay, std::function<void()> done) = 0;
};
std::unique_ptr<Clock> steadyClock(boost::asio::io_context& io);

enum class EventType { kAdded, kModified, kDeleted };

// Receives one resource's state: replace() with the full list (initially and after every
// re-list; the receiver drops what is not in it), then one apply() per watch event. Objects
// that failed to decode never arrive (they are logged and counted).
template <class T>
class Handler {
 public:
  virtual ~Handler() = default;
  virtual void replace(std::vector<T> objects) = 0;
  virtual void apply(EventType type, T object) = 0;
};

// Why a request or a stream failed; each has a counter (docs/operations.md).
enum class ErrorReason : int {
  kConnect,          // DNS, TCP connect or TLS handshake failed
  kTimeout,          // no response header within request_timeout
  kSilence,          // an open watch sent no byte for silence_deadline
  kStreamCut,        // the connection ended inside a response (mid-event, mid-page)
  kUnauthorized,     // 401 after the token was re-read
  kForbidden,        // 403
  kNotFound,         // 404 (besides the EndpointSlice v1 probe)
  kGone,             // 410 on a LIST page (expired continue token) or a WATCH
  kTooManyRequests,  // 429
  kServerError,      // 5xx
  kHttpOther,        // any other non-200 status
  kBadJson,          // a body or a watch stream that is not JSON (the stream is dropped)
  kWatchError,       // an ERROR event other than 410 inside a watch
  kTooLarge,         // max_event_bytes / max_page_bytes exceeded
  kCount,
};
std::string_view errorReasonName(ErrorReason reason);

// Counters of one informer; written by the control thread, read by /metrics from anywhere.
struct ResourceMetrics {
  std::atomic<uint64_t> lists{0};        // complete LISTs (all pages) delivered by replace()
  std::atomic<uint64_t> list_pages{0};
  std::atomic<uint64_t> watches{0};      // WATCH requests answered 200
  std::atomic<uint64_t> watch_closes{0}; // watches ended cleanly by the server (timeoutSeconds)
  std::atomic<uint64_t> relists{0};      // LISTs started again because of 410 Gone / expiry
  std::atomic<uint64_t> events{0};       // ADDED/MODIFIED/DELETED applied
  std::atomic<uint64_t> bookmarks{0};
  std::atomic<uint64_t> bad_objects{0};  // events or list items skipped as malformed
  std::atomic<uint64_t> token_reloads{0};
  std::atomic<uint64_t> errors[static_cast<int>(ErrorReason::kCount)] = {};
  std::atomic<int64_t> last_backoff_ms{0};
  // Each event applied, from the read that completed its bytes to its handler's return: JSON
  // parse, decode, registry update and the datapath's map writes (all synchronous on the
  // control thread). From 25 µs to 5 s: an event's own cost up to a whole-state rebuild.
  common::DurationHistogram event_apply{{25e-6, 50e-6, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2, 2e-2, 5e-2, 0.1,
                                         0.2, 0.5, 1, 2, 5}};
  uint64_t error(ErrorReason r) const { return errors[static_cast<int>(r)].load(); }
};

class Informer {
 public:
  virtual ~Informer() = default;
  virtual std::string_view resource() const = 0;  // "pods", "namespaces", ...
  // Begins list + watch on the io_context; stop() ends it at the next step (the open
  // connection is closed at once).
  virtual void start() = 0;
  virtual void stop() = 0;
  // True once a first LIST was delivered. The last good state keeps serving afterwards
  // whatever happens; only its age says how stale it may be.
  virtual bool synced() const = 0;
  // Time since the state was last known current: a LIST completed, a WATCH was answered,
  // an event or bookmark arrived, or a watch closed cleanly. The caller compares it with
  // kubernetes.max_state_age for readiness. Control thread only.
  virtual Millis stateAge() const = 0;
  virtual std::string lastError() const = 0;
  virtual const ResourceMetrics& metrics() const = 0;
};


// One API server connection setup shared by the informers made from it. All of it runs on
// `io` (ferryd's control thread); none of it is thread-safe except the metrics.
class ApiClient {
 public:
  // Errors: an unparsable server URL, an unreadable CA / client certificate / key / token.
  static absl::StatusOr<std::unique_ptr<ApiClient>> create(boost::asio::io_context& io, ClusterAccess access,
                                                           Options options, std::unique_ptr<Clock> clock = nullptr);
  ~ApiClient();

  // Informers owned by the client; handlers must outlive it. None starts before start().
  Informer& pods(Handler<Pod>& handler);
  Informer& namespaces(Handler<Namespace>& handler);
  Informer& services(Handler<Service>& handler);
  // discovery.k8s.io/v1, or v1beta1 where v1 is not served (Kubernetes < 1.21).
  Informer& endpointSlices(Handler<EndpointSlice>& handler);
  // One DaemonSet, by name (a list and watch with fieldSelector=metadata.name, which RBAC
  // can grant for that one name). Its state's age is not part of stateAge().
  Informer& daemonSet(const std::string& namespace_name, const std::string& name, Handler<DaemonSet>& handler);
  // A namespaced custom resource, by its plural name ("authorizationpolicies": the label of
  // its metrics) and its paths, preferred API version first (a 404 on the first LIST moves
  // to the next path for good, as for EndpointSlices). `optional`: a resource whose CRD may
  // not be installed. When every path answers 404 the handler gets an empty list, the
  // informer counts as synced and current (its absence is the state, readiness does not
  // wait for it), and the LIST is tried again from the first path every backoff_max, so a
  // CRD installed later is picked up; a CRD deleted later ends in an empty list the same way.
  Informer& customObjects(std::string resource, std::vector<std::string> paths, Handler<CustomObject>& handler,
                          bool optional);

  // One TokenReview (POST /apis/authentication.k8s.io/v1/tokenreviews) of `token` for
  // `audiences`, sent with the client's own credentials (it needs RBAC `create` on
  // tokenreviews). Bounded by request_timeout and max_event_bytes; failures are counted as an
  // informer's are (resource "tokenreviews"). Errors: the API server did not answer with a
  // TokenReview (connect, timeout, a non-2xx status, JSON that is not one). A token the server
  // did not authenticate is an answer: authenticated false. Control thread only; any number
  // may be in flight at once, each on its own connection.
  boost::asio::awaitable<absl::StatusOr<TokenReviewStatus>> reviewToken(std::string token,
                                                                       std::vector<std::string> audiences);
  const ResourceMetrics& tokenReviewMetrics() const;

  // One request with the client's credentials (`body`, when not empty, as JSON) and its
  // answer whatever the status: 404 or 409 are answers the caller decides on. Bounded by
  // request_timeout and max_event_bytes. Errors: no answer (connect, timeout, a cut body),
  // counted as ferry_k8s_errors_total{resource="calls"}. Control thread only.
  boost::asio::awaitable<absl::StatusOr<ApiAnswer>> call(std::string method, std::string target, std::string body);

  void start();
  void stop();
  // The oldest state among the informers; Millis::max() until every one has synced.
  Millis stateAge() const;
  // The informers stateAge() waits for that have not synced yet (their lastError() says why).
  std::vector<const Informer*> unsynced() const;
  // ferry_k8s_* metrics of every informer (docs/operations.md), stated at scrape time.
  void collect(telemetry::Exposition& out) const;

  struct Impl;

 private:
  explicit ApiClient(std::shared_ptr<Impl> impl);
  // Shared with the informers: a coroutine still suspended when the client is destroyed
  // (a handshake in flight) resumes on the io_context later and must find it alive.
  std::shared_ptr<Impl> impl_;
};

}  // namespace ferry::k8s
