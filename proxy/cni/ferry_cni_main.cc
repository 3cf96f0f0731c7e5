// ferry-cni: the chained CNI plugin (docs/install.md, "The CNI chain"). The runtime runs it
// once per call with the CNI_* environment and the plugin's configuration on stdin; it asks
// ferryd over the node's enrolment socket and prints the result or a CNI error. While ferryd
// is unreachable under failurePolicy closed it asks the API server whether ferry would enrol
// the pod at all (api.h). The exchange with ferryd, and the API server's two answers, are
// each bounded by timeoutMs. Statically linked: Boost.JSON and OpenSSL compiled in.
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>

#include "proxy/cni/api_fetch.h"
#include "proxy/cni/plugin.h"
#include "proxy/cni/poll_wait.h"
#include "proxy/common/unique_fd.h"

namespace {

using namespace ferry::cni;
using Clock = std::chrono::steady_clock;

std::variant<Answer, Unreachable> exchange(const Request& req, const PluginOptions& options) {
  auto deadline = Clock::now() + std::chrono::milliseconds(options.timeout_ms);
  ferry::common::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return Unreachable{std::string("socket: ") + std::strerror(errno)};
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (options.socket.size() >= sizeof(addr.sun_path)) return Unreachable{"the socket path is too long"};
  std::memcpy(addr.sun_path, options.socket.c_str(), options.socket.size() + 1);
  std::string why;
  // A unix connect either completes at once or fails (EAGAIN: ferryd's backlog is full).
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return Unreachable{std::string("connect: ") + std::strerror(errno)};
  }
  std::string body = encodeRequest(req);
  std::string out = frameHeader(static_cast<uint32_t>(body.size())) + body;
  size_t sent = 0;
  while (sent < out.size()) {
    ssize_t n = ::send(fd.get(), out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!waitFor(fd.get(), POLLOUT, deadline, &why)) return Unreachable{why};
    } else {
      return Unreachable{std::string("send: ") + std::strerror(errno)};
    }
  }
  std::string in;
  size_t want = 4;
  while (in.size() < want) {
    char buf[4096];
    ssize_t n = ::recv(fd.get(), buf, std::min(sizeof(buf), want - in.size()), 0);
    if (n > 0) {
      in.append(buf, static_cast<size_t>(n));
      if (want == 4 && in.size() == 4) {
        uint32_t len = frameLength(reinterpret_cast<const unsigned char*>(in.data()));
        if (len == 0 || len > kMaxMessageBytes) return Answer{Verdict::kError, "ferryd's answer has a bad length", {}};
        want += len;
      }
    } else if (n == 0) {
      return Unreachable{"ferryd closed the connection without an answer"};
    } else if (errno == EAGAIN || errno == EINTR) {
      if (!waitFor(fd.get(), POLLIN, deadline, &why)) return Unreachable{why};
    } else {
      return Unreachable{std::string("recv: ") + std::strerror(errno)};
    }
  }
  std::string error;
  auto answer = decodeAnswer(std::string_view(in).substr(4), &error);
  if (!answer) return Answer{Verdict::kError, "ferryd's answer is not understood: " + error, {}};
  return *answer;
}

// Whether ferry would enrol the pod, from the API server with the plugin's kubeconfig.
std::variant<Membership, Unreachable> lookup(const Request& req, const PluginOptions& options) {
  auto deadline = Clock::now() + std::chrono::milliseconds(options.timeout_ms);
  std::ifstream file(options.kubeconfig);
  if (!file) {
    return Unreachable{"no kubeconfig at " + options.kubeconfig + ": " + std::strerror(errno) +
                       " (ferryd writes it once it has run on this node)"};
  }
  std::stringstream text;
  text << file.rdbuf();
  auto access = parseApiAccess(text.str());
  if (const auto* why = std::get_if<std::string>(&access)) return Unreachable{options.kubeconfig + ": " + *why};
  const ApiAccess& a = std::get<ApiAccess>(access);
  if (!validObjectName(req.pod_namespace) || !validObjectName(req.pod_name)) {
    return Unreachable{"the pod's namespace or name (CNI_ARGS) is not a Kubernetes name"};
  }
  auto pod = apiGet(a, podPath(req.pod_namespace, req.pod_name), deadline);
  if (const auto* why = std::get_if<std::string>(&pod)) return Unreachable{"https://" + a.host + ":" + a.port + ": " + *why};
  auto ns = apiGet(a, namespacePath(req.pod_namespace), deadline);
  if (const auto* why = std::get_if<std::string>(&ns)) return Unreachable{"https://" + a.host + ":" + a.port + ": " + *why};
  auto member = decideMembership(std::get<ApiReply>(pod), std::get<ApiReply>(ns), req.pod_uid, options.istio_ambient);
  if (const auto* why = std::get_if<std::string>(&member)) return Unreachable{*why};
  return std::get<Membership>(member);
}

int emit(const Outcome& o) {
  if (!o.out.empty()) std::cout << o.out << std::endl;
  if (!o.log.empty()) std::cerr << o.log << std::endl;
  return o.exit_code;
}

}  // namespace

int main() {
  auto env = readEnvironment([](const char* name) { return std::getenv(name); });
  std::string stdin_text((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  const std::string version = cniVersionOf(stdin_text);
  if (!ok(env)) return emit(Outcome{1, errorJson(std::get<Error>(env), version), {}});
  const Environment& e = std::get<Environment>(env);
  if (e.command == Command::kVersion) return emit(Outcome{0, versionJson("1.0.0"), {}});
  auto options = parsePluginOptions(stdin_text);
  if (!ok(options)) return emit(Outcome{1, errorJson(std::get<Error>(options), version), {}});
  const PluginOptions& p = std::get<PluginOptions>(options);
  // Pods ferryd has no say over pass before the rest of the input is judged.
  if (auto early = passWithoutFerryd(e, stdin_text, p)) return emit(*early);
  auto config = parseNetworkConfig(stdin_text, e.command != Command::kDel);
  if (!ok(config)) return emit(Outcome{1, errorJson(std::get<Error>(config), version), {}});
  Lookup api;
  if (!p.kubeconfig.empty()) api = [&](const Request& req) { return lookup(req, p); };
  return emit(run(e, std::get<NetworkConfig>(config), p, [&](const Request& req) { return exchange(req, p); }, api));
}
