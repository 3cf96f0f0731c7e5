#include "proxy/workloads/registry.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "proxy/common/log.h"
#include "proxy/common/strings.h"
#include "proxy/config/yaml_reader.h"

namespace ferry::workloads {
namespace {

using config::YamlField;
using config::YamlMap;
using config::YamlReader;

// Kubernetes DNS-subdomain names are at most 253 bytes.
constexpr size_t kMaxNameBytes = 253;
// IFNAMSIZ - 1: the kernel refuses longer interface names.
constexpr size_t kMaxInterfaceNameBytes = 15;

// Kubernetes object names. "." and ".." are refused because namespace and service account
// become SPIFFE ID path segments, where they would read as relative paths.
bool isName(std::string_view name) {
  if (name.empty() || name.size() > kMaxNameBytes || name == "." || name == "..") return false;
  return name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789.-") == std::string_view::npos;
}

// The kernel's dev_valid_name() rules.
bool isInterfaceName(std::string_view name) {
  if (name.empty() || name.size() > kMaxInterfaceNameBytes || name == "." || name == "..") {
    return false;
  }
  return std::none_of(name.begin(), name.end(), [](char c) {
    return c == '/' || c == ':' || c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' ||
           c == '\f' || c == '\0';
  });
}

// Dual-stack sockets report IPv4 peers as ::ffff:a.b.c.d; keying the registry by the plain
// IPv4 form makes both spellings find the same workload.
IpAddress canonicalIp(const IpAddress& ip) {
  if (ip.is_v6() && ip.to_v6().is_v4_mapped()) {
    return boost::asio::ip::make_address_v4(boost::asio::ip::v4_mapped, ip.to_v6());
  }
  return ip;
}

// The entry's name as written, if it has one, so that every error can name the workload.
std::string entryName(const YAML::Node& node) {
  if (!node.IsMap()) return "";
  for (auto it = node.begin(); it != node.end(); ++it) {
    if (it->first.IsScalar() && it->first.Scalar() == "name" && it->second.IsScalar()) {
      return it->second.Scalar();
    }
  }
  return "";
}

struct ParsedEntry {
  Workload workload;
  int name_line = 1;
  std::vector<YamlField> ip_fields;  // same order as workload.ips
};

absl::StatusOr<std::string> requiredName(const YamlReader& reader, const YamlMap& map,
                                         std::string_view key, int* line) {
  auto field = reader.require(map, key);
  if (!field.ok()) return field.status();
  auto text = reader.string(*field);
  if (!text.ok()) return text.status();
  if (!isName(*text)) {
    return reader.error(
        *field, absl::StrCat("'", *text,
                             "' is not a valid name (use lowercase letters, digits, '.' and '-')"));
  }
  if (line != nullptr) *line = field->line;
  return *std::move(text);
}

absl::StatusOr<ParsedEntry> parseEntry(const YamlReader& reader, const YamlField& entry) {
  auto map = reader.map(entry, {"name", "namespace", "service_account", "node", "ips", "hbone",
                                "host_interface", "tls_mode"});
  if (!map.ok()) return map.status();
  ParsedEntry parsed;
  Workload& w = parsed.workload;

  auto name = requiredName(reader, *map, "name", &parsed.name_line);
  if (!name.ok()) return name.status();
  w.name = *std::move(name);
  auto namespace_name = requiredName(reader, *map, "namespace", nullptr);
  if (!namespace_name.ok()) return namespace_name.status();
  w.namespace_name = *std::move(namespace_name);
  auto service_account = requiredName(reader, *map, "service_account", nullptr);
  if (!service_account.ok()) return service_account.status();
  w.service_account = *std::move(service_account);
  auto node = requiredName(reader, *map, "node", nullptr);
  if (!node.ok()) return node.status();
  w.node = *std::move(node);

  auto ips_field = reader.require(*map, "ips");
  if (!ips_field.ok()) return ips_field.status();
  auto ips = reader.sequence(*ips_field);
  if (!ips.ok()) return ips.status();
  if (ips->empty()) return reader.error(*ips_field, "needs at least one IP address");
  for (auto& ip_field : *ips) {
    auto text = reader.string(ip_field);
    if (!text.ok()) return text.status();
    auto ip = common::parseIp(*text);
    if (!ip.ok()) return reader.error(ip_field, ip.status().message());
    w.ips.push_back(canonicalIp(*ip));
    parsed.ip_fields.push_back(std::move(ip_field));
  }

  if (auto field = map->find("hbone")) {
    auto hbone = reader.boolean(*field);
    if (!hbone.ok()) return hbone.status();
    w.hbone = *hbone;
  }
  if (auto field = map->find("host_interface")) {
    auto text = reader.string(*field);
    if (!text.ok()) return text.status();
    if (!isInterfaceName(*text)) {
      return reader.error(
          *field,
          absl::StrCat(
              "'", *text,
              "' is not a valid interface name (1 to 15 bytes, no '/', ':' or whitespace)"));
    }
    w.host_interface = *std::move(text);
  }
  if (auto field = map->find("tls_mode")) {
    auto text = reader.string(*field);
    if (!text.ok()) return text.status();
    if (*text == "permissive") {
      w.tls_mode = TlsMode::kPermissive;
    } else if (*text == "strict") {
      w.tls_mode = TlsMode::kStrict;
    } else {
      return reader.error(
          *field, absl::StrCat("unknown tls_mode '", *text, "' (expected permissive or strict)"));
    }
  }
  return parsed;
}

absl::Status withWorkloadName(const absl::Status& status, const std::string& name) {
  if (name.empty()) return status;
  return absl::Status(status.code(), absl::StrCat(status.message(), " (workload '", name, "')"));
}

// Closes the descriptor on every return path.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

// 0 or an errno.
int readAll(int fd, std::string& out) {
  char buffer[16 * 1024];
  for (;;) {
    ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return 0;
    out.append(buffer, static_cast<size_t>(n));
  }
}

}  // namespace

std::string Workload::spiffeId(std::string_view trust_domain) const {
  return absl::StrCat("spiffe://", common::toAbsl(trust_domain), "/ns/", namespace_name, "/sa/",
                      service_account);
}

std::string Workload::displayName() const { return absl::StrCat(namespace_name, "/", name); }

absl::StatusOr<std::shared_ptr<const Registry>> Registry::parse(std::string_view yaml_text,
                                                                std::string_view source_name,
                                                                std::string_view local_node) {
  YamlReader reader(source_name);
  auto root = reader.parseDocument(yaml_text);
  if (!root.ok()) return root.status();
  auto top = reader.map(*root, {"workloads"});
  if (!top.ok()) return top.status();
  auto list = reader.require(*top, "workloads");
  if (!list.ok()) return list.status();
  auto entries = reader.sequence(*list);
  if (!entries.ok()) return entries.status();

  auto registry = std::make_shared<Registry>();
  registry->local_node_ = std::string(local_node);
  registry->workloads_.reserve(entries->size());
  std::vector<int> entry_lines;
  // (namespace, name) -> index: names are unique per namespace, as in Kubernetes.
  absl::flat_hash_map<std::pair<std::string, std::string>, size_t> by_name;
  for (size_t index = 0; index < entries->size(); ++index) {
    const YamlField& entry = (*entries)[index];
    std::string label = entryName(entry.node);
    auto parsed = parseEntry(reader, entry);
    if (!parsed.ok()) return withWorkloadName(parsed.status(), label);
    Workload& w = parsed->workload;

    auto [named, inserted] = by_name.try_emplace(std::pair{w.namespace_name, w.name}, index);
    if (!inserted) {
      size_t first = named->second;
      return withWorkloadName(
          reader.error(parsed->name_line, absl::StrCat(entry.path, ".name"),
                       absl::StrCat("'", w.displayName(), "' is already defined by workloads[",
                                    first, "] (line ", entry_lines[first], ")")),
          label);
    }
    for (size_t i = 0; i < w.ips.size(); ++i) {
      auto [owner, fresh] = registry->by_ip_.try_emplace(w.ips[i], index);
      if (fresh) continue;
      const YamlField& ip_field = parsed->ip_fields[i];
      if (owner->second == index) {
        return withWorkloadName(
            reader.error(ip_field, absl::StrCat(w.ips[i].to_string(), " is listed twice")), label);
      }
      const Workload& other = registry->workloads_[owner->second];
      return withWorkloadName(
          reader.error(ip_field,
                       absl::StrCat(w.ips[i].to_string(), " is already used by workloads[",
                                    owner->second, "] '", other.displayName(), "' (line ",
                                    entry_lines[owner->second], ")")),
          label);
    }
    entry_lines.push_back(entry.line);
    registry->workloads_.push_back(std::move(w));
  }
  return std::shared_ptr<const Registry>(std::move(registry));
}

std::shared_ptr<const Registry> Registry::empty(std::string_view local_node) {
  auto registry = std::make_shared<Registry>();
  registry->local_node_ = std::string(local_node);
  return registry;
}

const Workload* Registry::findByIp(const IpAddress& ip) const {
  auto it = by_ip_.find(canonicalIp(ip));
  return it == by_ip_.end() ? nullptr : &workloads_[it->second];
}

const Workload* Registry::findLocalByIp(const IpAddress& ip) const {
  const Workload* w = findByIp(ip);
  return w != nullptr && w->node == local_node_ ? w : nullptr;
}

size_t Registry::localCount() const {
  return static_cast<size_t>(
      std::count_if(workloads_.begin(), workloads_.end(),
                    [&](const Workload& w) { return w.node == local_node_; }));
}

Watcher::Watcher(std::string path, std::string local_node)
    : path_(std::move(path)),
      local_node_(std::move(local_node)),
      current_(Registry::empty(local_node_)) {}

absl::Status Watcher::loadInitial() {
  // Forget any earlier stamp so the file is always read: start-up must see its real state.
  stamp_ = FileStamp{};
  return reloadIfChanged().status();
}

bool Watcher::poll() {
  auto published = reloadIfChanged();
  if (published.ok()) return *published;
  reload_failures_.fetch_add(1);
  FERRY_LOG(kWarn, "workloads: %s; keeping the previous %d workloads", published.status().message(),
            current()->all().size());
  return false;
}

absl::StatusOr<bool> Watcher::reloadIfChanged() {
  // O_NONBLOCK: a FIFO put in the file's place must not hang the control thread.
  FileDescriptor fd(::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (fd.get() < 0) {
    int err = errno;
    // An unreadable file gets a stamp of its own so it is reported once, not on every poll,
    // and again only if the reason changes.
    FileStamp unreadable{.mtime_ns = -2, .size = -static_cast<int64_t>(err), .inode = 0};
    if (stamp_ == unreadable) return false;
    stamp_ = unreadable;
    return absl::InvalidArgumentError(absl::StrCat(path_, ": cannot open: ", std::strerror(err)));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": cannot stat: ", std::strerror(errno)));
  }
  FileStamp stamp{
      .mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec,
      .size = static_cast<int64_t>(st.st_size),
      .inode = static_cast<uint64_t>(st.st_ino)};
  if (stamp == stamp_) return false;
  // Remembered before parsing: a broken version is reported once, not on every poll.
  stamp_ = stamp;
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": not a regular file"));
  }

  std::string text;
  if (int err = readAll(fd.get(), text); err != 0) {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": cannot read: ", std::strerror(err)));
  }
  auto next = Registry::parse(text, path_, local_node_);
  if (!next.ok()) return next.status();
  {
    std::lock_guard lock(current_mu_);
    current_ = *next;
  }
  uint64_t generation = generation_.fetch_add(1) + 1;
  FERRY_LOG(kInfo, "workloads: loaded %d workloads (%d local) from %s, generation %d",
            (*next)->all().size(), (*next)->localCount(), path_, generation);
  if (on_change_) on_change_(*next);
  return true;
}

}  // namespace ferry::workloads
