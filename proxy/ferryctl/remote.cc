#include "proxy/ferryctl/remote.h"

#include <cstdio>
#include <cstdlib>
#include <future>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "proxy/common/net.h"
#include "proxy/config/kubeconfig.h"
#include "proxy/ferryctl/explain.h"
#include "proxy/ferryctl/json_read.h"
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

// A session with the API server of the kubeconfig at `flag` (else $KUBECONFIG, else
// ~/.kube/config); null, said on stderr why, when there is none.
std::unique_ptr<k8s::ApiSession> openApi(asio::io_context& io, const std::string& flag) {
  const std::string path = kubeconfigPath(flag);
  auto kubeconfig = config::loadKubeconfig(path);
  if (!kubeconfig.ok()) {
    std::fprintf(stderr, "ferryctl: kubeconfig %s: %s\n", path.c_str(), std::string(kubeconfig.status().message()).c_str());
    return nullptr;
  }
  auto api = k8s::ApiSession::create(io, k8s::accessFrom(*kubeconfig), "ferryctl");
  if (!api.ok()) {
    std::fprintf(stderr, "ferryctl: %s: %s\n", path.c_str(), std::string(api.status().message()).c_str());
    return nullptr;
  }
  return std::move(*api);
}

// The JSON of a GET, or why there is none.
asio::awaitable<absl::StatusOr<json::value>> getJson(k8s::ApiSession& api, std::string target) {
  auto answer = co_await api.get(target, kTimeout);
  if (!answer.ok()) co_return answer.status();
  if (answer->status != 200) {
    // 404: no such object; 401/403: not allowed; anything else: the API server did not answer.
    std::string why = absl::StrCat("GET ", target, ": HTTP ", answer->status, ": ", answer->message);
    if (answer->status == 404) co_return absl::NotFoundError(why);
    if (answer->status == 401 || answer->status == 403) co_return absl::PermissionDeniedError(why);
    co_return absl::UnavailableError(why);
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

// One node's /explain answer, through `ferryctl explain --node-view` in its ferryd pod.
asio::awaitable<NodeAnswer> askNode(k8s::ApiSession& api, std::string ferry_namespace, std::string node,
                                    std::string from_ip, std::string to_address) {
  NodeAnswer answer;
  answer.node = node;
  auto ferryd = co_await ferrydPodOn(api, ferry_namespace, node);
  if (!ferryd.ok()) {
    answer.error = std::string(ferryd.status().message());
    co_return answer;
  }
  std::vector<std::string> command;
  for (const char* word : {"ferryctl", "explain", "--node-view", "--from"}) command.emplace_back(word);
  command.insert(command.end(), {from_ip, "--to", to_address});
  auto output = co_await api.exec(ferry_namespace, *ferryd, kContainer, std::move(command), kTimeout);
  if (!output.ok()) {
    answer.error = absl::StrCat("pod ", *ferryd, ": ", output.status().message());
    co_return answer;
  }
  if (output->exit_code != 0) {
    std::string why = output->err.empty() ? output->out : output->err;
    while (!why.empty() && why.back() == '\n') why.pop_back();
    answer.error = absl::StrCat("pod ", *ferryd, ": ", why);
    co_return answer;
  }
  auto view = parseObject(output->out, "/explain");
  if (!view.ok()) {
    answer.error = absl::StrCat("pod ", *ferryd, ": ", view.status().message());
    co_return answer;
  }
  answer.reached = true;
  answer.view = std::move(*view);
  co_return answer;
}

// "ip:port", "[v6]:port": as ferryd writes addresses (and the text itself when it is no IP).
std::string addressOf(const std::string& ip, int port) {
  auto parsed = common::parseIp(ip);
  return parsed.ok() ? common::formatHostPort(*parsed, static_cast<uint16_t>(port)) : absl::StrCat(ip, ":", port);
}

struct ExplainResult {
  ExplainEnds ends;
  NodeAnswer source;
  std::optional<NodeAnswer> destination;
};

std::string podPath(const std::string& ns, const std::string& name) {
  return absl::StrCat("/api/v1/namespaces/", k8s::queryEscape(ns), "/pods/", k8s::queryEscape(name));
}

// Where `--to NAMESPACE/NAME:PORT` goes: the pod of that name (its address, and its node in
// `destination_node`), else the Service's ClusterIP. Fills the destination of `ends`.
asio::awaitable<absl::Status> resolveNamedDestination(k8s::ApiSession& api, const std::string& to, ExplainEnds& ends,
                                                      std::string& destination_node) {
  const size_t colon = to.rfind(':');
  const size_t to_slash = to.find('/');
  int port = 0;
  if (colon == std::string::npos || to_slash == std::string::npos || to_slash > colon ||
      !absl::SimpleAtoi(to.substr(colon + 1), &port) || port < 1 || port > 65535) {
    co_return absl::InvalidArgumentError(absl::StrCat("--to ", to, ": NAMESPACE/NAME:PORT or IP:PORT"));
  }
  std::string ns = to.substr(0, to_slash), name = to.substr(to_slash + 1, colon - to_slash - 1);
  auto pod_json = co_await getJson(api, podPath(ns, name));
  if (!pod_json.ok() && !absl::IsNotFound(pod_json.status())) {
    co_return absl::Status(pod_json.status().code(), absl::StrCat("--to ", to, ": ", pod_json.status().message()));
  }
  if (pod_json.ok()) {
    auto pod = k8s::internal::decodePod(*pod_json);
    if (!pod.ok()) co_return pod.status();
    if (pod->pod_ips.empty()) co_return absl::FailedPreconditionError(absl::StrCat("--to ", to, ": the pod has no IP yet"));
    ends.to = to;
    ends.to_address = addressOf(pod->pod_ips.front(), port);
    destination_node = pod->node_name;
    co_return absl::OkStatus();
  }
  auto service_json = co_await getJson(api, absl::StrCat("/api/v1/namespaces/", k8s::queryEscape(ns), "/services/",
                                                         k8s::queryEscape(name)));
  if (absl::IsNotFound(service_json.status())) {
    co_return absl::NotFoundError(absl::StrCat("--to ", to, ": no pod and no Service ", ns, "/", name));
  }
  if (!service_json.ok()) {
    co_return absl::Status(service_json.status().code(),
                           absl::StrCat("--to ", to, ": ", service_json.status().message()));
  }
  auto service = k8s::internal::decodeService(*service_json);
  if (!service.ok()) co_return service.status();
  if (service->cluster_ips.empty()) {
    co_return absl::FailedPreconditionError(absl::StrCat("--to ", to, ": Service ", ns, "/", name,
                                                         " has no ClusterIP (headless): name a pod instead"));
  }
  ends.to = absl::StrCat("Service ", ns, "/", name, ":", port);
  ends.to_address = addressOf(service->cluster_ips.front(), port);
  ends.to_is_service = true;
  co_return absl::OkStatus();
}

asio::awaitable<absl::StatusOr<ExplainResult>> explainCluster(k8s::ApiSession& api, std::string ferry_namespace,
                                                              std::string from, std::string to) {
  ExplainResult r;
  const size_t slash = from.find('/');
  auto source_json = co_await getJson(api, podPath(from.substr(0, slash), from.substr(slash + 1)));
  if (!source_json.ok()) {
    co_return absl::Status(source_json.status().code(), absl::StrCat("--from ", from, ": ", source_json.status().message()));
  }
  auto source_pod = k8s::internal::decodePod(*source_json);
  if (!source_pod.ok()) co_return source_pod.status();
  if (source_pod->node_name.empty() || source_pod->pod_ips.empty()) {
    co_return absl::FailedPreconditionError(absl::StrCat("--from ", from, ": the pod has no node or no IP yet"));
  }
  r.ends.from = from;
  r.ends.from_ip = source_pod->pod_ips.front();
  std::string destination_node;  // of a destination pod named by the operator
  if (auto address = common::parseHostPort(to); address.ok()) {
    r.ends.to = r.ends.to_address = common::formatHostPort(*address);
  } else {
    absl::Status resolved = co_await resolveNamedDestination(api, to, r.ends, destination_node);
    if (!resolved.ok()) co_return resolved;
  }
  r.source = co_await askNode(api, ferry_namespace, source_pod->node_name, r.ends.from_ip, r.ends.to_address);
  std::string destination_address = r.ends.to_address;
  if (r.source.reached) {
    if (auto endpoint = pickEndpoint(r.source.view)) {
      destination_node = endpoint->node;
      destination_address = endpoint->address;
    } else if (const auto& d = member(r.source.view, "destination"); flag(d, "known")) {
      destination_node = text(d, "node");
    } else {
      destination_node.clear();  // not a mesh workload: no ferryd of its own to ask
    }
  }
  if (!destination_node.empty()) {
    if (destination_node == r.source.node && destination_address == r.ends.to_address) {
      r.destination = r.source;
    } else {
      r.destination = co_await askNode(api, ferry_namespace, destination_node, r.ends.from_ip, destination_address);
    }
  }
  co_return r;
}

}  // namespace

int runExplain(const std::string& kubeconfig_flag, const std::string& ferry_namespace, const std::string& from,
               const std::string& to, bool json_output) {
  asio::io_context io;
  auto api = openApi(io, kubeconfig_flag);
  if (!api) return kExitUnreachable;
  auto done = asio::co_spawn(io, explainCluster(*api, ferry_namespace.empty() ? kDefaultNamespace : ferry_namespace, from, to),
                             asio::use_future);
  io.run();
  auto result = done.get();
  if (!result.ok()) {
    std::fprintf(stderr, "ferryctl: %s\n", std::string(result.status().message()).c_str());
    return absl::IsUnavailable(result.status()) ? kExitUnreachable : 1;
  }
  Explanation e = explainConnection(result->ends, result->source, result->destination);
  if (json_output) {
    std::printf("%s\n", json::serialize(explanationJson(result->ends, e, result->source, result->destination)).c_str());
  } else {
    std::fputs(renderExplanation(result->ends, e).c_str(), stdout);
  }
  return e.exit_code;
}

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
  asio::io_context io;
  auto api = openApi(io, target.kubeconfig);
  if (!api) return kExitUnreachable;
  auto done = asio::co_spawn(io, ask(*api, target, args), asio::use_future);
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
