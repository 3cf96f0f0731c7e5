#pragma once
// An in-process "two node" lab on loopback: ferryd instances for node n1 and n2, pods as
// loopback addresses (127.0.1.x on n1, 127.0.2.x on n2), real TLS and HBONE between them.
// Capture is stood in for by PROXY protocol v2 on 15001/15006 (the tc datapath tier
// exercises the real capture); everything after the original destination is the same
// code path as in production.
#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "proxy/identity/dir_cert_source.h"
#include "proxy/identity/tls_context.h"
#include "proxy/server/server.h"
#include "tests/support/temp_dir.h"

namespace ferry::testing {

using Clock = std::chrono::steady_clock;

// Polls `cond` until it holds or `timeout` passes (for counters updated just after the
// event a test waits on). Returns the last value of cond.
bool waitFor(const std::function<bool()>& cond, std::chrono::milliseconds timeout = std::chrono::seconds(10));

struct Pod {
  std::string name;
  std::string sa;
  std::string node;
  std::string ip;
  bool hbone = true;
  std::string tls_mode = "permissive";
  std::string labels = "{}";  // YAML map: what policy selectors match
};

// Temp dir with a CA, one SVID per service account, and the workloads file.
class LabFiles {
 public:
  LabFiles();
  ~LabFiles();
  const std::string& dir() const { return dir_; }
  std::string certDir() const { return dir_ + "/certs"; }
  std::string caDir() const { return dir_ + "/ca"; }
  // The standard pods: n1: c1 127.0.1.10 (sa client), c2 127.0.1.11 (sa other);
  // n2: s1 127.0.2.10 (sa server), s2 127.0.2.11 (sa strict, STRICT);
  // n3: b1 127.0.4.10 (sa server3; no ferryd runs for n3). s1 carries app: server, s2
  // app: strict.
  static std::vector<Pod> defaultPods();
  // Config YAML for `node` (n1 or n2) plus `extra` top-level YAML lines; two workers and
  // log level error unless `extra` sets `workers` or `log_level`.
  std::string configYaml(const std::string& node, const std::string& extra = "") const;

 private:
  ferry::test_support::TempDir tmp_{"it"};
  const std::string dir_ = tmp_.path();
};

class Node {
 public:
  // Writes the YAML to configPath(), starts the server from that file (it watches it, and
  // re-reads it on SIGHUP) and its control loop; fails the test on error.
  Node(const LabFiles& files, const std::string& node, const std::string& extra = "");
  // <lab dir>/<node>.yaml
  const std::string& configPath() const { return config_path_; }
  ~Node();
  server::Server& server() { return *server_; }
  session::Stats& stats() { return server_->stats(); }
  uint64_t closed(session::Direction d, session::CloseReason r) {
    return stats().closed[static_cast<size_t>(d)][static_cast<size_t>(r)].load();
  }
  // Started and ready.
  bool ok() const { return ok_; }
  // Started (listeners bound, control loop running), ready or not.
  bool started() const { return started_; }
  // A value of the Prometheus text on /metrics: `series` is the metric name with its labels,
  // e.g. ferry_trust_bundle_roots or ferry_svid_rejections_total{direction="inbound",...}.
  // -1 when absent.
  double metric(const std::string& series);

 private:
  std::string config_path_;
  std::unique_ptr<server::Server> server_;
  std::thread control_;
  bool ok_ = false;
  bool started_ = false;
};

// n1 and n2 with the standard pods, started by the test (startNodes), both ready. The log
// level is process-wide: every test gets the lab's (error) back afterwards.
class LoopbackNodesTest : public ::testing::Test {
 protected:
  // Both with `extra` config lines.
  void startNodes(const std::string& extra = "") { startNodes(extra, extra); }
  void startNodes(const std::string& n1_extra, const std::string& n2_extra);
  void TearDown() override;

  LabFiles files_;
  std::unique_ptr<Node> n1_, n2_;
};

// The client TLS of the lab's pods, as a raw HBONE client needs it: the SVID of a service
// account (client, other, ...) from the lab's cert dir.
class LabClientTls {
 public:
  explicit LabClientTls(const LabFiles& files)
      : certs_(files.certDir(), "cluster.local"), cache_(certs_, "cluster.local") {}
  // Null (and a test failure) when the SVID does not load.
  std::shared_ptr<boost::asio::ssl::context> context(const std::string& service_account) {
    auto ctx = cache_.clientContext(identity::SpiffeId::forWorkload("cluster.local", "default", service_account));
    EXPECT_TRUE(ctx.ok()) << ctx.status();
    return ctx.ok() ? *ctx : nullptr;
  }

 private:
  identity::DirCertSource certs_;
  identity::TlsContextCache cache_;
};

// The same, started before each test with the lab's config.
class TwoNodeTest : public LoopbackNodesTest {
 protected:
  void SetUp() override { ASSERT_NO_FATAL_FAILURE(startNodes()); }
};

// A real ferryd process (the built binary `binary`) for `node`: its config is the lab's
// plus `extra` (<lab dir>/<node>-<tag>.yaml), its output goes to <lab dir>/<node>-<tag>.log.
// Killed (SIGKILL) with the object, or with the test process, if it still runs.
class FerrydProcess {
 public:
  FerrydProcess(const std::string& binary, const LabFiles& files, const std::string& node,
                const std::string& extra = "", const std::string& tag = "process");
  ~FerrydProcess() { kill(); }
  FerrydProcess(const FerrydProcess&) = delete;
  FerrydProcess& operator=(const FerrydProcess&) = delete;
  bool running() const { return pid_ > 0; }
  int pid() const { return pid_; }
  void kill();
  void signal(int sig);
  // Waits for it to exit: its exit code (128 + signal when a signal ended it), or -1 when it
  // still runs after `timeout`.
  int waitExit(std::chrono::milliseconds timeout);
  std::string log() const;

 private:
  int pid_ = -1;
  std::string log_;
};

// GET http://ip:port/path (HTTP/1.1, Connection: close). Returns the status (0 on failure)
// and sets `body`.
int httpGet(const std::string& ip, uint16_t port, const std::string& path, std::string* body = nullptr);

// A blocking TCP application server on a pod address; one thread per connection. A
// behaviour must not close its fd: the server closes it when the behaviour returns.
class AppServer {
 public:
  using Behaviour = std::function<void(int fd)>;
  AppServer(const std::string& ip, uint16_t port, Behaviour behaviour);
  ~AppServer();
  // Peer IPs seen so far.
  std::vector<std::string> peers();
  size_t accepted() const { return accepted_.load(); }

  static void echo(int fd);

 private:
  int listen_fd_ = -1;
  Behaviour behaviour_;
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<std::string> peers_;
  std::vector<std::thread> handlers_;
  std::set<int> open_fds_;
  std::atomic<bool> stop_{false};
  std::atomic<size_t> accepted_{0};
};

// Opens a connection "captured" from pod `src_ip`: connects from src_ip to the node's
// listener and sends the PROXY header naming `dst_ip:dst_port` as original destination.
// Returns the fd or -1.
int connectCaptured(const std::string& src_ip, const std::string& listener_ip, uint16_t listener_port,
                    const std::string& dst_ip, uint16_t dst_port);
inline int connectOutbound(const std::string& src_ip, const std::string& dst_ip, uint16_t dst_port) {
  // n1's outbound listener unless the source is an n2 pod.
  std::string listener = src_ip.rfind("127.0.2.", 0) == 0 ? "127.0.2.1" : "127.0.1.1";
  return connectCaptured(src_ip, listener, 15001, dst_ip, dst_port);
}

// A program run to its end (tests of ferryctl): its exit status (-1 if it did not exit)
// and what it wrote.
struct ProgramRun {
  int exit = -1;
  std::string out, err;
};
// Runs `argv` (argv[0] a path) with its output in files under `scratch_dir` (no pipe to drain
// while waiting for it); with `env`, that is its whole environment, else it inherits ours.
ProgramRun runProgram(const std::string& scratch_dir, const std::vector<std::string>& argv,
                      const std::vector<std::string>* env = nullptr);

// Writes `text` to `path` through a rename (watchers never see half a file).
void writeFile(const std::string& path, const std::string& text);

bool sendAll(int fd, const char* data, size_t size);
// Reads until EOF; returns false on error (errno kept).
bool recvAll(int fd, std::string& out);
// Reads exactly n bytes.
bool recvExact(int fd, char* data, size_t n);
void setRecvTimeout(int fd, std::chrono::milliseconds t);
void setAbortOnClose(int fd);  // SO_LINGER {1,0}: close() will send a RST
void abortClose(int fd);
// `ip`:`port` as a socket address (IPv4).
sockaddr_in ipv4Address(const std::string& ip, uint16_t port);
// One short connection from pod `src` to `dst`:`port` through the mesh: true when `msg`
// comes back intact (an echo server there; at most 20 s).
bool echoOnce(const std::string& src, const std::string& dst, const std::string& msg = "hello",
              uint16_t port = 8080);

}  // namespace ferry::testing
