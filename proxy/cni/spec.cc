#include "proxy/cni/spec.h"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

#include <algorithm>
#include <cstring>

namespace ferry::cni {
namespace json = boost::json;
namespace {

Error error(ErrorCode code, std::string msg, std::string details = {}) {
  return Error{static_cast<int>(code), std::move(msg), std::move(details)};
}

// A string member, "" when absent; nullopt when present with another type.
std::optional<std::string> stringAt(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr || v->is_null()) return std::string();
  if (!v->is_string()) return std::nullopt;
  return std::string(v->get_string());
}

Result<PrevResult> parsePrevResult(const json::value& v, const std::string& cni_version) {
  auto bad = [](std::string what) { return error(ErrorCode::kInvalidConfig, "prevResult: " + what); };
  if (!v.is_object()) return bad("not an object");
  const json::object& o = v.get_object();
  PrevResult r;
  auto version = stringAt(o, "cniVersion");
  if (!version) return bad("cniVersion is not a string");
  r.cni_version = version->empty() ? cni_version : *version;
  if (const json::value* list = o.if_contains("interfaces"); list != nullptr && !list->is_null()) {
    if (!list->is_array()) return bad("interfaces is not a list");
    for (const json::value& i : list->get_array()) {
      if (!i.is_object()) return bad("an interface is not an object");
      auto name = stringAt(i.get_object(), "name");
      auto mac = stringAt(i.get_object(), "mac");
      auto sandbox = stringAt(i.get_object(), "sandbox");
      if (!name || !mac || !sandbox || name->empty()) return bad("an interface needs a string name (mac, sandbox strings)");
      r.interfaces.push_back(Interface{*name, *mac, *sandbox});
    }
  }
  if (const json::value* list = o.if_contains("ips"); list != nullptr && !list->is_null()) {
    if (!list->is_array()) return bad("ips is not a list");
    for (const json::value& i : list->get_array()) {
      if (!i.is_object()) return bad("an ips entry is not an object");
      const json::object& e = i.get_object();
      IpConfig ip;
      auto address = stringAt(e, "address");
      auto gateway = stringAt(e, "gateway");
      if (!address || address->empty() || address->find('/') == std::string::npos) {
        return bad("an ips entry needs an address in CIDR form");
      }
      if (!gateway) return bad("ips[].gateway is not a string");
      ip.address = *address;
      ip.gateway = *gateway;
      ip.family = address->find(':') == std::string::npos ? 4 : 6;
      // 0.3.x and 0.4.0 say the family; 1.0.0 dropped the field (the address says it).
      if (auto family = stringAt(e, "version"); !family) {
        return bad("ips[].version is not a string");
      } else if (!family->empty() && *family != std::to_string(ip.family)) {
        return bad("ips[].version " + *family + " does not match " + *address);
      }
      if (const json::value* index = e.if_contains("interface"); index != nullptr && !index->is_null()) {
        if (!index->is_int64() || index->get_int64() < 0 ||
            static_cast<size_t>(index->get_int64()) >= r.interfaces.size()) {
          return bad("ips[].interface is not an index into interfaces");
        }
        ip.interface = static_cast<int>(index->get_int64());
      }
      r.ips.push_back(std::move(ip));
    }
  }
  return r;
}

}  // namespace

bool supportedVersion(std::string_view version) {
  return std::any_of(std::begin(kSupportedVersions), std::end(kSupportedVersions),
                     [&](const char* v) { return version == v; });
}

Result<Environment> readEnvironment(const std::function<const char*(const char*)>& getenv) {
  auto var = [&](const char* name) -> std::string {
    const char* v = getenv(name);
    return v == nullptr ? std::string() : std::string(v);
  };
  Environment env;
  std::string command = var("CNI_COMMAND");
  if (command == "ADD") {
    env.command = Command::kAdd;
  } else if (command == "DEL") {
    env.command = Command::kDel;
  } else if (command == "CHECK") {
    env.command = Command::kCheck;
  } else if (command == "VERSION") {
    env.command = Command::kVersion;
    return env;
  } else {
    return error(ErrorCode::kInvalidEnvironment,
                 command.empty() ? "CNI_COMMAND is not set" : "CNI_COMMAND '" + command + "' is not ADD, DEL, CHECK or VERSION");
  }
  env.container_id = var("CNI_CONTAINERID");
  env.netns = var("CNI_NETNS");
  env.ifname = var("CNI_IFNAME");
  env.path = var("CNI_PATH");
  // DEL may come without a netns (the sandbox is gone); everything else is required.
  for (auto [name, value] : {std::pair{"CNI_CONTAINERID", &env.container_id}, std::pair{"CNI_IFNAME", &env.ifname},
                             std::pair{"CNI_PATH", &env.path}, std::pair{"CNI_NETNS", &env.netns}}) {
    if (value->empty() && !(env.command == Command::kDel && std::strcmp(name, "CNI_NETNS") == 0)) {
      return error(ErrorCode::kInvalidEnvironment, std::string(name) + " is not set");
    }
  }
  std::string args = var("CNI_ARGS");
  size_t pos = 0;
  while (pos < args.size()) {
    size_t end = args.find(';', pos);
    if (end == std::string::npos) end = args.size();
    std::string kv = args.substr(pos, end - pos);
    size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      return error(ErrorCode::kInvalidEnvironment, "CNI_ARGS is not K=V;K=V", "at '" + kv + "'");
    }
    env.args[kv.substr(0, eq)] = kv.substr(eq + 1);
    pos = end + 1;
  }
  return env;
}

std::vector<std::string> PrevResult::podAddresses(const std::string& ifname) const {
  std::vector<std::string> out;
  for (const auto& ip : ips) {
    if (ip.interface) {
      const Interface& i = interfaces[*ip.interface];
      if (i.sandbox.empty() || i.name != ifname) continue;
    }
    out.push_back(ip.address.substr(0, ip.address.find('/')));
  }
  return out;
}

std::vector<std::string> PrevResult::hostInterfaces() const {
  std::vector<std::string> out;
  for (const auto& i : interfaces) {
    if (i.sandbox.empty()) out.push_back(i.name);
  }
  return out;
}

Result<NetworkConfig> parseNetworkConfig(std::string_view text, bool require_prev) {
  boost::system::error_code ec;
  json::value v = json::parse(json::string_view(text.data(), text.size()), ec);
  if (ec) return error(ErrorCode::kDecodeFailure, "the network configuration is not JSON", ec.message());
  if (!v.is_object()) return error(ErrorCode::kDecodeFailure, "the network configuration is not a JSON object");
  const json::object& o = v.get_object();
  NetworkConfig c;
  auto version = stringAt(o, "cniVersion");
  auto name = stringAt(o, "name");
  auto type = stringAt(o, "type");
  if (!version || !name || !type) return error(ErrorCode::kInvalidConfig, "cniVersion, name and type must be strings");
  if (!supportedVersion(*version)) {
    std::string supported;
    for (const char* v : kSupportedVersions) supported += (supported.empty() ? "" : ", ") + std::string(v);
    return error(ErrorCode::kIncompatibleVersion, "cniVersion '" + *version + "' is not supported",
                 "supported: " + supported);
  }
  if (name->empty() || type->empty()) return error(ErrorCode::kInvalidConfig, "name and type are required");
  c.cni_version = *version;
  c.name = *name;
  c.type = *type;
  if (const json::value* prev = o.if_contains("prevResult"); prev != nullptr && !prev->is_null()) {
    auto parsed = parsePrevResult(*prev, c.cni_version);
    if (!ok(parsed)) return std::get<Error>(parsed);
    c.prev_result = std::get<PrevResult>(std::move(parsed));
    c.prev_result_json = json::serialize(*prev);
  } else if (require_prev) {
    return error(ErrorCode::kInvalidConfig, "no prevResult: ferry-cni is chained after the plugin that creates the interface");
  }
  return c;
}

std::string versionJson(std::string_view cni_version) {
  json::object o;
  o["cniVersion"] = json::string_view(cni_version.data(), cni_version.size());
  json::array supported;
  for (const char* v : kSupportedVersions) supported.emplace_back(v);
  o["supportedVersions"] = std::move(supported);
  return json::serialize(o);
}

std::string errorJson(const Error& e, std::string_view cni_version) {
  json::object o;
  o["cniVersion"] = json::string_view(cni_version.data(), cni_version.size());
  o["code"] = e.code;
  o["msg"] = e.msg;
  if (!e.details.empty()) o["details"] = e.details;
  return json::serialize(o);
}

}  // namespace ferry::cni
