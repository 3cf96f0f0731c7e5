#include "proxy/config/config_dump.h"

#include <boost/json.hpp>

#include <cstdint>
#include <string_view>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "proxy/common/duration.h"
#include "proxy/common/log.h"
#include "proxy/common/net.h"
#include "proxy/config/reload.h"

namespace ferry::config {
namespace {

namespace json = boost::json;

// One writer per member type of the table; enums through their EnumName tables.
json::value write(const std::string& v) { return json::value(v); }
json::value write(bool v) { return json::value(v); }
template <typename T>
  requires std::is_integral_v<T>
json::value write(T v) {
  return json::value(v);
}
json::value write(Millis v) { return json::value(common::formatDuration(v)); }
json::value write(const HostPort& v) { return json::value(common::formatHostPort(v)); }
json::value write(common::LogLevel v) { return json::value(std::string(common::logLevelName(v))); }
json::value write(WorkloadSourceKind v) { return json::value(nameOf(kWorkloadSourceNames, v)); }
json::value write(OriginalDestination v) { return json::value(nameOf(kOriginalDestinationNames, v)); }
json::value write(Injection v) { return json::value(nameOf(kInjectionNames, v)); }
json::value write(Capture v) { return json::value(nameOf(kCaptureNames, v)); }
json::value write(FailureMode v) { return json::value(nameOf(kFailureModeNames, v)); }
json::value write(CertSourceKind v) { return json::value(nameOf(kCertSourceNames, v)); }
json::value write(CniFailurePolicy v) { return json::value(nameOf(kCniFailurePolicyNames, v)); }
template <typename T>
json::value write(const std::vector<T>& items) {
  json::array out;
  for (const auto& item : items) out.push_back(write(item));
  return out;
}
// limits.memory and limits.receive_buffer: "auto", "none" or bytes.
json::value write(const MemorySetting& s) {
  switch (s.source) {
    case MemorySetting::Source::kAuto:
      return "auto";
    case MemorySetting::Source::kNone:
      return "none";
    case MemorySetting::Source::kBytes:
      break;
  }
  return json::value(s.bytes);
}
json::value write(const ListenerLimits& l) {
  return json::object{{"max_connections", l.max_connections},
                      {"max_connections_per_source", l.max_connections_per_source},
                      {"max_pending_handshakes", l.max_pending},
                      {"max_pending_handshakes_per_source", l.max_pending_per_source},
                      {"max_new_connections_per_source_per_second", l.max_new_per_source_per_second}};
}
json::value write(const AccessLog& a) {
  return json::object{{"enabled", a.enabled},
                      {"format", nameOf(kAccessLogFormatNames, a.format)},
                      {"sample_success", a.sample_success},
                      {"failures_per_second", a.failures_per_second},
                      {"failures_burst", a.failures_burst}};
}
json::value write(const MemoryBudget& b) {
  return json::object{{"limit", b.limit},
                      {"source", b.source},
                      {"headroom", b.headroom},
                      {"available", b.available},
                      {"worst_case", b.worst_case},
                      {"default_worst_case", b.default_worst_case},
                      {"receive_buffer", b.receive_buffer},
                      {"lowered", b.lowered}};
}

// `value` at the dotted `key` ("identity.cluster_ca.address"), making the objects on the way.
void put(json::object& root, std::string_view key, json::value value) {
  json::object* at = &root;
  for (size_t dot = key.find('.'); dot != std::string_view::npos; dot = key.find('.')) {
    json::value& next = (*at)[key.substr(0, dot)];
    if (!next.is_object()) next = json::object();
    at = &next.as_object();
    key.remove_prefix(dot + 1);
  }
  (*at)[key] = std::move(value);
}

}  // namespace

std::string configDumpJson(const Config& c) {
  json::object out;
#define FERRY_X(key, how, member) put(out, key, write(c.member));
  FERRY_CONFIG_KEYS(FERRY_X)
#undef FERRY_X
  // The two keys held in two members each (one row per member above): written whole.
  put(out, "kubernetes.daemonset",
      write(c.kubernetes.daemonset_name.empty()
                ? std::string()
                : absl::StrCat(c.kubernetes.daemonset_namespace, "/", c.kubernetes.daemonset_name)));
  put(out, "datapath.proxy_netns", write(c.datapath.proxy_netns_auto ? std::string("auto") : c.datapath.proxy_netns));
  out["memory_budget"] = write(c.memory_budget);
  return json::serialize(out);
}

}  // namespace ferry::config
