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

// ferryd down under `closed`: the API server's labels decide which pods may start without it.
struct FakeApi {
  std::variant<Membership, Unreachable> reply = Membership{false, "pod ferry.io/dataplane=(none), namespace ferry.io/dataplane=(none)"};
  int asked = 0;
  Lookup lookup() {
    return [this](const Request& r) {
      ++asked;
      EXPECT_EQ(r.pod_namespace, "shop");
      EXPECT_EQ(r.pod_name, "web-0");
      EXPECT_EQ(r.pod_uid, "u1");
      return reply;
    };
  }
};

TEST(CniPlugin, WithFerrydDownAPodFerryWouldNotEnrolStartsAndAMeshPodWaits) {
  FakeFerryd ferryd;
  ferryd.reply = Unreachable{"connect: Connection refused"};
  FakeApi api;
  Outcome o = run(env(Command::kAdd), config(), options(), ferryd.exchange(), api.lookup());
  EXPECT_EQ(o.exit_code, 0) << o.out;
  EXPECT_EQ(boost::json::parse(o.out), boost::json::parse(kPtp100)) << "the previous result, unchanged";
  EXPECT_NE(o.log.find("started without ferryd"), std::string::npos) << o.log;
  EXPECT_NE(o.log.find("ferry.io/dataplane=(none)"), std::string::npos) << "the labels that decided: " << o.log;
  o = run(env(Command::kCheck), config(), options(), ferryd.exchange(), api.lookup());
  EXPECT_EQ(o.exit_code, 0) << "CHECK of a pod outside the mesh passes too";

  api.reply = Membership{true, "pod ferry.io/dataplane=(none), namespace ferry.io/dataplane=enabled"};
  o = run(env(Command::kAdd), config(), options(), ferryd.exchange(), api.lookup());
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_EQ(errorCode(o), 11) << "the kubelet retries the sandbox";
  EXPECT_NE(o.out.find("ferryd is not reachable to enrol shop/web-0"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("ferry would enrol it (pod ferry.io/dataplane=(none), namespace ferry.io/dataplane=enabled)"),
            std::string::npos)
      << o.out;

  // What cannot be decided waits as a mesh pod does, and says why.
  api.reply = Unreachable{"https://10.96.0.1:443: connect: Connection refused"};
  o = run(env(Command::kAdd), config(), options(), ferryd.exchange(), api.lookup());
  EXPECT_EQ(errorCode(o), 11);
  EXPECT_NE(o.out.find("the API server cannot tell whether ferry would enrol it: https://10.96.0.1:443"),
            std::string::npos)
      << o.out;
  o = run(env(Command::kAdd), config(), options(), ferryd.exchange());
  EXPECT_EQ(errorCode(o), 11);
  EXPECT_NE(o.out.find("no API server credentials"), std::string::npos) << o.out;

  // Open lets every pod start and need not ask; DEL never asks.
  int asked = api.asked;
  o = run(env(Command::kAdd), config(), options(R"("failurePolicy":"open",)"), ferryd.exchange(), api.lookup());
  EXPECT_EQ(o.exit_code, 0);
  o = run(env(Command::kDel), config(), options(), ferryd.exchange(), api.lookup());
  EXPECT_EQ(o.exit_code, 0);
  EXPECT_EQ(api.asked, asked);
  // A reachable ferryd decides: the API server is not asked.
  ferryd.reply = Answer{Verdict::kNotEnrolled, "", ""};
  o = run(env(Command::kAdd), config(), options(), ferryd.exchange(), api.lookup());
  EXPECT_EQ(o.exit_code, 0);
  EXPECT_EQ(api.asked, asked);
}

TEST(CniPlugin, TheKubeconfigAndTheEnrolmentRuleComeFromTheChainEntry) {
  PluginOptions o = options(R"("kubeconfig":"/etc/cni/net.d/ferry-cni.kubeconfig","istioAmbient":true,)");
  EXPECT_EQ(o.kubeconfig, "/etc/cni/net.d/ferry-cni.kubeconfig");
  EXPECT_TRUE(o.istio_ambient);
  EXPECT_TRUE(options().kubeconfig.empty());
  EXPECT_FALSE(options().istio_ambient);
  auto bad = parsePluginOptions(configText(R"("istioAmbient":"yes",)"));
  ASSERT_FALSE(ok(bad));
  EXPECT_EQ(std::get<Error>(bad).code, 7);
  bad = parsePluginOptions(configText(R"("kubeconfig":7,)"));
  ASSERT_FALSE(ok(bad));
  EXPECT_EQ(std::get<Error>(bad).code, 7);
}

// The API server's answers as it sends them (kubectl get --raw of a pod and its namespace,
// trimmed to the fields that matter).
std::string podJson(const std::string& labels, const std::string& uid = "u1") {
  return R"({"kind":"Pod","apiVersion":"v1","metadata":{"name":"web-0","namespace":"shop","uid":")" + uid +
         R"(","labels":{)" + labels + R"(}},"spec":{"nodeName":"fy-node"},"status":{"phase":"Pending"}})";
}
std::string namespaceJson(const std::string& labels) {
  return R"({"kind":"Namespace","apiVersion":"v1","metadata":{"name":"shop","labels":{"kubernetes.io/metadata.name":"shop")" +
         (labels.empty() ? "" : "," + labels) + R"(}},"spec":{"finalizers":["kubernetes"]},"status":{"phase":"Active"}})";
}

TEST(CniApi, TheApiServersLabelsDecideWithFerrydsRule) {
  auto decide = [](const std::string& pod_labels, const std::string& ns_labels, bool ambient = false) {
    auto m = decideMembership({200, podJson(pod_labels)}, {200, namespaceJson(ns_labels)}, "u1", ambient);
    EXPECT_TRUE(std::holds_alternative<Membership>(m)) << std::get<std::string>(m);
    return std::holds_alternative<Membership>(m) && std::get<Membership>(m).enrolled;
  };
  EXPECT_FALSE(decide(R"("app":"web")", ""));
  EXPECT_TRUE(decide(R"("app":"web")", R"("ferry.io/dataplane":"enabled")"));
  EXPECT_FALSE(decide(R"("ferry.io/dataplane":"disabled")", R"("ferry.io/dataplane":"enabled")"));
  EXPECT_TRUE(decide(R"("ferry.io/dataplane":"enabled")", ""));
  EXPECT_FALSE(decide("", R"("istio.io/dataplane-mode":"ambient")"));
  EXPECT_TRUE(decide("", R"("istio.io/dataplane-mode":"ambient")", true));
  EXPECT_FALSE(decide(R"("istio.io/dataplane-mode":"none")", R"("istio.io/dataplane-mode":"ambient")", true));
}

TEST(CniApi, WhatCannotBeDecidedSaysWhy) {
  auto why = [](ApiReply pod, ApiReply ns, std::string uid = "u1") {
    auto m = decideMembership(pod, ns, uid, false);
    return std::holds_alternative<std::string>(m) ? std::get<std::string>(m) : std::string("(decided)");
  };
  const ApiReply pod{200, podJson("")}, ns{200, namespaceJson("")};
  EXPECT_NE(why({403, R"({"kind":"Status","code":403})"}, ns).find("credentials are expired or not allowed"), std::string::npos);
  EXPECT_NE(why({401, ""}, ns).find("401"), std::string::npos);
  EXPECT_NE(why({404, ""}, ns).find("not there"), std::string::npos);
  EXPECT_NE(why(pod, {200, "<html>"}).find("not a Namespace"), std::string::npos);
  EXPECT_NE(why(pod, ns, "u2").find("uid u1, the sandbox is for u2"), std::string::npos) << "another pod of that name";
  std::string other_ns = namespaceJson("");
  other_ns.replace(other_ns.find(R"("name":"shop")"), 13, R"("name":"shap")");
  EXPECT_NE(why(pod, {200, other_ns}).find("do not match"), std::string::npos);
}

TEST(CniApi, TheKubeconfigGivesAnHttpsServerItsCaAndAToken) {
  const std::string ok_text = R"({"clusters":[{"name":"c","cluster":{"server":"https://[fd00::1]:6443","certificate-authority-data":"LS0tLS1CRUdJTg=="}}],"users":[{"name":"u","user":{"token":"t"}}]})";
  auto a = parseApiAccess(ok_text);
  ASSERT_TRUE(std::holds_alternative<ApiAccess>(a)) << std::get<std::string>(a);
  EXPECT_EQ(std::get<ApiAccess>(a).host, "fd00::1");
  EXPECT_EQ(std::get<ApiAccess>(a).port, "6443");
  EXPECT_EQ(std::get<ApiAccess>(a).ca_pem, "-----BEGIN");
  auto a2 = parseApiAccess(R"({"clusters":[{"cluster":{"server":"https://api.example","certificate-authority-data":"QQ=="}}],"users":[{"user":{"token":"t"}}]})");
  ASSERT_TRUE(std::holds_alternative<ApiAccess>(a2));
  EXPECT_EQ(std::get<ApiAccess>(a2).host, "api.example");
  EXPECT_EQ(std::get<ApiAccess>(a2).port, "443");
  auto error = [](const std::string& text) {
    auto r = parseApiAccess(text);
    return std::holds_alternative<std::string>(r) ? std::get<std::string>(r) : std::string("(parsed)");
  };
  EXPECT_EQ(error("nope"), "not a JSON kubeconfig");
  EXPECT_NE(error(R"({"clusters":[{"cluster":{"server":"http://10.0.0.1","certificate-authority-data":"QQ=="}}],"users":[{"user":{"token":"t"}}]})").find("not an https URL"), std::string::npos);
  EXPECT_NE(error(R"({"clusters":[{"cluster":{"server":"https://10.0.0.1","certificate-authority-data":"!!"}}],"users":[{"user":{"token":"t"}}]})").find("base64"), std::string::npos);
  EXPECT_EQ(error(R"({"clusters":[{"cluster":{"server":"https://10.0.0.1","certificate-authority-data":"QQ=="}}],"users":[{"user":{}}]})"), "no user token");
  EXPECT_TRUE(validObjectName("shop-1.a"));
  EXPECT_FALSE(validObjectName("../secrets"));
  EXPECT_FALSE(validObjectName("a/b"));
  EXPECT_FALSE(validObjectName(""));
}

TEST(CniApi, AnHttpAnswerIsReadWholeOrRefused) {
  auto body = [](const std::string& raw) {
    auto r = parseHttpResponse(raw);
    return std::holds_alternative<ApiReply>(r) ? std::to_string(std::get<ApiReply>(r).status) + " " + std::get<ApiReply>(r).body
                                               : "error: " + std::get<std::string>(r);
  };
  EXPECT_EQ(body("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"), "200 {}");
  EXPECT_EQ(body("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{\"a\r\n4;x=y\r\n\":1}\r\n0\r\n\r\n"), "200 {\"a\":1}");
  EXPECT_EQ(body("HTTP/1.1 403 Forbidden\r\nConnection: close\r\n\r\nno"), "403 no");
  EXPECT_EQ(body("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}"), "error: the body is shorter than its Content-Length");
  EXPECT_EQ(body("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nabc"), "error: the chunked body is cut");
  EXPECT_EQ(body("SSH-2.0-OpenSSH\r\n\r\n"), "error: not an HTTP answer");
  EXPECT_EQ(body("HTTP/1.1 200 OK\r\nContent-Le"), "error: the answer's header is cut");
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
