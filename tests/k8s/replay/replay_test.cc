// The replay tier (README.md here): ferryd's Kubernetes client against wire bytes recorded
// from a real kube-apiserver. Each test names the recorded case it replays and, where the
// real server could not produce the case on demand, how the bytes were derived.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>

#include <fcntl.h>
#include <sys/stat.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "proxy/k8s/client.h"
#include "proxy/telemetry/metrics.h"
#include "tests/k8s/replay/replay_server.h"

namespace ferry::k8s {
namespace {
namespace asio = boost::asio;
namespace json = boost::json;
using namespace std::chrono_literals;
using replay::Recorded;
using replay::Reply;

// The recordings are committed: a missing one is a broken checkout, not a reason to skip.
#define LOAD_FIXTURE(var, name)                                                                  \
  auto var = replay::loadCase(name);                                                             \
  if (var.empty()) {                                                                             \
    FAIL() << "fixture " << name << " missing under " << replay::fixtureDir()                    \
           << " (tests/k8s/replay/README.md says how to record it)";                             \
  }

// Time that moves only when the client sleeps: back-off is checked without waiting for it.
class FakeClock : public Clock {
 public:
  explicit FakeClock(asio::io_context& io) : io_(io) {}
  TimePoint now() const override { return now_; }
  void sleep(Millis delay, std::function<void()> done) override {
    sleeps.push_back(delay);
    now_ += delay;
    if (on_sleep) on_sleep(delay);
    asio::post(io_, std::move(done));
  }
  void advance(Millis d) { now_ += d; }
  std::vector<Millis> sleeps;
  std::function<void(Millis)> on_sleep;

 private:
  asio::io_context& io_;
  TimePoint now_ = TimePoint{} + 1h;
};

std::string keyOf(const Pod& p) { return p.namespace_name + "/" + p.name; }
std::string keyOf(const Namespace& n) { return n.name; }
std::string keyOf(const Service& s) { return s.namespace_name + "/" + s.name; }
std::string keyOf(const EndpointSlice& e) { return e.namespace_name + "/" + e.name; }
std::string keyOf(const DaemonSet& d) { return d.namespace_name + "/" + d.name; }
std::string keyOf(const CustomObject& o) { return o.namespace_name + "/" + o.name; }

// What a consumer of the informer would hold.
template <class T>
class Store : public Handler<T> {
 public:
  void replace(std::vector<T> objects) override {
    state.clear();
    for (auto& o : objects) state[keyOf(o)] = std::move(o);
    ++replaces;
  }
  void apply(EventType type, T object) override {
    ++applied;
    if (type == EventType::kDeleted) {
      state.erase(keyOf(object));
    } else {
      state[keyOf(object)] = std::move(object);
    }
  }
  const T* find(const std::string& key) const {
    auto it = state.find(key);
    return it == state.end() ? nullptr : &it->second;
  }
  std::map<std::string, T> state;
  int replaces = 0;
  int applied = 0;
};

std::string label(const Pod& p, const std::string& key) {
  const std::string* v = findLabel(p.labels, key);
  return v ? *v : "";
}

// A digest of a pod store for comparing two runs (labels, IPs, node, phase).
std::string digest(const Store<Pod>& s) {
  std::string out;
  for (const auto& [k, p] : s.state) {
    out += k + " " + p.node_name + " " + p.phase + (p.deleting ? " deleting" : "");
    for (const auto& ip : p.pod_ips) out += " " + ip;
    for (const auto& [lk, lv] : p.labels) out += " " + lk + "=" + lv;
    out += "\n";
  }
  return out;
}

// Facts about a recorded watch body, read with Boost.JSON independently of the client.
struct WatchFacts {
  int changes = 0;  // ADDED / MODIFIED / DELETED
  int bookmarks = 0;
  int errors = 0;
  std::string last_rv;
  std::vector<std::string> change_rvs;  // resourceVersion after each change
};
WatchFacts factsOf(const Recorded& watch) {
  WatchFacts f;
  for (const std::string& line : watch.lines()) {
    json::value ev = json::parse(line);
    std::string type(ev.at("type").as_string());
    const json::value& md = ev.at("object").as_object().contains("metadata") ? ev.at("object").at("metadata") : json::value();
    std::string rv = md.is_object() && md.as_object().contains("resourceVersion")
                         ? std::string(md.at("resourceVersion").as_string())
                         : "";
    if (type == "BOOKMARK") ++f.bookmarks;
    else if (type == "ERROR") ++f.errors;
    else {
      ++f.changes;
      f.change_rvs.push_back(rv);
    }
    if (!rv.empty() && type != "ERROR") f.last_rv = rv;
  }
  return f;
}

std::string listVersion(const Recorded& page) {
  return std::string(json::parse(page.body).at("metadata").at("resourceVersion").as_string());
}
size_t itemCount(const std::vector<Recorded>& pages) {
  size_t n = 0;
  for (const auto& p : pages) n += json::parse(p.body).at("items").as_array().size();
  return n;
}

// Replies in order; every request after the script waits forever (an idle watch).
replay::ReplayServer::Responder scripted(std::vector<Reply> replies) {
  return [replies = std::move(replies)](size_t i, const replay::Request&) {
    if (i < replies.size()) return replies[i];
    Reply hang;
    hang.hang = true;
    return hang;
  };
}

// One whole run on its own server: the pods' digest once the first watch closed cleanly.
std::string podsAfterWatchClose(std::vector<Reply> replies, const Options& options, uint64_t& bad_objects) {
  asio::io_context io;
  replay::ReplayServer server(io);
  server.respond(scripted(std::move(replies)));
  ClusterAccess access;
  access.server = server.url();
  access.ca_pem = server.caPem();
  auto client = ApiClient::create(io, access, options, std::make_unique<FakeClock>(io));
  EXPECT_TRUE(client.ok());
  if (!client.ok()) return "";
  Store<Pod> pods;
  Informer& inf = (*client)->pods(pods);
  (*client)->start();
  auto deadline = std::chrono::steady_clock::now() + 20s;
  while (inf.metrics().watch_closes == 0 && std::chrono::steady_clock::now() < deadline) io.run_for(5ms);
  EXPECT_EQ(inf.metrics().watch_closes, 1u);
  bad_objects = inf.metrics().bad_objects;
  (*client)->stop();
  io.run_for(10ms);
  return digest(pods);
}

class ReplayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    options_.silence_deadline = 60s;  // the tests that want silence set less
    options_.watch_timeout = 30s;
  }
  void start(ClusterAccess access = {}) {
    access.server = server_.url();
    access.ca_pem = server_.caPem();
    auto clock = std::make_unique<FakeClock>(io_);
    clock_ = clock.get();
    auto c = ApiClient::create(io_, access, options_, std::move(clock));
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = std::move(*c);
  }
  void script(std::vector<Reply> replies) { server_.respond(scripted(std::move(replies))); }
  void expectImmediateRelist(const std::vector<Recorded>& c, Reply watch);
  // Scripts the server, makes the client with one informer and starts it.
  template <class T>
  Informer& startWith(std::vector<Reply> replies, Informer& (ApiClient::*make)(Handler<T>&), Handler<T>& handler) {
    script(std::move(replies));
    start();
    Informer& inf = (client_.get()->*make)(handler);
    client_->start();
    return inf;
  }
  // Runs the io_context until `done` holds (false after 20 s: a failure, never a timing).
  bool runUntil(const std::function<bool()>& done) {
    auto deadline = std::chrono::steady_clock::now() + 20s;
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      io_.restart();
      io_.run_for(5ms);
    }
    return true;
  }
  size_t requests() const { return server_.requests().size(); }
  const replay::Request& request(size_t i) const { return server_.requests().at(i); }
  void TearDown() override {
    // Requests still on their way (a re-watch) must not reach a responder that captured the
    // test's locals by reference.
    server_.respond(nullptr);
    if (client_) client_->stop();
    io_.restart();
    io_.run_for(20ms);
  }

  asio::io_context io_;
  replay::ReplayServer server_{io_};
  Options options_;
  FakeClock* clock_ = nullptr;
  std::unique_ptr<ApiClient> client_;
};

// pods-list-watch: the paged LIST and the WATCH, byte for byte as the server sent them.
std::vector<Recorded> pagesOf(const std::vector<Recorded>& c) { return {c.begin(), c.end() - 1}; }

std::vector<Reply> verbatimAll(const std::vector<Recorded>& rs) {
  std::vector<Reply> out;
  for (const auto& r : rs) out.push_back(replay::verbatim(r));
  return out;
}

TEST_F(ReplayTest, ListsEveryPageThenFollowsTheWatchFromTheListsVersion) {
  LOAD_FIXTURE(c, "pods-list-watch");
  auto pages = pagesOf(c);
  WatchFacts facts = factsOf(c.back());
  Store<Pod> pods;
  Informer& inf = startWith(verbatimAll(c), &ApiClient::pods, pods);
  // The watch ended by its timeoutSeconds and the next one is open (hanging).
  ASSERT_TRUE(runUntil([&] { return inf.metrics().watch_closes == 1 && requests() == c.size() + 1; }));

  EXPECT_EQ(pods.replaces, 1);
  EXPECT_EQ(inf.metrics().list_pages, pages.size());
  EXPECT_EQ(inf.metrics().lists, 1u);
  ASSERT_GT(pages.size(), 1u) << "the recording should hold several pages";
  ASSERT_GE(facts.bookmarks, 1) << "the recording should hold a BOOKMARK";
  EXPECT_EQ(request(0).param("continue"), "");
  for (size_t i = 1; i < pages.size(); ++i) EXPECT_NE(request(i).param("continue"), "") << i;
  // The watch starts from the list's resourceVersion, with bookmarks.
  const auto& watch = request(pages.size());
  EXPECT_EQ(watch.param("watch"), "1");
  EXPECT_EQ(watch.param("allowWatchBookmarks"), "true");
  EXPECT_EQ(watch.param("resourceVersion"), listVersion(pages.back()));
  EXPECT_NE(watch.param("timeoutSeconds"), "");
  // The re-watch after the clean close resumes from the last version seen (event or
  // bookmark), without back-off.
  EXPECT_EQ(request(pages.size() + 1).param("resourceVersion"), facts.last_rv);
  EXPECT_TRUE(clock_->sleeps.empty());
  EXPECT_EQ(inf.metrics().events, static_cast<uint64_t>(facts.changes));
  EXPECT_EQ(inf.metrics().bookmarks, static_cast<uint64_t>(facts.bookmarks));
  EXPECT_EQ(inf.metrics().bad_objects, 0u);
  // Every applied event is timed once (ferry_k8s_event_apply_seconds).
  EXPECT_EQ(inf.metrics().event_apply.count(), inf.metrics().events.load());
  EXPECT_NE(telemetry::textOf(*client_).find(absl::StrCat("ferry_k8s_event_apply_seconds_count{resource=\"pods\"} ",
                                                          facts.changes, "\n")),
            std::string::npos);

  // The objects made by record_wire.py, as the server described them.
  const Pod* a = pods.find("fy-replay/fy-a");
  const Pod* b = pods.find("fy-replay/fy-b");
  const Pod* noip = pods.find("fy-replay/fy-noip");
  ASSERT_TRUE(a && b && noip);
  EXPECT_EQ(label(*a, "ferry.io/dataplane"), "disabled");  // relabelled during the watch
  EXPECT_EQ(label(*b, "fy-step"), "1");
  EXPECT_EQ(a->pod_ips.size(), 1u);
  EXPECT_FALSE(a->node_name.empty());
  EXPECT_EQ(a->service_account, "default");
  EXPECT_EQ(a->phase, "Running");
  EXPECT_FALSE(a->uid.empty());
  // A pod without an IP is delivered as such (the consumer decides what it means).
  EXPECT_TRUE(noip->pod_ips.empty());
  EXPECT_EQ(noip->phase, "Pending");
  EXPECT_EQ(noip->node_name, "fy-ghost-node");
  // fy-big (a 60 KB object, several TLS records) was created and deleted during the watch.
  EXPECT_EQ(pods.find("fy-replay/fy-big"), nullptr);
  EXPECT_EQ(pods.state.size(), itemCount(pages) /* fy-big came and went */);
  EXPECT_TRUE(inf.synced());
  EXPECT_EQ(inf.stateAge(), 0ms);
}

// Derived: the recorded watch body re-framed (a) 7 bytes per chunk, so that every event is
// split over many chunks, and (b) as one chunk holding every event. Same state either way.
TEST_F(ReplayTest, EventsSplitAcrossChunksOrSharingOneGiveTheSameState) {
  LOAD_FIXTURE(c, "pods-list-watch");
  std::string expected;
  for (int variant = 0; variant < 3; ++variant) {
    std::vector<Reply> replies = verbatimAll(pagesOf(c));
    if (variant == 0) replies.push_back(replay::verbatim(c.back()));
    if (variant == 1) replies.push_back(replay::rechunked(c.back(), replay::splitEvery(c.back().body, 7)));
    if (variant == 2) replies.push_back(replay::rechunked(c.back(), {c.back().body}));
    uint64_t bad = 0;
    std::string got = podsAfterWatchClose(replies, options_, bad);
    EXPECT_EQ(bad, 0u) << "variant " << variant;
    if (variant == 0) expected = got;
    else EXPECT_EQ(got, expected) << "variant " << variant;
  }
}

// The recorded LIST pages, `watch` as the answer to the WATCH, then the pages again: the
// client must re-list at once (no continue, no back-off) and deliver the state twice.
void ReplayTest::expectImmediateRelist(const std::vector<Recorded>& c, Reply watch) {
  auto pages = pagesOf(c);
  std::vector<Reply> replies = verbatimAll(pages);
  replies.push_back(std::move(watch));
  for (const auto& p : pages) replies.push_back(replay::verbatim(p));
  Store<Pod> pods;
  Informer& inf = startWith(replies, &ApiClient::pods, pods);
  ASSERT_TRUE(runUntil([&] { return requests() == 2 * pages.size() + 2; }));
  EXPECT_EQ(inf.metrics().relists, 1u);
  EXPECT_EQ(inf.metrics().error(ErrorReason::kGone), 1u);
  EXPECT_EQ(pods.replaces, 2);
  const auto& relist = request(pages.size() + 1);
  EXPECT_EQ(relist.param("watch"), "");
  EXPECT_EQ(relist.param("continue"), "");
  EXPECT_TRUE(clock_->sleeps.empty());
  EXPECT_EQ(pods.state.size(), itemCount(pages));
}

TEST_F(ReplayTest, WatchErrorGoneInsideA200Relists) {
  LOAD_FIXTURE(c, "pods-list-watch");
  LOAD_FIXTURE(expired, "pods-watch-expired");
  ASSERT_EQ(expired[0].status, 200);
  ASSERT_EQ(factsOf(expired[0]).errors, 1);
  expectImmediateRelist(c, replay::verbatim(expired[0]));  // 200, then ERROR 410
}

// The recorded 410 Gone (an expired continue token's answer) given to a WATCH request:
// same rule as the ERROR event.
TEST_F(ReplayTest, WatchAnswered410GoneRelists) {
  LOAD_FIXTURE(c, "pods-list-watch");
  LOAD_FIXTURE(e, "pods-list-expired-continue");
  ASSERT_EQ(e[1].status, 410);
  expectImmediateRelist(c, replay::verbatim(e[1]));
}

TEST_F(ReplayTest, ExpiredContinueTokenRestartsTheListFromScratch) {
  LOAD_FIXTURE(c, "pods-list-watch");
  LOAD_FIXTURE(e, "pods-list-expired-continue");
  ASSERT_EQ(e[1].status, 410);
  auto pages = pagesOf(c);
  // Page 1 of the compacted list, its continue token answered 410, then a whole list.
  std::vector<Reply> replies{replay::verbatim(e[0]), replay::verbatim(e[1])};
  for (const auto& p : pages) replies.push_back(replay::verbatim(p));
  Store<Pod> pods;
  Informer& inf = startWith(replies, &ApiClient::pods, pods);
  ASSERT_TRUE(runUntil([&] { return inf.synced() && requests() == pages.size() + 3; }));
  EXPECT_NE(request(1).param("continue"), "");
  EXPECT_EQ(request(2).param("continue"), "") << "the list restarts, not continues";
  EXPECT_EQ(inf.metrics().relists, 1u);
  EXPECT_EQ(pods.replaces, 1) << "the first page of the expired list is never delivered";
  EXPECT_EQ(pods.state.size(), itemCount(pages));
  EXPECT_EQ(request(pages.size() + 2).param("resourceVersion"), listVersion(pages.back()));
}

TEST_F(ReplayTest, TimeoutSecondsCloseRewatchesFromTheSameVersionWithoutBackoff) {
  LOAD_FIXTURE(c, "namespaces-list-quiet-watch");
  WatchFacts facts = factsOf(c[1]);
  Store<Namespace> namespaces;
  Informer& inf = startWith(verbatimAll(c), &ApiClient::namespaces, namespaces);
  ASSERT_TRUE(runUntil([&] { return requests() == 3; }));
  EXPECT_EQ(inf.metrics().watch_closes, 1u);
  EXPECT_EQ(facts.changes, 0);
  EXPECT_EQ(request(2).param("resourceVersion"), facts.last_rv.empty() ? listVersion(c[0]) : facts.last_rv);
  EXPECT_TRUE(clock_->sleeps.empty());
  for (int r = 0; r < static_cast<int>(ErrorReason::kCount); ++r) EXPECT_EQ(inf.metrics().errors[r], 0u) << r;
  ASSERT_NE(namespaces.find("fy-replay"), nullptr);
  EXPECT_NE(findLabel(namespaces.find("fy-replay")->labels, "ferry.io/dataplane"), nullptr);
  EXPECT_NE(namespaces.find("kube-system"), nullptr);
}

// Derived: the recorded watch response truncated in the middle of its second change event,
// then the TCP connection dropped without a TLS close.
TEST_F(ReplayTest, ConnectionCutMidEventKeepsOnlyWholeEvents) {
  LOAD_FIXTURE(c, "pods-list-watch");
  auto pages = pagesOf(c);
  auto lines = c.back().lines();
  WatchFacts facts = factsOf(c.back());
  ASSERT_GE(facts.changes, 2);
  // Keep every line up to the first change, and half of the next one.
  std::vector<std::string> kept;
  int changes = 0;
  std::string last_rv;
  for (const auto& line : lines) {
    bool change = line.find("\"type\":\"ADDED\"") != std::string::npos ||
                  line.find("\"type\":\"MODIFIED\"") != std::string::npos ||
                  line.find("\"type\":\"DELETED\"") != std::string::npos;
    if (change && changes == 1) {
      kept.push_back(line.substr(0, line.size() / 2));
      break;
    }
    kept.push_back(line);
    if (change) ++changes;
  }
  Reply cut = replay::rechunked(c.back(), kept, /*final_chunk=*/false);
  cut.cut = true;
  std::vector<Reply> replies = verbatimAll(pages);
  replies.push_back(cut);
  Store<Pod> pods;
  Informer& inf = startWith(replies, &ApiClient::pods, pods);
  ASSERT_TRUE(runUntil([&] { return requests() == pages.size() + 2; }));
  EXPECT_EQ(inf.metrics().error(ErrorReason::kStreamCut), 1u);
  EXPECT_EQ(inf.metrics().events, 1u) << "the half event is not applied";
  EXPECT_EQ(pods.applied, 1);
  EXPECT_EQ(inf.metrics().relists, 0u);
  // The re-watch resumes after the last whole event, after a back-off.
  EXPECT_EQ(request(pages.size() + 1).param("resourceVersion"), facts.change_rvs[0]);
  ASSERT_EQ(clock_->sleeps.size(), 1u);
  EXPECT_GE(clock_->sleeps[0], options_.backoff_initial / 2);
  EXPECT_LE(clock_->sleeps[0], options_.backoff_initial);
}

// Derived: one chunk per recorded event, each written in two halves, 20 ms apart.
TEST_F(ReplayTest, SlowChunksAreAssembledIntoEvents) {
  LOAD_FIXTURE(c, "pods-list-watch");
  auto pages = pagesOf(c);
  Reply slow = replay::rechunked(c.back(), c.back().lines());
  for (size_t i = 0; i < 40 && i * 50 < slow.bytes.size(); ++i) slow.segments.push_back(50);
  slow.gap = 20ms;
  std::vector<Reply> replies = verbatimAll(pages);
  replies.push_back(slow);
  Store<Pod> pods;
  Informer& inf = startWith(replies, &ApiClient::pods, pods);
  ASSERT_TRUE(runUntil([&] { return inf.metrics().watch_closes == 1; }));
  EXPECT_EQ(inf.metrics().events, static_cast<uint64_t>(factsOf(c.back()).changes));
  EXPECT_EQ(inf.metrics().bad_objects, 0u);
  EXPECT_EQ(label(*pods.find("fy-replay/fy-a"), "ferry.io/dataplane"), "disabled");
}

// Derived: a recorded error response (the 401's Status body) under a 429 and a 500 status
// line with Retry-After; the real server sends these under overload, not on demand.
TEST_F(ReplayTest, RetryAfterIsHonouredOn429And500) {
  LOAD_FIXTURE(c, "pods-list-watch");
  LOAD_FIXTURE(u, "unauthorized");
  auto pages = pagesOf(c);
  std::vector<Reply> replies{replay::withStatus(u[0], 429, "Too Many Requests", "Retry-After: 7\r\n"),
                             replay::withStatus(u[0], 500, "Internal Server Error", "Retry-After: 3\r\n"),
                             replay::withStatus(u[0], 503, "Service Unavailable", "")};
  for (const auto& p : pages) replies.push_back(replay::verbatim(p));
  Store<Pod> pods;
  Informer& inf = startWith(replies, &ApiClient::pods, pods);
  ASSERT_TRUE(runUntil([&] { return inf.synced(); }));
  EXPECT_EQ(inf.metrics().error(ErrorReason::kTooManyRequests), 1u);
  EXPECT_EQ(inf.metrics().error(ErrorReason::kServerError), 2u);
  ASSERT_EQ(clock_->sleeps.size(), 3u);
  EXPECT_EQ(clock_->sleeps[0], 7000ms);  // Retry-After beats the first back-off (<= 500 ms)
  EXPECT_EQ(clock_->sleeps[1], 3000ms);  // and the second (<= 1 s)
  // No Retry-After: the third back-off, doubled and jittered to [1, 2] s.
  EXPECT_GE(clock_->sleeps[2], 1000ms);
  EXPECT_LE(clock_->sleeps[2], 2000ms);
  EXPECT_EQ(pods.state.size(), itemCount(pages));
}

// Derived: bytes that are not JSON between two recorded events.
TEST_F(ReplayTest, BadJsonInAWatchDropsTheStreamAndResumesFromTheLastEvent) {
  LOAD_FIXTURE(c, "pods-list-watch");
  auto pages = pagesOf(c);
  auto lines = c.back().lines();
  WatchFacts facts = factsOf(c.back());
  std::vector<std::string> chunks;
  size_t changes = 0;
  for (const auto& line : lines) {
    chunks.push_back(line);
    if (line.find("\"BOOKMARK\"") == std::string::npos && ++changes == 1) chunks.push_back("{\"type\": ADDED, oops}\n");
  }
  std::vector<Reply> replies = verbatimAll(pages);
  replies.push_back(replay::rechunked(c.back(), chunks));
  Store<Pod> pods;
  Informer& inf = startWith(replies, &ApiClient::pods, pods);
  ASSERT_TRUE(runUntil([&] { return requests() == pages.size() + 2; }));
  EXPECT_EQ(inf.metrics().error(ErrorReason::kBadJson), 1u);
  EXPECT_EQ(inf.metrics().events, 1u);
  EXPECT_EQ(request(pages.size() + 1).param("resourceVersion"), facts.change_rvs[0]);
  EXPECT_EQ(clock_->sleeps.size(), 1u);
}

// The recorded 401 (the real server refusing a token it does not know) until the client
// sends the rotated token. The file is rewritten in place with the same size and mtime, so
// only the 401 can tell the client to read it again.
TEST_F(ReplayTest, RotatedTokenIsReReadAfter401AndTheRequestRetriedOnce) {
  LOAD_FIXTURE(c, "pods-list-watch");
  LOAD_FIXTURE(u, "unauthorized");
  ASSERT_EQ(u[0].status, 401);
  auto pages = pagesOf(c);
  std::string dir = ::testing::TempDir();
  std::string token_file = dir + "/fy-replay-token";
  { std::ofstream(token_file) << "fy-token-1\n"; }
  struct stat before {};
  ASSERT_EQ(::stat(token_file.c_str(), &before), 0);
  size_t page = 0;
  server_.respond([&](size_t, const replay::Request& req) {
    if (req.authorization != "Bearer fy-token-2") return replay::verbatim(u[0]);
    if (page < pages.size()) return replay::verbatim(pages[page++]);
    Reply hang;
    hang.hang = true;
    return hang;
  });
  ClusterAccess access;
  access.token_file = token_file;
  start(access);
  Store<Pod> pods;
  Informer& inf = client_->pods(pods);
  // The kubelet rotates the token after the client read it: same size, same mtime.
  { std::ofstream(token_file) << "fy-token-2\n"; }
  timespec times[2] = {before.st_atim, before.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, token_file.c_str(), times, 0), 0);
  client_->start();
  ASSERT_TRUE(runUntil([&] { return inf.synced(); }));
  EXPECT_EQ(request(0).authorization, "Bearer fy-token-1");
  EXPECT_EQ(request(1).authorization, "Bearer fy-token-2");
  EXPECT_EQ(inf.metrics().token_reloads, 1u);
  EXPECT_EQ(inf.metrics().error(ErrorReason::kUnauthorized), 0u) << "the retry succeeded: no error";
  EXPECT_TRUE(clock_->sleeps.empty());
  EXPECT_EQ(pods.state.size(), itemCount(pages));
  std::remove(token_file.c_str());
}

TEST_F(ReplayTest, TokenThatStaysRefusedIsAnErrorWithBackoff) {
  LOAD_FIXTURE(u, "unauthorized");
  script({replay::verbatim(u[0]), replay::verbatim(u[0])});
  std::string token_file = ::testing::TempDir() + "/fy-replay-token-refused";
  { std::ofstream(token_file) << "fy-token-1\n"; }
  ClusterAccess access;
  access.token_file = token_file;
  start(access);
  Store<Pod> pods;
  Informer& inf = client_->pods(pods);
  client_->start();
  ASSERT_TRUE(runUntil([&] { return requests() == 3; }));
  EXPECT_EQ(inf.metrics().error(ErrorReason::kUnauthorized), 1u);
  EXPECT_EQ(clock_->sleeps.size(), 1u);
  EXPECT_FALSE(inf.synced());
  EXPECT_EQ(inf.stateAge(), Millis::max());
  std::remove(token_file.c_str());
}

// Derived: recorded events with one field ferry reads given the wrong type, and one object
// without a name; plus unknown fields added everywhere.
std::string mutateObject(const std::string& line, const std::function<void(json::object&)>& f) {
  json::value ev = json::parse(line);
  f(ev.at("object").as_object());
  return json::serialize(ev) + "\n";
}

TEST_F(ReplayTest, MalformedObjectIsSkippedNeverHalfApplied) {
  LOAD_FIXTURE(c, "pods-list-watch");
  auto pages = pagesOf(c);
  std::vector<std::string> chunks;
  std::string broken_key;
  for (const auto& line : c.back().lines()) {
    if (line.find("\"MODIFIED\"") != std::string::npos && line.find("\"fy-a\"") != std::string::npos &&
        broken_key.empty()) {
      // The relabel of fy-a, with status.podIPs of the wrong type: nothing of it applies.
      chunks.push_back(mutateObject(line, [](json::object& o) { o["status"].as_object()["podIPs"] = "10.0.0.1"; }));
      broken_key = "fy-replay/fy-a";
      continue;
    }
    chunks.push_back(line);
  }
  ASSERT_FALSE(broken_key.empty()) << "the recording should relabel fy-a";
  // And, first of all, a copy of the first change whose object has no name.
  for (const auto& line : c.back().lines()) {
    if (line.find("\"BOOKMARK\"") != std::string::npos) continue;
    chunks.insert(chunks.begin(),
                  mutateObject(line, [](json::object& o) { o["metadata"].as_object().erase("name"); }));
    break;
  }
  std::vector<Reply> replies = verbatimAll(pages);
  replies.push_back(replay::rechunked(c.back(), chunks));
  Store<Pod> pods;
  Informer& inf = startWith(replies, &ApiClient::pods, pods);
  ASSERT_TRUE(runUntil([&] { return inf.metrics().watch_closes == 1; }));
  EXPECT_EQ(inf.metrics().bad_objects, 2u);
  // fy-a kept its state from before the broken event: labels and IPs as listed.
  const Pod* a = pods.find("fy-replay/fy-a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(label(*a, "ferry.io/dataplane"), "enabled");
  EXPECT_EQ(a->pod_ips.size(), 1u);
  EXPECT_EQ(label(*pods.find("fy-replay/fy-b"), "fy-step"), "1") << "later events still apply";
}

TEST_F(ReplayTest, UnknownFieldsAreIgnored) {
  LOAD_FIXTURE(c, "pods-list-watch");
  auto pages = pagesOf(c);
  std::vector<std::string> chunks;
  for (const auto& line : c.back().lines()) {
    json::value ev = json::parse(line);
    ev.as_object()["fyUnknownEventField"] = json::array{1, 2};
    auto& o = ev.at("object").as_object();
    o["fyUnknownField"] = json::object{{"nested", json::array{"x", 2, nullptr}}};
    if (o.contains("spec")) o["spec"].as_object()["fyFutureSpec"] = true;
    chunks.push_back(json::serialize(ev) + "\n");
  }
  uint64_t bad = 0;
  std::string plain = podsAfterWatchClose(verbatimAll(c), options_, bad);
  std::vector<Reply> replies = verbatimAll(pages);
  replies.push_back(replay::rechunked(c.back(), chunks));
  std::string with_unknown = podsAfterWatchClose(replies, options_, bad);
  EXPECT_EQ(bad, 0u);
  EXPECT_EQ(with_unknown, plain);
  EXPECT_NE(plain.find("fy-replay/fy-a"), std::string::npos);
}

TEST_F(ReplayTest, EndpointSlicesFallBackToV1beta1WhereV1IsNotServed) {
  LOAD_FIXTURE(c, "endpointslices-v1beta1");
  ASSERT_EQ(c[0].status, 404);
  Store<EndpointSlice> slices;
  Informer& inf = startWith(verbatimAll(c), &ApiClient::endpointSlices, slices);
  ASSERT_TRUE(runUntil([&] { return requests() == 4; }));
  EXPECT_EQ(request(0).path(), "/apis/discovery.k8s.io/v1/endpointslices");
  EXPECT_EQ(request(1).path(), "/apis/discovery.k8s.io/v1beta1/endpointslices");
  EXPECT_EQ(request(2).path(), "/apis/discovery.k8s.io/v1beta1/endpointslices");
  EXPECT_EQ(request(3).path(), "/apis/discovery.k8s.io/v1beta1/endpointslices");
  EXPECT_EQ(inf.metrics().error(ErrorReason::kNotFound), 0u) << "the probe is not an error";
  EXPECT_TRUE(clock_->sleeps.empty());
  const EndpointSlice* echo = nullptr;
  for (const auto& [k, s] : slices.state) {
    if (s.service_name == "fy-echo") echo = &s;
  }
  ASSERT_NE(echo, nullptr);
  EXPECT_EQ(echo->address_type, "IPv4");
  std::set<std::string> pods_behind;
  for (const auto& e : echo->endpoints) {
    EXPECT_EQ(e.addresses.size(), 1u);
    EXPECT_FALSE(e.node_name.empty()) << "v1beta1 names the node in topology";
    pods_behind.insert(e.pod_name);
  }
  EXPECT_TRUE(pods_behind.count("fy-a") && pods_behind.count("fy-b"));
  std::set<std::string> ports;
  for (const auto& p : echo->ports) ports.insert(p.name + ":" + std::to_string(p.port) + "/" + p.protocol);
  EXPECT_EQ(ports, (std::set<std::string>{"http:8080/TCP", "raw:9000/TCP"}));
}

TEST_F(ReplayTest, OwnDaemonSetIsListedByNameAndItsStateIsNotReadiness) {
  // The grant is missing (the recorded 401 of a refused token stands in for a refusal):
  // the DaemonSet informer fails, and ferryd's state is not older for it.
  LOAD_FIXTURE(u, "unauthorized");
  script({replay::verbatim(u[0])});
  ClusterAccess access;
  access.token = "fy-token";
  start(access);
  Store<DaemonSet> daemonsets;
  Informer& inf = client_->daemonSet("ferry-system", "ferry", daemonsets);
  client_->start();
  ASSERT_TRUE(runUntil([&] { return inf.metrics().error(ErrorReason::kUnauthorized) == 1; }));
  EXPECT_EQ(request(0).path(), "/apis/apps/v1/namespaces/ferry-system/daemonsets");
  EXPECT_EQ(request(0).param("fieldSelector"), "metadata.name%3Dferry");
  EXPECT_EQ(request(0).param("limit"), "500");
  EXPECT_FALSE(inf.synced());
  EXPECT_EQ(inf.stateAge(), Millis::max());
  EXPECT_EQ(client_->stateAge(), Millis{0}) << "only the workloads' informers age the state";
}

TEST_F(ReplayTest, ServicesKeepClusterIpsAndNamedTargetPorts) {
  LOAD_FIXTURE(c, "services-list-watch");
  Store<Service> services;
  Informer& inf = startWith(verbatimAll(c), &ApiClient::services, services);
  ASSERT_TRUE(runUntil([&] { return inf.metrics().watch_closes == 1; }));
  const Service* echo = services.find("fy-replay/fy-echo");
  ASSERT_NE(echo, nullptr);
  ASSERT_EQ(echo->cluster_ips.size(), 1u);
  ASSERT_EQ(echo->ports.size(), 2u);
  EXPECT_EQ(echo->ports[0].port, 80);
  EXPECT_EQ(echo->ports[0].target_port_name, "http");
  EXPECT_EQ(echo->ports[1].target_port, 9000);
  EXPECT_EQ(echo->ports[1].protocol, "TCP");
  const Service* api = services.find("default/kubernetes");
  ASSERT_NE(api, nullptr);
  EXPECT_EQ(api->ports[0].port, 443);
}

// Derived: the recorded watch's header, then nothing at all.
TEST_F(ReplayTest, SilentWatchIsReplaced) {
  LOAD_FIXTURE(c, "namespaces-list-quiet-watch");
  options_.watch_timeout = 1s;
  options_.silence_deadline = 1500ms;
  script({replay::verbatim(c[0]), replay::headerThenSilence(c[1])});
  start();
  Store<Namespace> namespaces;
  Informer& inf = client_->namespaces(namespaces);
  client_->start();
  ASSERT_TRUE(runUntil([&] { return requests() == 3; }));
  EXPECT_EQ(inf.metrics().error(ErrorReason::kSilence), 1u);
  EXPECT_EQ(request(2).param("resourceVersion"), listVersion(c[0]));
  EXPECT_EQ(clock_->sleeps.size(), 1u);
}

// Derived: the list, then 500s (the recorded 401 body under a 500 line) for every watch.
// The state keeps serving; only its age grows, for readiness to judge.
TEST_F(ReplayTest, StateKeepsServingWhileItsAgeGrows) {
  LOAD_FIXTURE(c, "pods-list-watch");
  LOAD_FIXTURE(u, "unauthorized");
  auto pages = pagesOf(c);
  std::vector<Reply> replies = verbatimAll(pages);
  for (int i = 0; i < 5; ++i) replies.push_back(replay::withStatus(u[0], 500, "Internal Server Error", ""));
  Store<Pod> pods;
  Informer& inf = startWith(replies, &ApiClient::pods, pods);
  ASSERT_TRUE(runUntil([&] { return requests() == pages.size() + 6; }));
  EXPECT_EQ(inf.metrics().error(ErrorReason::kServerError), 5u);
  EXPECT_EQ(pods.replaces, 1);
  EXPECT_EQ(pods.state.size(), itemCount(pages));
  Millis slept{0};
  for (Millis s : clock_->sleeps) slept += s;
  EXPECT_EQ(inf.stateAge(), slept);
  EXPECT_EQ(client_->stateAge(), slept);
  // Doubling back-off, jittered: each within [base/2, base].
  for (size_t i = 0; i < clock_->sleeps.size(); ++i) {
    Millis base = std::min(options_.backoff_max, options_.backoff_initial * (1 << i));
    EXPECT_GE(clock_->sleeps[i], base / 2) << i;
    EXPECT_LE(clock_->sleeps[i], base) << i;
  }
  std::string text = telemetry::textOf(*client_);
  EXPECT_NE(text.find("ferry_k8s_errors_total{resource=\"pods\",reason=\"server_error\"} 5"), std::string::npos);
  EXPECT_NE(text.find("ferry_k8s_lists_total{resource=\"pods\"} 1"), std::string::npos);
}

// A server that accepts and never answers: the request times out, backs off, and the next
// attempt (the recorded list) succeeds.
TEST_F(ReplayTest, ServerThatNeverAnswersTimesOutAndIsRetried) {
  LOAD_FIXTURE(c, "pods-list-watch");
  options_.request_timeout = 300ms;
  Reply silent;
  silent.hang = true;
  std::vector<Reply> replies{silent};
  for (const auto& p : pagesOf(c)) replies.push_back(replay::verbatim(p));
  Store<Pod> pods;
  Informer& inf = startWith(replies, &ApiClient::pods, pods);
  ASSERT_TRUE(runUntil([&] { return inf.synced(); }));
  EXPECT_EQ(inf.metrics().error(ErrorReason::kTimeout), 1u);
  EXPECT_EQ(clock_->sleeps.size(), 1u);
  EXPECT_EQ(pods.state.size(), itemCount(pagesOf(c)));
}

// The API server's certificate is checked: against the CA given (another CA: no request is
// ever sent), and against the host dialled (here the DNS name localhost, in its SAN).
TEST_F(ReplayTest, ServerCertificateIsVerifiedAgainstTheCaAndTheHost) {
  LOAD_FIXTURE(c, "pods-list-watch");
  {
    asio::io_context io;
    replay::ReplayServer other(io);  // a second self-signed certificate: the wrong CA
    ClusterAccess access;
    access.server = server_.url();
    access.ca_pem = other.caPem();
    auto client = ApiClient::create(io_, access, options_, std::make_unique<FakeClock>(io_));
    ASSERT_TRUE(client.ok());
    Store<Pod> pods;
    Informer& inf = (*client)->pods(pods);
    (*client)->start();
    ASSERT_TRUE(runUntil([&] { return inf.metrics().error(ErrorReason::kConnect) >= 1; }));
    EXPECT_FALSE(inf.synced());
    EXPECT_EQ(requests(), 0u) << "nothing is sent to a server that failed verification";
    (*client)->stop();
  }
  Store<Pod> pods;
  script(verbatimAll(pagesOf(c)));
  ClusterAccess access;
  std::string url = server_.url();
  access.server = "https://localhost" + url.substr(url.rfind(':'));
  access.ca_pem = server_.caPem();
  auto client = ApiClient::create(io_, access, options_, std::make_unique<FakeClock>(io_));
  ASSERT_TRUE(client.ok());
  Informer& inf = (*client)->pods(pods);
  (*client)->start();
  ASSERT_TRUE(runUntil([&] { return inf.synced(); }));
  (*client)->stop();
}

// policies-crds-absent, authorizationpolicies-list-watch: Istio's AuthorizationPolicy kind as
// ferryd's optional informer meets it (proxy/policy/kubernetes.h takes these paths).
const std::vector<std::string> kPolicyPaths = {"/apis/security.istio.io/v1/authorizationpolicies",
                                               "/apis/security.istio.io/v1beta1/authorizationpolicies"};

// The objects of a recorded LIST body, by "<namespace>/<name>".
std::map<std::string, json::value> listItems(const Recorded& list) {
  std::map<std::string, json::value> out;
  json::value body = json::parse(list.body);
  for (const json::value& item : body.at("items").as_array()) {
    const auto& md = item.at("metadata");
    out[absl::StrCat(std::string(md.at("namespace").as_string()), "/", std::string(md.at("name").as_string()))] = item;
  }
  return out;
}

// Remembers how many objects each replace() left.
struct CustomObjects : Store<CustomObject> {
  void replace(std::vector<CustomObject> objects) override {
    Store<CustomObject>::replace(std::move(objects));
    sizes.push_back(state.size());
  }
  std::vector<size_t> sizes;
};

// Before the CRD: v1 and v1beta1 answer 404 (the real server's plain-text 404). The informer
// delivers an empty state, counts as synced and current, logs no error, and looks again one
// backoff_max later -- by then the CRD is installed (the LIST and WATCH recorded after it).
TEST_F(ReplayTest, OptionalResourceWithoutItsCrdIsAnEmptyCurrentStateAndIsLookedForAgain) {
  LOAD_FIXTURE(absent, "policies-crds-absent");
  LOAD_FIXTURE(c, "authorizationpolicies-list-watch");
  ASSERT_EQ(absent[0].status, 404);
  ASSERT_EQ(absent[1].status, 404);
  script({replay::verbatim(absent[0]), replay::verbatim(absent[1]), replay::verbatim(c[0]), replay::verbatim(c[1])});
  start();
  CustomObjects policies;
  Millis age_while_absent{-1}, client_age_while_absent{-1};
  Informer* inf = nullptr;
  clock_->on_sleep = [&](Millis) {
    // The pause before looking again (the fake clock has moved by it already).
    age_while_absent = inf->stateAge();
    client_age_while_absent = client_->stateAge();
  };
  inf = &client_->customObjects("authorizationpolicies", kPolicyPaths, policies, /*optional=*/true);
  client_->start();
  ASSERT_TRUE(runUntil([&] { return inf->metrics().watch_closes == 1; }));

  EXPECT_EQ(request(0).path(), kPolicyPaths[0]);
  EXPECT_EQ(request(1).path(), kPolicyPaths[1]);
  EXPECT_EQ(request(2).path(), kPolicyPaths[0]) << "looked for again from the preferred version";
  EXPECT_EQ(request(3).param("watch"), "1");
  ASSERT_EQ(clock_->sleeps.size(), 1u);
  EXPECT_EQ(clock_->sleeps[0], options_.backoff_max);
  EXPECT_EQ(policies.sizes, (std::vector<size_t>{0, 4})) << "an empty state, then the four listed objects";
  EXPECT_EQ(age_while_absent, options_.backoff_max)
      << "absence is a current state, as of the pause's start: readiness does not wait for the CRD";
  EXPECT_EQ(client_age_while_absent, options_.backoff_max);
  for (int r = 0; r < static_cast<int>(ErrorReason::kCount); ++r) EXPECT_EQ(inf->metrics().errors[r], 0u) << r;
  EXPECT_EQ(inf->metrics().lists, 1u) << "the absence is not a LIST";

  // Each object whole, as the server sent it; the watch's changes applied.
  auto listed = listItems(c[0]);
  ASSERT_EQ(listed.size(), 4u);
  WatchFacts facts = factsOf(c[1]);
  EXPECT_EQ(inf->metrics().events, static_cast<uint64_t>(facts.changes));
  const CustomObject* beta = policies.find("fy-replay/fy-beta-written");
  ASSERT_NE(beta, nullptr);
  EXPECT_EQ(json::parse(beta->json), listed["fy-replay/fy-beta-written"]);
  EXPECT_NE(policies.find("fy-replay/fy-allow-client"), nullptr);
  EXPECT_NE(policies.find("fy-replay/fy-deny-range"), nullptr);
  EXPECT_EQ(policies.find("fy-replay/fy-bad-cidr"), nullptr) << "deleted during the watch";
  EXPECT_EQ(policies.find("fy-replay/fy-added"), nullptr) << "added and deleted during the watch";
  std::string text = telemetry::textOf(*client_);
  EXPECT_NE(text.find("ferry_k8s_lists_total{resource=\"authorizationpolicies\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find(absl::StrCat("ferry_k8s_events_total{resource=\"authorizationpolicies\"} ", facts.changes, "\n")),
            std::string::npos);
  EXPECT_NE(text.find("ferry_k8s_state_age_seconds{resource=\"authorizationpolicies\"} 0\n"), std::string::npos);
}

// An old Istio's CRD (v1beta1 only): v1 answers 404 and v1beta1 serves. Then the CRD is
// deleted under the open watch: the server sends the object's DELETED and ends the watch, the
// next WATCH is a 404, and a LIST on both versions (404s) leaves an empty state.
TEST_F(ReplayTest, OptionalResourceFallsBackToV1beta1AndItsCrdDeletionEmptiesTheState) {
  LOAD_FIXTURE(old, "authorizationpolicies-v1beta1-only");
  LOAD_FIXTURE(absent, "policies-crds-absent");
  ASSERT_EQ(old.size(), 4u);
  ASSERT_EQ(old[0].status, 404);
  ASSERT_EQ(old[3].status, 404);
  script({replay::verbatim(old[0]), replay::verbatim(old[1]), replay::verbatim(old[2]), replay::verbatim(old[3]),
          replay::verbatim(absent[0]), replay::verbatim(absent[1])});
  start();
  CustomObjects policies;
  Informer& inf = client_->customObjects("authorizationpolicies", kPolicyPaths, policies, true);
  client_->start();
  ASSERT_TRUE(runUntil([&] { return !clock_->sleeps.empty(); }));
  EXPECT_EQ(policies.sizes, (std::vector<size_t>{1, 0})) << "fy-legacy listed on v1beta1, then the empty state";
  EXPECT_EQ(policies.applied, 1) << "the DELETED the server sent as the CRD went";
  EXPECT_EQ(request(1).path(), kPolicyPaths[1]);
  EXPECT_EQ(request(2).path(), kPolicyPaths[1]) << "watched where it was listed";
  EXPECT_EQ(request(2).param("watch"), "1");
  EXPECT_EQ(request(3).param("watch"), "1") << "the server ended the watch: watched again";
  EXPECT_EQ(request(4).path(), kPolicyPaths[0]) << "the 404 on the watch: listed again, preferred version first";
  EXPECT_EQ(request(5).path(), kPolicyPaths[1]);
  EXPECT_EQ(inf.metrics().watch_closes, 1u);
  EXPECT_EQ(inf.metrics().relists, 1u);
  EXPECT_EQ(inf.metrics().error(ErrorReason::kNotFound), 0u);
  EXPECT_TRUE(inf.synced());
  EXPECT_EQ(inf.stateAge(), options_.backoff_max) << "current as the pause began";
  EXPECT_EQ(clock_->sleeps, std::vector<Millis>{options_.backoff_max});
}

// The same 404s for a resource that is not optional: an error, counted, with back-off; no
// state is invented and readiness keeps waiting.
TEST_F(ReplayTest, RequiredResourceThatIsNotServedIsAnError) {
  LOAD_FIXTURE(absent, "policies-crds-absent");
  script({replay::verbatim(absent[0]), replay::verbatim(absent[1])});
  start();
  Store<CustomObject> policies;
  Informer& inf = client_->customObjects("authorizationpolicies", kPolicyPaths, policies, /*optional=*/false);
  client_->start();
  ASSERT_TRUE(runUntil([&] { return inf.metrics().error(ErrorReason::kNotFound) == 1; }));
  EXPECT_FALSE(inf.synced());
  EXPECT_EQ(policies.replaces, 0);
  EXPECT_EQ(client_->stateAge(), Millis::max());
  ASSERT_EQ(client_->unsynced().size(), 1u);
  EXPECT_EQ(client_->unsynced()[0], &inf);
  EXPECT_NE(inf.lastError().find("not_found"), std::string::npos) << inf.lastError();
}

// stop() closes the open watch at once; the client can then be destroyed while the
// io_context still runs (ferryd's control thread outlives it).
TEST_F(ReplayTest, StopEndsTheOpenWatchAndTheClientCanGo) {
  LOAD_FIXTURE(c, "pods-list-watch");
  auto pages = pagesOf(c);
  std::vector<Reply> replies = verbatimAll(pages);
  replies.push_back(replay::headerThenSilence(c.back()));
  Store<Pod> pods;
  Informer& inf = startWith(replies, &ApiClient::pods, pods);
  ASSERT_TRUE(runUntil([&] { return inf.metrics().watches == 1; }));
  client_->stop();
  client_.reset();
  io_.restart();
  io_.run_for(50ms);
  EXPECT_EQ(requests(), pages.size() + 1) << "nothing after stop";
  EXPECT_EQ(pods.replaces, 1);
}

// TokenReview (ferry-ca): not recorded (the recorder makes GETs only); the answer's body is
// the shape a 1.20 API server returns (tests/unit/k8s_decode_test.cc), framed by hand.
Reply handMade(int status, const std::string& reason, const std::string& body) {
  Reply r;
  r.bytes = absl::StrCat("HTTP/1.1 ", status, " ", reason, "\r\nContent-Type: application/json\r\nContent-Length: ",
                         body.size(), "\r\n\r\n", body);
  return r;
}

TEST_F(ReplayTest, TokenReviewPostsWithTheClientsOwnTokenAndDecodesTheAnswer) {
  script({handMade(201, "Created", R"({"kind":"TokenReview","apiVersion":"authentication.k8s.io/v1",
      "metadata":{"creationTimestamp":null},"spec":{"token":"t","audiences":["ferry-ca"]},
      "status":{"authenticated":true,"user":{"username":"system:serviceaccount:ferry-system:ferryd","uid":"u1",
      "groups":["system:serviceaccounts"],"extra":{"authentication.kubernetes.io/pod-name":["ferryd-abcde"],
      "authentication.kubernetes.io/pod-uid":["p1"]}},"audiences":["ferry-ca"]}})"),
          handMade(403, "Forbidden", R"({"kind":"Status","apiVersion":"v1","status":"Failure","message":"tokenreviews.authentication.k8s.io is forbidden","reason":"Forbidden","code":403})")});
  ClusterAccess access;
  access.token = "ferry-ca-own-token";
  start(access);
  std::optional<absl::StatusOr<TokenReviewStatus>> first, second;
  asio::co_spawn(io_, [&]() -> asio::awaitable<void> {
    std::vector<std::string> audiences = {"ferry-ca"};
    first = co_await client_->reviewToken("caller-token", audiences);
    second = co_await client_->reviewToken("caller-token", audiences);
  }, asio::detached);
  ASSERT_TRUE(runUntil([&] { return second.has_value(); }));
  ASSERT_TRUE(first->ok()) << first->status();
  EXPECT_TRUE((*first)->authenticated);
  EXPECT_EQ((*first)->pod_names, std::vector<std::string>{"ferryd-abcde"});
  ASSERT_GE(server_.requests().size(), 1u);
  EXPECT_EQ(server_.requests()[0].target, "/apis/authentication.k8s.io/v1/tokenreviews");
  EXPECT_EQ(server_.requests()[0].authorization, "Bearer ferry-ca-own-token") << "the client's own credentials";
  ASSERT_FALSE(second->ok());
  EXPECT_NE(second->status().message().find("forbidden"), std::string::npos) << second->status();
  EXPECT_EQ(client_->tokenReviewMetrics().error(ErrorReason::kForbidden), 1u);
  EXPECT_EQ(client_->tokenReviewMetrics().events.load(), 1u);
}

}  // namespace
}  // namespace ferry::k8s
