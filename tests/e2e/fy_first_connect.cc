// fy_first_connect: the first-packet test's client (tests/e2e/cni_e2e.sh, issue 14). Runs a
// CNI chain's ADD (the command after --), and the moment it returns connects from the new
// pod's netns, as a pod's process that starts at once would: no fork, no exec, no netns
// switch by a tool in between (the netns is opened before the chain runs, entered after).
// Sends a request, reads the answer, prints one JSON line:
//   {"add_exit": N, "add_ms": F, "gap_us": F, "connected": B, "error": "...", "answer": "..."}
// gap_us is from the chain's exit (waitpid) to the connect() call.
//
//   fy_first_connect --netns /run/netns/POD --connect IP:PORT --send TEXT [--out FILE] -- CMD ARGS...
//
// The chain's stdout goes to FILE (its result), its stderr stays ours. Exit 0 when it
// printed its line (the verdicts are the caller's to judge), 2 on bad arguments.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

std::string jsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

int usage() {
  std::fprintf(stderr, "usage: fy_first_connect --netns PATH --connect IP:PORT --send TEXT [--out FILE] -- CMD ARGS...\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string netns, connect_to, send_text, out_file = "/dev/null";
  int i = 1;
  for (; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (i + 1 >= argc) return usage();
    if (a == "--netns") netns = argv[++i];
    else if (a == "--connect") connect_to = argv[++i];
    else if (a == "--send") send_text = argv[++i];
    else if (a == "--out") out_file = argv[++i];
    else return usage();
  }
  if (netns.empty() || connect_to.empty() || i >= argc) return usage();
  size_t colon = connect_to.rfind(':');
  sockaddr_in dst{};
  dst.sin_family = AF_INET;
  if (colon == std::string::npos || inet_pton(AF_INET, connect_to.substr(0, colon).c_str(), &dst.sin_addr) != 1) return usage();
  dst.sin_port = htons(static_cast<uint16_t>(std::stoi(connect_to.substr(colon + 1))));
  int ns_fd = ::open(netns.c_str(), O_RDONLY | O_CLOEXEC);
  if (ns_fd < 0) {
    std::fprintf(stderr, "fy_first_connect: %s: %s\n", netns.c_str(), std::strerror(errno));
    return 2;
  }
  int out_fd = ::open(out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out_fd < 0) return usage();

  using Clock = std::chrono::steady_clock;
  auto t0 = Clock::now();
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out_fd, 1);
    ::execvp(argv[i], argv + i);
    std::perror("fy_first_connect: exec");
    _exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  auto added = Clock::now();
  int add_exit = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  // The pod's process starts now: enter its netns and connect at once.
  bool entered = ::setns(ns_fd, CLONE_NEWNET) == 0;
  int fd = entered ? ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0) : -1;
  timeval tv{5, 0};
  if (fd >= 0) {
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  }
  auto connecting = Clock::now();
  bool connected = fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&dst), sizeof(dst)) == 0;
  std::string error = !entered ? std::string("setns: ") + std::strerror(errno)
                      : fd < 0  ? std::string("socket: ") + std::strerror(errno)
                      : !connected ? std::string("connect: ") + std::strerror(errno)
                                   : "";
  std::string answer;
  if (connected) {
    if (::send(fd, send_text.data(), send_text.size(), MSG_NOSIGNAL) < 0) error = std::string("send: ") + std::strerror(errno);
    char buf[4096];
    for (;;) {
      ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) {
        if (n < 0) error = std::string("recv: ") + std::strerror(errno);
        break;
      }
      answer.append(buf, static_cast<size_t>(n));
      if (answer.size() > 65536) break;
    }
  }
  auto ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
  std::printf("{\"add_exit\": %d, \"add_ms\": %.3f, \"gap_us\": %.1f, \"connected\": %s, \"error\": %s, \"answer\": %s}\n",
              add_exit, ms(added - t0), ms(connecting - added) * 1000.0, connected ? "true" : "false",
              jsonString(error).c_str(), jsonString(answer).c_str());
  return 0;
}
