#include "proxy/ferryctl/remote.h"

#include <cstdio>
#include <cstdlib>
#include <future>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/json/parse.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "proxy/config/kubeconfig.h"
#include "proxy/k8s/session.h"
#include "proxy/k8s/decode.h"

namespace ferry::ferryctl {
namespace {

namespace asio = boost::asio;
namespace json = boost::json;

constexpr int kExitUnreachable = 4;  // as main.cc's: ferryd not reachable
constexpr char kDefaultNamespace[] = "ferry-system";
constexpr char kContainer[] = "ferryd";
// The chart's label of ferryd's pods (templates/_helpers.tpl, ferry.labels).
constexpr char kSelector[] = "app.kubernetes.io%2Fcomponent%3Dnode-proxy";
constexpr std::chrono::seconds kTimeout{60};

std::string kubeconfigPath(const std::string& flag) {
  if (!flag.empty()) return flag;
  if (const char* env = std::getenv("KUBECONFIG"); env != nullptr && *env != '\0') {
    std::string list(env);
    return list.substr(0, list.find(':'));  // kubectl merges a list; ferryctl reads the first
  }
  const char* home = std::getenv("HOME");
  return absl::StrCat(home != nullptr ? home : "", "/.kube/config");
}

// The JSON of a GET, or why there is none.
asio::awaitable<absl::StatusOr<json::value>> getJson(k8s::ApiSession& api, std::string target) {
  auto answer = co_await api.get(target, kTimeout);
  if (!answer.ok()) co_return answer.status();
  if (answer->status != 200) {
    co_return absl::NotFoundError(absl::StrCat("GET ", target, ": HTTP ", answer->status, ": ", answer->message));
  }
  boost::system::error_code ec;
  json::value v = json::parse(answer->body, ec);
  if (ec) co_return absl::UnavailableError(absl::StrCat("GET ", target, ": not JSON"));
  co_return v;
}

// The ferryd pod on `node`: a running one that is not being deleted (during a handover two
// run; both ask the same ferryd, the one serving the node's admin port).
asio::awaitable<absl::StatusOr<std::string>> ferrydPodOn(k8s::ApiSession& api, const std::string& ns,
                                                         const std::string& node) {
  auto list = co_await getJson(api, absl::StrCat("/api/v1/namespaces/", k8s::queryEscape(ns), "/pods?labelSelector=",
                                                 kSelector, "&fieldSelector=spec.nodeName%3D", k8s::queryEscape(node)));
  if (!list.ok()) co_return list.status();
  const json::value* items = list->is_object() ? list->get_object().if_contains("items") : nullptr;
  std::string found, fallback;
  if (items != nullptr && items->is_array()) {
    for (const auto& item : items->get_array()) {
      auto pod = k8s::internal::decodePod(item);
      if (!pod.ok()) continue;
      if (pod->phase == "Running" && !pod->deleting) found = pod->name;
      if (pod->phase == "Running") fallback = pod->name;
    }
  }
  if (found.empty()) found = fallback;
  if (found.empty()) {
    co_return absl::NotFoundError(absl::StrCat("no running ferryd pod on node ", node, " in namespace ", ns,
                                               " (label app.kubernetes.io/component=node-proxy; --ferry-namespace?)"));
  }
  co_return found;
}

asio::awaitable<absl::StatusOr<k8s::ExecOutput>> ask(k8s::ApiSession& api, RemoteTarget target,
                                                     std::vector<std::string> args) {
  std::string node = target.node;
  if (node.empty()) {
    const size_t slash = target.pod.find('/');
    auto pod = co_await getJson(api, absl::StrCat("/api/v1/namespaces/", k8s::queryEscape(target.pod.substr(0, slash)),
                                                  "/pods/", k8s::queryEscape(target.pod.substr(slash + 1))));
    if (!pod.ok()) co_return pod.status();
    auto decoded = k8s::internal::decodePod(*pod);
    if (!decoded.ok()) co_return decoded.status();
    if (decoded->node_name.empty()) co_return absl::NotFoundError(absl::StrCat("pod ", target.pod, " is not scheduled"));
    node = decoded->node_name;
  }
  auto ferryd = co_await ferrydPodOn(api, target.ferry_namespace, node);
  if (!ferryd.ok()) co_return ferryd.status();
  std::vector<std::string> command{"ferryctl"};
  command.insert(command.end(), args.begin(), args.end());
  co_return co_await api.exec(target.ferry_namespace, *ferryd, kContainer, std::move(command), kTimeout);
}

}  // namespace

absl::StatusOr<std::optional<RemoteTarget>> takeRemoteFlags(std::vector<std::string>& args) {
  RemoteTarget t;
  const std::pair<const char*, std::string*> flags[] = {
      {"node", &t.node}, {"pod", &t.pod}, {"kubeconfig", &t.kubeconfig}, {"ferry-namespace", &t.ferry_namespace}};
  std::vector<std::string> rest;
  for (size_t i = 0; i < args.size(); ++i) {
    bool taken = false;
    for (const auto& [name, slot] : flags) {
      const std::string dashed = absl::StrCat("--", name);
      if (args[i] == dashed) {
        if (i + 1 >= args.size() || args[i + 1].empty()) return absl::InvalidArgumentError(absl::StrCat(dashed, " needs a value"));
        *slot = args[++i];
        taken = true;
      } else if (absl::StartsWith(args[i], dashed + "=")) {
        *slot = args[i].substr(dashed.size() + 1);
        if (slot->empty()) return absl::InvalidArgumentError(absl::StrCat(dashed, " needs a value"));
        taken = true;
      }
      if (taken) break;
    }
    if (!taken) rest.push_back(args[i]);
  }
  args = std::move(rest);
  if (t.node.empty() && t.pod.empty()) {
    if (!t.kubeconfig.empty() || !t.ferry_namespace.empty()) {
      return absl::InvalidArgumentError("--kubeconfig and --ferry-namespace go with --node or --pod");
    }
    return std::nullopt;
  }
  if (!t.node.empty() && !t.pod.empty()) return absl::InvalidArgumentError("--node and --pod: give one");
  if (!t.pod.empty()) {
    const size_t slash = t.pod.find('/');
    if (slash == std::string::npos || slash == 0 || slash + 1 == t.pod.size() ||
        t.pod.find('/', slash + 1) != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("--pod ", t.pod, ": NAMESPACE/NAME"));
    }
  }
  if (t.ferry_namespace.empty()) t.ferry_namespace = kDefaultNamespace;
  return t;
}

int runRemote(const RemoteTarget& target, const std::vector<std::string>& args) {
  const std::string path = kubeconfigPath(target.kubeconfig);
  auto kubeconfig = config::loadKubeconfig(path);
  if (!kubeconfig.ok()) {
    std::fprintf(stderr, "ferryctl: kubeconfig %s: %s\n", path.c_str(), std::string(kubeconfig.status().message()).c_str());
    return kExitUnreachable;
  }
  asio::io_context io;
  auto api = k8s::ApiSession::create(io, k8s::accessFrom(*kubeconfig), "ferryctl");
  if (!api.ok()) {
    std::fprintf(stderr, "ferryctl: %s: %s\n", path.c_str(), std::string(api.status().message()).c_str());
    return kExitUnreachable;
  }
  auto done = asio::co_spawn(io, ask(**api, target, args), asio::use_future);
  io.run();
  auto output = done.get();
  if (!output.ok()) {
    std::fprintf(stderr, "ferryctl: %s\n", std::string(output.status().message()).c_str());
    return kExitUnreachable;
  }
  std::fwrite(output->out.data(), 1, output->out.size(), stdout);
  std::fwrite(output->err.data(), 1, output->err.size(), stderr);
  return output->exit_code;
}

}  // namespace ferry::ferryctl
