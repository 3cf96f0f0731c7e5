#include "proxy/cni/protocol.h"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

namespace ferry::cni {
namespace json = boost::json;
namespace {

constexpr std::pair<Verb, const char*> kVerbs[] = {{Verb::kAdd, "ADD"}, {Verb::kDel, "DEL"}, {Verb::kCheck, "CHECK"}};
constexpr std::pair<Verdict, const char*> kVerdicts[] = {{Verdict::kEnrolled, "enrolled"},
                                                         {Verdict::kNotEnrolled, "not-enrolled"},
                                                         {Verdict::kReleased, "released"},
                                                         {Verdict::kRetry, "retry"},
                                                         {Verdict::kError, "error"}};

json::array stringArray(const std::vector<std::string>& items) {
  json::array a;
  for (const auto& s : items) a.emplace_back(s);
  return a;
}

// The message's object once its version is checked; nullptr with *error set otherwise.
const json::object* versioned(const json::value& v, std::string* error) {
  if (!v.is_object()) {
    *error = "not a JSON object";
    return nullptr;
  }
  const json::value* version = v.get_object().if_contains("version");
  if (version == nullptr || !version->is_int64()) {
    *error = "no integer version";
    return nullptr;
  }
  if (version->get_int64() != kProtocolVersion) {
    *error = "protocol version " + std::to_string(version->get_int64()) + " is not spoken here (this side speaks " +
             std::to_string(kProtocolVersion) + ")";
    return nullptr;
  }
  return &v.get_object();
}

bool readString(const json::object& o, const char* key, bool required, std::string& out, std::string* error) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr) {
    if (required) *error = std::string("no ") + key;
    return !required;
  }
  if (!v->is_string()) {
    *error = std::string(key) + " is not a string";
    return false;
  }
  out = std::string(v->get_string());
  return true;
}

bool readStrings(const json::object& o, const char* key, std::vector<std::string>& out, std::string* error) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr) return true;
  if (!v->is_array()) {
    *error = std::string(key) + " is not a list";
    return false;
  }
  for (const auto& item : v->get_array()) {
    if (!item.is_string()) {
      *error = std::string(key) + " holds a non-string";
      return false;
    }
    out.emplace_back(item.get_string());
  }
  return true;
}

std::optional<json::value> parse(std::string_view text, std::string* error) {
  boost::system::error_code ec;
  json::value v = json::parse(json::string_view(text.data(), text.size()), ec);
  if (ec) {
    *error = "not JSON: " + ec.message();
    return std::nullopt;
  }
  return v;
}

}  // namespace

std::string podKey(const Request& r) { return r.pod_namespace + "/" + r.pod_name; }

const char* verbName(Verb verb) {
  for (auto [v, name] : kVerbs) {
    if (v == verb) return name;
  }
  return "?";
}

const char* verdictName(Verdict verdict) {
  for (auto [v, name] : kVerdicts) {
    if (v == verdict) return name;
  }
  return "?";
}

std::string encodeRequest(const Request& r) {
  json::object o;
  o["version"] = kProtocolVersion;
  o["verb"] = verbName(r.verb);
  o["containerId"] = r.container_id;
  o["netns"] = r.netns;
  o["ifname"] = r.ifname;
  o["podNamespace"] = r.pod_namespace;
  o["podName"] = r.pod_name;
  o["podUid"] = r.pod_uid;
  o["ips"] = stringArray(r.ips);
  o["hostInterfaces"] = stringArray(r.host_interfaces);
  return json::serialize(o);
}

std::string encodeAnswer(const Answer& a) {
  json::object o;
  o["version"] = kProtocolVersion;
  o["verdict"] = verdictName(a.verdict);
  o["reason"] = a.reason;
  o["device"] = a.device;
  return json::serialize(o);
}

std::optional<Request> decodeRequest(std::string_view text, std::string* error) {
  auto v = parse(text, error);
  if (!v) return std::nullopt;
  const json::object* o = versioned(*v, error);
  if (o == nullptr) return std::nullopt;
  Request r;
  std::string verb;
  if (!readString(*o, "verb", true, verb, error)) return std::nullopt;
  bool known = false;
  for (auto [value, name] : kVerbs) {
    if (verb == name) r.verb = value, known = true;
  }
  if (!known) {
    *error = "verb '" + verb + "' is not ADD, DEL or CHECK";
    return std::nullopt;
  }
  if (!readString(*o, "containerId", true, r.container_id, error) || !readString(*o, "netns", false, r.netns, error) ||
      !readString(*o, "ifname", false, r.ifname, error) ||
      !readString(*o, "podNamespace", true, r.pod_namespace, error) ||
      !readString(*o, "podName", true, r.pod_name, error) || !readString(*o, "podUid", false, r.pod_uid, error) ||
      !readStrings(*o, "ips", r.ips, error) || !readStrings(*o, "hostInterfaces", r.host_interfaces, error)) {
    return std::nullopt;
  }
  if (r.container_id.empty()) {
    *error = "containerId is empty";
    return std::nullopt;
  }
  return r;
}

std::optional<Answer> decodeAnswer(std::string_view text, std::string* error) {
  auto v = parse(text, error);
  if (!v) return std::nullopt;
  const json::object* o = versioned(*v, error);
  if (o == nullptr) return std::nullopt;
  Answer a;
  std::string verdict;
  if (!readString(*o, "verdict", true, verdict, error) || !readString(*o, "reason", false, a.reason, error) ||
      !readString(*o, "device", false, a.device, error)) {
    return std::nullopt;
  }
  bool known = false;
  for (auto [value, name] : kVerdicts) {
    if (verdict == name) a.verdict = value, known = true;
  }
  if (!known) {
    *error = "verdict '" + verdict + "' is unknown";
    return std::nullopt;
  }
  return a;
}

std::string frameHeader(uint32_t n) {
  return std::string{static_cast<char>(n >> 24), static_cast<char>(n >> 16), static_cast<char>(n >> 8),
                     static_cast<char>(n)};
}

uint32_t frameLength(const unsigned char h[4]) {
  return (uint32_t{h[0]} << 24) | (uint32_t{h[1]} << 16) | (uint32_t{h[2]} << 8) | uint32_t{h[3]};
}

}  // namespace ferry::cni
