#include "proxy/cni/chain.h"

#include <algorithm>

#include <boost/json.hpp>

#include "proxy/cni/spec.h"

namespace ferry::cni {
namespace json = boost::json;
namespace {

json::string_view view(std::string_view s) { return json::string_view(s.data(), s.size()); }

bool isFerryEntry(const json::value& plugin) {
  const json::object* o = plugin.if_object();
  if (o == nullptr) return false;
  const json::value* type = o->if_contains("type");
  return type != nullptr && type->is_string() && type->get_string() == kPluginType;
}

json::object entryObject(const ChainEntry& entry) {
  json::object o;
  o["type"] = kPluginType;
  o["socket"] = view(entry.socket);
  o["failurePolicy"] = entry.failure_policy == FailurePolicy::kOpen ? "open" : "closed";
  json::array excluded;
  for (const auto& ns : entry.exclude_namespaces) excluded.emplace_back(view(ns));
  o["excludeNamespaces"] = std::move(excluded);
  o["timeoutMs"] = entry.timeout_ms;
  if (!entry.kubeconfig.empty()) o["kubeconfig"] = view(entry.kubeconfig);
  if (entry.istio_ambient) o["istioAmbient"] = true;
  return o;
}

// Two spaces per level, one key or element per line: operators read these files with `cat`
// (the reference plugins' examples and most CNIs write them indented). Scalars and keys as
// Boost.JSON serializes them.
void pretty(const json::value& v, std::string& out, int depth) {
  auto newline = [&](int d) {
    out += '\n';
    out.append(static_cast<size_t>(d) * 2, ' ');
  };
  if (const json::object* o = v.if_object(); o != nullptr && !o->empty()) {
    out += '{';
    bool first = true;
    for (const auto& kv : *o) {
      if (!first) out += ',';
      first = false;
      newline(depth + 1);
      out += json::serialize(json::string(kv.key()));
      out += ": ";
      pretty(kv.value(), out, depth + 1);
    }
    newline(depth);
    out += '}';
  } else if (const json::array* a = v.if_array(); a != nullptr && !a->empty()) {
    out += '[';
    bool first = true;
    for (const auto& e : *a) {
      if (!first) out += ',';
      first = false;
      newline(depth + 1);
      pretty(e, out, depth + 1);
    }
    newline(depth);
    out += ']';
  } else {
    out += json::serialize(v);
  }
}

std::string prettyText(const json::value& v) {
  std::string out;
  pretty(v, out, 0);
  out += '\n';
  return out;
}

ChainEdit failed(std::string why) {
  ChainEdit edit;
  edit.error = std::move(why);
  return edit;
}

// The file as a JSON object, or why not.
std::optional<json::object> parseObject(std::string_view text, std::string& error) {
  boost::system::error_code ec;
  json::value v = json::parse(view(text), ec);
  if (ec) {
    error = "not JSON (" + ec.message() + ")";
    return std::nullopt;
  }
  if (!v.is_object()) {
    error = "not a JSON object";
    return std::nullopt;
  }
  return std::move(v.get_object());
}

// The list's (or the single plugin's) cniVersion and name, as a runtime requires them.
std::string checkHeader(const json::object& o) {
  const json::value* version = o.if_contains("cniVersion");
  if (version == nullptr) return "no cniVersion";
  if (!version->is_string()) return "cniVersion is not a string";
  std::string v(version->get_string());
  if (!supportedVersion(v)) {
    std::string supported;
    for (const char* s : kSupportedVersions) supported += (supported.empty() ? "" : ", ") + std::string(s);
    return "cniVersion " + v + " is one ferry-cni cannot read (it reads " + supported + ")";
  }
  const json::value* name = o.if_contains("name");
  if (name == nullptr) return "no name";
  if (!name->is_string()) return "name is not a string";
  return "";
}

}  // namespace

std::string chainEntryJson(const ChainEntry& entry) { return json::serialize(entryObject(entry)); }

ChainEdit chainIn(std::string_view text, bool is_conflist, const ChainEntry& entry) {
  std::string error;
  auto parsed = parseObject(text, error);
  if (!parsed) return failed(std::move(error));
  json::object file = *std::move(parsed);
  if (std::string why = checkHeader(file); !why.empty()) return failed(std::move(why));
  const json::object wanted = entryObject(entry);

  ChainEdit edit;
  json::value* plugins = file.if_contains("plugins");
  if (plugins == nullptr && !is_conflist) {
    // One plugin's configuration: the list a runtime would make of it, plus ferry's entry.
    const json::value* type = file.if_contains("type");
    if (type == nullptr || !type->is_string()) return failed("neither a plugins list nor a plugin type");
    if (isFerryEntry(file)) return failed("its only plugin is ferry-cni (no primary CNI to chain after)");
    json::object list;
    list["cniVersion"] = file.at("cniVersion");
    list["name"] = file.at("name");
    list["plugins"] = json::array{std::move(file), wanted};
    edit.changed = true;
    edit.converted = true;
    edit.text = prettyText(list);
    return edit;
  }
  if (plugins == nullptr) return failed("no plugins list");
  if (!plugins->is_array()) return failed("plugins is not a list");
  json::array& list = plugins->get_array();
  if (std::any_of(list.begin(), list.end(), [](const json::value& p) { return !p.is_object(); })) {
    return failed("a plugin of the list is not an object");
  }
  size_t ours = std::count_if(list.begin(), list.end(), isFerryEntry);
  if (ours == 1 && isFerryEntry(list.back()) && list.back().get_object() == wanted) return edit;
  auto others = std::remove_if(list.begin(), list.end(), isFerryEntry);
  list.erase(others, list.end());
  if (list.empty()) return failed("its only plugin is ferry-cni (no primary CNI to chain after)");
  list.emplace_back(wanted);
  edit.changed = true;
  edit.text = prettyText(file);
  return edit;
}

ChainEdit chainOut(std::string_view text) {
  std::string error;
  auto parsed = parseObject(text, error);
  if (!parsed) return failed(std::move(error));
  json::object file = *std::move(parsed);
  ChainEdit edit;
  json::value* plugins = file.if_contains("plugins");
  if (plugins == nullptr || !plugins->is_array()) return edit;
  json::array& list = plugins->get_array();
  auto others = std::remove_if(list.begin(), list.end(), isFerryEntry);
  if (others == list.end()) return edit;
  list.erase(others, list.end());
  if (list.empty()) return failed("ferry-cni is its only plugin (left as it is)");
  edit.changed = true;
  edit.text = prettyText(file);
  return edit;
}

namespace {
std::string_view extension(std::string_view name) {
  size_t dot = name.rfind('.');
  return dot == std::string_view::npos ? std::string_view{} : name.substr(dot);
}
}  // namespace

bool isConfigFileName(std::string_view name) {
  std::string_view ext = extension(name);
  return ext == ".conflist" || ext == ".conf" || ext == ".json";
}

bool isConflistFileName(std::string_view name) { return extension(name) == ".conflist"; }

std::optional<std::string> firstConfigFile(const std::vector<std::string>& names) {
  std::optional<std::string> first;
  for (const auto& name : names) {
    // std::string's < compares bytes as unsigned char, as Go's string comparison does.
    if (isConfigFileName(name) && (!first || name < *first)) first = name;
  }
  return first;
}

std::string conflistFileName(std::string_view name) {
  std::string_view ext = extension(name);
  return std::string(name.substr(0, name.size() - ext.size())) + ".conflist";
}

}  // namespace ferry::cni
