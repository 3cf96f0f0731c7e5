// Admission limits and memory (issue 12, finding 8 and the memory items): silent
// connections on 15008 cost little and are capped per source, a legitimate client is
// served while they are held, the operator endpoints answer while the data plane is at its
// descriptor cap, and RSS comes back after a flood. Where RSS or a descriptor limit
// matters, ferryd runs as a real child process (VmRSS of /proc/<pid>/status, a lowered
// RLIMIT_NOFILE); the rest runs in-process.
#include <arpa/inet.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <atomic>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include <gtest/gtest.h>
#include <openssl/ssl.h>

#include <boost/json.hpp>

#include "proxy/identity/dir_cert_source.h"
#include "proxy/identity/tls_context.h"
#include "tests/integration/h2_frames.h"
#include "tests/integration/loopback_lab.h"

namespace ferry::testing {
namespace {

constexpr uint16_t kAppPort = 8080;
// The bound for a legitimate client while 2,000 silent connections are held, with
// slack for a loaded two-core CI machine (the old code took 7.3 s with a lowered limit).
constexpr auto kServedWithin = std::chrono::milliseconds(100);
constexpr auto kSlack = 5;
// The kubelet's default probe timeout: an operator endpoint slower than this is down.
constexpr auto kProbeTimeout = std::chrono::seconds(1);
// The sanitizers' allocators hold freed memory (ASan's quarantine, TSan's shadow) and give
// nothing back the way glibc's malloc_trim does, and ferryd runs with them in the asan and
// tsan presets: RSS during and after a flood is asserted in the plain build (make test)
// and only measured and printed under make test-asan / test-tsan.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kAllocatorGivesMemoryBack = false;
#else
constexpr bool kAllocatorGivesMemoryBack = true;
#endif

// A blocking TCP connection from `src_ip` (any port) to dst_ip:port; -1 with errno kept when
// it fails.
int connectFrom(const std::string& src_ip, const std::string& dst_ip, uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  auto src = ipv4Address(src_ip, 0);
  auto dst = ipv4Address(dst_ip, port);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&src), sizeof(src)) != 0 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&dst), sizeof(dst)) != 0) {
    int err = errno;
    ::close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

// ferryd as a child process: its own RSS, its own descriptor limit.
class FerrydProcess {
 public:
  // `cgroup_procs`: a cgroup's cgroup.procs the child joins before it runs ferryd.
  FerrydProcess(const LabFiles& files, const std::string& node, const std::string& extra = "",
                rlim_t nofile = 0, const std::string& cgroup_procs = "")
      : ip_(node == "n1" ? "127.0.1.1" : "127.0.2.1") {
    std::string path = files.dir() + "/" + node + "-child.yaml";
    std::ofstream(path) << files.configYaml(node, extra);
    std::string binary = FERRYD_BINARY;
    std::vector<char*> argv = {binary.data(), const_cast<char*>("--config"), path.data(), nullptr};
    pid_ = ::fork();
    if (pid_ == 0) {
      if (nofile != 0) {
        rlimit rl{nofile, nofile};
        ::setrlimit(RLIMIT_NOFILE, &rl);
      }
      if (!cgroup_procs.empty()) {
        std::ofstream procs(cgroup_procs);
        procs << ::getpid() << std::flush;
        if (!procs) ::_exit(126);
      }
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ready_ = waitFor([&] { return httpGet(ip_, 15021, "/healthz/ready") == 200; }, std::chrono::seconds(20));
  }
  ~FerrydProcess() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
  bool ready() const { return ready_; }
  pid_t pid() const { return pid_; }
  const std::string& ip() const { return ip_; }

  long rssKb() const {
    std::ifstream in("/proc/" + std::to_string(pid_) + "/status");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("VmRSS:", 0) == 0) return std::strtol(line.c_str() + 6, nullptr, 10);
    }
    return -1;
  }
  size_t openDescriptors() const {
    std::error_code ec;
    size_t n = 0;
    for (auto it = std::filesystem::directory_iterator("/proc/" + std::to_string(pid_) + "/fd", ec);
         !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
      ++n;
    }
    return n;
  }
  // A value from its /metrics; -1 when absent or unreachable.
  double metric(const std::string& series) const {
    std::string body;
    if (httpGet(ip_, 15020, "/metrics", &body) != 200) return -1;
    auto pos = body.find("\n" + series + " ");
    if (pos == std::string::npos) return -1;
    return std::strtod(body.c_str() + pos + series.size() + 2, nullptr);
  }

 private:
  std::string ip_;
  pid_t pid_ = -1;
  bool ready_ = false;
};

// The k-th address of a flood: 127.0.3.1 to 127.0.3.250, then 127.0.20.1 onwards (none of
// them a lab pod's, 127.0.{1,2,4}.x).
std::string floodAddress(size_t k) {
  if (k < 250) return "127.0.3." + std::to_string(1 + k);
  return "127.0." + std::to_string(20 + (k - 250) / 250) + "." + std::to_string(1 + (k - 250) % 250);
}

// `n` connections to ip:port that never send a byte, from `sources` flood addresses.
// ferryd may refuse one so fast that its RST reaches the socket before connect() returns:
// connect() then says ECONNRESET. Those are counted in `reset_at_connect` (when given) and
// closed; any other failure fails the test.
std::vector<int> silentConnections(size_t n, size_t sources, const std::string& ip, uint16_t port,
                                   size_t* reset_at_connect = nullptr) {
  std::vector<int> fds;
  size_t per_source = (n + sources - 1) / sources;
  for (size_t i = 0; i < n; ++i) {
    int fd = connectFrom(floodAddress(i / per_source), ip, port);
    if (fd < 0 && errno == ECONNRESET) {
      if (reset_at_connect != nullptr) ++*reset_at_connect;
      continue;
    }
    if (fd < 0) {
      ADD_FAILURE() << "silent connection " << i << ": " << std::strerror(errno);
      break;
    }
    fds.push_back(fd);
  }
  return fds;
}

// ferryd's /config_dump at `ip`, parsed; null (and a failure) when it did not answer JSON.
boost::json::value configDump(const std::string& ip) {
  std::string body;
  if (httpGet(ip, 15000, "/config_dump", &body) != 200) {
    ADD_FAILURE() << "no /config_dump from " << ip;
    return nullptr;
  }
  boost::system::error_code ec;
  auto parsed = boost::json::parse(body, ec);
  if (ec) {
    ADD_FAILURE() << "/config_dump is not JSON: " << body.substr(0, 200);
    return nullptr;
  }
  return parsed;
}

void closeAll(std::vector<int>& fds) {
  for (int fd : fds) ::close(fd);
  fds.clear();
}

// A legitimate client through n1: a captured connection from pod `src` to s1's echo
// server; the time until its first bytes came back, or nullopt when it was not served.
std::optional<std::chrono::milliseconds> timeToServe(const std::string& src = "127.0.1.10") {
  auto start = Clock::now();
  int fd = connectOutbound(src, "127.0.2.10", kAppPort);
  if (fd < 0) return std::nullopt;
  setRecvTimeout(fd, std::chrono::seconds(15));
  char buf[4];
  bool ok = sendAll(fd, "ping", 4) && recvExact(fd, buf, 4) && std::memcmp(buf, "ping", 4) == 0;
  auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
  ::close(fd);
  if (!ok) return std::nullopt;
  return took;
}

// How many of `fds` were reset by the server, waiting (bounded) until `expected` of them
// have something to report; the others are left alone.
size_t countReset(const std::vector<int>& fds, size_t expected) {
  std::vector<pollfd> polls;
  for (int fd : fds) polls.push_back({fd, POLLIN, 0});
  waitFor([&] {
    size_t ready = 0;
    ::poll(polls.data(), polls.size(), 0);
    for (auto& p : polls) ready += p.revents != 0 ? 1 : 0;
    return ready >= expected;
  }, std::chrono::seconds(5));
  size_t reset = 0;
  for (int fd : fds) {
    char c;
    ssize_t n = ::recv(fd, &c, 1, MSG_DONTWAIT);
    reset += n < 0 && errno == ECONNRESET ? 1 : 0;
  }
  return reset;
}

TEST(AdmissionTest, LegitimateClientIsServedWithin100msWhile2000SilentConnectionsAreHeld) {
  LabFiles files;
  Node n1(files, "n1");
  FerrydProcess n2(files, "n2");
  ASSERT_TRUE(n1.ok() && n2.ready());
  AppServer app("127.0.2.10", kAppPort, AppServer::echo);
  ASSERT_TRUE(timeToServe().has_value());  // warm: the tunnel and the app's first accept
  long baseline = n2.rssKb();

  // Eight sources, 250 each: under the per-source limit, so all 2,000 are held.
  auto silent = silentConnections(2000, 8, "127.0.2.10", 15008);
  ASSERT_EQ(silent.size(), 2000u);
  // Accepted by ferryd (a descriptor each), on the old code as on the new.
  ASSERT_TRUE(waitFor([&] { return n2.openDescriptors() >= 2000; })) << n2.openDescriptors();
  // Every one held as a pending handshake. (The descriptor count includes ferryd's own, so
  // it can reach 2,000 while the last few connections are still being accepted: wait for
  // the gauge, found on a CI run with 1,997.)
  EXPECT_TRUE(waitFor([&] { return n2.metric("ferry_pending_handshakes{listener=\"hbone\"}") == 2000; }))
      << n2.metric("ferry_pending_handshakes{listener=\"hbone\"}");
  long during = n2.rssKb();
  // From c2, whose pool key is new: a new HBONE connection to 15008 and its handshake.
  auto served = timeToServe("127.0.1.11");
  ASSERT_TRUE(served.has_value());
  std::printf("[ measure  ] legitimate client served in %lld ms while 2,000 silent connections were held\n",
              static_cast<long long>(served->count()));
  EXPECT_LT(*served, kServedWithin * kSlack);

  double trims = n2.metric("ferry_memory_trims_total");
  closeAll(silent);
  ASSERT_TRUE(waitFor([&] { return n2.openDescriptors() < 1000; }));
  // The trim follows the burst of closes within two checks (one per second).
  EXPECT_TRUE(waitFor([&] { return n2.metric("ferry_memory_trims_total") > trims; }, std::chrono::seconds(5)));
  long after = n2.rssKb();
  std::printf("[ measure  ] n2 VmRSS: baseline %ld KB, with 2,000 silent connections %ld KB (%.1f KB each), "
              "after they closed %ld KB (%+.1f %%)\n",
              baseline, during, (during - baseline) / 2000.0, after, 100.0 * (after - baseline) / baseline);
  // Before: ~89 KB each (full TLS state per silent connection), 190 MB, never given back.
  if (kAllocatorGivesMemoryBack) {  // TSan's shadow memory alone is several times this
    EXPECT_LT(during - baseline, 2000 * 16) << "silent connections must not hold TLS state";
    EXPECT_LE(after, baseline * 110 / 100) << "RSS must come back within 10 % of its baseline";
  }
}

TEST(AdmissionTest, PerSourceLimitRefusesTheExcessAtOnceWhileAnotherSourceIsServed) {
  LabFiles files;
  Node n1(files, "n1");
  Node n2(files, "n2",
          "limits:\n  hbone: {max_connections_per_source: 20, max_pending_handshakes_per_source: 10}\n");
  ASSERT_TRUE(n1.ok() && n2.ok());
  AppServer app("127.0.2.10", kAppPort, AppServer::echo);

  size_t reset_at_connect = 0;
  auto silent = silentConnections(50, 1, "127.0.2.10", 15008, &reset_at_connect);
  ASSERT_EQ(silent.size() + reset_at_connect, 50u);
  const std::string refused =
      "ferry_admission_refused_total{listener=\"hbone\",reason=\"pending_handshakes_per_source\"}";
  ASSERT_TRUE(waitFor([&] { return n2.metric(refused) == 40; })) << n2.metric(refused);
  EXPECT_EQ(n2.metric("ferry_pending_handshakes{listener=\"hbone\"}"), 10);
  // The excess was reset at once, not left to time out; ten are still open.
  EXPECT_EQ(countReset(silent, 40 - reset_at_connect) + reset_at_connect, 40u);

  auto served = timeToServe();
  ASSERT_TRUE(served.has_value()) << "another source must be served";
  EXPECT_LT(*served, kServedWithin * kSlack);
  closeAll(silent);
}

// limits.hbone.max_new_connections_per_source_per_second: a source that connects and
// closes in a loop (a reconnecting flood holds nothing, so no cap on what it holds sees
// it) is refused beyond its burst and rate, counted; another source is served meanwhile.
TEST(AdmissionTest, ReconnectingSourceIsHeldToItsRateOfNewConnections) {
  LabFiles files;
  Node n1(files, "n1");
  Node n2(files, "n2", "limits:\n  hbone: {max_connections_per_source: 20, max_new_connections_per_source_per_second: 10}\n");
  ASSERT_TRUE(n1.ok() && n2.ok());
  AppServer app("127.0.2.10", kAppPort, AppServer::echo);
  const std::string refused =
      "ferry_admission_refused_total{listener=\"hbone\",reason=\"new_connections_per_source_rate\"}";
  auto start = Clock::now();
  constexpr size_t kTries = 300;
  for (size_t i = 0; i < kTries; ++i) {
    size_t reset_at_connect = 0;
    auto one = silentConnections(1, 1, "127.0.2.10", 15008, &reset_at_connect);
    closeAll(one);
  }
  double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  // Settled once ferryd has taken every try from its backlog: refused by the rate, or
  // admitted and ended by the client's close before a handshake.
  const std::string ended = "ferry_hbone_handshake_failures_total";
  bool settled = waitFor([&] { return n2.metric(refused) + n2.metric(ended) == kTries; });
  double refusals = n2.metric(refused), admitted = n2.metric(ended);
  ASSERT_TRUE(settled) << refusals << " refused, " << admitted << " ended";
  std::printf("reconnecting source: %zu connects in %.2f s: %.0f admitted, %.0f refused by the rate\n", kTries,
              seconds, admitted, refusals);
  EXPECT_LE(admitted, 20 + 10 * (seconds + 0.5)) << "burst 20, then 10 a second";
  EXPECT_GE(admitted, 20);
  auto served = timeToServe();
  ASSERT_TRUE(served.has_value()) << "another source must be served";
  EXPECT_LT(*served, kServedWithin * kSlack);
}

TEST(AdmissionTest, ANewClientIsServedWhileTenSourcesHoldEveryPendingPlace) {
  // Issue 34's lockout: 2,100 silent connections from 10 sources, each under the per-source
  // limit (256), fill max_pending_handshakes (2,048). Before, every new HBONE client was
  // refused until the handshake timeout (10 s), again with each wave.
  LabFiles files;
  Node n1(files, "n1");
  FerrydProcess n2(files, "n2");
  ASSERT_TRUE(n1.ok() && n2.ready());
  AppServer app("127.0.2.10", kAppPort, AppServer::echo);
  size_t reset_at_connect = 0;
  auto silent = silentConnections(2100, 10, "127.0.2.10", 15008, &reset_at_connect);
  ASSERT_TRUE(waitFor([&] { return n2.metric("ferry_pending_handshakes{listener=\"hbone\"}") >= 2048; }));
  // c2's tunnel is new: its handshake needs a pending place.
  auto served = timeToServe("127.0.1.11");
  ASSERT_TRUE(served.has_value()) << "a new client must get in";
  std::printf("[ measure  ] new HBONE client served in %lld ms with every pending place held by 10 sources\n",
              static_cast<long long>(served->count()));
  EXPECT_LT(*served, kServedWithin * kSlack);
  EXPECT_GE(n2.metric("ferry_admission_evicted_total{listener=\"hbone\"}"), 1)
      << "a silent connection of a source holding many made room";
  closeAll(silent);
}

TEST(AdmissionTest, AWorkloadIsServedWhileThousandsOfAddressesHoldOnePendingHandshakeEach) {
  // Issue 34, "whatever the attacker's spread": 2,100 silent connections from 2,100
  // addresses, one each, fill max_pending_handshakes (2,048) with handshakes that no
  // per-source rule makes room from (a source's only one is spared 500 ms). Before, a new
  // client was refused until the oldest had been held 500 ms, and under a flood that keeps
  // its connections younger than that, for good. A mesh workload's tunnel now takes an
  // unknown address's place at once.
  LabFiles files;
  Node n1(files, "n1");
  FerrydProcess n2(files, "n2");
  ASSERT_TRUE(n1.ok() && n2.ready());
  AppServer app("127.0.2.10", kAppPort, AppServer::echo);
  ASSERT_TRUE(timeToServe().has_value());  // warm: c1's tunnel
  const std::string evicted = "ferry_admission_evicted_total{listener=\"hbone\"}";
  const double evicted_before = std::max(0.0, n2.metric(evicted));
  size_t reset_at_connect = 0;
  auto silent = silentConnections(2100, 2100, "127.0.2.10", 15008, &reset_at_connect);
  ASSERT_TRUE(waitFor([&] { return n2.metric("ferry_pending_handshakes{listener=\"hbone\"}") >= 2048; }));
  // c2's tunnel is new: its handshake needs a pending place, and every one is held by an
  // address alone at its source (the old rule made room once one had been held 500 ms;
  // AdmissionEvictionTest.AWorkloadTakesAnUnknownAddresssPlaceAtOnceWhateverTheSpread shows
  // the rule without the clock).
  auto served = timeToServe("127.0.1.11");
  ASSERT_TRUE(served.has_value()) << "a workload's new tunnel must get in";
  std::printf("[ measure  ] new HBONE client served in %lld ms with every pending place held by 2,048 addresses, "
              "one each\n",
              static_cast<long long>(served->count()));
  EXPECT_LT(*served, kServedWithin * kSlack);
  EXPECT_GE(n2.metric(evicted) - evicted_before, 1) << "an unknown address's silent connection made room";
  closeAll(silent);
}

TEST(AdmissionTest, AnotherSourceIsServedWhileOneFloodsWithALowDescriptorLimit) {
  // The case: 1,024 descriptors, 2,000 silent connections from one source. Before,
  // every descriptor went to them and a legitimate client waited 7.3 s.
  LabFiles files;
  Node n1(files, "n1");
  FerrydProcess n2(files, "n2", "", 1024);
  ASSERT_TRUE(n1.ok() && n2.ready());
  AppServer app("127.0.2.10", kAppPort, AppServer::echo);

  auto silent = silentConnections(2000, 1, "127.0.2.10", 15008);
  // ferryd took what it could (the per-source limit; the old code: every descriptor).
  ASSERT_TRUE(waitFor([&] { return n2.openDescriptors() >= 256; })) << n2.openDescriptors();
  EXPECT_TRUE(waitFor([&] {
    return n2.metric("ferry_admission_refused_total{listener=\"hbone\",reason=\"pending_handshakes_per_source\"}") ==
           2000 - 256;
  }));
  auto served = timeToServe();
  ASSERT_TRUE(served.has_value());
  std::printf("[ measure  ] with RLIMIT_NOFILE 1024 and 2,000 silent connections from one source: served in %lld ms, "
              "%zu descriptors open\n",
              static_cast<long long>(served->count()), n2.openDescriptors());
  EXPECT_LT(*served, kServedWithin * kSlack);
  closeAll(silent);
}

TEST(AdmissionTest, ANewClientIsServedWhileTenSourcesHoldEveryDescriptor) {
  // Issue 34's other lockout: with 1,024 descriptors (the data plane's cap 768), 1,500
  // silent connections from 10 sources (150 each, under every per-source limit) take every
  // descriptor. Before, every new client was refused (descriptors) until handshake timeouts
  // freed some, 10 s later. Now a newcomer over the cap takes the place of a pending
  // connection of a source holding more of them.
  LabFiles files;
  Node n1(files, "n1");
  FerrydProcess n2(files, "n2", "", 1024);
  ASSERT_TRUE(n1.ok() && n2.ready());
  AppServer app("127.0.2.10", kAppPort, AppServer::echo);
  size_t reset_at_connect = 0;
  auto silent = silentConnections(1500, 10, "127.0.2.10", 15008, &reset_at_connect);
  ASSERT_TRUE(waitFor([&] { return n2.openDescriptors() >= 760; })) << n2.openDescriptors();
  auto served = timeToServe("127.0.1.11");
  ASSERT_TRUE(served.has_value()) << "a new client must get in; refused (descriptors) "
                                  << n2.metric("ferry_admission_refused_total{listener=\"hbone\",reason=\"descriptors\"}")
                                  << ", evicted " << n2.metric("ferry_admission_evicted_total{listener=\"hbone\"}")
                                  << ", closed connect_failed "
                                  << n2.metric("ferry_connections_closed_total{direction=\"inbound\",reason=\"connect_failed\"}")
                                  << ", descriptors " << n2.openDescriptors();
  std::printf("[ measure  ] with RLIMIT_NOFILE 1024 and every descriptor held by 10 sources: new client served in "
              "%lld ms, %zu descriptors open, %.0f evicted\n",
              static_cast<long long>(served->count()), n2.openDescriptors(),
              n2.metric("ferry_admission_evicted_total{listener=\"hbone\"}"));
  EXPECT_LT(*served, kServedWithin * kSlack);
  EXPECT_GE(n2.metric("ferry_admission_evicted_total{listener=\"hbone\"}"), 1);
  EXPECT_EQ(httpGet("127.0.2.1", 15021, "/healthz/ready"), 200) << "the operator endpoints keep their reserve";
  closeAll(silent);
}

// Keeps `per_source` silent connections from each of `sources` flood addresses open to
// 127.0.2.10:15008 until stopped: any that ferryd closes or refuses is opened again at once,
// as a flood that means it would. Counts the connections it made.
class RefillingFlood {
 public:
  RefillingFlood(size_t sources, size_t per_source) : thread_([this, sources, per_source] { run(sources, per_source); }) {}
  ~RefillingFlood() {
    stop_ = true;
    thread_.join();
  }
  uint64_t connects() const { return connects_.load(); }
  size_t held() const { return held_.load(); }

 private:
  void run(size_t sources, size_t per_source) {
    std::vector<int> fds(sources * per_source, -1);
    std::vector<pollfd> polls(fds.size());
    while (!stop_) {
      size_t held = 0;
      for (size_t i = 0; i < fds.size() && !stop_; ++i) {
        if (fds[i] < 0) {
          fds[i] = connectFrom(floodAddress(i / per_source), "127.0.2.10", 15008);
          connects_.fetch_add(1);
        }
        held += fds[i] >= 0 ? 1 : 0;
        polls[i] = {fds[i], POLLIN, 0};
      }
      held_ = held;
      ::poll(polls.data(), polls.size(), 5);
      for (size_t i = 0; i < fds.size(); ++i) {
        if (fds[i] >= 0 && polls[i].revents != 0) {  // reset or closed by ferryd: it never sends
          ::close(fds[i]);
          fds[i] = -1;
        }
      }
    }
    for (int fd : fds) {
      if (fd >= 0) ::close(fd);
    }
  }
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> connects_{0};
  std::atomic<size_t> held_{0};
  std::thread thread_;
};

TEST(AdmissionTest, NewClientsKeepBeingServedWhileTenSourcesRefillEveryDescriptor) {
  // Issue 34, "whatever the attacker's spread ... while the flood is held": 1,024
  // descriptors (the data plane's cap 768, a slack of 64 above it), ten sources keeping 150
  // silent connections each, reopening every one ferryd closes. One after the other, 200
  // new clients, each from an address of its own, complete their TLS handshake and stay
  // connected (a peer's pooled tunnel). Before, each newcomer over the cap took a slack
  // descriptor and the connection it evicted was replaced by the flood at once: after 64,
  // every newcomer was refused until the flood's handshakes timed out.
  LabFiles files;
  FerrydProcess n2(files, "n2", "", 1024);
  ASSERT_TRUE(n2.ready());
  identity::DirCertSource certs(files.certDir(), "cluster.local");
  identity::TlsContextCache cache(certs, "cluster.local");
  auto ctx = cache.clientContext(identity::SpiffeId::forWorkload("cluster.local", "default", "client"));
  ASSERT_TRUE(ctx.ok()) << ctx.status();

  auto flood = std::make_unique<RefillingFlood>(10, 150);
  ASSERT_TRUE(waitFor([&] { return n2.openDescriptors() >= 768; })) << n2.openDescriptors();
  constexpr size_t kClients = 200;
  std::vector<std::pair<int, SSL*>> clients;
  std::vector<long long> took_ms;
  size_t refused = 0;
  for (size_t i = 0; i < kClients; ++i) {
    auto start = Clock::now();
    int fd = connectFrom("127.0." + std::to_string(6 + i / 200) + "." + std::to_string(1 + i % 200), "127.0.2.10",
                         15008);
    SSL* ssl = fd < 0 ? nullptr : SSL_new((*ctx)->native_handle());
    if (ssl != nullptr) {
      setRecvTimeout(fd, std::chrono::seconds(2));
      SSL_set_fd(ssl, fd);
    }
    if (ssl == nullptr || SSL_connect(ssl) != 1) {
      ++refused;
      if (ssl != nullptr) SSL_free(ssl);
      if (fd >= 0) ::close(fd);
      continue;
    }
    took_ms.push_back(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count());
    clients.emplace_back(fd, ssl);
  }
  std::sort(took_ms.begin(), took_ms.end());
  const size_t open = n2.openDescriptors();
  std::printf("[ measure  ] RLIMIT_NOFILE 1024, 10 sources refilling 1,500 silent connections (%llu connects): "
              "%zu of %zu new clients served (max %lld ms, median %lld ms), %zu refused; %zu descriptors open, "
              "%.0f evicted\n",
              static_cast<unsigned long long>(flood->connects()), clients.size(), kClients,
              took_ms.empty() ? -1 : took_ms.back(), took_ms.empty() ? -1 : took_ms[took_ms.size() / 2], refused, open,
              n2.metric("ferry_admission_evicted_total{listener=\"hbone\"}"));
  EXPECT_EQ(clients.size(), kClients) << "every new client must get in while the flood refills";
  if (!took_ms.empty()) {
    EXPECT_LT(took_ms.back(), (kServedWithin * kSlack).count());
  }
  EXPECT_LE(open, 768u + 64u + 8u) << "the descriptors above the slack stay free for the operator endpoints";
  EXPECT_EQ(httpGet("127.0.2.1", 15021, "/healthz/ready"), 200);
  // The flood gone, a client that already holds a connection opens another: the cap no
  // longer holds it back.
  flood.reset();
  ASSERT_TRUE(waitFor([&] { return n2.metric("ferry_pending_handshakes{listener=\"hbone\"}") == 0; }));
  int again = connectFrom("127.0.6.1", "127.0.2.10", 15008);
  ASSERT_GE(again, 0);
  setRecvTimeout(again, std::chrono::seconds(2));
  SSL* again_ssl = SSL_new((*ctx)->native_handle());
  SSL_set_fd(again_ssl, again);
  EXPECT_EQ(SSL_connect(again_ssl), 1) << "a second connection from a served client, after the flood";
  SSL_free(again_ssl);
  ::close(again);
  for (auto& [fd, ssl] : clients) {
    SSL_free(ssl);
    ::close(fd);
  }
}

TEST(AdmissionTest, ReadinessMetricsAndAdminAnswerWhileTheDataPlaneIsAtItsDescriptorCap) {
  LabFiles files;
  FerrydProcess n2(files, "n2", "", 1024);  // the data plane's cap: 1024 - 256 = 768
  ASSERT_TRUE(n2.ready());
  EXPECT_EQ(n2.metric("ferry_data_plane_descriptor_cap"), 768);

  // 40 sources, 30 each: no per-source limit applies, the descriptors run out.
  size_t reset_at_connect = 0;
  auto silent = silentConnections(1200, 40, "127.0.2.10", 15008, &reset_at_connect);
  const std::string refused = "ferry_admission_refused_total{listener=\"hbone\",reason=\"descriptors\"}";
  ASSERT_TRUE(waitFor([&] { return n2.openDescriptors() >= 760; })) << n2.openDescriptors();
  // Answered, and in time for a probe: the kubelet gives up after 1 s by default (the old
  // code answered only once handshake timeouts had freed descriptors, up to 10 s later).
  auto start = Clock::now();
  EXPECT_EQ(httpGet("127.0.2.1", 15021, "/healthz/ready"), 200);
  EXPECT_LT(Clock::now() - start, kProbeTimeout);
  start = Clock::now();
  EXPECT_EQ(httpGet("127.0.2.1", 15020, "/metrics"), 200);
  EXPECT_LT(Clock::now() - start, kProbeTimeout);
  EXPECT_TRUE(waitFor([&] { return n2.metric(refused) > 0; })) << n2.metric(refused);
  EXPECT_EQ(httpGet("127.0.2.1", 15000, "/certs"), 200);
  EXPECT_GT(n2.metric("ferry_pending_handshakes{listener=\"hbone\"}"), 600);
  size_t open = n2.openDescriptors();
  std::printf("[ measure  ] at the cap: %zu descriptors open in ferryd, %.0f connections refused\n", open,
              n2.metric(refused));
  // Over the cap only by newcomers that took an evicted connection's place, within a quarter
  // of the reserve (64): the rest stays free.
  EXPECT_LE(open, 768u + 64u + 8u) << "three quarters of the reserve above the cap stay free";
  // The refused ones were reset at once. Counted once ferryd has dealt with every one of
  // them (pending or refused): the accept loop may still be working through the backlog.
  const std::string pending = "ferry_pending_handshakes{listener=\"hbone\"}";
  const std::string evicted = "ferry_admission_evicted_total{listener=\"hbone\"}";
  const double attempted = static_cast<double>(silent.size() + reset_at_connect);
  EXPECT_TRUE(waitFor([&] { return n2.metric(refused) + n2.metric(pending) + n2.metric(evicted) >= attempted; }))
      << n2.metric(refused) << " refused, " << n2.metric(pending) << " pending, " << n2.metric(evicted)
      << " evicted of " << attempted;
  // Refused ones are reset; evicted ones were shut down first, so their client may read the
  // end of the stream before the reset.
  const size_t refused_later = static_cast<size_t>(n2.metric(refused)) - reset_at_connect;
  const size_t ended = refused_later + static_cast<size_t>(n2.metric(evicted));
  const size_t resets = countReset(silent, ended);
  EXPECT_GE(resets, refused_later);
  EXPECT_LE(resets, ended);
  closeAll(silent);
  EXPECT_TRUE(waitFor([&] { return n2.metric("ferry_pending_handshakes{listener=\"hbone\"}") == 0; }));
}

// Accepts and holds connections (one thread, no per-connection thread: 5,000 of them).
class HoldingServer {
 public:
  HoldingServer(const std::string& ip, uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    auto a = ipv4Address(ip, port);
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(fd_, 4096) != 0) {
      ADD_FAILURE() << "holding server: " << std::strerror(errno);
    }
    thread_ = std::thread([this] {
      while (!stop_) {
        pollfd p{fd_, POLLIN, 0};
        if (::poll(&p, 1, 50) <= 0) continue;
        int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0) continue;
        std::lock_guard lock(mu_);
        held_.push_back(c);
      }
    });
  }
  ~HoldingServer() {
    stop_ = true;
    thread_.join();
    closeHeld();
    ::close(fd_);
  }
  size_t held() {
    std::lock_guard lock(mu_);
    return held_.size();
  }
  void closeHeld() {
    std::lock_guard lock(mu_);
    closeAll(held_);
  }

 private:
  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<int> held_;
  std::thread thread_;
};

TEST(AdmissionTest, MemoryComesBackAfter5000IdleProxiedConnectionsClose) {
  LabFiles files;
  // n1 lets its idle tunnels go after 2 s (the pool is a cache; its default is 5 min), and
  // n2 its side after twice that.
  FerrydProcess n1(files, "n1", "pool:\n  idle_release: 2s\n");
  FerrydProcess n2(files, "n2");
  ASSERT_TRUE(n1.ready() && n2.ready());
  HoldingServer app("127.0.2.10", kAppPort);
  constexpr size_t kConnections = 5000;
  std::vector<int> clients;
  size_t idle_descriptors = n2.openDescriptors();
  auto tunnelsGone = [&] {
    return n1.metric("ferry_hbone_connections_closed_total") == n1.metric("ferry_hbone_connections_opened_total") &&
           n2.openDescriptors() <= idle_descriptors;
  };
  // The baseline is a ferryd that has carried traffic: the first connections page in the
  // TLS client and server code (libcrypto alone: ~200 KB of file-backed RSS), which is no
  // memory to give back. 64 connections, closed, then their tunnels, then a trim.
  {
    double trims1 = n1.metric("ferry_memory_trims_total"), trims2 = n2.metric("ferry_memory_trims_total");
    for (size_t i = 0; i < 64; ++i) clients.push_back(connectOutbound("127.0.1.10", "127.0.2.10", kAppPort));
    ASSERT_TRUE(waitFor([&] { return app.held() == 64; })) << app.held();
    closeAll(clients);
    app.closeHeld();
    ASSERT_TRUE(waitFor(tunnelsGone, std::chrono::seconds(30)));
    EXPECT_TRUE(waitFor([&] {
      return n1.metric("ferry_memory_trims_total") > trims1 && n2.metric("ferry_memory_trims_total") > trims2;
    }));
  }
  long base1 = n1.rssKb(), base2 = n2.rssKb();

  for (size_t i = 0; i < kConnections; ++i) {
    int fd = connectOutbound("127.0.1.10", "127.0.2.10", kAppPort);
    ASSERT_GE(fd, 0) << i;
    clients.push_back(fd);
  }
  ASSERT_TRUE(waitFor([&] { return app.held() == kConnections; }, std::chrono::seconds(60))) << app.held();
  long during1 = n1.rssKb(), during2 = n2.rssKb();

  double trims1 = n1.metric("ferry_memory_trims_total"), trims2 = n2.metric("ferry_memory_trims_total");
  closeAll(clients);
  app.closeHeld();
  ASSERT_TRUE(waitFor([&] { return n1.metric("ferry_connections_active{direction=\"outbound\"}") == 0; }));
  // The tunnels go (idle release), and a trim follows their close.
  ASSERT_TRUE(waitFor(tunnelsGone, std::chrono::seconds(30)));
  EXPECT_TRUE(waitFor([&] { return n1.metric("ferry_memory_trims_total") > trims1; }, std::chrono::seconds(5)));
  EXPECT_TRUE(waitFor([&] { return n2.metric("ferry_memory_trims_total") > trims2; }, std::chrono::seconds(5)));
  // The tunnels' close is followed by a trim of its own within two checks (one per second),
  // unless the one seen above already came after it.
  trims1 = n1.metric("ferry_memory_trims_total");
  trims2 = n2.metric("ferry_memory_trims_total");
  waitFor([&] { return n1.metric("ferry_memory_trims_total") > trims1 && n2.metric("ferry_memory_trims_total") > trims2; },
          std::chrono::seconds(3));
  long after1 = n1.rssKb(), after2 = n2.rssKb();
  std::printf("[ measure  ] 5,000 idle connections: n1 VmRSS %ld -> %ld -> %ld KB (%+.1f %%), "
              "n2 (server node) %ld -> %ld -> %ld KB (%+.1f %%)\n",
              base1, during1, after1, 100.0 * (after1 - base1) / base1, base2, during2, after2,
              100.0 * (after2 - base2) / base2);
  if (kAllocatorGivesMemoryBack) {
    EXPECT_LE(after2, base2 * 110 / 100) << "server node RSS must come back within 10 % of its baseline";
    EXPECT_LE(after1, base1 * 110 / 100) << "client node RSS must come back within 10 % of its baseline";
  }
}

// Established HBONE connections that go silent (TLS done with a valid certificate, the
// HTTP/2 preface sent, then nothing; ferryd's PINGs unanswered) are closed by
// pool.ping_timeout: 1,000 of them from four addresses, three times; after each wave RSS is
// back within 10 % of the baseline. Before, each wave left +17-45 %: every closed tunnel's
// shared_ptr control block (32 bytes) stayed in the worker's list of tunnels until a lazy
// sweep, ~1,000 of them spread over the heap, each pinning a page of free memory that
// malloc_trim could not give back (found by walking the heap: 975 live 32-byte chunks on 863
// pages above the baseline's heap end; heaptrack named H2Connection::create).
TEST(AdmissionTest, IdleTunnelsClosedByThePingTimeoutGiveTheirMemoryBack) {
  LabFiles files;
  FerrydProcess n2(files, "n2", "pool:\n  ping_interval: 500ms\n  ping_timeout: 2s\n");
  ASSERT_TRUE(n2.ready());
  identity::DirCertSource certs(files.certDir(), "cluster.local");
  identity::TlsContextCache cache(certs, "cluster.local");
  auto ctx = cache.clientContext(identity::SpiffeId::forWorkload("cluster.local", "default", "client"));
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  const std::string hello = kPreface + frame(kSettings, 0, 0, "");
  struct Tunnel {
    int fd = -1;
    SSL* ssl = nullptr;
  };
  auto open = [&](size_t n) {
    std::vector<Tunnel> out;
    for (size_t i = 0; i < n; ++i) {
      Tunnel t;
      t.fd = connectFrom("127.0.5." + std::to_string(1 + i % 4), "127.0.2.10", 15008);
      if (t.fd < 0) {
        ADD_FAILURE() << "tunnel " << i << ": " << std::strerror(errno);
        break;
      }
      t.ssl = SSL_new((*ctx)->native_handle());
      SSL_set_fd(t.ssl, t.fd);
      if (SSL_connect(t.ssl) != 1 || SSL_write(t.ssl, hello.data(), static_cast<int>(hello.size())) <= 0) {
        ADD_FAILURE() << "tunnel " << i << ": the handshake failed";
        SSL_free(t.ssl);
        ::close(t.fd);
        break;
      }
      out.push_back(t);
    }
    return out;
  };
  auto closeTunnels = [](std::vector<Tunnel>& tunnels) {
    for (auto& t : tunnels) {
      SSL_free(t.ssl);
      ::close(t.fd);
    }
    tunnels.clear();
  };
  const std::string open_gauge = "ferry_admitted_connections{listener=\"hbone\"}";
  const std::string trims = "ferry_memory_trims_total";
  // The baseline is a ferryd that has served tunnels (the first ones page in the TLS code).
  auto warm = open(64);
  ASSERT_TRUE(waitFor([&] { return n2.metric(open_gauge) == 0; }, std::chrono::seconds(10)));
  closeTunnels(warm);
  double trims0 = n2.metric(trims);
  EXPECT_TRUE(waitFor([&] { return n2.metric(trims) > trims0; }, std::chrono::seconds(5)));
  long base = n2.rssKb();

  // The sanitizers' builds keep freed memory and handshake far slower: one small wave there.
  const size_t kTunnels = kAllocatorGivesMemoryBack ? 1000 : 200;
  const int kWaves = kAllocatorGivesMemoryBack ? 3 : 1;
  std::vector<long> after;
  for (int wave = 1; wave <= kWaves; ++wave) {
    auto tunnels = open(kTunnels);
    ASSERT_EQ(tunnels.size(), kTunnels);
    long during = n2.rssKb();
    // Every one is closed by the ping timeout (2 s after its last answer; none ever answers).
    ASSERT_TRUE(waitFor([&] { return n2.metric(open_gauge) == 0; }, std::chrono::seconds(20))) << n2.metric(open_gauge);
    double trims1 = n2.metric(trims);
    closeTunnels(tunnels);
    EXPECT_TRUE(waitFor([&] { return n2.metric(trims) > trims1; }, std::chrono::seconds(5)));
    after.push_back(n2.rssKb());
    std::printf("[ measure  ] wave %d: %zu idle tunnels closed by the ping timeout: n2 VmRSS %ld -> %ld -> %ld KB "
                "(%+.1f %% of the baseline)\n",
                wave, kTunnels, base, during, after.back(), 100.0 * (after.back() - base) / base);
  }
  if (kAllocatorGivesMemoryBack) {
    for (size_t i = 0; i < after.size(); ++i) {
      EXPECT_LE(after[i], base * 110 / 100) << "wave " << i + 1 << ": RSS must come back within 10 % of its baseline";
    }
  }
}

// A memory cgroup of its own under the v1 memory controller (this lab's hosts) or cgroup v2,
// with a limit; removed at the end, once nothing is in it. Named fy-mem-<pid>.
class MemoryCgroup {
 public:
  explicit MemoryCgroup(uint64_t limit) {
    std::string name = "fy-mem-" + std::to_string(::getpid());
    if (std::filesystem::exists("/sys/fs/cgroup/memory/cgroup.procs")) {
      dir_ = "/sys/fs/cgroup/memory/" + name;
      limit_file_ = "memory.limit_in_bytes";
      events_file_ = "memory.oom_control";
      peak_file_ = "memory.max_usage_in_bytes";
    } else if (std::filesystem::exists("/sys/fs/cgroup/cgroup.controllers")) {
      dir_ = "/sys/fs/cgroup/" + name;
      limit_file_ = "memory.max";
      events_file_ = "memory.events";
      peak_file_ = "memory.peak";
    } else {
      return;
    }
    std::error_code ec;
    std::filesystem::create_directory(dir_, ec);
    std::ofstream(dir_ + "/" + limit_file_) << limit << std::flush;
    ok_ = !ec && readFile(dir_ + "/" + limit_file_).find(std::to_string(limit)) == 0;
  }
  ~MemoryCgroup() {
    if (!dir_.empty()) ::rmdir(dir_.c_str());
  }
  bool ok() const { return ok_; }
  const std::string& dir() const { return dir_; }
  std::string procs() const { return dir_ + "/cgroup.procs"; }
  // OOM kills in the cgroup (v1 memory.oom_control and v2 memory.events both say oom_kill N).
  long oomKills() const {
    std::string text = readFile(dir_ + "/" + events_file_);
    auto at = text.find("oom_kill ");
    return at == std::string::npos ? -1 : std::strtol(text.c_str() + at + 9, nullptr, 10);
  }
  // The most the cgroup was charged (its processes' pages and their sockets' buffers); 0 if
  // the kernel does not say.
  uint64_t peakBytes() const { return std::strtoull(readFile(dir_ + "/" + peak_file_).c_str(), nullptr, 10); }

 private:
  static std::string readFile(const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  std::string dir_, limit_file_, events_file_, peak_file_;
  bool ok_ = false;
};

// `n` connections to ip:15008 from `sources` addresses 127.0.4.x that each send a TLS
// ClientHello and then nothing: the server holds a handshake halfway (~89 KB each) until its
// timeout. Those ferryd refused at once are closed and not returned.
std::vector<int> stalledHandshakes(size_t n, size_t sources, const std::string& ip) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  std::vector<int> fds;
  size_t per_source = (n + sources - 1) / sources;
  for (size_t i = 0; i < n; ++i) {
    int fd = connectFrom("127.0.4." + std::to_string(1 + i / per_source), ip, 15008);
    if (fd < 0) continue;
    SSL* ssl = SSL_new(ctx);
    BIO* rbio = BIO_new(BIO_s_mem());
    BIO* wbio = BIO_new(BIO_s_mem());
    SSL_set_bio(ssl, rbio, wbio);
    SSL_set_connect_state(ssl);
    SSL_do_handshake(ssl);  // wants to read: the ClientHello is in wbio
    char* hello = nullptr;
    long len = BIO_get_mem_data(wbio, &hello);
    bool sent = len > 0 && sendAll(fd, hello, static_cast<size_t>(len));
    SSL_free(ssl);
    if (!sent) {
      ::close(fd);
      continue;
    }
    fds.push_back(fd);
  }
  SSL_CTX_free(ctx);
  return fds;
}

// `connections` HBONE connections from pod c1 (127.0.1.10, sa client: a valid certificate)
// that each open and reset CONNECT streams to 127.0.2.10 as fast as the server takes them
// (HTTP/2 rapid reset), until it closes the connection or `pairs` were sent. Returns how
// many connections completed their handshake.
size_t rapidResets(SSL_CTX* ctx, size_t connections, size_t pairs) {
  std::string burst;
  for (uint32_t id = 1; id < 2 * pairs; id += 2) {
    burst += frame(kHeaders, kEndHeaders, id, connectBlock("127.0.2.10:8080")) + rstStream(id);
  }
  const std::string out = kPreface + frame(kSettings, 0, 0, "") + burst;
  size_t handshaken = 0;
  for (size_t i = 0; i < connections; ++i) {
    int fd = connectFrom("127.0.1.10", "127.0.2.10", 15008);
    if (fd < 0) continue;
    timeval tv{2, 0};  // a server that stops reading ends the burst, not the test
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    SSL* ssl = SSL_new(ctx);
    SSL_set_fd(ssl, fd);
    if (SSL_connect(ssl) == 1) {
      ++handshaken;
      for (size_t off = 0; off < out.size();) {
        int n = SSL_write(ssl, out.data() + off, static_cast<int>(std::min<size_t>(out.size() - off, 16384)));
        if (n <= 0) break;  // closed by the server (GOAWAY, then the close)
        off += static_cast<size_t>(n);
      }
    }
    SSL_free(ssl);
    ::close(fd);
  }
  return handshaken;
}

TEST(AdmissionTest, UnderACgroupMemoryLimitTheLimitsFitAndFloodsAreRefusedNotOomKilled) {
  if (::geteuid() != 0) {
    if (std::getenv("CI") != nullptr && std::string(std::getenv("CI")) == "true") FAIL() << "CI runs as root";
    GTEST_SKIP() << "a memory cgroup needs root";
  }
  // 192 MiB: 64 MiB kept (a quarter, 64 MiB at least), the default limits' 1.6 GiB worst
  // case lowered to 128 MiB (hbone: 328 connections, 164 pending, 20 pending per source).
  // Under the sanitizers 1 GiB (768 MiB for connections, still below the defaults' worst
  // case): ASan's quarantine alone keeps 256 MiB of freed heap, TSan's shadow a multiple of
  // the heap, and either ferryd was OOM-killed in 192 MiB.
  constexpr uint64_t kLimit = kAllocatorGivesMemoryBack ? uint64_t{192} << 20 : uint64_t{1} << 30;
  MemoryCgroup cgroup(kLimit);
  ASSERT_TRUE(cgroup.ok()) << "no memory cgroup could be made (" << cgroup.dir() << ")";
  LabFiles files;
  Node n1(files, "n1");
  {
    FerrydProcess n2(files, "n2", "", 0, cgroup.procs());
    ASSERT_TRUE(n1.ok() && n2.ready());
    AppServer app("127.0.2.10", kAppPort, AppServer::echo);

    const auto dump = configDump("127.0.2.1");
    ASSERT_TRUE(dump.is_object());
    const auto& config = dump.at("config");
    const auto& budget = config.at("memory_budget");
    EXPECT_EQ(budget.at("limit").to_number<uint64_t>(), kLimit);
    EXPECT_EQ(budget.at("source").as_string().find("cgroup v"), 0u) << "read from the cgroup, and named";
    EXPECT_TRUE(budget.at("lowered").as_bool());
    const auto max_pending = config.at("limits").at("hbone").at("max_pending_handshakes").to_number<double>();
    EXPECT_LT(max_pending, 2048) << "the default came down";
    const double worst = n2.metric("ferry_memory_admission_worst_case_bytes");
    EXPECT_EQ(n2.metric("ferry_memory_limit_bytes"), static_cast<double>(kLimit));
    EXPECT_GT(worst, 0);
    EXPECT_LE(worst, static_cast<double>(kLimit) * 3 / 4);

    ASSERT_TRUE(timeToServe().has_value());  // warm
    ::signal(SIGPIPE, SIG_IGN);  // the rapid-reset client writes while ferryd closes
    identity::DirCertSource certs(files.certDir(), "cluster.local");
    identity::TlsContextCache cache(certs, "cluster.local");
    auto client_ctx = cache.clientContext(identity::SpiffeId::forWorkload("cluster.local", "default", "client"));
    ASSERT_TRUE(client_ctx.ok()) << client_ctx.status();
    const std::string calm = "ferry_hbone_goaway_sent_total{code=\"enhance_your_calm\"}";
    const double calm_before = std::max(0.0, n2.metric(calm));
    const double penalized_before = std::max(0.0, n2.metric("ferry_hbone_streams_penalized_total"));
    const long baseline = n2.rssKb();
    const std::string pending = "ferry_pending_handshakes{listener=\"hbone\"}";
    double refused_before = 0;
    for (const char* reason : {"connections", "connections_per_source", "pending_handshakes",
                               "pending_handshakes_per_source", "new_connections_per_source_rate"}) {
      refused_before += std::max(0.0, n2.metric(std::string("ferry_admission_refused_total{listener=\"hbone\",reason=\"") +
                                                reason + "\"}"));
    }
    // Beyond every lowered limit: 1,000 handshakes stalled after the ClientHello (the costly
    // kind) from 50 sources, then 3,000 silent connections from 30 more, then 20 connections
    // with a valid certificate resetting 500 streams each (rapid reset), three rounds.
    long peak = baseline;
    for (int round = 0; round < 3; ++round) {
      auto stalled = stalledHandshakes(1000, 50, "127.0.2.10");
      size_t reset_at_connect = 0;
      auto silent = silentConnections(3000, 30, "127.0.2.10", 15008, &reset_at_connect);
      EXPECT_GT(rapidResets((*client_ctx)->native_handle(), 20, 500), 0u) << "round " << round;
      EXPECT_TRUE(waitFor([&] { return n2.metric(pending) > 0; }));
      auto served = timeToServe("127.0.1.11");
      EXPECT_TRUE(served.has_value()) << "round " << round << ": a legitimate client must be served";
      long during = n2.rssKb();
      peak = std::max(peak, during);
      std::printf("[ measure  ] round %d: RSS %ld KB (limit %llu KB), %.0f pending handshakes held, legitimate "
                  "client served in %lld ms\n",
                  round, during, static_cast<unsigned long long>(kLimit / 1024), n2.metric(pending),
                  served ? static_cast<long long>(served->count()) : -1LL);
      // Connections evicted to make room count until their worker has closed them.
      EXPECT_TRUE(waitFor([&] { return n2.metric(pending) <= max_pending; })) << "the lowered limit holds";
      closeAll(silent);
      closeAll(stalled);
      ASSERT_TRUE(waitFor([&] { return n2.metric(pending) == 0; }, std::chrono::seconds(15)));
    }
    double refused = -refused_before;
    for (const char* reason : {"connections", "connections_per_source", "pending_handshakes",
                               "pending_handshakes_per_source", "new_connections_per_source_rate"}) {
      refused += std::max(0.0, n2.metric(std::string("ferry_admission_refused_total{listener=\"hbone\",reason=\"") +
                                         reason + "\"}"));
    }
    const double evicted = n2.metric("ferry_admission_evicted_total{listener=\"hbone\"}");
    // 12,000 connections against a few hundred places: the excess was refused at accept, or
    // took the place of a heavier source's (evicted); either way counted. Under the
    // sanitizers ferryd accepts so slowly that the kernel's accept queue takes most of a
    // round, closed before ferryd sees it (522 to 2,015 counted in four ASan runs).
    EXPECT_GT(refused + evicted, kAllocatorGivesMemoryBack ? 1000 : 100)
        << refused << " refused, " << evicted << " evicted";
    // The first rapid-reset connection is ended by the rule (GOAWAY ENHANCE_YOUR_CALM); the
    // identity's next ones, for 30 s, get 503 at once on a shared connect budget.
    const double calmed = n2.metric(calm) - calm_before;
    const double penalized = n2.metric("ferry_hbone_streams_penalized_total") - penalized_before;
    EXPECT_GE(calmed, 1) << "rapid reset closed with ENHANCE_YOUR_CALM";
    EXPECT_GT(penalized, 0) << "the identity's later streams answered 503";
    EXPECT_TRUE(waitFor([&] { return n2.metric("ferry_memory_trims_total") > 0; }, std::chrono::seconds(10)));
    long after = n2.rssKb();
    std::printf("[ measure  ] under a %llu MiB cgroup limit: RSS baseline %ld KB, peak %ld KB, after %ld KB (%+.1f %%); "
                "%.0f refused, %.0f evicted, %.0f rapid-reset connections calmed, %.0f streams penalized\n",
                static_cast<unsigned long long>(kLimit >> 20), baseline, peak, after,
                100.0 * (after - baseline) / baseline, refused, evicted, calmed, penalized);
    EXPECT_EQ(cgroup.oomKills(), 0) << "never OOM-killed";
    EXPECT_EQ(::kill(n2.pid(), 0), 0) << "still running";
    EXPECT_TRUE(timeToServe().has_value());
    if (kAllocatorGivesMemoryBack) {
      EXPECT_LE(after, baseline * 110 / 100) << "RSS must come back within 10 % of its baseline";
    }
  }
}

// Issue 33: bytes received over HBONE for a workload that reads nothing. HTTP/2 flow
// control lets each tunnel be sent 16 MiB (its connection window) before the sender stops;
// 20 tunnels are 320 MiB, beyond ferryd's 192 MiB cgroup limit. The receive budget
// (limits.receive_buffer, auto: 16 MiB here) stops the tunnels that hold bytes from reading,
// TCP holds the sender back, and a tunnel that holds nothing is still served.
TEST(AdmissionTest, DataForAWorkloadThatReadsNothingIsHeldToTheReceiveBudgetNotOomKilled) {
  if (::geteuid() != 0) {
    if (std::getenv("CI") != nullptr && std::string(std::getenv("CI")) == "true") FAIL() << "CI runs as root";
    GTEST_SKIP() << "a memory cgroup needs root";
  }
  // Under the sanitizers 1 GiB (as above): the budget is then 96 MiB, and the senders push
  // 80 x 6 MiB, still five times more.
  constexpr uint64_t kLimit = kAllocatorGivesMemoryBack ? uint64_t{192} << 20 : uint64_t{1} << 30;
  constexpr uint16_t kHoldPort = 8081;
  constexpr size_t kSenders = 80;  // 20 tunnels of 4 streams (n1's pool.max_streams)
  constexpr size_t kBytesEach = 6u << 20;
  MemoryCgroup cgroup(kLimit);
  ASSERT_TRUE(cgroup.ok()) << "no memory cgroup could be made (" << cgroup.dir() << ")";
  LabFiles files;
  // n2 first: a child forked later would inherit n1's listeners (Asio opens its sockets
  // without SOCK_CLOEXEC), and n1 restarts below.
  FerrydProcess n2(files, "n2", "", 0, cgroup.procs());
  const std::string n1_config = "pool:\n  max_streams: 4\n";
  std::optional<Node> n1(std::in_place, files, "n1", n1_config);
  ASSERT_TRUE(n1->ok() && n2.ready());
  AppServer echo("127.0.2.10", kAppPort, AppServer::echo);
  // The workload that reads nothing until the test lets it, then reads everything.
  std::promise<void> let_read;
  std::shared_future<void> may_read = let_read.get_future().share();
  std::atomic<uint64_t> drained{0};
  AppServer hold("127.0.2.10", kHoldPort, [may_read, &drained](int fd) {
    may_read.wait();
    std::vector<char> buf(256 * 1024);
    for (;;) {
      ssize_t n = ::recv(fd, buf.data(), buf.size(), 0);
      if (n <= 0) break;
      drained += static_cast<uint64_t>(n);
    }
  });
  // Lets the workload read even when an assertion below returns early (before `hold` and its
  // threads are torn down, which joins them).
  struct LetRead {
    std::promise<void>& p;
    bool done = false;
    void now() {
      if (!std::exchange(done, true)) p.set_value();
    }
    ~LetRead() { now(); }
  } release{let_read};

  const auto dump = configDump("127.0.2.1");
  ASSERT_TRUE(dump.is_object());
  const auto& config = dump.at("config");
  EXPECT_EQ(config.at("limits").at("receive_buffer").as_string(), "auto");
  const auto& budget_json = config.at("memory_budget");
  const uint64_t budget = budget_json.at("receive_buffer").to_number<uint64_t>();
  EXPECT_EQ(budget, (kLimit - budget_json.at("headroom").to_number<uint64_t>()) / 8)
      << "auto: an eighth of what the headroom leaves";
  EXPECT_EQ(n2.metric("ferry_hbone_receive_budget_bytes"), static_cast<double>(budget));
  EXPECT_LE(budget_json.at("worst_case").to_number<uint64_t>() + budget,
            budget_json.at("limit").to_number<uint64_t>() - budget_json.at("headroom").to_number<uint64_t>())
      << "the connections and the received data fit together";

  ASSERT_TRUE(timeToServe().has_value());  // warm
  const long baseline = n2.rssKb();
  const double pauses_before = std::max(0.0, n2.metric("ferry_hbone_read_pauses_total"));

  // 80 application connections from c1, each sending 6 MiB to the workload that reads nothing:
  // 480 MiB offered. Each sender blocks once ferry holds it back, and ends when the workload
  // has read its share.
  std::atomic<size_t> connected{0}, finished{0};
  std::vector<std::thread> senders;
  for (size_t i = 0; i < kSenders; ++i) {
    senders.emplace_back([&] {
      int fd = connectOutbound("127.0.1.10", "127.0.2.10", kHoldPort);
      if (fd < 0) return;
      ++connected;
      std::vector<char> chunk(64 * 1024, 'x');
      size_t sent = 0;
      while (sent < kBytesEach && sendAll(fd, chunk.data(), chunk.size())) sent += chunk.size();
      ::shutdown(fd, SHUT_WR);
      char c;
      while (::recv(fd, &c, 1, 0) > 0) {
      }
      ::close(fd);
      if (sent >= kBytesEach) ++finished;
    });
  }
  const std::string held = "ferry_hbone_received_unwritten_bytes";
  // The budget is reached and the tunnels that hold bytes stopped reading.
  EXPECT_TRUE(waitFor([&] {
    return n2.metric(held) >= static_cast<double>(budget) &&
           n2.metric("ferry_hbone_read_pauses_total") > pauses_before;
  }, std::chrono::seconds(30)))
      << n2.metric(held) << " bytes held of a budget of " << budget;
  // And it stays there while the senders push: their bytes wait in n1 and in the kernels'
  // buffers. A measurement window (there is no event to wait for): 40 samples, 50 ms apart.
  double now = 0;
  for (int i = 0; i < 40; ++i) {
    now = std::max(now, n2.metric(held));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const uint64_t tunnels = kSenders / 4;
  // Each tunnel may have read one record past the budget, and each worker one full read
  // before it saw the budget exceeded.
  const double bound = static_cast<double>(budget + tunnels * 16 * 1024 + 2 * 128 * 1024);
  EXPECT_LE(now, bound) << "held up to " << now << " bytes; the budget is " << budget;
  const long during = n2.rssKb();
  // A tunnel that holds nothing is still served: c2's pool connection is its own.
  auto served = timeToServe("127.0.1.11");
  EXPECT_TRUE(served.has_value()) << "a legitimate client must be served while the budget is exhausted";
  std::printf("[ measure  ] %zu senders to a workload that reads nothing, under a %llu MiB cgroup limit: "
              "at most %.0f bytes held (budget %llu, HTTP/2 windows would allow %llu), RSS %ld KB (baseline %ld KB), "
              "cgroup peak %llu KB, %.0f read pauses, legitimate client served in %lld ms\n",
              connected.load(), static_cast<unsigned long long>(kLimit >> 20), now,
              static_cast<unsigned long long>(budget), static_cast<unsigned long long>(tunnels * (16ull << 20)),
              during, baseline, static_cast<unsigned long long>(cgroup.peakBytes() >> 10),
              n2.metric("ferry_hbone_read_pauses_total") - pauses_before,
              served ? static_cast<long long>(served->count()) : -1LL);
  EXPECT_LT(static_cast<uint64_t>(during) * 1024, kLimit - kLimit / 4);

  // The workload reads: every byte arrives, and what ferryd held is let go.
  release.now();
  for (auto& t : senders) t.join();
  EXPECT_EQ(connected.load(), kSenders);
  EXPECT_EQ(finished.load(), kSenders) << "every sender's bytes were taken";
  EXPECT_TRUE(waitFor([&] { return drained.load() == kSenders * kBytesEach; }, std::chrono::seconds(30)))
      << drained.load() << " of " << kSenders * kBytesEach << " bytes arrived";
  EXPECT_TRUE(waitFor([&] { return n2.metric(held) == 0; }));
  // n1's 20 tunnels stay open, idle, until its pool lets them go: ~175 KB each that the
  // baseline (one tunnel) did not have. n1 restarts instead, and one tunnel is made again.
  const std::string tunnels_open = "ferry_admitted_connections{listener=\"hbone\"}";
  const double trims = n2.metric("ferry_memory_trims_total");
  n1.reset();
  EXPECT_TRUE(waitFor([&] { return n2.metric(tunnels_open) == 0; }));
  EXPECT_TRUE(waitFor([&] { return n2.metric("ferry_memory_trims_total") > trims; }, std::chrono::seconds(15)));
  n1.emplace(files, "n1", n1_config);
  ASSERT_TRUE(n1->ok());
  EXPECT_TRUE(timeToServe().has_value());
  const long after = n2.rssKb();
  std::printf("[ measure  ] after: RSS %ld KB (%+.1f %% of the baseline), cgroup peak %llu KB of %llu KB\n", after,
              100.0 * (after - baseline) / baseline, static_cast<unsigned long long>(cgroup.peakBytes() >> 10),
              static_cast<unsigned long long>(kLimit >> 10));
  EXPECT_EQ(cgroup.oomKills(), 0) << "never OOM-killed";
  EXPECT_EQ(::kill(n2.pid(), 0), 0) << "still running";
  if (kAllocatorGivesMemoryBack) {
    EXPECT_LE(after, baseline * 110 / 100) << "RSS must come back within 10 % of its baseline";
  }
}

}  // namespace
}  // namespace ferry::testing
