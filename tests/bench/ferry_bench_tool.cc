// ferry-bench-tool: the traffic programs of the benchmark suite (tests/bench/run_bench.py).
// Plain POSIX sockets, epoll and bpf(2), no ferry code: it measures whatever sits between a client
// pod and a server pod, the same way for every configuration.
//
//   serve --bind IP:PORT                     echo server (epoll, one thread, any number of
//                                            connections); runs until SIGTERM/SIGINT
//   rr    --connect IP:PORT [--size 100] [--seconds 5] [--warmup 0.5]
//                                            one connection, SIZE-byte ping-pong; prints
//                                            rate and p50/p90/p99 round-trip latency
//   conns --connect IP:PORT [--size 100] [--seconds 5] [--concurrency 32]
//                                            short connections: connect, SIZE-byte request,
//                                            SIZE-byte answer, close; prints connections/s
//   idle  --connect IP:PORT --count N        opens N connections, one 1-byte round trip on
//                                            each (so every proxy leg exists), prints
//                                            "ready", holds them until stdin closes
//   capture-wait --map PIN [--interval-us 50] [--seconds 5]
//                                            for each stdin line "present A.B.C.D" or
//                                            "absent A.B.C.D", polls the pinned BPF hash
//                                            map PIN (ferry_capture: IPv4 key in network
//                                            order) until the entry is there / gone and
//                                            prints "<CLOCK_MONOTONIC ns> <polls>", or
//                                            "timeout" after SECONDS; for k8s_registry_bench.py,
//                                            which sends the line before it writes to the API
//
// Results are one JSON object on stdout (capture-wait: one line per request). Exit 1 when
// no transaction or connection completed, so that a configuration that carries no traffic
// fails the run.
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

Clock::duration secondsOf(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "ferry-bench-tool: %s: %s\n", what, std::strerror(errno));
  std::exit(2);
}

struct Args {
  std::string mode;
  sockaddr_in addr{};
  size_t size = 100;
  double seconds = 5;
  double warmup = 0.5;
  int concurrency = 32;
  int count = 1000;
  std::string map;
  long interval_us = 50;
};

sockaddr_in parseAddr(const std::string& s) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  auto colon = s.rfind(':');
  if (colon == std::string::npos) {
    std::fprintf(stderr, "ferry-bench-tool: expected IP:PORT, got %s\n", s.c_str());
    std::exit(2);
  }
  if (inet_pton(AF_INET, s.substr(0, colon).c_str(), &a.sin_addr) != 1) {
    std::fprintf(stderr, "ferry-bench-tool: bad IPv4 address in %s\n", s.c_str());
    std::exit(2);
  }
  a.sin_port = htons(static_cast<uint16_t>(std::atoi(s.c_str() + colon + 1)));
  return a;
}

Args parse(int argc, char** argv) {
  Args a;
  if (argc < 2) {
    std::fprintf(stderr, "usage: ferry-bench-tool serve|rr|conns|idle|capture-wait [options] (see the source)\n");
    std::exit(2);
  }
  a.mode = argv[1];
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--bind" || k == "--connect") a.addr = parseAddr(v);
    else if (k == "--size") a.size = std::strtoul(v.c_str(), nullptr, 10);
    else if (k == "--seconds") a.seconds = std::atof(v.c_str());
    else if (k == "--warmup") a.warmup = std::atof(v.c_str());
    else if (k == "--concurrency") a.concurrency = std::atoi(v.c_str());
    else if (k == "--count") a.count = std::atoi(v.c_str());
    else if (k == "--map") a.map = v;
    else if (k == "--interval-us") a.interval_us = std::atol(v.c_str());
    else {
      std::fprintf(stderr, "ferry-bench-tool: unknown option %s\n", k.c_str());
      std::exit(2);
    }
  }
  if (a.size == 0 || a.size > 65536) a.size = 100;
  return a;
}

// Thousands of connections need thousands of descriptors: take the hard limit.
void raiseFdLimit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

void noDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

volatile sig_atomic_t g_stop = 0;
void onSignal(int) { g_stop = 1; }

// ---------------------------------------------------------------------------------------
int serve(const Args& a) {
  raiseFdLimit();
  signal(SIGTERM, onSignal);
  signal(SIGINT, onSignal);
  signal(SIGPIPE, SIG_IGN);
  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  int one = 1;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(lfd, reinterpret_cast<const sockaddr*>(&a.addr), sizeof(a.addr)) != 0) die("bind");
  if (listen(lfd, 4096) != 0) die("listen");
  int ep = epoll_create1(0);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = lfd;
  epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
  std::vector<char> buf(256 * 1024);
  std::vector<epoll_event> events(512);
  while (!g_stop) {
    int n = epoll_wait(ep, events.data(), static_cast<int>(events.size()), 200);
    for (int i = 0; i < n; ++i) {
      int fd = events[i].data.fd;
      if (fd == lfd) {
        for (;;) {
          int c = accept4(lfd, nullptr, nullptr, SOCK_NONBLOCK);
          if (c < 0) break;
          noDelay(c);
          epoll_event cev{};
          cev.events = EPOLLIN;
          cev.data.fd = c;
          epoll_ctl(ep, EPOLL_CTL_ADD, c, &cev);
        }
        continue;
      }
      // Level-triggered: read what is there, echo it back (blocking briefly if the peer's
      // window is full: the clients here read everything they provoke).
      ssize_t r = read(fd, buf.data(), buf.size());
      if (r <= 0) {
        if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        close(fd);
        continue;
      }
      size_t off = 0;
      while (off < static_cast<size_t>(r)) {
        ssize_t w = write(fd, buf.data() + off, r - off);
        if (w > 0) {
          off += w;
        } else if (w < 0 && errno == EAGAIN) {
          pollfd p{fd, POLLOUT, 0};
          poll(&p, 1, 1000);
        } else {
          break;
        }
      }
    }
  }
  return 0;
}

bool readExactly(int fd, char* p, size_t n) {
  while (n > 0) {
    ssize_t r = read(fd, p, n);
    if (r <= 0) {
      if (r < 0 && errno == EINTR) continue;
      return false;
    }
    p += r;
    n -= r;
  }
  return true;
}

bool writeAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w <= 0) {
      if (w < 0 && errno == EINTR) continue;
      return false;
    }
    p += w;
    n -= w;
  }
  return true;
}

double percentile(std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  size_t k = static_cast<size_t>(q * (v.size() - 1) + 0.5);
  std::nth_element(v.begin(), v.begin() + k, v.end());
  return v[k];
}

int rr(const Args& a) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  noDelay(fd);
  if (connect(fd, reinterpret_cast<const sockaddr*>(&a.addr), sizeof(a.addr)) != 0) die("connect");
  std::vector<char> out(a.size, 'x'), in(a.size);
  std::vector<double> rtt_us;
  rtt_us.reserve(1 << 20);
  auto start = Clock::now();
  auto measure_from = start + secondsOf(a.warmup);
  auto end = measure_from + secondsOf(a.seconds);
  bool ok = true;
  for (;;) {
    auto t0 = Clock::now();
    if (t0 >= end) break;
    if (!writeAll(fd, out.data(), out.size()) || !readExactly(fd, in.data(), in.size())) {
      ok = false;
      break;
    }
    auto t1 = Clock::now();
    if (t0 >= measure_from) rtt_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  close(fd);
  double total = 0;
  for (double v : rtt_us) total += v;
  size_t count = rtt_us.size();
  double mean = count ? total / count : 0;
  double p50 = percentile(rtt_us, 0.50), p90 = percentile(rtt_us, 0.90), p99 = percentile(rtt_us, 0.99);
  std::printf("{\"transactions\": %zu, \"seconds\": %.3f, \"rate\": %.1f, \"mean_us\": %.2f, "
              "\"p50_us\": %.2f, \"p90_us\": %.2f, \"p99_us\": %.2f, \"broken\": %s}\n",
              count, a.seconds, count / a.seconds, mean, p50, p90, p99, ok ? "false" : "true");
  return count > 0 && ok ? 0 : 1;
}

// ---------------------------------------------------------------------------------------
// Short connections, CONCURRENCY at a time, one thread, epoll.
struct Conn {
  int fd = -1;
  enum State { kConnecting, kReading } state = kConnecting;
  size_t got = 0;
};

int conns(const Args& a) {
  raiseFdLimit();
  signal(SIGPIPE, SIG_IGN);
  int ep = epoll_create1(0);
  std::vector<Conn> slots(a.concurrency);
  std::vector<char> req(a.size, 'c'), in(a.size);
  uint64_t done = 0, errors = 0;
  auto start = Clock::now();
  auto end = start + secondsOf(a.seconds);
  bool stopping = false;

  auto open = [&](size_t i) {
    Conn& c = slots[i];
    c = Conn{};
    c.fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (c.fd < 0) die("socket");
    noDelay(c.fd);
    int r = connect(c.fd, reinterpret_cast<const sockaddr*>(&a.addr), sizeof(a.addr));
    if (r != 0 && errno != EINPROGRESS) {
      ++errors;
      close(c.fd);
      c.fd = -1;
      return;
    }
    epoll_event ev{};
    ev.events = EPOLLOUT;
    ev.data.u64 = i;
    epoll_ctl(ep, EPOLL_CTL_ADD, c.fd, &ev);
  };
  auto finish = [&](size_t i, bool ok) {
    Conn& c = slots[i];
    if (c.fd >= 0) close(c.fd);  // close() also removes it from the epoll set
    c.fd = -1;
    ok ? ++done : ++errors;
    if (!stopping) open(i);
  };
  for (int i = 0; i < a.concurrency; ++i) open(i);
  std::vector<epoll_event> events(a.concurrency + 1);
  for (;;) {
    if (!stopping && Clock::now() >= end) stopping = true;
    bool any = false;
    for (auto& c : slots) any |= c.fd >= 0;
    if (stopping && !any) break;
    if (!stopping) {
      for (size_t i = 0; i < slots.size(); ++i) {
        if (slots[i].fd < 0) open(i);  // a failed connect() leaves the slot empty
      }
    }
    int n = epoll_wait(ep, events.data(), static_cast<int>(events.size()), 100);
    if (stopping && n == 0 && Clock::now() > end + std::chrono::seconds(5)) break;
    for (int k = 0; k < n; ++k) {
      size_t i = events[k].data.u64;
      Conn& c = slots[i];
      if (c.fd < 0) continue;
      if (c.state == Conn::kConnecting) {
        int err = 0;
        socklen_t len = sizeof(err);
        getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err != 0 || write(c.fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) {
          finish(i, false);
          continue;
        }
        c.state = Conn::kReading;
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.u64 = i;
        epoll_ctl(ep, EPOLL_CTL_MOD, c.fd, &ev);
        continue;
      }
      ssize_t r = read(c.fd, in.data(), in.size() - c.got);
      if (r < 0 && errno == EAGAIN) continue;
      if (r <= 0) {
        finish(i, false);
        continue;
      }
      c.got += r;
      if (c.got == a.size) finish(i, true);
    }
  }
  // Connections still in flight at the deadline finish (bounded) and count: a rate over
  // the nominal duration.
  double secs = a.seconds;
  std::printf("{\"connections\": %llu, \"errors\": %llu, \"seconds\": %.3f, \"rate\": %.1f}\n",
              static_cast<unsigned long long>(done), static_cast<unsigned long long>(errors),
              secs, done / secs);
  return done > 0 ? 0 : 1;
}

// ---------------------------------------------------------------------------------------
int idle(const Args& a) {
  raiseFdLimit();
  signal(SIGPIPE, SIG_IGN);
  std::vector<int> fds;
  fds.reserve(a.count);
  int failed = 0;
  char b = 'i';
  // One at a time keeps it simple and never floods a proxy's accept queue; with
  // blocking sockets each round trip proves the whole chain for that connection.
  for (int i = 0; i < a.count; ++i) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) {
      ++failed;
      break;
    }
    timeval tv{10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char got = 0;
    if (connect(fd, reinterpret_cast<const sockaddr*>(&a.addr), sizeof(a.addr)) != 0 ||
        write(fd, &b, 1) != 1 || !readExactly(fd, &got, 1)) {
      ++failed;
      close(fd);
      continue;
    }
    fds.push_back(fd);
  }
  std::printf("{\"open\": %zu, \"failed\": %d}\n", fds.size(), failed);
  std::fflush(stdout);
  // Hold until the caller closes our stdin.
  char c;
  while (read(0, &c, 1) > 0) {
  }
  for (int fd : fds) close(fd);
  return fds.empty() ? 1 : 0;
}

// ---------------------------------------------------------------------------------------
// The bpf(2) syscall directly: this tool links no ferry code and no libbpf.
long bpfCall(int cmd, bpf_attr& attr) { return syscall(SYS_bpf, cmd, &attr, sizeof(attr)); }

int captureWait(const Args& a) {
  bpf_attr get{};
  get.pathname = reinterpret_cast<uint64_t>(a.map.c_str());
  int fd = static_cast<int>(bpfCall(BPF_OBJ_GET, get));
  if (fd < 0) die(("opening the pinned map " + a.map).c_str());
  // Big enough for any value ferry's maps hold (ferry_capture's is 4 bytes).
  uint8_t value[256];
  std::string line;
  while (std::getline(std::cin, line)) {
    auto space = line.find(' ');
    std::string want = line.substr(0, space);
    in_addr ip{};
    if (space == std::string::npos || (want != "present" && want != "absent") ||
        inet_pton(AF_INET, line.substr(space + 1).c_str(), &ip) != 1) {
      std::fprintf(stderr, "ferry-bench-tool: expected \"present|absent A.B.C.D\", got \"%s\"\n", line.c_str());
      return 2;
    }
    uint32_t key = ip.s_addr;  // network order, as ferry_ipv4_key
    auto deadline = Clock::now() + secondsOf(a.seconds);
    uint64_t polls = 0;
    for (;;) {
      bpf_attr look{};
      look.map_fd = static_cast<uint32_t>(fd);
      look.key = reinterpret_cast<uint64_t>(&key);
      look.value = reinterpret_cast<uint64_t>(value);
      bool there = bpfCall(BPF_MAP_LOOKUP_ELEM, look) == 0;
      auto now = Clock::now();
      ++polls;
      if (there == (want == "present")) {
        std::printf("%lld %llu\n", static_cast<long long>(now.time_since_epoch() / std::chrono::nanoseconds(1)),
                    static_cast<unsigned long long>(polls));
        break;
      }
      if (now > deadline) {
        std::printf("timeout\n");
        break;
      }
      // A short sleep, not a spin: the machine's two cores are what ferryd and the API
      // server run on. The resolution is this interval plus a wake-up.
      timespec ts{0, a.interval_us * 1000};
      nanosleep(&ts, nullptr);
    }
    std::fflush(stdout);
  }
  close(fd);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a = parse(argc, argv);
  if (a.mode == "serve") return serve(a);
  if (a.mode == "rr") return rr(a);
  if (a.mode == "conns") return conns(a);
  if (a.mode == "idle") return idle(a);
  if (a.mode == "capture-wait") return captureWait(a);
  std::fprintf(stderr, "ferry-bench-tool: unknown mode %s\n", a.mode.c_str());
  return 2;
}
