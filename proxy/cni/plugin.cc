#include "proxy/cni/plugin.h"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

#include <algorithm>

namespace ferry::cni {
namespace json = boost::json;
namespace {

Error configError(std::string msg) { return Error{static_cast<int>(ErrorCode::kInvalidConfig), std::move(msg), {}}; }

Outcome fail(const NetworkConfig& config, int code, std::string msg, std::string details) {
  Error e{code, std::move(msg), std::move(details)};
  std::string log = "ferry-cni: " + e.msg + (e.details.empty() ? "" : ": " + e.details);
  return Outcome{1, errorJson(e, config.cni_version), std::move(log)};
}

// ADD and CHECK of a pod ferry has nothing to do with: the previous result goes on unchanged.
Outcome pass(const Environment& env, const NetworkConfig& config, std::string log = {}) {
  return Outcome{0, env.command == Command::kAdd ? config.prev_result_json : std::string(), std::move(log)};
}

}  // namespace

Result<PluginOptions> parsePluginOptions(std::string_view text) {
  boost::system::error_code ec;
  json::value v = json::parse(json::string_view(text.data(), text.size()), ec);
  if (ec || !v.is_object()) return Error{static_cast<int>(ErrorCode::kDecodeFailure), "the network configuration is not a JSON object", {}};
  const json::object& o = v.get_object();
  PluginOptions p;
  if (const auto* s = o.if_contains("socket")) {
    if (!s->is_string() || s->get_string().empty()) return configError("socket must be a non-empty string");
    p.socket = std::string(s->get_string());
  }
  if (const auto* f = o.if_contains("failurePolicy")) {
    if (!f->is_string() || (f->get_string() != "closed" && f->get_string() != "open")) {
      return configError("failurePolicy must be \"closed\" or \"open\"");
    }
    p.fail_open = f->get_string() == "open";
  }
  if (const auto* list = o.if_contains("excludeNamespaces")) {
    if (!list->is_array()) return configError("excludeNamespaces must be a list of strings");
    for (const auto& item : list->get_array()) {
      if (!item.is_string()) return configError("excludeNamespaces must be a list of strings");
      p.exclude_namespaces.emplace_back(item.get_string());
    }
  }
  if (const auto* t = o.if_contains("timeoutMs")) {
    // 100 ms to 5 min: below, a busy node fails every ADD; above, the runtime gives up first.
    if (!t->is_int64() || t->get_int64() < 100 || t->get_int64() > 300'000) {
      return configError("timeoutMs must be an integer from 100 to 300000");
    }
    p.timeout_ms = static_cast<int>(t->get_int64());
  }
  if (const auto* k = o.if_contains("kubeconfig")) {
    if (!k->is_string()) return configError("kubeconfig must be a string");
    p.kubeconfig = std::string(k->get_string());
  }
  if (const auto* a = o.if_contains("istioAmbient")) {
    if (!a->is_bool()) return configError("istioAmbient must be true or false");
    p.istio_ambient = a->get_bool();
  }
  return p;
}

namespace {

// Whether ferryd has a say: a Kubernetes pod (its name in CNI_ARGS) of a namespace that is
// not excluded.
bool asksFerryd(const Environment& env, const PluginOptions& options) {
  const std::string* ns = env.arg("K8S_POD_NAMESPACE");
  const std::string* name = env.arg("K8S_POD_NAME");
  if (ns == nullptr || name == nullptr || ns->empty() || name->empty()) return false;
  return std::find(options.exclude_namespaces.begin(), options.exclude_namespaces.end(), *ns) ==
         options.exclude_namespaces.end();
}

}  // namespace

std::string cniVersionOf(std::string_view text) {
  boost::system::error_code ec;
  json::value v = json::parse(json::string_view(text.data(), text.size()), ec);
  if (!ec && v.is_object()) {
    if (const auto* version = v.get_object().if_contains("cniVersion"); version != nullptr && version->is_string()) {
      return std::string(version->get_string());
    }
  }
  return "1.0.0";
}

std::optional<Outcome> passWithoutFerryd(const Environment& env, std::string_view text, const PluginOptions& options) {
  if (asksFerryd(env, options)) return std::nullopt;
  if (env.command != Command::kAdd) return Outcome{};
  // The previous result as it came (a chained plugin passes it on); without one, an empty
  // result of the configuration's version.
  boost::system::error_code ec;
  json::value v = json::parse(json::string_view(text.data(), text.size()), ec);
  if (!ec && v.is_object()) {
    if (const auto* prev = v.get_object().if_contains("prevResult"); prev != nullptr && prev->is_object()) {
      return Outcome{0, json::serialize(*prev), {}};
    }
  }
  json::object empty;
  empty["cniVersion"] = cniVersionOf(text);
  return Outcome{0, json::serialize(empty), {}};
}

Outcome run(const Environment& env, const NetworkConfig& config, const PluginOptions& options,
            const Exchange& exchange, const Lookup& lookup) {
  if (!asksFerryd(env, options)) return pass(env, config);
  Request req;
  req.verb = env.command == Command::kAdd ? Verb::kAdd : env.command == Command::kDel ? Verb::kDel : Verb::kCheck;
  req.container_id = env.container_id;
  req.netns = env.netns;
  req.ifname = env.ifname;
  req.pod_namespace = *env.arg("K8S_POD_NAMESPACE");
  req.pod_name = *env.arg("K8S_POD_NAME");
  const std::string pod = podKey(req);
  if (const std::string* uid = env.arg("K8S_POD_UID")) req.pod_uid = *uid;
  if (config.prev_result) {
    req.ips = config.prev_result->podAddresses(env.ifname);
    req.host_interfaces = config.prev_result->hostInterfaces();
  }
  auto reply = exchange(req);
  if (auto* down = std::get_if<Unreachable>(&reply)) {
    // DEL cannot leave anything behind that ferryd would not clean up itself: its records are
    // reconciled when it starts, against the sandboxes that still exist.
    if (env.command == Command::kDel) {
      return Outcome{0, "", "ferry-cni: DEL of " + pod + ": ferryd not reachable (" + down->why +
                                "); it releases the pod when it starts"};
    }
    if (options.fail_open) {
      return pass(env, config, "ferry-cni: " + pod + " not enrolled: ferryd not reachable at " + options.socket + " (" +
                                   down->why + "); failurePolicy open lets it start unprotected");
    }
    // Closed: only a pod ferry would enrol waits for ferryd. The API server's current labels
    // decide; what cannot be read or decided waits too.
    std::string api;
    if (!lookup) {
      api = "no API server credentials to tell whether ferry would enrol it (the chain entry names no kubeconfig)";
    } else {
      auto member = lookup(req);
      if (const auto* m = std::get_if<Membership>(&member)) {
        if (!m->enrolled) {
          return pass(env, config, "ferry-cni: " + pod + " started without ferryd (" + down->why +
                                       "): ferry would not enrol it (" + m->why + ")");
        }
        api = "ferry would enrol it (" + m->why + ")";
      } else {
        api = "the API server cannot tell whether ferry would enrol it: " + std::get<Unreachable>(member).why;
      }
    }
    return fail(config, static_cast<int>(ErrorCode::kTryAgainLater),
                std::string("ferryd is not reachable to ") + (env.command == Command::kCheck ? "check " : "enrol ") + pod,
                options.socket + ": " + down->why + "; " + api + " (failurePolicy closed: the pod starts once ferryd is up)");
  }
  const Answer& a = std::get<Answer>(reply);
  if (env.command == Command::kDel) {
    // A DEL never blocks the sandbox's removal: ferryd reconciles its records at start.
    if (a.verdict == Verdict::kReleased) return Outcome{};
    return Outcome{0, "", "ferry-cni: DEL of " + pod + ": ferryd answered " + verdictName(a.verdict) +
                              (a.reason.empty() ? "" : " (" + a.reason + ")") + "; it releases the pod when it starts"};
  }
  switch (a.verdict) {
    case Verdict::kEnrolled:
    case Verdict::kNotEnrolled:
      return pass(env, config);
    case Verdict::kReleased:  // not an answer to ADD or CHECK
      return fail(config, kEnrolmentFailed, "ferryd's answer is not understood", "\"released\" to " + std::string(env.command == Command::kAdd ? "ADD" : "CHECK"));
    case Verdict::kRetry:
      return fail(config, static_cast<int>(ErrorCode::kTryAgainLater), "ferryd cannot enrol " + pod + " yet", a.reason);
    case Verdict::kError:
      break;
  }
  if (env.command == Command::kCheck) {
    return fail(config, kNotAttached, "ferry's programs are not attached to " + pod, a.reason);
  }
  return fail(config, kEnrolmentFailed, "ferryd could not enrol " + pod, a.reason);
}

}  // namespace ferry::cni
