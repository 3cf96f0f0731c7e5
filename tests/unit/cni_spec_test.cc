// The CNI spec's side of ferry-cni (proxy/cni/spec.h). The prevResults below are what the
// reference plugins of Debian's containernetworking-plugins 1.1.1 printed on ADD on this
// machine (ptp and bridge with host-local, cniVersion 0.3.1, 0.4.0 and 1.0.0; 2026-12-01),
// compacted.
#include "proxy/cni/spec.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace ferry::cni {
namespace {

constexpr char kPtp031[] = R"({"cniVersion":"0.3.1","interfaces":[{"name":"vethfb18bea4","mac":"4a:96:96:ee:d1:9b"},{"name":"eptp031","mac":"36:81:49:f7:39:dc","sandbox":"/run/netns/fy-cnitest"}],"ips":[{"version":"4","interface":1,"address":"10.99.0.2/24","gateway":"10.99.0.1"}],"dns":{}})";
constexpr char kPtp040[] = R"({"cniVersion":"0.4.0","interfaces":[{"name":"veth1e0d3c13","mac":"3e:4f:00:6d:28:a8"},{"name":"eth0","mac":"36:52:57:f9:ec:df","sandbox":"/run/netns/fy-cnit040"}],"ips":[{"version":"4","interface":1,"address":"10.99.0.5/24","gateway":"10.99.0.1"}],"dns":{}})";
constexpr char kPtp100[] = R"({"cniVersion":"1.0.0","interfaces":[{"name":"vethfcc45541","mac":"12:07:82:c3:a6:57"},{"name":"eth0","mac":"86:af:c5:8f:66:49","sandbox":"/run/netns/fy-cnit100"}],"ips":[{"interface":1,"address":"10.99.0.6/24","gateway":"10.99.0.1"}],"dns":{}})";
constexpr char kBridge040[] = R"({"cniVersion":"0.4.0","interfaces":[{"name":"fy-specbr","mac":"3a:aa:c4:5d:ae:f1"},{"name":"veth90bd8ea6","mac":"76:c8:a3:99:88:fe"},{"name":"ebridge040","mac":"06:5e:52:cb:e1:ad","sandbox":"/run/netns/fy-cnitest"}],"ips":[{"version":"4","interface":2,"address":"10.99.0.3/24","gateway":"10.99.0.1"}],"dns":{}})";
constexpr char kBridge100[] = R"({"cniVersion":"1.0.0","interfaces":[{"name":"fy-specbr","mac":"3a:aa:c4:5d:ae:f1"},{"name":"veth261bda7a","mac":"ce:18:fd:64:bb:d1"},{"name":"ebridge100","mac":"72:0d:9c:fe:3b:73","sandbox":"/run/netns/fy-cnitest"}],"ips":[{"interface":2,"address":"10.99.0.4/24","gateway":"10.99.0.1"}],"dns":{}})";

std::string withPrev(const char* version, const char* prev) {
  return std::string(R"({"cniVersion":")") + version + R"(","name":"fy-net","type":"ferry-cni","prevResult":)" + prev + "}";
}

NetworkConfig parsed(const std::string& text) {
  auto r = parseNetworkConfig(text, true);
  EXPECT_TRUE(ok(r)) << (ok(r) ? "" : std::get<Error>(r).msg);
  return ok(r) ? std::get<NetworkConfig>(r) : NetworkConfig{};
}

int codeOf(const Result<NetworkConfig>& r) { return ok(r) ? 0 : std::get<Error>(r).code; }

TEST(CniSpec, ReadsThePodsAddressAndHostDeviceFromPtpResultsOfEveryVersion) {
  for (auto [version, prev] : {std::pair{"0.3.1", kPtp031}, std::pair{"0.4.0", kPtp040}, std::pair{"1.0.0", kPtp100}}) {
    NetworkConfig c = parsed(withPrev(version, prev));
    ASSERT_TRUE(c.prev_result) << version;
    const PrevResult& r = *c.prev_result;
    ASSERT_EQ(r.interfaces.size(), 2u) << version;
    EXPECT_EQ(r.hostInterfaces(), std::vector<std::string>{r.interfaces[0].name}) << version;
    EXPECT_EQ(r.hostInterfaces()[0].rfind("veth", 0), 0u) << "ptp names the host side veth*";
    const std::string ifname = r.interfaces[1].name;
    ASSERT_EQ(r.podAddresses(ifname).size(), 1u) << version;
    EXPECT_EQ(r.podAddresses(ifname)[0].rfind("10.99.0.", 0), 0u);
    EXPECT_TRUE(r.podAddresses("other0").empty()) << "only the interface the runtime asked for";
    EXPECT_EQ(r.ips[0].family, 4);
    EXPECT_EQ(c.prev_result_json.front(), '{') << "kept to be passed through";
  }
}

TEST(CniSpec, BridgeResultsNameTheBridgeAndTheVethOnTheHost) {
  for (auto [version, prev] : {std::pair{"0.4.0", kBridge040}, std::pair{"1.0.0", kBridge100}}) {
    NetworkConfig c = parsed(withPrev(version, prev));
    ASSERT_TRUE(c.prev_result);
    auto host = c.prev_result->hostInterfaces();
    ASSERT_EQ(host.size(), 2u) << version;
    EXPECT_EQ(host[0], "fy-specbr") << "the bridge: a candidate the caller must rule out";
    EXPECT_EQ(host[1].rfind("veth", 0), 0u);
    EXPECT_EQ(c.prev_result->podAddresses(c.prev_result->interfaces[2].name).size(), 1u);
  }
}

TEST(CniSpec, EveryBadConfigurationHasItsSpecErrorCode) {
  EXPECT_EQ(codeOf(parseNetworkConfig("{not json", true)), 6);
  EXPECT_EQ(codeOf(parseNetworkConfig("[1]", true)), 6);
  EXPECT_EQ(codeOf(parseNetworkConfig(withPrev("1.1.0", kPtp100), true)), 1) << "GC/STATUS versions are not claimed";
  EXPECT_EQ(codeOf(parseNetworkConfig(R"({"cniVersion":"1.0.0","name":"fy","type":"ferry-cni"})", true)), 7)
      << "ADD of a chained plugin needs prevResult";
  EXPECT_EQ(codeOf(parseNetworkConfig(R"({"cniVersion":"1.0.0","name":"fy","type":"ferry-cni"})", false)), 0)
      << "DEL may come without one";
  EXPECT_EQ(codeOf(parseNetworkConfig(R"({"cniVersion":"1.0.0","type":"ferry-cni","prevResult":{}})", true)), 7);
  EXPECT_EQ(codeOf(parseNetworkConfig(R"({"cniVersion":1,"name":"fy","type":"ferry-cni"})", false)), 7);
  // prevResults that lie about themselves.
  EXPECT_EQ(codeOf(parseNetworkConfig(withPrev("0.4.0", R"({"interfaces":[{"name":"eth0"}],"ips":[{"version":"6","address":"10.0.0.1/24"}]})"), true)), 7);
  EXPECT_EQ(codeOf(parseNetworkConfig(withPrev("1.0.0", R"({"interfaces":[],"ips":[{"interface":0,"address":"10.0.0.1/24"}]})"), true)), 7);
  EXPECT_EQ(codeOf(parseNetworkConfig(withPrev("1.0.0", R"({"ips":[{"address":"10.0.0.1"}]})"), true)), 7);
  EXPECT_EQ(codeOf(parseNetworkConfig(withPrev("1.0.0", R"({"interfaces":"eth0"})"), true)), 7);
}

TEST(CniSpec, ReadsTheEnvironmentARuntimeSets) {
  std::map<std::string, std::string> vars{{"CNI_COMMAND", "ADD"},         {"CNI_CONTAINERID", "fy-c1"},
                                          {"CNI_NETNS", "/run/netns/fy"}, {"CNI_IFNAME", "eth0"},
                                          {"CNI_PATH", "/usr/lib/cni"},
                                          {"CNI_ARGS", "IgnoreUnknown=1;K8S_POD_NAMESPACE=shop;K8S_POD_NAME=web-0;K8S_POD_UID=u-1"}};
  auto getenv = [&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
  auto env = readEnvironment(getenv);
  ASSERT_TRUE(ok(env));
  const Environment& e = std::get<Environment>(env);
  EXPECT_EQ(e.command, Command::kAdd);
  ASSERT_NE(e.arg("K8S_POD_NAMESPACE"), nullptr);
  EXPECT_EQ(*e.arg("K8S_POD_NAME"), "web-0");
  EXPECT_EQ(e.arg("K8S_POD_INFRA_CONTAINER_ID"), nullptr);
  // DEL may come without a netns; ADD may not.
  vars.erase("CNI_NETNS");
  EXPECT_EQ(std::get<Error>(readEnvironment(getenv)).msg, "CNI_NETNS is not set");
  vars["CNI_COMMAND"] = "DEL";
  EXPECT_TRUE(ok(readEnvironment(getenv)));
  vars["CNI_ARGS"] = "K8S_POD_NAME";
  EXPECT_EQ(std::get<Error>(readEnvironment(getenv)).code, 4);
  vars["CNI_COMMAND"] = "GC";
  EXPECT_EQ(std::get<Error>(readEnvironment(getenv)).msg, "CNI_COMMAND 'GC' is not ADD, DEL, CHECK or VERSION");
  vars["CNI_COMMAND"] = "VERSION";
  EXPECT_TRUE(ok(readEnvironment(getenv))) << "VERSION needs nothing else";
}

TEST(CniSpec, AnswersInTheSpecsShapes) {
  EXPECT_EQ(versionJson("1.0.0"), R"({"cniVersion":"1.0.0","supportedVersions":["0.3.0","0.3.1","0.4.0","1.0.0"]})");
  EXPECT_EQ(errorJson(Error{11, "ferryd is not reachable", "connect /var/run/ferry/cni.sock: refused"}, "0.4.0"),
            R"({"cniVersion":"0.4.0","code":11,"msg":"ferryd is not reachable","details":"connect /var/run/ferry/cni.sock: refused"})");
  EXPECT_EQ(errorJson(Error{7, "bad", ""}, "1.0.0"), R"({"cniVersion":"1.0.0","code":7,"msg":"bad"})");
}

}  // namespace
}  // namespace ferry::cni
