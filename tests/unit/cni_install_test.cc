// CniInstaller (proxy/server/cni_install.h) on temporary folders standing in for the node's
// /opt/cni/bin and /etc/cni/net.d: the plugin copied, the chain put in, kept through a
// primary CNI's rewrites, and taken out again.
#include "proxy/server/cni_install.h"
#include "proxy/cni/api.h"
#include "proxy/server/cni_credentials.h"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "proxy/common/file.h"
#include "proxy/telemetry/metrics.h"

namespace ferry::server {
namespace {
namespace fs = std::filesystem;
namespace json = boost::json;

constexpr char kFlannel[] = R"({
  "name": "cbr0",
  "cniVersion": "0.3.1",
  "plugins": [
    {"type": "flannel", "delegate": {"hairpinMode": true, "isDefaultGateway": true}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
)";
constexpr char kCalico[] = R"({"name": "k8s-pod-network", "cniVersion": "0.3.1", "plugins": [
  {"type": "calico", "datastore_type": "kubernetes", "ipam": {"type": "calico-ipam"}},
  {"type": "bandwidth", "capabilities": {"bandwidth": true}}]})";
constexpr char kBridgeConf[] = R"({"cniVersion": "0.4.0", "name": "bridge", "type": "bridge", "bridge": "cnio0",
  "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.200.0.0/24"}]]}})";
constexpr char kPlugin[] = "\x7f" "ELF stand-in for ferry-cni\n";

class CniInstallTest : public testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(testing::TempDir()) /
            ("fy_cni_" + std::string(testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(root_);
    fs::create_directories(root_ / "bin");
    fs::create_directories(root_ / "net.d");
    fs::create_directories(root_ / "image");
    write(root_ / "image" / "ferry-cni", kPlugin);
    config_.enabled = config_.install = true;
    config_.bin_dir = (root_ / "bin").string();
    config_.conf_dir = (root_ / "net.d").string();
    config_.plugin_binary = (root_ / "image" / "ferry-cni").string();
    config_.socket = "/var/run/ferry/cni.sock";
    config_.exclude_namespaces = {"kube-system"};
  }
  void TearDown() override { fs::remove_all(root_); }

  // As a primary CNI writes its file: a new file renamed into place.
  static void write(const fs::path& path, const std::string& text) {
    ASSERT_TRUE(common::writeFileAtomic(path.string(), text, 0644).ok());
  }
  static std::string read(const fs::path& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  static json::value parse(const std::string& text) {
    boost::system::error_code ec;
    json::value v = json::parse(text, ec);
    EXPECT_FALSE(ec) << text;
    return v;
  }
  json::array plugins(const std::string& name) {
    json::value v = parse(read(conf(name)));
    return v.is_object() && v.as_object().contains("plugins") ? v.at("plugins").as_array() : json::array{};
  }
  fs::path conf(const std::string& name) const { return root_ / "net.d" / name; }
  fs::path installed() const { return root_ / "bin" / "ferry-cni"; }
  static std::string typeOf(const json::value& plugin) { return std::string(plugin.at("type").as_string()); }

  fs::path root_;
  config::Cni config_;
};

TEST_F(CniInstallTest, CopiesThePluginAndChainsTheFirstConfigurationList) {
  write(conf("10-flannel.conflist"), kFlannel);
  write(conf("99-loopback.conf"), R"({"cniVersion": "0.3.1", "name": "lo", "type": "loopback"})");
  CniInstaller installer(config_, {"ferry-system"});
  ASSERT_TRUE(installer.install().ok());

  EXPECT_EQ(read(installed()), kPlugin);
  EXPECT_EQ(fs::status(installed()).permissions() & fs::perms::all, static_cast<fs::perms>(0755));
  json::array list = plugins("10-flannel.conflist");
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(typeOf(list[0]), "flannel");
  EXPECT_EQ(typeOf(list[1]), "portmap");
  EXPECT_EQ(list[2].at("type"), "ferry-cni");
  EXPECT_EQ(list[2].at("socket"), "/var/run/ferry/cni.sock");
  EXPECT_EQ(list[2].at("failurePolicy"), "closed");
  EXPECT_EQ(list[2].at("excludeNamespaces"), (json::array{"kube-system", "ferry-system"}));
  EXPECT_EQ(list[2].at("timeoutMs"), 5000);
  EXPECT_EQ(read(conf("99-loopback.conf")), R"({"cniVersion": "0.3.1", "name": "lo", "type": "loopback"})")
      << "only the first file is the runtime's network";
  EXPECT_TRUE(installer.chained());
  EXPECT_EQ(installer.chainedFile(), conf("10-flannel.conflist").string());
  EXPECT_NE(telemetry::textOf(installer).find("ferry_cni_chain_installed 1\n"), std::string::npos);
  EXPECT_EQ(fs::status(conf("10-flannel.conflist")).permissions() & fs::perms::all, static_cast<fs::perms>(0644));
}

// A restarted ferryd finds its chain and its plugin as it left them: nothing is rewritten.
TEST_F(CniInstallTest, ASecondInstallAndEveryCheckLeaveAChainedFileAlone) {
  write(conf("10-flannel.conflist"), kFlannel);
  { ASSERT_TRUE(CniInstaller(config_, {}).install().ok()); }
  struct stat conf_before {}, bin_before {};
  ASSERT_EQ(::stat(conf("10-flannel.conflist").c_str(), &conf_before), 0);
  ASSERT_EQ(::stat(installed().c_str(), &bin_before), 0);

  CniInstaller installer(config_, {});
  ASSERT_TRUE(installer.install().ok());
  EXPECT_FALSE(installer.check());
  EXPECT_FALSE(installer.check());
  struct stat conf_after {}, bin_after {};
  ASSERT_EQ(::stat(conf("10-flannel.conflist").c_str(), &conf_after), 0);
  ASSERT_EQ(::stat(installed().c_str(), &bin_after), 0);
  EXPECT_EQ(conf_after.st_ino, conf_before.st_ino) << "the configuration was rewritten";
  EXPECT_EQ(bin_after.st_ino, bin_before.st_ino) << "the plugin was rewritten";
  EXPECT_TRUE(installer.chained());
  EXPECT_EQ(installer.rechains(), 0u);
}

TEST_F(CniInstallTest, ReChainsWhenThePrimaryCniRewritesItsFile) {
  write(conf("10-flannel.conflist"), kFlannel);
  CniInstaller installer(config_, {});
  ASSERT_TRUE(installer.install().ok());
  write(conf("10-flannel.conflist"), kFlannel);  // flannel restarted and wrote its own again
  ASSERT_EQ(plugins("10-flannel.conflist").size(), 2u);

  EXPECT_TRUE(installer.check());
  json::array list = plugins("10-flannel.conflist");
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(typeOf(list.back()), "ferry-cni");
  EXPECT_EQ(installer.rechains(), 1u);
  EXPECT_FALSE(installer.check()) << "its own write is not a rewrite to answer";
  EXPECT_EQ(installer.rechains(), 1u);
  EXPECT_NE(telemetry::textOf(installer).find("ferry_cni_rechained_total 1\n"), std::string::npos);
}

TEST_F(CniInstallTest, FollowsTheFileThatBecomesFirst) {
  write(conf("10-flannel.conflist"), kFlannel);
  CniInstaller installer(config_, {});
  ASSERT_TRUE(installer.install().ok());
  write(conf("05-calico.conflist"), kCalico);  // a CNI migration: calico's file sorts first

  EXPECT_TRUE(installer.check());
  EXPECT_EQ(installer.chainedFile(), conf("05-calico.conflist").string());
  json::array list = plugins("05-calico.conflist");
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(typeOf(list.back()), "ferry-cni");
  EXPECT_EQ(installer.rechains(), 1u);
}

TEST_F(CniInstallTest, WaitsForThePrimaryCniToWriteItsFile) {
  write(conf("calico-kubeconfig"), "apiVersion: v1\n");  // not a configuration file
  CniInstaller installer(config_, {});
  ASSERT_TRUE(installer.install().ok()) << "no configuration yet is no error";
  EXPECT_FALSE(installer.chained());
  EXPECT_TRUE(fs::exists(installed())) << "the plugin is there before any chain names it";
  EXPECT_FALSE(installer.check());
  EXPECT_NE(telemetry::textOf(installer).find("ferry_cni_chain_installed 0\n"), std::string::npos);

  write(conf("10-calico.conflist"), kCalico);
  EXPECT_TRUE(installer.check());
  EXPECT_TRUE(installer.chained());
  EXPECT_EQ(installer.rechains(), 0u) << "the first chain is no re-chain";
  EXPECT_EQ(installer.errors(), 0u);
}

TEST_F(CniInstallTest, ASinglePluginConfBecomesAConflistBesideIt) {
  write(conf("10-bridge.conf"), kBridgeConf);
  CniInstaller installer(config_, {});
  ASSERT_TRUE(installer.install().ok());
  EXPECT_FALSE(fs::exists(conf("10-bridge.conf"))) << "the runtime would keep taking the .conf";
  json::array list = plugins("10-bridge.conflist");
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0], parse(kBridgeConf));
  EXPECT_EQ(typeOf(list[1]), "ferry-cni");
  EXPECT_EQ(installer.chainedFile(), conf("10-bridge.conflist").string());
  EXPECT_FALSE(installer.check());

  // The primary CNI writes its .conf again: it sorts first, and is converted again.
  write(conf("10-bridge.conf"), kBridgeConf);
  EXPECT_TRUE(installer.check());
  EXPECT_FALSE(fs::exists(conf("10-bridge.conf")));
  EXPECT_EQ(plugins("10-bridge.conflist").size(), 2u);
  EXPECT_EQ(installer.rechains(), 1u);
}

// A file ferry cannot chain into is reported once per version and tried again once it changes.
TEST_F(CniInstallTest, ABrokenFileIsCountedOnceAndChainedWhenFixed) {
  write(conf("10-flannel.conflist"), "{\"name\": \"cbr0\", \"cniVersion\": \"0.3.1\", \"plugins\": [");
  CniInstaller installer(config_, {});
  ASSERT_TRUE(installer.install().ok());
  EXPECT_FALSE(installer.chained());
  EXPECT_EQ(installer.errors(), 1u);
  EXPECT_FALSE(installer.check());
  EXPECT_EQ(installer.errors(), 1u) << "an unchanged broken file is not an error per poll";
  EXPECT_NE(telemetry::textOf(installer).find("ferry_cni_chain_errors_total 1\n"), std::string::npos);

  write(conf("10-flannel.conflist"), kFlannel);
  EXPECT_TRUE(installer.check());
  EXPECT_TRUE(installer.chained());
  EXPECT_EQ(plugins("10-flannel.conflist").size(), 3u);
}

TEST_F(CniInstallTest, PutsBackAPluginSomeoneRemoved) {
  write(conf("10-flannel.conflist"), kFlannel);
  CniInstaller installer(config_, {});
  ASSERT_TRUE(installer.install().ok());
  fs::remove(installed());
  installer.check();
  EXPECT_EQ(read(installed()), kPlugin);
}

TEST_F(CniInstallTest, AMissingPluginIsAStartUpErrorNamingTheKey) {
  config_.plugin_binary = (root_ / "image" / "nothing-here").string();
  write(conf("10-flannel.conflist"), kFlannel);
  CniInstaller installer(config_, {});
  absl::Status st = installer.install();
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound) << st;
  EXPECT_NE(st.message().find("nothing-here"), std::string::npos) << st;
  EXPECT_NE(st.message().find("cni.plugin_binary"), std::string::npos) << st;
  EXPECT_EQ(read(conf("10-flannel.conflist")), kFlannel) << "no chain to a plugin that is not there";
}

TEST_F(CniInstallTest, UninstallLeavesTheOriginalPluginsAndNoBinary) {
  write(conf("10-flannel.conflist"), kFlannel);
  CniInstaller installer(config_, {});
  ASSERT_TRUE(installer.install().ok());
  write(conf("10-flannel.conflist"), kFlannel);
  ASSERT_TRUE(installer.check());
  // A file that was first once (an earlier ferryd chained it) and is not now.
  write(conf("20-old.conflist"),
        R"({"cniVersion": "0.3.1", "name": "old", "plugins": [{"type": "ptp"}, {"type": "ferry-cni", "socket": "/x"}]})");
  write(conf("30-other.conflist"), kCalico);
  // The plugin's credentials (cni.service_account), which ferryd keeps beside the entry.
  ASSERT_TRUE(common::writeFileAtomic(installer.kubeconfigPath(), "{}", 0600).ok());

  installer.uninstall();
  EXPECT_FALSE(fs::exists(installed()));
  EXPECT_FALSE(fs::exists(installer.kubeconfigPath())) << "the credentials go with the entry";
  EXPECT_EQ(parse(read(conf("10-flannel.conflist"))), parse(kFlannel));
  json::array old = plugins("20-old.conflist");
  ASSERT_EQ(old.size(), 1u);
  EXPECT_EQ(typeOf(old[0]), "ptp");
  EXPECT_EQ(read(conf("30-other.conflist")), kCalico) << "a file without ferry's entry is not rewritten";
  EXPECT_FALSE(installer.chained());

  // The control loop may still poll once before it stops: nothing comes back.
  EXPECT_FALSE(installer.check());
  EXPECT_FALSE(fs::exists(installed()));
  EXPECT_EQ(plugins("10-flannel.conflist").size(), 2u);
}

TEST_F(CniInstallTest, TheEntryNamesThePluginsKubeconfigAsTheNodeSeesItAndTheEnrolmentRule) {
  write(conf("10-flannel.conflist"), kFlannel);
  config_.service_account = "ferry/ferry-cni";
  config_.node_conf_dir = "/etc/cni/net.d";  // ferryd's conf_dir is a mount of it
  CniInstaller installer(config_, {"ferry"}, /*istio_ambient=*/true);
  ASSERT_TRUE(installer.install().ok());
  json::value entry = plugins("10-flannel.conflist").back();
  EXPECT_EQ(entry.at("kubeconfig"), "/etc/cni/net.d/ferry-cni.kubeconfig");
  EXPECT_EQ(entry.at("istioAmbient"), true);
  EXPECT_EQ(installer.kubeconfigPath(), conf("ferry-cni.kubeconfig").string()) << "ferryd writes it in its own view";

  // Without a ServiceAccount the plugin has no credentials and is told of none.
  config_.service_account.clear();
  CniInstaller plain(config_, {});
  ASSERT_TRUE(plain.install().ok());
  entry = plugins("10-flannel.conflist").back();
  EXPECT_EQ(entry.as_object().if_contains("kubeconfig"), nullptr);
  EXPECT_EQ(entry.as_object().if_contains("istioAmbient"), nullptr);
}

// What ferryd writes is what the plugin reads (proxy/cni/api.h), and kubectl's shape.
TEST(CniCredentials, ThePluginReadsTheKubeconfigFerrydWrites) {
  const std::string ca = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
  std::string text = pluginKubeconfig("https://10.96.0.1:443", ca, "eyJhbGciOi.x.y");
  auto access = cni::parseApiAccess(text);
  ASSERT_TRUE(std::holds_alternative<cni::ApiAccess>(access)) << std::get<std::string>(access);
  const auto& a = std::get<cni::ApiAccess>(access);
  EXPECT_EQ(a.host, "10.96.0.1");
  EXPECT_EQ(a.port, "443");
  EXPECT_EQ(a.ca_pem, ca);
  EXPECT_EQ(a.token, "eyJhbGciOi.x.y");
  json::value v = json::parse(text);
  EXPECT_EQ(v.at("current-context"), "ferry-cni");
  EXPECT_EQ(v.at("contexts").at(0).at("context").at("user"), "ferry-cni");
}

TEST(CniCredentials, ATokenRequestAnswerGivesTheTokenAndItsExpiry) {
  // As the API server answers POST .../serviceaccounts/<name>/token (201).
  auto t = parseTokenRequest(
      R"({"kind":"TokenRequest","apiVersion":"authentication.k8s.io/v1","metadata":{"name":"ferry-cni","namespace":"ferry","creationTimestamp":null},"spec":{"audiences":["https://kubernetes.default.svc"],"expirationSeconds":172800,"boundObjectRef":null},"status":{"token":"eyJ.a.b","expirationTimestamp":"2026-12-08T23:09:37Z"}})");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->token, "eyJ.a.b");
  EXPECT_EQ(t->expires_unix, 1796771377);
  EXPECT_FALSE(parseTokenRequest(R"({"kind":"Status","status":"Failure","code":403})").ok());
  EXPECT_FALSE(parseTokenRequest(R"({"kind":"TokenRequest","status":{"token":""}})").ok());
  EXPECT_FALSE(parseTokenRequest(R"({"kind":"TokenRequest","status":{"token":"t","expirationTimestamp":"tomorrow"}})").ok());
}

}  // namespace
}  // namespace ferry::server
