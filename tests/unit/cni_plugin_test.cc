// What ferry-cni does with one call (proxy/cni/plugin.h) and what it says on the wire
// (proxy/cni/protocol.h): every verdict ferryd can answer, every way ferryd can be
// unreachable, under both failure policies. The prevResult is a real ptp result (as in
// cni_spec_test.cc).
#include "proxy/cni/plugin.h"

#include <gtest/gtest.h>

#include <boost/json/parse.hpp>

#include <optional>
#include <string>

namespace ferry::cni {
namespace {

constexpr char kPtp100[] = R"({"cniVersion":"1.0.0","interfaces":[{"name":"vethfcc45541","mac":"12:07:82:c3:a6:57"},{"name":"eth0","mac":"86:af:c5:8f:66:49","sandbox":"/run/netns/fy-cnit100"}],"ips":[{"interface":1,"address":"10.99.0.6/24","gateway":"10.99.0.1"}],"dns":{}})";

std::string configText(const std::string& extra = "") {
  return std::string(R"({"cniVersion":"1.0.0","name":"fy-net","type":"ferry-cni",)") + extra +
         R"("prevResult":)" + kPtp100 + "}";
}

Environment env(Command command, const std::string& args = "IgnoreUnknown=1;K8S_POD_NAMESPACE=shop;K8S_POD_NAME=web-0;K8S_POD_UID=u1") {
  std::map<std::string, std::string> vars = {{"CNI_CONTAINERID", "abc123"}, {"CNI_NETNS", "/run/netns/fy-p"},
                                             {"CNI_IFNAME", "eth0"}, {"CNI_PATH", "/opt/cni/bin"},
                                             {"CNI_ARGS", args}};
  vars["CNI_COMMAND"] = command == Command::kAdd ? "ADD" : command == Command::kDel ? "DEL" : "CHECK";
  auto e = readEnvironment([&](const char* name) {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
  EXPECT_TRUE(ok(e));
  return std::get<Environment>(e);
}

NetworkConfig config(const std::string& extra = "") {
  auto c = parseNetworkConfig(configText(extra), true);
  EXPECT_TRUE(ok(c));
  return std::get<NetworkConfig>(c);
}

PluginOptions options(const std::string& extra = "") {
  auto o = parsePluginOptions(configText(extra));
  EXPECT_TRUE(ok(o)) << (ok(o) ? "" : std::get<Error>(o).msg);
  return std::get<PluginOptions>(o);
}

// A ferryd that answers `answer` and remembers what it was asked.
struct FakeFerryd {
  std::variant<Answer, Unreachable> reply = Answer{Verdict::kEnrolled, "", "vethfcc45541"};
  std::optional<Request> asked;
  Exchange exchange() {
    return [this](const Request& r) {
      // What goes on the wire decodes to what was sent.
      std::string error;
      auto back = decodeRequest(encodeRequest(r), &error);
      EXPECT_TRUE(back) << error;
      asked = back;
      return reply;
    };
  }
};

int errorCode(const Outcome& o) {
  auto v = boost::json::parse(o.out);
  return static_cast<int>(v.as_object().at("code").as_int64());
}

TEST(CniPlugin, AddAsksFerrydWithThePodsIdentityAddressAndHostDevicesAndPassesThePreviousResult) {
  FakeFerryd ferryd;
  Outcome o = run(env(Command::kAdd), config(), options(), ferryd.exchange());
  EXPECT_EQ(o.exit_code, 0);
  EXPECT_EQ(boost::json::parse(o.out), boost::json::parse(kPtp100)) << "the chain's result goes on unchanged";
  ASSERT_TRUE(ferryd.asked);
  EXPECT_EQ(ferryd.asked->verb, Verb::kAdd);
  EXPECT_EQ(ferryd.asked->pod_namespace, "shop");
  EXPECT_EQ(ferryd.asked->pod_name, "web-0");
  EXPECT_EQ(ferryd.asked->pod_uid, "u1");
  EXPECT_EQ(ferryd.asked->container_id, "abc123");
  EXPECT_EQ(ferryd.asked->netns, "/run/netns/fy-p");
  EXPECT_EQ(ferryd.asked->ips, std::vector<std::string>{"10.99.0.6"});
  EXPECT_EQ(ferryd.asked->host_interfaces, std::vector<std::string>{"vethfcc45541"});
}

TEST(CniPlugin, APodFerrydLeavesOutOfTheMeshStartsUnchanged) {
  FakeFerryd ferryd;
  ferryd.reply = Answer{Verdict::kNotEnrolled, "labels", ""};
  Outcome o = run(env(Command::kAdd), config(), options(), ferryd.exchange());
  EXPECT_EQ(o.exit_code, 0);
  EXPECT_EQ(boost::json::parse(o.out), boost::json::parse(kPtp100));
}

TEST(CniPlugin, FerrydThatCannotTellYetOrFailsMakesAddFailWithACodeTheRuntimeRetries) {
  FakeFerryd ferryd;
  ferryd.reply = Answer{Verdict::kRetry, "the API server's copy of pod shop/web-0 has not reached ferryd yet", ""};
  Outcome o = run(env(Command::kAdd), config(), options(), ferryd.exchange());
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_EQ(errorCode(o), 11);
  EXPECT_NE(o.out.find("has not reached ferryd"), std::string::npos) << "the reason is in details: " << o.out;
  ferryd.reply = Answer{Verdict::kError, "attach failed", ""};
  o = run(env(Command::kAdd), config(), options(), ferryd.exchange());
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_EQ(errorCode(o), kEnrolmentFailed);
  EXPECT_NE(o.log.find("attach failed"), std::string::npos) << "and in the runtime's log";
}

TEST(CniPlugin, UnreachableFerrydFailsClosedByDefaultAndPassesWhenThePolicyIsOpen) {
  FakeFerryd ferryd;
  ferryd.reply = Unreachable{"connect: No such file or directory"};
  Outcome o = run(env(Command::kAdd), config(), options(), ferryd.exchange());
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_EQ(errorCode(o), 11);
  EXPECT_NE(o.out.find("/var/run/ferry/cni.sock"), std::string::npos) << "names where it looked: " << o.out;
  o = run(env(Command::kAdd), config(R"("failurePolicy":"open",)"), options(R"("failurePolicy":"open",)"),
          ferryd.exchange());
  EXPECT_EQ(o.exit_code, 0);
  EXPECT_EQ(boost::json::parse(o.out), boost::json::parse(kPtp100));
  EXPECT_NE(o.log.find("unprotected"), std::string::npos) << "said in the runtime's log: " << o.log;
}

TEST(CniPlugin, DelSucceedsWhenFerrydIsDownAndCheckFailsWhenThePodIsNotAttached) {
  FakeFerryd ferryd;
  ferryd.reply = Unreachable{"connect: Connection refused"};
  Outcome o = run(env(Command::kDel), config(), options(), ferryd.exchange());
  EXPECT_EQ(o.exit_code, 0) << "a DEL must not block the sandbox's removal";
  EXPECT_TRUE(o.out.empty());
  ferryd.reply = Answer{Verdict::kReleased, "", ""};
  o = run(env(Command::kDel), config(), options(), ferryd.exchange());
  EXPECT_EQ(o.exit_code, 0);
  EXPECT_EQ(ferryd.asked->verb, Verb::kDel);
  ferryd.reply = Answer{Verdict::kError, "shop/web-0 is in the mesh and its programs are not attached", ""};
  o = run(env(Command::kCheck), config(), options(), ferryd.exchange());
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_EQ(errorCode(o), kNotAttached);
  ferryd.reply = Answer{Verdict::kEnrolled, "", "vethfcc45541"};
  o = run(env(Command::kCheck), config(), options(), ferryd.exchange());
  EXPECT_EQ(o.exit_code, 0);
  EXPECT_TRUE(o.out.empty()) << "CHECK prints nothing on success";
}

TEST(CniPlugin, DelSucceedsWhateverFerrydAnswersAndAnAnswerThatFitsNoAddIsRefused) {
  FakeFerryd ferryd;
  ferryd.reply = Answer{Verdict::kError, "protocol version 2 is not spoken here", ""};
  Outcome o = run(env(Command::kDel), config(), options(), ferryd.exchange());
  EXPECT_EQ(o.exit_code, 0) << "an upgrade's version skew must not block sandbox removal";
  EXPECT_NE(o.log.find("version 2"), std::string::npos) << o.log;
  ferryd.reply = Answer{Verdict::kReleased, "", ""};
  o = run(env(Command::kAdd), config(), options(), ferryd.exchange());
  EXPECT_EQ(o.exit_code, 1) << "released is no answer to ADD";
  EXPECT_EQ(errorCode(o), kEnrolmentFailed);
}

TEST(CniPlugin, PodsFerrydHasNoSayOverPassWhateverTheirPreviousResultLooksLike) {
  PluginOptions p = options(R"("excludeNamespaces":["kube-system"],)");
  // A previous result ferry-cni could not read (an interface index out of range).
  std::string odd = R"({"cniVersion":"0.4.0","name":"n","type":"ferry-cni","excludeNamespaces":["kube-system"],)"
                    R"("prevResult":{"interfaces":[],"ips":[{"version":"4","interface":7,"address":"10.0.0.2/8"}]}})";
  EXPECT_FALSE(ok(parseNetworkConfig(odd, true))) << "the strict parser refuses it";
  auto o = passWithoutFerryd(env(Command::kAdd, "K8S_POD_NAMESPACE=kube-system;K8S_POD_NAME=coredns-1"), odd, p);
  ASSERT_TRUE(o);
  EXPECT_EQ(o->exit_code, 0);
  EXPECT_EQ(boost::json::parse(o->out), boost::json::parse(odd).as_object().at("prevResult"));
  EXPECT_FALSE(passWithoutFerryd(env(Command::kAdd), odd, p)) << "a pod of another namespace is ferryd's to decide";
  EXPECT_EQ(cniVersionOf(odd), "0.4.0");
  EXPECT_EQ(cniVersionOf("not json"), "1.0.0");
}

TEST(CniPlugin, ExcludedNamespacesAndNonKubernetesContainersNeverReachFerryd) {
  FakeFerryd ferryd;
  ferryd.reply = Unreachable{"must not be asked"};
  Outcome o = run(env(Command::kAdd, "K8S_POD_NAMESPACE=kube-system;K8S_POD_NAME=coredns-1"), config(),
                  options(R"("excludeNamespaces":["kube-system","ferry-system"],)"), ferryd.exchange());
  EXPECT_EQ(o.exit_code, 0);
  EXPECT_FALSE(ferryd.asked);
  o = run(env(Command::kAdd, "IgnoreUnknown=1"), config(), options(), ferryd.exchange());
  EXPECT_EQ(o.exit_code, 0);
  EXPECT_FALSE(ferryd.asked);
}

TEST(CniPlugin, BadPluginOptionsAreInvalidConfig) {
  for (const char* bad : {R"("failurePolicy":"maybe",)", R"("timeoutMs":5,)", R"("timeoutMs":"5s",)",
                          R"("excludeNamespaces":"kube-system",)", R"("socket":"",)"}) {
    auto o = parsePluginOptions(configText(bad));
    ASSERT_FALSE(ok(o)) << bad;
    EXPECT_EQ(std::get<Error>(o).code, 7) << bad;
  }
  PluginOptions p = options(R"("socket":"/run/x.sock","timeoutMs":250,"failurePolicy":"closed",)");
  EXPECT_EQ(p.socket, "/run/x.sock");
  EXPECT_EQ(p.timeout_ms, 250);
  EXPECT_FALSE(p.fail_open);
}

TEST(CniProtocol, MessagesOfAnotherVersionOrShapeAreRefusedWithTheReason) {
  std::string error;
  EXPECT_FALSE(decodeRequest(R"({"version":2,"verb":"ADD"})", &error));
  EXPECT_NE(error.find("version 2"), std::string::npos) << error;
  EXPECT_FALSE(decodeRequest("[]", &error));
  EXPECT_FALSE(decodeRequest(R"({"version":1,"verb":"PUT","containerId":"a","podNamespace":"n","podName":"p"})", &error));
  EXPECT_NE(error.find("PUT"), std::string::npos) << error;
  EXPECT_FALSE(decodeRequest(R"({"version":1,"verb":"ADD","containerId":"a","podNamespace":"n","podName":"p","ips":[1]})", &error));
  EXPECT_FALSE(decodeAnswer(R"({"version":1,"verdict":"maybe"})", &error));
  auto a = decodeAnswer(encodeAnswer(Answer{Verdict::kRetry, "why", "veth0"}), &error);
  ASSERT_TRUE(a) << error;
  EXPECT_EQ(a->verdict, Verdict::kRetry);
  EXPECT_EQ(a->reason, "why");
  EXPECT_EQ(a->device, "veth0");
  unsigned char h[4];
  std::string header = frameHeader(70000);
  std::copy(header.begin(), header.end(), h);
  EXPECT_EQ(frameLength(h), 70000u);
}

}  // namespace
}  // namespace ferry::cni
