#include "proxy/config/kubeconfig.h"

#include <filesystem>
#include <optional>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "proxy/common/file.h"
#include "proxy/common/strings.h"
#include "proxy/config/yaml_reader.h"

namespace ferry::config {
namespace {

class KubeconfigParser {
 public:
  KubeconfigParser(std::string_view source, std::string_view base_dir) : reader_(source), base_dir_(base_dir) {}

  absl::StatusOr<Kubeconfig> parse(std::string_view text) {
    auto root = reader_.parseDocument(text);
    if (!root.ok()) return root.status();
    if (!isMap(*root)) return reader_.error(*root, "a kubeconfig is a map");
    auto current = child(*root, "current-context");
    if (!current || isNull(*current)) return reader_.error(*root, "no current-context");
    auto context_name = reader_.string(*current);
    if (!context_name.ok()) return context_name.status();
    auto context = named(*root, "contexts", *context_name, "context");
    if (!context.ok()) return context.status();
    auto cluster_name = stringAt(*context, "cluster");
    auto user_name = stringAt(*context, "user");
    if (!cluster_name.ok()) return cluster_name.status();
    if (!user_name.ok()) return user_name.status();
    if (cluster_name->empty()) return reader_.error(*context, "the context names no cluster");
    auto cluster = named(*root, "clusters", *cluster_name, "cluster");
    if (!cluster.ok()) return cluster.status();

    Kubeconfig out;
    if (auto st = readCluster(*cluster, out); !st.ok()) return st;
    if (!user_name->empty()) {
      auto user = named(*root, "users", *user_name, "user");
      if (!user.ok()) return user.status();
      if (auto st = readUser(*user, out); !st.ok()) return st;
    }
    return out;
  }

 private:
  static bool isMap(const YamlField& f) { return f.node != nullptr && f.node->kind == Value::Kind::kMap; }
  static bool isNull(const YamlField& f) { return f.node == nullptr || f.node->kind == Value::Kind::kNull; }
  // Unknown keys are allowed here (see kubeconfig.h), so no YamlReader::map().
  std::optional<YamlField> child(const YamlField& map, const std::string& key) const {
    if (!isMap(map)) return std::nullopt;
    for (const auto& [k, v] : map.node->entries) {
      if (k == nullptr || k->scalar != key) continue;
      return YamlField{map.path.empty() ? key : absl::StrCat(map.path, ".", key), v,
                       v != nullptr && v->line > 0 ? v->line : (k->line > 0 ? k->line : map.line)};
    }
    return std::nullopt;
  }
  // A string under `key`, "" when absent or empty.
  absl::StatusOr<std::string> stringAt(const YamlField& map, const std::string& key) const {
    auto f = child(map, key);
    if (!f || isNull(*f)) return std::string();
    return reader_.string(*f);
  }
  absl::StatusOr<bool> boolAt(const YamlField& map, const std::string& key) const {
    auto f = child(map, key);
    if (!f || isNull(*f)) return false;
    return reader_.boolean(*f);
  }
  // The `inner` map of the entry of list `list` whose name is `name`.
  absl::StatusOr<YamlField> named(const YamlField& root, const std::string& list, const std::string& name,
                                  const std::string& inner) const {
    auto l = child(root, list);
    if (!l || isNull(*l)) return reader_.error(root, absl::StrCat("no ", list, " (looking for '", name, "')"));
    auto entries = reader_.sequence(*l);
    if (!entries.ok()) return entries.status();
    for (const YamlField& e : *entries) {
      auto n = stringAt(e, "name");
      if (!n.ok()) return n.status();
      if (*n != name) continue;
      auto body = child(e, inner);
      if (!body || !isMap(*body)) return reader_.error(e, absl::StrCat("'", name, "' has no ", inner, " map"));
      return *body;
    }
    return reader_.error(*l, absl::StrCat("no entry named '", name, "'"));
  }
  std::string resolve(const std::string& path) const {
    if (path.empty() || path.front() == '/' || base_dir_.empty()) return path;
    return (std::filesystem::path(base_dir_) / path).string();
  }
  absl::Status fileOrData(const YamlField& map, const std::string& key, std::string& file, std::string& pem) const {
    auto f = stringAt(map, key);
    if (!f.ok()) return f.status();
    file = resolve(*f);
    auto d = stringAt(map, key + "-data");
    if (!d.ok()) return d.status();
    if (!d->empty() && !absl::Base64Unescape(*d, &pem)) {
      return reader_.error(*child(map, key + "-data"), "not valid base64");
    }
    return absl::OkStatus();
  }

  absl::Status readCluster(const YamlField& cluster, Kubeconfig& out) const {
    auto server = stringAt(cluster, "server");
    if (!server.ok()) return server.status();
    if (server->empty()) return reader_.error(cluster, "the cluster has no server");
    out.server = *server;
    auto insecure = boolAt(cluster, "insecure-skip-tls-verify");
    if (!insecure.ok()) return insecure.status();
    if (*insecure) {
      return reader_.error(cluster, "insecure-skip-tls-verify is not supported: ferryd always verifies the API server");
    }
    return fileOrData(cluster, "certificate-authority", out.ca_file, out.ca_pem);
  }

  absl::Status readUser(const YamlField& user, Kubeconfig& out) const {
    for (const char* unsupported : {"exec", "auth-provider", "username"}) {
      if (auto f = child(user, unsupported); f && !isNull(*f)) {
        return reader_.error(*f, "this credential type is not supported by ferryd (use a token, a token file or a "
                                 "client certificate)");
      }
    }
    if (auto st = fileOrData(user, "client-certificate", out.client_cert_file, out.client_cert_pem); !st.ok()) return st;
    if (auto st = fileOrData(user, "client-key", out.client_key_file, out.client_key_pem); !st.ok()) return st;
    auto token = stringAt(user, "token");
    if (!token.ok()) return token.status();
    out.token = *token;
    auto token_file = stringAt(user, "tokenFile");
    if (!token_file.ok()) return token_file.status();
    out.token_file = resolve(*token_file);
    return absl::OkStatus();
  }

  YamlReader reader_;
  std::string base_dir_;
};

}  // namespace

absl::StatusOr<Kubeconfig> parseKubeconfig(std::string_view yaml_text, std::string_view source_name,
                                           std::string_view base_dir) {
  return KubeconfigParser(source_name, base_dir).parse(yaml_text);
}

absl::StatusOr<Kubeconfig> loadKubeconfig(const std::string& path) {
  auto text = common::readFile(path);
  if (!text.ok()) return absl::InvalidArgumentError(absl::StrCat("cannot read kubeconfig: ", text.status().message()));
  return parseKubeconfig(*text, path, std::filesystem::path(path).parent_path().string());
}

}  // namespace ferry::config
