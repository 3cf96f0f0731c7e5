#include "tests/integration/loopback_lab.h"

#include <arpa/inet.h>
#include <poll.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <gtest/gtest.h>

#include "proxy/common/file.h"
#include "proxy/config/config.h"
#include "proxy/identity/ca.h"
#include "proxy/identity/openssl_util.h"
#include "proxy/session/proxy_protocol.h"

extern char** environ;

namespace ferry::testing {

namespace {

// 1,000 concurrent connections need about 4 fds each in this one process.
struct RaiseFdLimit {
  RaiseFdLimit() {
    rlimit rl{};
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
      rl.rlim_cur = rl.rlim_max;
      setrlimit(RLIMIT_NOFILE, &rl);
    }
  }
} raise_fd_limit;

// The lab's addresses and ports are fixed, and ferryd's listeners use SO_REUSEPORT: a second
// test process on this machine (another checkout's ctest, a CI run beside a developer's)
// would bind the same 127.0.2.x:15008 and the kernel would spread connections over both
// processes, failing handshakes at random. ctest's RESOURCE_LOCK covers one ctest run only;
// this lock, taken by the first lab a test builds (not at start-up: ctest lists the tests
// while building) and held for the life of the process, covers the machine.
struct MachineWideLabLock {
  MachineWideLabLock() {
    fd = ::open("/tmp/ferry-loopback-lab.lock", O_CREAT | O_RDWR | O_CLOEXEC, 0666);
    if (fd >= 0) ::flock(fd, LOCK_EX);
  }
  int fd = -1;
};


}  // namespace

ProgramRun runProgram(const std::string& scratch_dir, const std::vector<std::string>& args,
                      const std::vector<std::string>* env) {
  std::string out = scratch_dir + "/program.out", err = scratch_dir + "/program.err";
  std::vector<std::string> words = args, env_words = env != nullptr ? *env : std::vector<std::string>{};
  std::vector<char*> argv, envp;
  for (auto& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  for (auto& e : env_words) envp.push_back(e.data());
  envp.push_back(nullptr);
  int out_fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  int err_fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  pid_t pid = ::fork();
  if (pid == 0) {
    // This process runs ferryd's threads: only async-signal-safe calls until exec.
    ::dup2(out_fd, 1);
    ::dup2(err_fd, 2);
    if (env != nullptr) {
      ::execve(argv[0], argv.data(), envp.data());
    } else {
      ::execv(argv[0], argv.data());
    }
    ::_exit(127);
  }
  ::close(out_fd);
  ::close(err_fd);
  ProgramRun run;
  int status = 0;
  if (pid > 0 && ::waitpid(pid, &status, 0) == pid && WIFEXITED(status)) run.exit = WEXITSTATUS(status);
  auto slurp = [](const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  run.out = slurp(out);
  run.err = slurp(err);
  return run;
}

void writeFile(const std::string& path, const std::string& text) {
  {
    std::ofstream out(path + ".tmp");
    out << text;
  }
  std::filesystem::rename(path + ".tmp", path);
}

bool waitFor(const std::function<bool()>& cond, std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  while (!cond()) {
    if (Clock::now() > deadline) return cond();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

std::vector<Pod> LabFiles::defaultPods() {
  return {
      {"c1", "client", "n1", "127.0.1.10"},
      {"c2", "other", "n1", "127.0.1.11"},
      {"s1", "server", "n2", "127.0.2.10", true, "permissive", "{app: server}"},
      {"s2", "strict", "n2", "127.0.2.11", true, "strict", "{app: strict}"},
      {"b1", "server3", "n3", "127.0.4.10"},
  };
}

LabFiles::LabFiles() {
  static MachineWideLabLock machine_wide_lab_lock;
  auto ca = identity::CertificateAuthority::createRoot("cluster.local", std::chrono::hours(24));
  EXPECT_TRUE(ca.ok()) << ca.status();
  std::filesystem::create_directories(caDir());
  EXPECT_TRUE(ca->writePem(caDir() + "/ca.pem", caDir() + "/ca.key").ok());
  std::filesystem::create_directories(certDir());
  writeFile(certDir() + "/bundle.pem", *identity::certToPem(ca->cert()));
  std::string yaml = "workloads:\n";
  for (const auto& p : defaultPods()) {
    auto id = identity::SpiffeId::forWorkload("cluster.local", "default", p.sa);
    auto leaf = ca->issueLeaf(id, std::chrono::hours(1));
    EXPECT_TRUE(leaf.ok()) << leaf.status();
    EXPECT_TRUE(identity::writeSvidFiles(certDir(), id, *leaf, {}).ok());
    yaml += "  - {name: " + p.name + ", namespace: default, service_account: " + p.sa +
            ", node: " + p.node + ", ips: [" + p.ip + "], hbone: " + (p.hbone ? "true" : "false") +
            ", tls_mode: " + p.tls_mode + ", labels: " + p.labels + "}\n";
  }
  writeFile(dir_ + "/workloads.yaml", yaml);
}

LabFiles::~LabFiles() = default;

std::string LabFiles::configYaml(const std::string& node, const std::string& extra) const {
  std::string n = node == "n1" ? "1" : "2";
  std::string hbone;
  for (const auto& p : defaultPods()) {
    if (p.node == node) hbone += (hbone.empty() ? "\"" : ", \"") + p.ip + ":15008\"";
  }
  return "node: " + node + "\ntrust_domain: cluster.local\nworkloads_file: " + dir_ +
         "/workloads.yaml\ncert_dir: " + certDir() + "\nlisten:\n  outbound: [\"127.0." + n +
         ".1:15001\"]\n  inbound_plaintext: [\"127.0." + n + ".1:15006\"]\n  hbone: [" + hbone +
         "]\n  admin: 127.0." + n + ".1:15000\n  metrics: 127.0." + n + ".1:15020\n  readiness: 127.0." +
         n + ".1:15021\ntransparent: false\noriginal_destination: proxy_protocol\n" +
         (extra.find("workers:") != std::string::npos ? "" : "workers: 2\n") +
         (extra.find("log_level:") != std::string::npos
              ? ""
              : std::string("log_level: ") +
                    (std::getenv("FERRY_TEST_LOG") ? std::getenv("FERRY_TEST_LOG") : "error") + "\n") +
         extra;
}

Node::Node(const LabFiles& files, const std::string& node, const std::string& extra)
    : config_path_(files.dir() + "/" + node + ".yaml") {
  writeFile(config_path_, files.configYaml(node, extra));
  common::WatchedFile file(config_path_);
  auto cfg = config::loadConfigFile(file);
  if (!cfg.ok()) {
    ADD_FAILURE() << cfg.status();
    return;
  }
  server_ = std::make_unique<server::Server>(std::move(*cfg), std::move(file));
  auto st = server_->start();
  if (!st.ok()) {
    ADD_FAILURE() << "start " << node << ": " << st;
    return;
  }
  control_ = std::thread([this] { server_->run(); });
  started_ = true;
  ok_ = server_->ready();
}

void LoopbackNodesTest::startNodes(const std::string& n1_extra, const std::string& n2_extra) {
  n1_ = std::make_unique<Node>(files_, "n1", n1_extra);
  n2_ = std::make_unique<Node>(files_, "n2", n2_extra);
  ASSERT_TRUE(n1_->ok());
  ASSERT_TRUE(n2_->ok());
}

void LoopbackNodesTest::TearDown() {
  n1_.reset();
  n2_.reset();
  common::setLogLevel(common::LogLevel::kError);
}

double Node::metric(const std::string& series) {
  std::string text = server_->renderMetrics();
  std::string needle = "\n" + series + " ";
  auto pos = text.find(needle);
  if (pos == std::string::npos) return -1;
  return std::strtod(text.c_str() + pos + needle.size(), nullptr);
}

int httpGet(const std::string& ip, uint16_t port, const std::string& path, std::string* body) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  auto a = ipv4Address(ip, port);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return 0;
  }
  std::string request = "GET " + path + " HTTP/1.1\r\nHost: " + ip + "\r\nConnection: close\r\n\r\n";
  std::string response;
  setRecvTimeout(fd, std::chrono::seconds(10));
  bool ok = sendAll(fd, request.data(), request.size()) && recvAll(fd, response);
  ::close(fd);
  // "HTTP/1.1 200 OK\r\n...\r\n\r\nbody"
  if (!ok || response.size() < 12 || response.compare(0, 5, "HTTP/") != 0) return 0;
  if (body != nullptr) {
    auto end = response.find("\r\n\r\n");
    *body = end == std::string::npos ? "" : response.substr(end + 4);
  }
  return std::atoi(response.c_str() + 9);
}

FerrydProcess::FerrydProcess(const std::string& binary, const LabFiles& files, const std::string& node,
                             const std::string& extra, const std::string& tag) {
  std::string config = files.dir() + "/" + node + "-" + tag + ".yaml";
  writeFile(config, files.configYaml(node, extra));
  log_ = files.dir() + "/" + node + "-" + tag + ".log";
  std::string path = binary;
  char* argv[] = {path.data(), const_cast<char*>("--config"), config.data(), nullptr};
  int log_fd = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  pid_ = ::fork();
  if (pid_ == 0) {
    // Only async-signal-safe calls here. A test that dies leaves no ferryd behind.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::dup2(log_fd, 1);
    ::dup2(log_fd, 2);
    ::execve(argv[0], argv, environ);
    ::_exit(127);
  }
  if (log_fd >= 0) ::close(log_fd);
}

void FerrydProcess::kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

void FerrydProcess::signal(int sig) {
  if (pid_ > 0) ::kill(pid_, sig);
}

int FerrydProcess::waitExit(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return -1;
  int status = 0;
  bool exited = waitFor([&] { return ::waitpid(pid_, &status, WNOHANG) == pid_; }, timeout);
  if (!exited) return -1;
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string FerrydProcess::log() const {
  std::ifstream in(log_);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

Node::~Node() {
  if (control_.joinable()) {
    server_->shutdown();
    control_.join();
  }
  server_.reset();
}

AppServer::AppServer(const std::string& ip, uint16_t port, Behaviour behaviour)
    : behaviour_(std::move(behaviour)) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  auto a = ipv4Address(ip, port);
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      ::listen(listen_fd_, 4096) != 0) {
    ADD_FAILURE() << "app server " << ip << ":" << port << ": " << strerror(errno);
    return;
  }
  acceptor_ = std::thread([this] {
    for (;;) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) {
        if (stop_) return;
        continue;
      }
      sockaddr_in peer{};
      socklen_t len = sizeof(peer);
      int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &len, SOCK_CLOEXEC);
      if (fd < 0) continue;
      char buf[INET_ADDRSTRLEN];
      inet_ntop(AF_INET, &peer.sin_addr, buf, sizeof(buf));
      std::lock_guard lock(mu_);
      peers_.push_back(buf);
      ++accepted_;
      open_fds_.insert(fd);
      handlers_.emplace_back([this, fd] {
        behaviour_(fd);
        // Closed here, under the lock, so the destructor never shuts down a reused fd.
        std::lock_guard lock(mu_);
        open_fds_.erase(fd);
        ::close(fd);
      });
    }
  });
}

AppServer::~AppServer() {
  stop_ = true;
  if (acceptor_.joinable()) acceptor_.join();
  {
    // Unblock handlers still waiting on a peer (a test that failed half way).
    std::lock_guard lock(mu_);
    for (int fd : open_fds_) ::shutdown(fd, SHUT_RDWR);
  }
  for (auto& t : handlers_) {
    if (t.joinable()) t.join();
  }
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

std::vector<std::string> AppServer::peers() {
  std::lock_guard lock(mu_);
  return peers_;
}

void AppServer::echo(int fd) {
  char buf[64 * 1024];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    if (!sendAll(fd, buf, static_cast<size_t>(n))) break;
  }
  ::shutdown(fd, SHUT_WR);
  // the AppServer closes fd when this returns
}

int connectCaptured(const std::string& src_ip, const std::string& listener_ip, uint16_t listener_port,
                    const std::string& dst_ip, uint16_t dst_port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  auto src = ipv4Address(src_ip, 0);
  auto dst = ipv4Address(listener_ip, listener_port);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&src), sizeof(src)) != 0 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&dst), sizeof(dst)) != 0) {
    ::close(fd);
    return -1;
  }
  sockaddr_in local{};
  socklen_t len = sizeof(local);
  getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len);
  auto header = session::encodeProxyV2(
      {boost::asio::ip::make_address(src_ip), ntohs(local.sin_port)},
      {boost::asio::ip::make_address(dst_ip), dst_port});
  if (!sendAll(fd, reinterpret_cast<const char*>(header.data()), header.size())) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool sendAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

bool recvAll(int fd, std::string& out) {
  char buf[64 * 1024];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n == 0) return true;
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    out.append(buf, static_cast<size_t>(n));
  }
}

sockaddr_in ipv4Address(const std::string& ip, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  inet_pton(AF_INET, ip.c_str(), &a.sin_addr);
  return a;
}

bool echoOnce(const std::string& src, const std::string& dst, const std::string& msg, uint16_t port) {
  int fd = connectOutbound(src, dst, port);
  if (fd < 0) return false;
  setRecvTimeout(fd, std::chrono::seconds(20));
  std::string back(msg.size(), '\0');
  bool ok = sendAll(fd, msg.data(), msg.size()) && recvExact(fd, back.data(), back.size()) && back == msg;
  ::close(fd);
  return ok;
}

bool recvExact(int fd, char* data, size_t n) {
  while (n > 0) {
    ssize_t r = ::recv(fd, data, n, 0);
    if (r <= 0) {
      if (r < 0 && errno == EINTR) continue;
      return false;
    }
    data += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

void setRecvTimeout(int fd, std::chrono::milliseconds t) {
  timeval tv{};
  tv.tv_sec = t.count() / 1000;
  tv.tv_usec = (t.count() % 1000) * 1000;
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

void setAbortOnClose(int fd) {
  linger l{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
}

void abortClose(int fd) {
  setAbortOnClose(fd);
  ::close(fd);
}

}  // namespace ferry::testing
