// ferry-cni's entry in the node's CNI configuration (proxy/cni/chain.h). The files below are
// shaped as their writers write them: containerd's example (install-cni, bridge + portmap),
// flannel's kube-flannel.yml (cni-conf.json), Calico's install (10-calico.conflist), kind's
// kindnet (ptp) and the single-plugin bridge .conf of older guides.
#include "proxy/cni/chain.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <boost/json.hpp>

namespace ferry::cni {
namespace {
namespace json = boost::json;

constexpr char kContainerdBridge[] = R"({
 "cniVersion": "1.0.0",
 "name": "containerd-net",
 "plugins": [
   {
     "type": "bridge",
     "bridge": "cni0",
     "isGateway": true,
     "ipMasq": true,
     "promiscMode": true,
     "ipam": {
       "type": "host-local",
       "ranges": [[{"subnet": "10.88.0.0/16"}], [{"subnet": "2001:db8:4860::/64"}]],
       "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}]
     }
   },
   {
     "type": "portmap",
     "capabilities": {"portMappings": true}
   }
 ]
})";

constexpr char kFlannel[] = R"({
  "name": "cbr0",
  "cniVersion": "0.3.1",
  "plugins": [
    {
      "type": "flannel",
      "delegate": {
        "hairpinMode": true,
        "isDefaultGateway": true
      }
    },
    {
      "type": "portmap",
      "capabilities": {
        "portMappings": true
      }
    }
  ]
})";

constexpr char kCalico[] = R"({
  "name": "k8s-pod-network",
  "cniVersion": "0.3.1",
  "plugins": [
    {
      "type": "calico",
      "log_level": "info",
      "log_file_path": "/var/log/calico/cni/cni.log",
      "datastore_type": "kubernetes",
      "nodename": "fy-node-1",
      "mtu": 0,
      "ipam": {
          "type": "calico-ipam"
      },
      "policy": {
          "type": "k8s"
      },
      "kubernetes": {
          "kubeconfig": "/etc/cni/net.d/calico-kubeconfig"
      }
    },
    {
      "type": "portmap",
      "snat": true,
      "capabilities": {"portMappings": true}
    },
    {
      "type": "bandwidth",
      "capabilities": {"bandwidth": true}
    }
  ]
})";

constexpr char kKindnet[] = R"({
	"cniVersion": "0.3.1",
	"name": "kindnet",
	"plugins": [
	{
		"type": "ptp",
		"ipMasq": false,
		"ipam": {
			"type": "host-local",
			"dataDir": "/run/cni-ipam-state",
			"routes": [{ "dst": "0.0.0.0/0" }],
			"ranges": [[ { "subnet": "10.244.1.0/24" } ]]
		},
		"mtu": 1500
	},
	{
		"type": "portmap",
		"capabilities": {
			"portMappings": true
		}
	}
	]
})";

constexpr char kBridgeConf[] = R"({
    "cniVersion": "0.3.1",
    "name": "bridge",
    "type": "bridge",
    "bridge": "cnio0",
    "isGateway": true,
    "ipMasq": true,
    "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "10.200.0.0/24"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
    }
})";

ChainEntry entry() {
  return ChainEntry{"/var/run/ferry/cni.sock", FailurePolicy::kClosed, {"kube-system", "ferry-system"}, 5000};
}

json::object parse(const std::string& text) {
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  EXPECT_FALSE(ec) << ec.message() << ": " << text;
  return v.is_object() ? v.get_object() : json::object{};
}

json::object parseOk(const ChainEdit& edit) {
  EXPECT_TRUE(edit.ok()) << edit.error;
  EXPECT_TRUE(edit.changed);
  return parse(edit.text);
}

json::array pluginsOf(const json::object& o) {
  const json::value* p = o.if_contains("plugins");
  return p != nullptr && p->is_array() ? p->get_array() : json::array{};
}

// The entry ferryd writes, field by field: the plugin reads exactly these keys.
TEST(CniChain, TheEntryCarriesTheSocketPolicyExclusionsAndTimeout) {
  json::object e = parse(chainEntryJson(ChainEntry{"/var/run/ferry/cni.sock", FailurePolicy::kOpen, {"kube-system"}, 2500}));
  EXPECT_EQ(e.at("type"), "ferry-cni");
  EXPECT_EQ(e.at("socket"), "/var/run/ferry/cni.sock");
  EXPECT_EQ(e.at("failurePolicy"), "open");
  EXPECT_EQ(e.at("excludeNamespaces"), (json::array{"kube-system"}));
  EXPECT_EQ(e.at("timeoutMs"), 2500);
  EXPECT_EQ(e.size(), 5u);
  EXPECT_EQ(parse(chainEntryJson(entry())).at("failurePolicy"), "closed");
}

// Every real list gets ferry's entry last, everything else exactly as it was (key order too).
TEST(CniChain, AppendsTheEntryLastToRealConflistsAndKeepsEverythingElse) {
  for (const char* text : {kContainerdBridge, kFlannel, kCalico, kKindnet}) {
    json::object before = parse(text);
    ChainEdit edit = chainIn(text, true, entry());
    json::object after = parseOk(edit);
    EXPECT_FALSE(edit.converted);
    json::array plugins = pluginsOf(after);
    json::array old_plugins = pluginsOf(before);
    ASSERT_EQ(plugins.size(), old_plugins.size() + 1) << text;
    for (size_t i = 0; i < old_plugins.size(); ++i) EXPECT_EQ(plugins[i], old_plugins[i]) << text;
    EXPECT_EQ(plugins.back(), parse(chainEntryJson(entry())));
    // The rest of the file: the same keys in the same order with the same values.
    ASSERT_EQ(after.size(), before.size());
    auto a = after.begin();
    for (auto b = before.begin(); b != before.end(); ++a, ++b) {
      EXPECT_EQ(a->key(), b->key());
      if (b->key() != "plugins") {
        EXPECT_EQ(a->value(), b->value());
      }
    }
  }
}

TEST(CniChain, KeepsKeysItDoesNotKnowOnTheListAndOnPlugins) {
  const char* text = R"({"cniVersion":"1.0.0","name":"n","disableCheck":true,"x-vendor":{"a":[1,2]},
    "plugins":[{"type":"bridge","futureKey":null,"n":1.5e3}]})";
  json::object after = parseOk(chainIn(text, true, entry()));
  EXPECT_EQ(after.at("disableCheck"), true);
  EXPECT_EQ(after.at("x-vendor"), parse(R"({"a":[1,2]})"));
  json::object first = pluginsOf(after)[0].get_object();
  EXPECT_TRUE(first.at("futureKey").is_null());
  EXPECT_EQ(first.at("n"), 1500.0);
}

// What ferryd wrote is what it would write: no rewrite, so that watching the file (ferryd's
// own check, the runtime's fsnotify) does not loop.
TEST(CniChain, ChainingTwiceLeavesTheFileUnchanged) {
  for (const char* text : {kContainerdBridge, kFlannel, kCalico, kKindnet}) {
    ChainEdit first = chainIn(text, true, entry());
    ASSERT_TRUE(first.ok() && first.changed) << first.error;
    ChainEdit second = chainIn(first.text, true, entry());
    EXPECT_TRUE(second.ok()) << second.error;
    EXPECT_FALSE(second.changed) << text;
    EXPECT_TRUE(second.text.empty());
  }
}

// A different entry (a new socket, policy or exclusion list) replaces the old one.
TEST(CniChain, AChangedEntryIsRewritten) {
  ChainEdit first = chainIn(kFlannel, true, entry());
  ChainEntry open = entry();
  open.failure_policy = FailurePolicy::kOpen;
  json::object after = parseOk(chainIn(first.text, true, open));
  json::array plugins = pluginsOf(after);
  ASSERT_EQ(plugins.size(), 3u);
  EXPECT_EQ(plugins.back().at("failurePolicy"), "open");
}

// A stale entry in the middle (a primary CNI that appended its own plugin after ferry's, or
// an older ferryd's entry) and a duplicate: exactly one, last.
TEST(CniChain, ReplacesStaleEntriesWhereverTheyAre) {
  const char* text = R"({"cniVersion":"0.3.1","name":"k8s-pod-network","plugins":[
    {"type":"calico"},
    {"type":"ferry-cni","socket":"/old.sock"},
    {"type":"portmap","capabilities":{"portMappings":true}},
    {"type":"ferry-cni","socket":"/var/run/ferry/cni.sock"}]})";
  json::array plugins = pluginsOf(parseOk(chainIn(text, true, entry())));
  ASSERT_EQ(plugins.size(), 3u);
  EXPECT_EQ(plugins[0].at("type"), "calico");
  EXPECT_EQ(plugins[1].at("type"), "portmap");
  EXPECT_EQ(plugins[2], parse(chainEntryJson(entry())));
  // Ours last but a second one earlier is not "unchanged".
  const char* twice = R"({"cniVersion":"0.3.1","name":"n","plugins":[{"type":"ferry-cni"},{"type":"bridge"}]})";
  std::string ours = chainIn(twice, true, entry()).text;
  json::object with_extra = parse(ours);
  with_extra.at("plugins").get_array().insert(with_extra.at("plugins").get_array().begin(), json::object{{"type", "ferry-cni"}});
  ChainEdit edit = chainIn(json::serialize(with_extra), true, entry());
  ASSERT_TRUE(edit.ok());
  EXPECT_TRUE(edit.changed);
  EXPECT_EQ(pluginsOf(parse(edit.text)).size(), 2u);
}

// A single plugin's file becomes the list a runtime would make of it, plus ferry's entry.
TEST(CniChain, ASinglePluginConfBecomesAConflist) {
  ChainEdit edit = chainIn(kBridgeConf, false, entry());
  json::object after = parseOk(edit);
  EXPECT_TRUE(edit.converted);
  ASSERT_EQ(after.size(), 3u);
  auto it = after.begin();
  EXPECT_EQ(it++->key(), "cniVersion");
  EXPECT_EQ(it++->key(), "name");
  EXPECT_EQ(it->key(), "plugins");
  EXPECT_EQ(after.at("cniVersion"), "0.3.1");
  EXPECT_EQ(after.at("name"), "bridge");
  json::array plugins = pluginsOf(after);
  ASSERT_EQ(plugins.size(), 2u);
  EXPECT_EQ(plugins[0], parse(kBridgeConf)) << "the old configuration, whole";
  EXPECT_EQ(plugins[1], parse(chainEntryJson(entry())));
  // The result, read as the .conflist it is written as, is already chained.
  ChainEdit again = chainIn(edit.text, true, entry());
  EXPECT_TRUE(again.ok() && !again.changed) << again.error;
}

// A list in a .conf (some installers name them so) is edited as the list it is.
TEST(CniChain, AListInAConfFileIsEditedInPlace) {
  ChainEdit edit = chainIn(kFlannel, false, entry());
  EXPECT_FALSE(edit.converted);
  EXPECT_EQ(pluginsOf(parseOk(edit)).size(), 3u);
}

TEST(CniChain, ChainOutRestoresExactlyThePlugins) {
  for (const char* text : {kContainerdBridge, kFlannel, kCalico, kKindnet}) {
    ChainEdit in = chainIn(text, true, entry());
    ChainEdit out = chainOut(in.text);
    json::object restored = parseOk(out);
    EXPECT_EQ(restored, parse(text)) << text;
    // Nothing of ferry's left: nothing to do.
    ChainEdit again = chainOut(out.text);
    EXPECT_TRUE(again.ok());
    EXPECT_FALSE(again.changed);
  }
}

TEST(CniChain, ChainOutRemovesEveryFerryEntryAndLeavesFilesWithoutOne) {
  const char* text = R"({"cniVersion":"0.3.1","name":"n","plugins":[{"type":"ferry-cni"},{"type":"bridge"},{"type":"ferry-cni"}]})";
  json::array plugins = pluginsOf(parseOk(chainOut(text)));
  ASSERT_EQ(plugins.size(), 1u);
  EXPECT_EQ(plugins[0].at("type"), "bridge");
  EXPECT_FALSE(chainOut(kBridgeConf).changed) << "a single plugin's file is never ferry's";
  EXPECT_FALSE(chainOut(kCalico).changed);
  ChainEdit only = chainOut(R"({"cniVersion":"0.3.1","name":"n","plugins":[{"type":"ferry-cni"}]})");
  EXPECT_FALSE(only.ok());
  EXPECT_NE(only.error.find("only plugin"), std::string::npos) << only.error;
}

TEST(CniChain, BadFilesAreRefusedWithTheReason) {
  struct Case {
    const char* text;
    bool is_conflist;
    const char* says;
  } cases[] = {
      {"", true, "not JSON"},
      {"{\"cniVersion\": \"0.3.1\", \"name\": \"n\", \"plugins\": [", true, "not JSON"},
      {"[1, 2]", true, "not a JSON object"},
      {R"({"cniVersion":"0.3.1","name":"n","type":"bridge"})", true, "no plugins list"},
      {R"({"cniVersion":"0.3.1","name":"n","plugins":{"type":"bridge"}})", true, "plugins is not a list"},
      {R"({"cniVersion":"0.3.1","name":"n","plugins":["bridge"]})", true, "a plugin of the list is not an object"},
      {R"({"name":"n","plugins":[{"type":"bridge"}]})", true, "no cniVersion"},
      {R"({"cniVersion":1,"name":"n","plugins":[{"type":"bridge"}]})", true, "cniVersion is not a string"},
      {R"({"cniVersion":"0.2.0","name":"n","plugins":[{"type":"bridge"}]})", true, "cniVersion 0.2.0 is one ferry-cni cannot read"},
      {R"({"cniVersion":"0.3.1","plugins":[{"type":"bridge"}]})", true, "no name"},
      {R"({"cniVersion":"0.3.1","name":["n"],"plugins":[{"type":"bridge"}]})", true, "name is not a string"},
      {R"({"cniVersion":"0.3.1","name":"n"})", false, "neither a plugins list nor a plugin type"},
      {R"({"cniVersion":"0.3.1","name":"n","type":"ferry-cni"})", false, "its only plugin is ferry-cni"},
      {R"({"cniVersion":"0.3.1","name":"n","plugins":[{"type":"ferry-cni"}]})", true, "its only plugin is ferry-cni"},
  };
  for (const auto& c : cases) {
    ChainEdit edit = chainIn(c.text, c.is_conflist, entry());
    EXPECT_FALSE(edit.ok()) << c.text;
    EXPECT_FALSE(edit.changed);
    EXPECT_NE(edit.error.find(c.says), std::string::npos) << c.text << " -> " << edit.error;
  }
  EXPECT_FALSE(chainOut("{").ok());
}

// libcni's ConfFiles (the extension after the last dot) and sort.Strings (bytes).
TEST(CniChain, PicksTheFirstConfigurationFileAsTheRuntimeDoes) {
  EXPECT_EQ(firstConfigFile({"99-loopback.conf", "10-calico.conflist", "calico-kubeconfig"}), "10-calico.conflist");
  EXPECT_EQ(firstConfigFile({"10-flannel.conflist", "05-cilium.conf"}), "05-cilium.conf");
  EXPECT_EQ(firstConfigFile({"10-net.json", "10-net.conflist", "10-net.conf"}), "10-net.conf");
  EXPECT_EQ(firstConfigFile({"Z.conflist", "a.conflist"}), "Z.conflist") << "bytes: upper case sorts first";
  EXPECT_EQ(firstConfigFile({"10-x.conflist.tmp.1.2345", "20-y.conflist"}), "20-y.conflist")
      << "a temporary file (writeFileAtomic's) is not a configuration file";
  EXPECT_EQ(firstConfigFile({"10-x.conflist.bak", "10-x.conflist~", ".conflist"}), ".conflist");
  EXPECT_EQ(firstConfigFile({"README", "calico-kubeconfig", "10-x.yaml"}), std::nullopt);
  EXPECT_EQ(firstConfigFile({}), std::nullopt);
  EXPECT_TRUE(isConflistFileName("10-a.conflist"));
  EXPECT_FALSE(isConflistFileName("10-a.conf"));
  EXPECT_EQ(conflistFileName("10-bridge.conf"), "10-bridge.conflist");
  EXPECT_EQ(conflistFileName("10-net.json"), "10-net.conflist");
}

}  // namespace
}  // namespace ferry::cni
