#include "proxy/k8s/client.h"

#include <malloc.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <random>

#include <boost/asio/async_result.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json/monotonic_resource.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/stream_parser.hpp>
#include <boost/json/value.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "proxy/common/file.h"
#include "proxy/common/log.h"
#include "proxy/common/strings.h"
#include "proxy/k8s/decode.h"
#include "proxy/k8s/http_stream.h"
#include "proxy/telemetry/metrics.h"

namespace ferry::k8s {
namespace asio = boost::asio;
namespace json = boost::json;
using boost::system::error_code;
using internal::HttpStream;

namespace {

// Error bodies (Status objects) are small; anything longer is cut, not buffered.
constexpr size_t kMaxErrorBody = 64 * 1024;
// Kubernetes objects nest deeper than Boost.JSON's default of 32 (managedFields).
constexpr size_t kMaxJsonDepth = 256;
// A paged LIST whose continue token keeps expiring is restarted at most this many times in
// a row before it counts as a failure and backs off (each restart is a full first page).
constexpr int kMaxListRestarts = 3;
// A LIST that brought this much JSON leaves enough freed heap behind to trim it (a trim walks
// the whole heap: a few ms; the namespaces' or a small cluster's lists are not worth it).
constexpr size_t kTrimAfterListBytes = 16u << 20;

class SteadyClock : public Clock {
 public:
  explicit SteadyClock(asio::io_context& io) : io_(io) {}
  TimePoint now() const override { return std::chrono::steady_clock::now(); }
  void sleep(Millis delay, std::function<void()> done) override {
    auto timer = std::make_shared<asio::steady_timer>(io_, delay);
    timer->async_wait([timer, done = std::move(done)](const error_code&) { done(); });
  }

 private:
  asio::io_context& io_;
};

// The bearer token: a static one, or a file re-read when it changes (kubelet rewrites the
// projected token well before it expires) and when the server answers 401.
class TokenSource {
 public:
  absl::Status init(std::string token, std::string file) {
    token_ = std::move(token);
    file_ = std::move(file);
    if (file_.empty()) return absl::OkStatus();
    if (!read()) return absl::FailedPreconditionError(absl::StrCat("cannot read the API token file ", file_));
    return absl::OkStatus();
  }
  bool reloadable() const { return !file_.empty(); }
  // The token to send now. Returns true in `changed` when the file was re-read.
  const std::string& current(bool& changed) {
    changed = false;
    if (!file_.empty() && stamp() != stamp_) changed = read();
    return token_;
  }
  // After a 401: the file is read again whatever its stamp says (a rewrite within the
  // file system's timestamp granularity keeps the stamp).
  bool reload() { return !file_.empty() && read(); }

 private:
  struct Stamp {
    ino_t ino = 0;
    off_t size = -1;
    timespec mtime{};
    bool operator!=(const Stamp& o) const {
      return ino != o.ino || size != o.size || mtime.tv_sec != o.mtime.tv_sec || mtime.tv_nsec != o.mtime.tv_nsec;
    }
  };
  Stamp stamp() const {
    struct stat st {};
    if (::stat(file_.c_str(), &st) != 0) return {};
    return Stamp{st.st_ino, st.st_size, st.st_mtim};
  }
  bool read() {
    Stamp before = stamp();
    auto text = common::readFile(file_);
    if (!text.ok()) {
      FERRY_LOG(kWarn, "k8s: cannot re-read the API token %s: %s (keeping the previous token)", file_,
                text.status().message());
      return false;
    }
    std::string t = *text;
    while (!t.empty() && (t.back() == '\n' || t.back() == '\r' || t.back() == ' ')) t.pop_back();
    token_ = std::move(t);
    stamp_ = before;
    return true;
  }
  std::string token_;
  std::string file_;
  Stamp stamp_;
};


}  // namespace

std::unique_ptr<Clock> steadyClock(asio::io_context& io) { return std::make_unique<SteadyClock>(io); }

std::string_view errorReasonName(ErrorReason reason) {
  switch (reason) {
    case ErrorReason::kConnect: return "connect";
    case ErrorReason::kTimeout: return "timeout";
    case ErrorReason::kSilence: return "silence";
    case ErrorReason::kStreamCut: return "stream_cut";
    case ErrorReason::kUnauthorized: return "unauthorized";
    case ErrorReason::kForbidden: return "forbidden";
    case ErrorReason::kNotFound: return "not_found";
    case ErrorReason::kGone: return "gone";
    case ErrorReason::kTooManyRequests: return "too_many_requests";
    case ErrorReason::kServerError: return "server_error";
    case ErrorReason::kHttpOther: return "http_other";
    case ErrorReason::kBadJson: return "bad_json";
    case ErrorReason::kWatchError: return "watch_error";
    case ErrorReason::kTooLarge: return "too_large";
    case ErrorReason::kCount: break;
  }
  return "unknown";
}

// What the informers share: the server, TLS, the token, time.
struct ApiClient::Impl {
  asio::io_context& io;
  Options options;
  std::unique_ptr<Clock> clock;
  asio::ssl::context tls{asio::ssl::context::tls_client};
  internal::ServerAddress server;
  TokenSource token;
  std::vector<std::shared_ptr<class InformerCore>> informers;
  ResourceMetrics token_reviews;  // reviewToken(): errors by reason, token_reloads
  ResourceMetrics calls;          // call(): answers (events) and failures by reason
  explicit Impl(asio::io_context& i) : io(i) {}
};

// How one step (a LIST, one WATCH) ended.
struct Outcome {
  // kAbsent: an optional resource that no path serves (its CRD is not installed).
  enum Kind { kOk, kClosed, kRelist, kError, kStopped, kAbsent } kind = kOk;
  ErrorReason reason = ErrorReason::kCount;
  std::string message;
  Millis retry_after{0};
  int http_status = 0;
};

Outcome just(Outcome::Kind kind) {
  Outcome o;
  o.kind = kind;
  return o;
}

// client-go's reflector for one resource, without the type: list all pages, hand the
// objects over, watch from the list's resourceVersion, re-list on 410 (docs/kubernetes.md).
class InformerCore : public Informer, public std::enable_shared_from_this<InformerCore> {
 public:
  InformerCore(std::shared_ptr<ApiClient::Impl> client, std::string resource, std::vector<std::string> paths)
      : keep_(std::move(client)), client_(*keep_), resource_(std::move(resource)), paths_(std::move(paths)), rng_(std::random_device{}()) {}

  std::string_view resource() const override { return resource_; }
  // Whether ApiClient::stateAge() counts this informer (see daemonSet()).
  bool agesState() const { return ages_state_; }
  void setAgesState(bool ages) { ages_state_ = ages; }
  // See ApiClient::customObjects.
  void setOptional(bool optional) { optional_ = optional; }
  void start() override {
    if (running_) return;
    running_ = true;
    stopped_ = false;
    asio::co_spawn(client_.io, run(shared_from_this()), asio::detached);
  }
  void stop() override {
    stopped_ = true;
    if (current_ != nullptr) current_->close();
  }
  bool synced() const override { return synced_; }
  Millis stateAge() const override {
    if (!synced_) return Millis::max();
    return std::chrono::duration_cast<Millis>(client_.clock->now() - last_good_);
  }
  std::string lastError() const override { return last_error_; }
  const ResourceMetrics& metrics() const override { return metrics_; }

 protected:
  // The typed half (InformerOf<T>): decode and deliver.
  virtual void listBegin() = 0;
  virtual absl::Status listItem(const json::value& item) = 0;
  virtual void listCommit() = 0;
  virtual absl::Status event(EventType type, const json::value& object) = 0;

 private:
  asio::awaitable<void> run(std::shared_ptr<InformerCore> self);
  asio::awaitable<Outcome> listAll();
  asio::awaitable<Outcome> listPage(std::string& cont, bool& more);
  asio::awaitable<Outcome> watchOnce();
  // `arrived`: when the read that completed the event returned (event_apply's start).
  Outcome handleEvent(const json::value& ev, std::chrono::steady_clock::time_point arrived);
  struct Reply {
    std::unique_ptr<HttpStream> stream;
    Outcome outcome;
  };
  asio::awaitable<Reply> request(const std::string& target);
  asio::awaitable<void> backoff(Millis retry_after);
  asio::awaitable<void> sleepFor(Millis delay);
  Outcome fail(ErrorReason reason, std::string message, Millis retry_after = Millis{0});
  // An optional resource that no path serves: an empty state, current as of now.
  Outcome absent();
  void markGood() { last_good_ = client_.clock->now(); }
  // Counts a malformed object or event; the log line is rate limited (a broken controller
  // can write thousands of bad objects), the counter is not.
  void skipped(const std::string& what) {
    metrics_.bad_objects.fetch_add(1, std::memory_order_relaxed);
    if (bad_log_.allow()) FERRY_LOG(kWarn, "k8s %s: skipping %s", resource_, what);
  }
  const std::string& path() const { return paths_[path_index_]; }
  // What joins the path and the next parameter: a path may carry a selector already.
  const char* query() const { return path().find('?') == std::string::npos ? "?" : "&"; }
  void beginList() {
    listBegin();
    listed_ = 0;
    list_bytes_ = 0;
  }

  std::shared_ptr<ApiClient::Impl> keep_;  // outlives the ApiClient while a step is in flight
  ApiClient::Impl& client_;
  std::string resource_;
  bool ages_state_ = true;
  bool optional_ = false;
  bool absent_ = false;  // the last LIST found no path serving the (optional) resource
  std::vector<std::string> paths_;  // preferred API version first
  size_t path_index_ = 0;
  std::mt19937_64 rng_;
  ResourceMetrics metrics_;
  bool running_ = false;
  bool stopped_ = false;
  bool synced_ = false;
  TimePoint last_good_{};
  std::string last_error_;
  std::string resource_version_;
  size_t listed_ = 0;      // objects the LIST in progress will hand over (for its log line)
  size_t list_bytes_ = 0;  // and the JSON it took
  int backoff_attempt_ = 0;
  HttpStream* current_ = nullptr;  // the open request, closed by stop()
  // 20 lines at once, then one per second.
  common::LogLimiter bad_log_{20, std::chrono::seconds(1)};
};

Outcome InformerCore::fail(ErrorReason reason, std::string message, Millis retry_after) {
  metrics_.errors[static_cast<int>(reason)].fetch_add(1, std::memory_order_relaxed);
  last_error_ = absl::StrCat(common::toAbsl(errorReasonName(reason)), ": ", message);
  FERRY_LOG(kWarn, "k8s %s: %s", resource_, last_error_);
  Outcome o;
  o.kind = Outcome::kError;
  o.reason = reason;
  o.message = std::move(message);
  o.retry_after = retry_after;
  return o;
}

asio::awaitable<void> InformerCore::run(std::shared_ptr<InformerCore> self) {
  while (!stopped_) {
    Outcome listed = co_await listAll();
    if (stopped_) break;
    if (listed.kind == Outcome::kAbsent) {
      // Not a failure: look again at a steady pace for a CRD installed meanwhile.
      backoff_attempt_ = 0;
      co_await sleepFor(client_.options.backoff_max);
      continue;
    }
    if (listed.kind != Outcome::kOk) {
      co_await backoff(listed.retry_after);
      continue;
    }
    backoff_attempt_ = 0;
    while (!stopped_) {
      Outcome watched = co_await watchOnce();
      if (stopped_) break;
      if (watched.kind == Outcome::kRelist) {
        metrics_.relists.fetch_add(1, std::memory_order_relaxed);
        break;
      }
      if (watched.kind == Outcome::kClosed) {
        backoff_attempt_ = 0;
        continue;
      }
      co_await backoff(watched.retry_after);
    }
  }
  running_ = false;
}

asio::awaitable<void> InformerCore::sleepFor(Millis delay) {
  co_await asio::async_initiate<decltype(asio::use_awaitable), void()>(
      [this, delay](auto handler) {
        auto shared = std::make_shared<decltype(handler)>(std::move(handler));
        client_.clock->sleep(delay, [shared] { std::move (*shared)(); });
      },
      asio::use_awaitable);
}

asio::awaitable<void> InformerCore::backoff(Millis retry_after) {
  const Options& o = client_.options;
  int shift = std::min(backoff_attempt_, 20);
  ++backoff_attempt_;
  Millis base = std::min(o.backoff_max, Millis{o.backoff_initial.count() << shift});
  if (base.count() <= 0) base = o.backoff_max;
  // Jitter in [base/2, base]: retries of many nodes after one API server restart spread out
  // instead of arriving together.
  std::uniform_int_distribution<int64_t> jitter(base.count() / 2, base.count());
  Millis delay{jitter(rng_)};
  if (retry_after > delay) delay = std::min(retry_after, o.retry_after_max);
  metrics_.last_backoff_ms.store(delay.count(), std::memory_order_relaxed);
  FERRY_LOG(kDebug, "k8s %s: retrying in %d ms", resource_, delay.count());
  co_await sleepFor(delay);
}

asio::awaitable<InformerCore::Reply> InformerCore::request(const std::string& target) {
  const Options& o = client_.options;
  for (int attempt = 0;; ++attempt) {
    Reply reply;
    reply.stream = std::make_unique<HttpStream>(client_.io, client_.tls, client_.server);
    bool rotated = false;
    std::string bearer = client_.token.current(rotated);
    if (rotated) metrics_.token_reloads.fetch_add(1, std::memory_order_relaxed);
    current_ = reply.stream.get();
    // A named local: GCC 12 destroys a braced temporary inside a co_await expression twice.
    HttpStream::Request get{.method = "GET", .target = target, .bearer = bearer, .user_agent = o.user_agent,
                            .body = {}, .content_type = {}};
    error_code ec = co_await reply.stream->open(get, o.request_timeout);
    current_ = nullptr;
    if (stopped_) co_return Reply{nullptr, just(Outcome::kStopped)};
    if (ec) {
      reply.outcome = fail(internal::isTimeout(ec) ? ErrorReason::kTimeout : ErrorReason::kConnect,
                           absl::StrCat("GET ", target, ": ", ec.message()));
      reply.stream.reset();
      co_return reply;
    }
    int status = reply.stream->status();
    if (status == 200) co_return reply;
    std::string body;
    current_ = reply.stream.get();
    co_await reply.stream->readAll(body, kMaxErrorBody, o.request_timeout);
    current_ = nullptr;
    int retry_after_s = reply.stream->retryAfterSeconds();
    reply.stream.reset();
    if (stopped_) co_return Reply{nullptr, just(Outcome::kStopped)};
    // A rotated token: the kubelet rewrote the file and the old token expired before we
    // noticed. Read it again and try once more; a second 401 is a real refusal.
    if (status == 401 && attempt == 0 && client_.token.reloadable()) {
      if (client_.token.reload()) metrics_.token_reloads.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    error_code jec;
    json::value parsed = json::parse(body, jec);
    internal::ApiStatus api = jec ? internal::ApiStatus{} : internal::decodeStatus(parsed);
    std::string what = absl::StrCat("GET ", target, ": HTTP ", status, api.message.empty() ? "" : ": ", api.message);
    Millis retry_after{0};
    if ((status == 429 || status >= 500) && retry_after_s >= 0) retry_after = Millis{retry_after_s * 1000LL};
    ErrorReason reason = status == 401   ? ErrorReason::kUnauthorized
                         : status == 403 ? ErrorReason::kForbidden
                         : status == 404 ? ErrorReason::kNotFound
                         : status == 410 ? ErrorReason::kGone
                         : status == 429 ? ErrorReason::kTooManyRequests
                         : status >= 500 ? ErrorReason::kServerError
                                         : ErrorReason::kHttpOther;
    // 404 may be the EndpointSlice v1 probe on an old server: the caller counts it.
    if (status == 404) {
      reply.outcome.kind = Outcome::kError;
      reply.outcome.reason = reason;
      reply.outcome.message = what;
    } else {
      reply.outcome = fail(reason, what, retry_after);
    }
    reply.outcome.http_status = status;
    if (status == 410) reply.outcome.kind = Outcome::kRelist;
    co_return reply;
  }
}

asio::awaitable<Outcome> InformerCore::listAll() {
  beginList();
  std::string cont;
  int restarts = 0;
  std::string unserved;  // the first path that answered 404, when a later one is tried
  auto began = std::chrono::steady_clock::now();
  uint64_t pages_before = metrics_.list_pages.load(std::memory_order_relaxed);
  for (bool more = true; more;) {
    bool first_page = cont.empty();
    Outcome page = co_await listPage(cont, more);
    if (page.kind == Outcome::kOk) continue;
    if (page.kind == Outcome::kStopped) co_return page;
    if (page.http_status == 404 && first_page && path_index_ + 1 < paths_.size()) {
      // Said once the next path served the LIST: an absent optional resource 404s on all.
      if (unserved.empty()) unserved = path();
      ++path_index_;
      beginList();
      more = true;
      continue;
    }
    if (page.http_status == 404 && first_page && optional_) co_return absent();
    if (page.http_status == 404) co_return fail(page.reason, page.message);
    // 410 on a later page: the continue token outlived etcd's compaction window. Its
    // snapshot is gone; a fresh LIST (not the server's "inconsistent" continue token) keeps
    // replace() a consistent picture.
    if (page.kind == Outcome::kRelist && !first_page && ++restarts <= kMaxListRestarts) {
      metrics_.relists.fetch_add(1, std::memory_order_relaxed);
      beginList();
      cont.clear();
      more = true;
      continue;
    }
    page.kind = Outcome::kError;
    co_return page;
  }
  auto received = std::chrono::steady_clock::now();
  if (!unserved.empty()) FERRY_LOG(kInfo, "k8s %s: %s is not served; using %s", resource_, unserved, path());
  if (absent_) {
    absent_ = false;
    FERRY_LOG(kInfo, "k8s %s: now served at %s", resource_, path());
  }
  listCommit();
  synced_ = true;
  metrics_.lists.fetch_add(1, std::memory_order_relaxed);
  markGood();
  auto applied = std::chrono::steady_clock::now();
  // The pages, their trees and the decoded objects are gone now that the receiver holds the
  // state; glibc keeps the pages they leave free between what stays (~100 MB after 150,000
  // pods: docs/benchmarks/registry.md). Hand them back, as the file source does after a load.
  bool trim = list_bytes_ >= kTrimAfterListBytes;
  if (trim) malloc_trim(0);
  auto ms = [](auto d) { return std::chrono::duration_cast<Millis>(d).count(); };
  // The sync's two halves for an operator (and docs/benchmarks/registry.md): the API server's
  // pages with their parsing, then what the receiver does with the whole state.
  FERRY_LOG(kInfo, "k8s %s: listed %d objects in %d pages (%d KiB) in %d ms; applied in %d ms%s", resource_, listed_,
            metrics_.list_pages.load(std::memory_order_relaxed) - pages_before, list_bytes_ >> 10, ms(received - began),
            ms(applied - received),
            trim ? absl::StrCat("; heap trimmed in ", ms(std::chrono::steady_clock::now() - applied), " ms") : "");
  co_return Outcome{};
}

Outcome InformerCore::absent() {
  if (!absent_ || !synced_) {
    // Once per absence (at start, and again after a CRD that was there is deleted).
    std::string group = paths_.front();  // "/apis/<group>/<version>/<resource>"
    if (group.rfind("/apis/", 0) == 0) group = group.substr(6, group.find('/', 6) - 6);
    FERRY_LOG(kInfo, "k8s: %s CRDs not installed: no %s (%s answer 404; looking again every %s s)", group, resource_,
              absl::StrJoin(paths_, ", "), absl::StrCat(client_.options.backoff_max.count() / 1000.0));
    beginList();
    listCommit();  // an empty state: what the receiver held is gone with the CRD
  }
  absent_ = true;
  synced_ = true;
  path_index_ = 0;  // a CRD installed later may serve the preferred version
  markGood();
  return just(Outcome::kAbsent);
}

asio::awaitable<Outcome> InformerCore::listPage(std::string& cont, bool& more) {
  const Options& o = client_.options;
  std::string target = absl::StrCat(path(), query(), "limit=", o.page_size);
  if (!cont.empty()) absl::StrAppend(&target, "&continue=", common::percentEncode(cont));
  Reply reply = co_await request(target);
  if (!reply.stream) co_return reply.outcome;
  std::string body;
  current_ = reply.stream.get();
  error_code ec = co_await reply.stream->readAll(body, o.max_page_bytes, o.request_timeout);
  current_ = nullptr;
  if (stopped_) co_return just(Outcome::kStopped);
  if (ec == boost::system::errc::file_too_large) {
    co_return fail(ErrorReason::kTooLarge, absl::StrCat("GET ", target, ": page over ", o.max_page_bytes, " bytes"));
  }
  if (ec) {
    co_return fail(internal::isTimeout(ec) ? ErrorReason::kTimeout : ErrorReason::kStreamCut,
                   absl::StrCat("GET ", target, ": ", ec.message()));
  }
  json::parse_options popts;
  popts.max_depth = kMaxJsonDepth;
  error_code jec;
  // The page's tree lives in one arena, freed at once when the page is done: 500 pods are
  // ~100,000 objects and strings, each a malloc and a free with the default resource, which
  // took half of ferryd's CPU in the initial sync of 150,000 pods (docs/benchmarks/registry.md).
  // The tree takes about twice the text.
  json::monotonic_resource arena(std::max<size_t>(body.size() * 2, 4096));
  json::value list = json::parse(body, jec, &arena, popts);
  const json::object* root = (!jec && list.is_object()) ? &list.get_object() : nullptr;
  const json::value* items = root ? root->if_contains("items") : nullptr;
  if (root == nullptr || (items != nullptr && !items->is_array() && !items->is_null())) {
    co_return fail(ErrorReason::kBadJson, absl::StrCat("GET ", target, ": not a list: ", jec ? jec.message() : "no items"));
  }
  if (items != nullptr && items->is_array()) {
    for (const json::value& item : items->get_array()) {
      if (absl::Status st = listItem(item); !st.ok()) {
        skipped(absl::StrCat("a malformed object in a list: ", st.message()));
      } else {
        ++listed_;
      }
    }
  }
  metrics_.list_pages.fetch_add(1, std::memory_order_relaxed);
  list_bytes_ += body.size();
  cont.clear();
  if (const json::value* md = root->if_contains("metadata"); md && md->is_object()) {
    if (const json::value* c = md->get_object().if_contains("continue"); c && c->is_string()) {
      cont = std::string(c->get_string());
    }
  }
  resource_version_ = internal::resourceVersionOf(list);
  more = !cont.empty();
  if (!more && resource_version_.empty()) {
    co_return fail(ErrorReason::kBadJson, absl::StrCat("GET ", target, ": list without metadata.resourceVersion"));
  }
  co_return Outcome{};
}

asio::awaitable<Outcome> InformerCore::watchOnce() {
  const Options& o = client_.options;
  // Jittered timeoutSeconds: [1/2, 1] of the configured value.
  int64_t full = std::max<int64_t>(1, o.watch_timeout.count());
  int64_t seconds = std::uniform_int_distribution<int64_t>(std::max<int64_t>(1, full / 2), full)(rng_);
  std::string target = absl::StrCat(path(), query(), "watch=1&allowWatchBookmarks=true&resourceVersion=",
                                    common::percentEncode(resource_version_), "&timeoutSeconds=", seconds);
  Reply reply = co_await request(target);
  if (!reply.stream && reply.outcome.http_status == 404) {
    // The resource stopped being served under the watch (its CRD deleted): a LIST finds out
    // whether it is gone (optional: an empty state) or moved.
    if (optional_) {
      FERRY_LOG(kInfo, "k8s %s: %s is no longer served; listing again", resource_, path());
      // From the preferred version: a CRD replaced by one that dropped this version (Istio
      // will drop v1beta1) must not look absent for a pause.
      path_index_ = 0;
      co_return just(Outcome::kRelist);
    }
    co_return fail(reply.outcome.reason, reply.outcome.message);
  }
  if (!reply.stream) co_return reply.outcome;
  metrics_.watches.fetch_add(1, std::memory_order_relaxed);
  markGood();
  json::parse_options popts;
  popts.max_depth = kMaxJsonDepth;
  json::stream_parser parser({}, popts);
  size_t event_bytes = 0;
  bool partial = false;  // bytes of an event that has not ended yet
  for (;;) {
    current_ = reply.stream.get();
    auto [ec, piece] = co_await reply.stream->readSome(o.silence_deadline);
    auto arrived = std::chrono::steady_clock::now();
    current_ = nullptr;
    if (stopped_) co_return just(Outcome::kStopped);
    if (ec) {
      if (internal::isTimeout(ec)) {
        co_return fail(ErrorReason::kSilence,
                       absl::StrCat("watch sent nothing for ", o.silence_deadline.count(), " ms; reconnecting"));
      }
      co_return fail(ErrorReason::kStreamCut, absl::StrCat("watch ended", partial ? " inside an event" : "", ": ",
                                                           ec.message()));
    }
    if (piece.empty()) {
      if (partial) co_return fail(ErrorReason::kStreamCut, "watch body ended inside an event");
      metrics_.watch_closes.fetch_add(1, std::memory_order_relaxed);
      markGood();
      co_return just(Outcome::kClosed);
    }
    while (!piece.empty()) {
      error_code jec;
      size_t used = parser.write_some(piece.data(), piece.size(), jec);
      if (jec) {
        // One undecodable byte and the stream cannot be resynchronised: drop it and watch
        // again from the last resourceVersion applied.
        co_return fail(ErrorReason::kBadJson, absl::StrCat("watch stream is not JSON: ", jec.message()));
      }
      for (size_t i = 0; i < used && !partial; ++i) partial = !std::isspace(static_cast<unsigned char>(piece[i]));
      event_bytes += used;
      piece.remove_prefix(used);
      if (parser.done()) {
        json::value ev = parser.release();
        parser.reset();
        partial = false;
        event_bytes = 0;
        Outcome handled = handleEvent(ev, arrived);
        if (handled.kind != Outcome::kOk) co_return handled;
      } else if (event_bytes > o.max_event_bytes) {
        co_return fail(ErrorReason::kTooLarge, absl::StrCat("watch event over ", o.max_event_bytes, " bytes"));
      }
    }
  }
}

Outcome InformerCore::handleEvent(const json::value& ev, std::chrono::steady_clock::time_point arrived) {
  const json::object* e = ev.is_object() ? &ev.get_object() : nullptr;
  const json::value* type = e ? e->if_contains("type") : nullptr;
  const json::value* object = e ? e->if_contains("object") : nullptr;
  std::string_view t = (type && type->is_string()) ? std::string_view(type->get_string()) : std::string_view();
  if (object == nullptr || t.empty()) {
    skipped("a watch event without type or object");
    return Outcome{};
  }
  if (t == "ERROR") {
    internal::ApiStatus st = internal::decodeStatus(*object);
    if (st.code == 410) {
      metrics_.errors[static_cast<int>(ErrorReason::kGone)].fetch_add(1, std::memory_order_relaxed);
      FERRY_LOG(kInfo, "k8s %s: watch expired (%s); re-listing", resource_, st.message);
      return just(Outcome::kRelist);
    }
    return fail(ErrorReason::kWatchError, absl::StrCat("watch ERROR ", st.code, " ", st.reason, ": ", st.message));
  }
  std::string rv = internal::resourceVersionOf(*object);
  if (t == "BOOKMARK") {
    if (!rv.empty()) resource_version_ = rv;
    metrics_.bookmarks.fetch_add(1, std::memory_order_relaxed);
    markGood();
    return Outcome{};
  }
  EventType kind;
  if (t == "ADDED") {
    kind = EventType::kAdded;
  } else if (t == "MODIFIED") {
    kind = EventType::kModified;
  } else if (t == "DELETED") {
    kind = EventType::kDeleted;
  } else {
    skipped(absl::StrCat("a watch event of unknown type '", common::toAbsl(t), "'"));
    return Outcome{};
  }
  if (absl::Status st = event(kind, *object); !st.ok()) {
    skipped(absl::StrCat("a malformed ", common::toAbsl(t), " event: ", st.message()));
  } else {
    metrics_.events.fetch_add(1, std::memory_order_relaxed);
    metrics_.event_apply.observe(std::chrono::steady_clock::now() - arrived);
  }
  // Skipped or applied, the event is behind us: a re-watch must not replay it.
  if (!rv.empty()) resource_version_ = rv;
  markGood();
  return Outcome{};
}

namespace {

template <class T>
using Decoder = absl::StatusOr<T> (*)(const json::value&);

template <class T>
class InformerOf : public InformerCore {
 public:
  InformerOf(std::shared_ptr<ApiClient::Impl> client, std::string resource, std::vector<std::string> paths, Decoder<T> decode,
             Handler<T>& handler)
      : InformerCore(std::move(client), std::move(resource), std::move(paths)), decode_(decode), handler_(handler) {}

 protected:
  void listBegin() override { pending_.clear(); }
  absl::Status listItem(const json::value& item) override {
    auto obj = decode_(item);
    if (!obj.ok()) return obj.status();
    pending_.push_back(*std::move(obj));
    return absl::OkStatus();
  }
  void listCommit() override {
    std::vector<T> all;
    all.swap(pending_);
    handler_.replace(std::move(all));
  }
  absl::Status event(EventType type, const json::value& object) override {
    auto obj = decode_(object);
    if (!obj.ok()) return obj.status();
    handler_.apply(type, *std::move(obj));
    return absl::OkStatus();
  }

 private:
  Decoder<T> decode_;
  Handler<T>& handler_;
  std::vector<T> pending_;
};

template <class T>
InformerCore& addInformer(const std::shared_ptr<ApiClient::Impl>& impl, std::string resource,
                          std::vector<std::string> paths, Decoder<T> decode, Handler<T>& handler) {
  auto informer = std::make_shared<InformerOf<T>>(impl, std::move(resource), std::move(paths), decode, handler);
  impl->informers.push_back(informer);
  return *informer;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ApiClient>> ApiClient::create(asio::io_context& io, ClusterAccess access,
                                                             Options options, std::unique_ptr<Clock> clock) {
  auto impl = std::make_shared<Impl>(io);
  if (options.silence_deadline <= std::chrono::duration_cast<Millis>(options.watch_timeout)) {
    return absl::InvalidArgumentError("k8s: silence_deadline must exceed watch_timeout");
  }
  auto server = internal::parseServerUrl(access.server);
  if (!server.ok()) return server.status();
  impl->server = *server;
  impl->options = std::move(options);
  impl->clock = clock ? std::move(clock) : steadyClock(io);

  if (auto st = configureTls(impl->tls, access); !st.ok()) return st;
  if (auto st = impl->token.init(access.token, access.token_file); !st.ok()) return st;
  return std::unique_ptr<ApiClient>(new ApiClient(std::move(impl)));
}

ApiClient::ApiClient(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
ApiClient::~ApiClient() {
  stop();
  // The informers hold the Impl; the Impl lets go of them (no cycle): each lives on only
  // as long as its stopped coroutine, if one is still suspended.
  impl_->informers.clear();
}

Informer& ApiClient::pods(Handler<Pod>& h) {
  return addInformer<Pod>(impl_, "pods", {"/api/v1/pods"}, internal::decodePod, h);
}
Informer& ApiClient::namespaces(Handler<Namespace>& h) {
  return addInformer<Namespace>(impl_, "namespaces", {"/api/v1/namespaces"}, internal::decodeNamespace, h);
}
Informer& ApiClient::services(Handler<Service>& h) {
  return addInformer<Service>(impl_, "services", {"/api/v1/services"}, internal::decodeService, h);
}
Informer& ApiClient::endpointSlices(Handler<EndpointSlice>& h) {
  return addInformer<EndpointSlice>(
      impl_, "endpointslices",
      {"/apis/discovery.k8s.io/v1/endpointslices", "/apis/discovery.k8s.io/v1beta1/endpointslices"},
      internal::decodeEndpointSlice, h);
}

Informer& ApiClient::customObjects(std::string resource, std::vector<std::string> paths, Handler<CustomObject>& h,
                                   bool optional) {
  auto& informer = addInformer<CustomObject>(impl_, std::move(resource), std::move(paths), internal::decodeCustomObject, h);
  informer.setOptional(optional);
  return informer;
}

Informer& ApiClient::daemonSet(const std::string& namespace_name, const std::string& name, Handler<DaemonSet>& h) {
  auto& informer = addInformer<DaemonSet>(impl_, "daemonsets",
                                {absl::StrCat("/apis/apps/v1/namespaces/", common::percentEncode(namespace_name),
                                              "/daemonsets?fieldSelector=", common::percentEncode(absl::StrCat("metadata.name=", name)))},
                                internal::decodeDaemonSet, h);
  // The workloads do not depend on it, so neither does readiness: it only decides what a
  // stop leaves behind (and a missing grant must not keep ferryd unready).
  informer.setAgesState(false);
  return informer;
}

namespace {

// The TokenReview request body: the token and the audiences it must have been minted for.
std::string tokenReviewBody(const std::string& token, const std::vector<std::string>& audiences) {
  json::array aud;
  for (const std::string& a : audiences) aud.emplace_back(a);
  json::object spec;
  spec["token"] = token;
  spec["audiences"] = std::move(aud);
  json::object o;
  o["apiVersion"] = "authentication.k8s.io/v1";
  o["kind"] = "TokenReview";
  o["spec"] = std::move(spec);
  return json::serialize(o);
}

ErrorReason reasonOfStatus(int status) {
  return status == 401   ? ErrorReason::kUnauthorized
         : status == 403 ? ErrorReason::kForbidden
         : status == 404 ? ErrorReason::kNotFound
         : status == 429 ? ErrorReason::kTooManyRequests
         : status >= 500 ? ErrorReason::kServerError
                         : ErrorReason::kHttpOther;
}

}  // namespace

namespace {

struct RoundTrip {
  int status = 0;
  std::string body;
};

// One request with the client's credentials and its whole answer, whatever its status. Our
// own token rotated under us (401) is read again and the request sent once more, as the
// informers do. No answer (connect, timeout, a cut or oversized body) is counted in `m` by
// reason and returned as an error that starts with `what`.
asio::awaitable<absl::StatusOr<RoundTrip>> roundTrip(std::shared_ptr<ApiClient::Impl> keep, ResourceMetrics& m,
                                                    std::string what, std::string method, std::string target,
                                                    std::string body) {
  ApiClient::Impl& c = *keep;
  auto failed = [&m, &what](ErrorReason reason, std::string message) {
    m.errors[static_cast<int>(reason)].fetch_add(1, std::memory_order_relaxed);
    return absl::UnavailableError(absl::StrCat(what, ": ", message));
  };
  for (int attempt = 0;; ++attempt) {
    HttpStream stream(c.io, c.tls, c.server);
    bool rotated = false;
    std::string bearer = c.token.current(rotated);
    if (rotated) m.token_reloads.fetch_add(1, std::memory_order_relaxed);
    HttpStream::Request request;  // named, as in InformerCore::request
    request.method = method;
    request.target = target;
    request.bearer = std::move(bearer);
    request.user_agent = c.options.user_agent;
    request.body = body;
    error_code ec = co_await stream.open(request, c.options.request_timeout);
    if (ec) co_return failed(internal::isTimeout(ec) ? ErrorReason::kTimeout : ErrorReason::kConnect, ec.message());
    RoundTrip answer;
    answer.status = stream.status();
    ec = co_await stream.readAll(answer.body, answer.status / 100 == 2 ? c.options.max_event_bytes : kMaxErrorBody,
                                 c.options.request_timeout);
    if (ec == boost::system::errc::file_too_large) co_return failed(ErrorReason::kTooLarge, "the answer is too large");
    if (ec) co_return failed(internal::isTimeout(ec) ? ErrorReason::kTimeout : ErrorReason::kStreamCut, ec.message());
    if (answer.status == 401 && attempt == 0 && c.token.reloadable()) {
      if (c.token.reload()) m.token_reloads.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    co_return answer;
  }
}

json::value parseAnswer(const std::string& body, error_code& ec) {
  json::parse_options popts;
  popts.max_depth = kMaxJsonDepth;
  return json::parse(body, ec, {}, popts);
}

}  // namespace

asio::awaitable<absl::StatusOr<TokenReviewStatus>> ApiClient::reviewToken(std::string token,
                                                                          std::vector<std::string> audiences) {
  // The Impl outlives this coroutine even if the client is destroyed while it is suspended.
  std::shared_ptr<Impl> keep = impl_;
  ResourceMetrics& m = keep->token_reviews;
  auto failed = [&m](ErrorReason reason, std::string message) {
    m.errors[static_cast<int>(reason)].fetch_add(1, std::memory_order_relaxed);
    return absl::UnavailableError(absl::StrCat("TokenReview: ", message));
  };
  auto answer = co_await roundTrip(keep, m, "TokenReview", "POST", "/apis/authentication.k8s.io/v1/tokenreviews",
                                   tokenReviewBody(token, audiences));
  if (!answer.ok()) co_return answer.status();
  error_code jec;
  json::value parsed = parseAnswer(answer->body, jec);
  if (answer->status / 100 != 2) {
    internal::ApiStatus api = jec ? internal::ApiStatus{} : internal::decodeStatus(parsed);
    co_return failed(reasonOfStatus(answer->status),
                     absl::StrCat("HTTP ", answer->status, api.message.empty() ? "" : ": ", api.message));
  }
  if (jec) co_return failed(ErrorReason::kBadJson, absl::StrCat("the answer is not JSON: ", jec.message()));
  auto review = internal::decodeTokenReview(parsed);
  if (!review.ok()) co_return failed(ErrorReason::kBadJson, std::string(review.status().message()));
  m.events.fetch_add(1, std::memory_order_relaxed);
  co_return review;
}

asio::awaitable<absl::StatusOr<ApiAnswer>> ApiClient::call(std::string method, std::string target, std::string body) {
  std::shared_ptr<Impl> keep = impl_;
  ResourceMetrics& m = keep->calls;
  std::string what = absl::StrCat(method, " ", target);
  auto answer = co_await roundTrip(keep, m, what, std::move(method), std::move(target), std::move(body));
  if (!answer.ok()) co_return answer.status();
  ApiAnswer out;
  out.status = answer->status;
  if (out.status / 100 != 2) {
    error_code jec;
    json::value parsed = parseAnswer(answer->body, jec);
    out.message = jec ? std::string("(no Status object)") : internal::decodeStatus(parsed).message;
  } else {
    m.events.fetch_add(1, std::memory_order_relaxed);
  }
  out.body = std::move(answer->body);
  co_return out;
}

const ResourceMetrics& ApiClient::tokenReviewMetrics() const { return impl_->token_reviews; }

void ApiClient::start() {
  for (auto& i : impl_->informers) i->start();
}
void ApiClient::stop() {
  for (auto& i : impl_->informers) i->stop();
}

Millis ApiClient::stateAge() const {
  Millis oldest{0};
  for (const auto& i : impl_->informers) {
    if (i->agesState()) oldest = std::max(oldest, i->stateAge());
  }
  return oldest;
}

std::vector<const Informer*> ApiClient::unsynced() const {
  std::vector<const Informer*> out;
  for (const auto& i : impl_->informers) {
    if (i->agesState() && !i->synced()) out.push_back(i.get());
  }
  return out;
}

void ApiClient::collect(telemetry::Exposition& out) const {
  struct Counter {
    const char* name;
    const char* help;
    std::atomic<uint64_t> ResourceMetrics::*field;
  };
  static const Counter kCounters[] = {
      {"ferry_k8s_lists_total", "Complete LISTs (all pages) delivered", &ResourceMetrics::lists},
      {"ferry_k8s_list_pages_total", "LIST pages received", &ResourceMetrics::list_pages},
      {"ferry_k8s_watches_total", "WATCH requests answered 200", &ResourceMetrics::watches},
      {"ferry_k8s_watch_closes_total", "Watches ended cleanly by the server (timeoutSeconds)",
       &ResourceMetrics::watch_closes},
      {"ferry_k8s_relists_total", "LISTs started again after 410 Gone or an expired version",
       &ResourceMetrics::relists},
      {"ferry_k8s_events_total", "Watch events applied (ADDED, MODIFIED, DELETED)", &ResourceMetrics::events},
      {"ferry_k8s_bookmarks_total", "Watch BOOKMARK events", &ResourceMetrics::bookmarks},
      {"ferry_k8s_bad_objects_total", "Malformed events or list items, skipped", &ResourceMetrics::bad_objects},
      {"ferry_k8s_token_reloads_total", "Service-account token re-reads (rotation, 401)",
       &ResourceMetrics::token_reloads},
  };
  for (const Counter& c : kCounters) {
    auto family = out.counter(c.name, c.help);
    for (const auto& i : impl_->informers) {
      family.add(static_cast<double>((i->metrics().*c.field).load()), {{"resource", i->resource()}});
    }
  }
  auto errors = out.counter("ferry_k8s_errors_total", "Failed requests and streams, by reason");
  auto addErrors = [&errors](std::string_view resource, const ResourceMetrics& m) {
    for (int r = 0; r < static_cast<int>(ErrorReason::kCount); ++r) {
      errors.add(static_cast<double>(m.errors[r].load()),
                 {{"resource", resource}, {"reason", errorReasonName(static_cast<ErrorReason>(r))}});
    }
  };
  for (const auto& i : impl_->informers) addErrors(i->resource(), i->metrics());
  // Only a client that reviews tokens (ferry-ca) states them: ferryd's exposition is unchanged.
  const ResourceMetrics& reviews = impl_->token_reviews;
  uint64_t answered = reviews.events.load();
  uint64_t failures = 0;
  for (const auto& e : reviews.errors) failures += e.load();
  if (answered + failures > 0) {
    addErrors("tokenreviews", reviews);
    out.counter("ferry_k8s_token_reviews_total", "TokenReviews the API server answered (authenticated or not)",
                static_cast<double>(answered));
  }
  // Only a client that makes calls (ferry-ca's bundle ConfigMap) states them.
  const ResourceMetrics& calls = impl_->calls;
  uint64_t call_failures = 0;
  for (const auto& e : calls.errors) call_failures += e.load();
  if (calls.events.load() + call_failures > 0) addErrors("calls", calls);
  auto apply = out.histogram("ferry_k8s_event_apply_seconds",
                             "Watch events, from the read that completed one to its handler's return (registry and "
                             "datapath maps updated)");
  for (const auto& i : impl_->informers) apply.add(i->metrics().event_apply, {{"resource", i->resource()}});
  auto age = out.gauge("ferry_k8s_state_age_seconds",
                       "Seconds since the state was last known current (-1 before the first LIST)");
  for (const auto& i : impl_->informers) {
    age.add(i->synced() ? std::chrono::duration<double>(i->stateAge()).count() : -1, {{"resource", i->resource()}});
  }
}

absl::StatusOr<ClusterAccess> inClusterAccess(const std::function<const char*(const char*)>& getenv,
                                              const std::string& sa_dir) {
  const char* host = getenv("KUBERNETES_SERVICE_HOST");
  const char* port = getenv("KUBERNETES_SERVICE_PORT");
  if (host == nullptr || *host == '\0' || port == nullptr || *port == '\0') {
    return absl::FailedPreconditionError(
        "not inside a Kubernetes pod (KUBERNETES_SERVICE_HOST/_PORT unset): set kubernetes.kubeconfig");
  }
  std::string h(host);
  ClusterAccess a;
  a.server = absl::StrCat("https://", h.find(':') != std::string::npos ? absl::StrCat("[", h, "]") : h, ":", port);
  a.ca_file = sa_dir + "/ca.crt";
  a.token_file = sa_dir + "/token";
  return a;
}

}  // namespace ferry::k8s
