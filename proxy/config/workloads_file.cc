#include "proxy/config/workloads_file.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "proxy/common/strings.h"
#include "proxy/config/yaml_reader.h"

namespace ferry::config {
namespace {

// Kubernetes DNS-subdomain names are at most 253 bytes.
constexpr size_t kMaxNameBytes = 253;
// IFNAMSIZ - 1: the kernel refuses longer interface names.
constexpr size_t kMaxInterfaceNameBytes = 15;

// The entry's name as written, if it has one, so that every error can name the workload.
std::string entryName(const Value& node) {
  if (node.kind != Value::Kind::kMap) return "";
  for (const auto& [key, value] : node.entries) {
    if (key->kind == Value::Kind::kScalar && key->scalar == "name" && value->kind == Value::Kind::kScalar) {
      return value->scalar;
    }
  }
  return "";
}

absl::Status withWorkloadName(const absl::Status& status, const std::string& name) {
  if (name.empty()) return status;
  return absl::Status(status.code(), absl::StrCat(status.message(), " (workload '", name, "')"));
}

std::string displayName(const WorkloadEntry& w) { return absl::StrCat(w.namespace_name, "/", w.name); }

class WorkloadsParser {
 public:
  WorkloadsParser(std::string_view source_name, const std::function<void(WorkloadEntry&&)>& each)
      : reader_(source_name), each_(each) {}

  absl::Status parse(std::string_view text, FileFormat format) {
    auto add_entry = [this](const YamlField& entry) { return add(entry); };
    auto root = format == FileFormat::kJson ? reader_.parseJsonDocument(text, "workloads", add_entry)
                                            : reader_.parseDocument(text, "workloads", add_entry);
    if (!root.ok()) return root.status();
    auto top = reader_.map(*root, {"workloads"});
    if (!top.ok()) return top.status();
    auto list = reader_.require(*top, "workloads");
    if (!list.ok()) return list.status();
    // The entries were streamed already; the list left in the tree is empty.
    auto entries = reader_.sequence(*list);
    if (!entries.ok()) return entries.status();
    for (const YamlField& entry : *entries) {
      if (auto s = add(entry); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

 private:
  struct Seen {
    size_t index;
    int line;
  };

  absl::Status add(const YamlField& entry) {
    std::string label = entryName(*entry.node);
    std::vector<YamlField> ip_fields;
    int name_line = entry.line;
    auto parsed = parseEntry(entry, ip_fields, name_line);
    if (!parsed.ok()) return withWorkloadName(parsed.status(), label);
    WorkloadEntry& w = *parsed;
    size_t index = count_;
    auto [named, inserted] = by_name_.try_emplace(std::pair{w.namespace_name, w.name}, Seen{index, entry.line});
    if (!inserted) {
      return withWorkloadName(
          reader_.error(name_line, absl::StrCat(entry.path, ".name"),
                        absl::StrCat("'", displayName(w), "' is already defined by workloads[",
                                     named->second.index, "] (line ", named->second.line, ")")),
          label);
    }
    for (size_t i = 0; i < w.ips.size(); ++i) {
      auto [owner, fresh] = by_ip_.try_emplace(w.ips[i], Owner{index, entry.line, displayName(w)});
      if (fresh) continue;
      if (owner->second.index == index) {
        return withWorkloadName(
            reader_.error(ip_fields[i], absl::StrCat(w.ips[i].to_string(), " is listed twice")), label);
      }
      return withWorkloadName(
          reader_.error(ip_fields[i], absl::StrCat(w.ips[i].to_string(), " is already used by workloads[",
                                                   owner->second.index, "] '", owner->second.name, "' (line ",
                                                   owner->second.line, ")")),
          label);
    }
    ++count_;
    each_(std::move(w));
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> requiredName(const YamlMap& map, std::string_view key, int* line) {
    auto field = reader_.require(map, key);
    if (!field.ok()) return field.status();
    auto text = reader_.string(*field);
    if (!text.ok()) return text.status();
    if (!isObjectName(*text)) {
      return reader_.error(
          *field, absl::StrCat("'", *text, "' is not a valid name (use lowercase letters, digits, '.' and '-')"));
    }
    if (line != nullptr) *line = field->line;
    return *std::move(text);
  }

  absl::StatusOr<WorkloadEntry> parseEntry(const YamlField& entry, std::vector<YamlField>& ip_fields,
                                           int& name_line) {
    auto map = reader_.map(entry, {"name", "namespace", "service_account", "node", "ips", "hbone",
                                   "host_interface", "tls_mode", "labels", "workload_name"});
    if (!map.ok()) return map.status();
    WorkloadEntry w;
    auto name = requiredName(*map, "name", &name_line);
    if (!name.ok()) return name.status();
    w.name = *std::move(name);
    auto namespace_name = requiredName(*map, "namespace", nullptr);
    if (!namespace_name.ok()) return namespace_name.status();
    w.namespace_name = *std::move(namespace_name);
    auto service_account = requiredName(*map, "service_account", nullptr);
    if (!service_account.ok()) return service_account.status();
    w.service_account = *std::move(service_account);
    auto node = requiredName(*map, "node", nullptr);
    if (!node.ok()) return node.status();
    w.node = *std::move(node);

    auto ips_field = reader_.require(*map, "ips");
    if (!ips_field.ok()) return ips_field.status();
    auto ips = reader_.sequence(*ips_field);
    if (!ips.ok()) return ips.status();
    if (ips->empty()) return reader_.error(*ips_field, "needs at least one IP address");
    for (auto& ip_field : *ips) {
      auto text = reader_.string(ip_field);
      if (!text.ok()) return text.status();
      auto ip = common::parseIp(*text);
      if (!ip.ok()) return reader_.error(ip_field, ip.status().message());
      w.ips.push_back(common::canonicalIp(*ip));
      ip_fields.push_back(std::move(ip_field));
    }

    if (auto field = map->find("hbone")) {
      auto hbone = reader_.boolean(*field);
      if (!hbone.ok()) return hbone.status();
      w.hbone = *hbone;
    }
    if (auto field = map->find("host_interface")) {
      auto text = reader_.string(*field);
      if (!text.ok()) return text.status();
      if (!isInterfaceName(*text)) {
        return reader_.error(
            *field, absl::StrCat("'", *text, "' is not a valid interface name (1 to 15 bytes, no '/', ':' or whitespace)"));
      }
      w.host_interface = *std::move(text);
    }
    if (auto field = map->find("tls_mode")) {
      auto text = reader_.string(*field);
      if (!text.ok()) return text.status();
      if (*text == "permissive") {
        w.tls_mode = TlsMode::kPermissive;
      } else if (*text == "strict") {
        w.tls_mode = TlsMode::kStrict;
      } else {
        return reader_.error(*field, absl::StrCat("unknown tls_mode '", *text, "' (expected permissive or strict)"));
      }
    }
    if (map->find("workload_name")) {
      auto workload_name = requiredName(*map, "workload_name", nullptr);
      if (!workload_name.ok()) return workload_name.status();
      w.workload_name = *std::move(workload_name);
    }
    if (auto field = map->find("labels")) {
      auto labels = reader_.anyMap(*field);
      if (!labels.ok()) return labels.status();
      for (const auto& [key, value] : labels->fields()) {
        auto text = reader_.string(value);
        if (!text.ok()) return text.status();
        w.labels.emplace_back(key, *std::move(text));
      }
    }
    return w;
  }

  struct Owner {
    size_t index;
    int line;
    std::string name;
  };

  YamlReader reader_;
  const std::function<void(WorkloadEntry&&)>& each_;
  size_t count_ = 0;
  // (namespace, name) -> first entry: names are unique per namespace, as in Kubernetes.
  absl::flat_hash_map<std::pair<std::string, std::string>, Seen> by_name_;
  absl::flat_hash_map<common::IpAddress, Owner> by_ip_;
};

}  // namespace

FileFormat formatOf(std::string_view path) {
  return absl::EndsWith(common::toAbsl(path), ".json") ? FileFormat::kJson : FileFormat::kYaml;
}

bool isObjectName(std::string_view name) {
  if (name.empty() || name.size() > kMaxNameBytes || name == "." || name == "..") return false;
  return name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789.-") == std::string_view::npos;
}

bool isInterfaceName(std::string_view name) {
  if (name.empty() || name.size() > kMaxInterfaceNameBytes || name == "." || name == "..") return false;
  return std::none_of(name.begin(), name.end(), [](char c) {
    return c == '/' || c == ':' || c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f' ||
           c == '\0';
  });
}

absl::Status parseWorkloads(std::string_view text, std::string_view source_name, FileFormat format,
                            const std::function<void(WorkloadEntry&&)>& each) {
  return WorkloadsParser(source_name, each).parse(text, format);
}

absl::StatusOr<std::vector<WorkloadEntry>> parseWorkloads(std::string_view text, std::string_view source_name,
                                                          FileFormat format) {
  std::vector<WorkloadEntry> out;
  auto status = parseWorkloads(text, source_name, format, [&](WorkloadEntry&& w) { out.push_back(std::move(w)); });
  if (!status.ok()) return status;
  return out;
}

}  // namespace ferry::config
