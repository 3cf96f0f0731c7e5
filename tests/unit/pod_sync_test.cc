// PodSync: registry deltas become per-pod kernel operations, checked through a recording
// PodSteering (no BPF, no devices).
#include "proxy/datapath/pod_sync.h"

#include <map>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "bpf/shared/datapath.h"

namespace ferry::datapath {
namespace {

using workloads::Store;
using workloads::Update;
using workloads::Workload;

uint32_t key(const char* text) { return ipv4Key(*common::parseIp(text)); }

// What the kernel would hold, and every operation asked of it, in order.
class FakeSteering : public PodSteering {
 public:
  absl::StatusOr<std::string> deviceOf(uint32_t ip, const Workload& w) override {
    ++device_lookups;
    if (!w.host_interface.empty()) return w.host_interface;
    auto it = routes.find(ip);  // what findPodInterface would find on the node
    if (it == routes.end()) return absl::NotFoundError("no route to the pod yet");
    return it->second;
  }
  absl::Status enroll(uint32_t ip, const Workload&, const std::string& device, uint32_t flags) override {
    ops.push_back(absl::StrCat("enroll ", device));
    if (missing_devices.count(device)) return absl::NotFoundError("no such device");
    pods[ip] = {device, flags};
    return absl::OkStatus();
  }
  void release(uint32_t ip) override {
    ops.push_back(absl::StrCat("release ", pods[ip].first));
    pods.erase(ip);
  }
  absl::Status setFlags(uint32_t ip, uint32_t flags) override {
    ops.push_back(absl::StrCat("flags ", pods[ip].first, " ", flags));
    pods[ip].second = flags;
    return absl::OkStatus();
  }
  void setCapture(uint32_t ip, bool on) override {
    ops.push_back(absl::StrCat(on ? "capture+ " : "capture- ", boost::asio::ip::address_v4(ntohl(ip)).to_string()));
    if (on) {
      capture.insert(ip);
    } else {
      capture.erase(ip);
    }
  }

  std::map<uint32_t, std::pair<std::string, uint32_t>> pods;
  std::set<uint32_t> capture;
  std::set<std::string> missing_devices;
  std::map<uint32_t, std::string> routes;
  std::vector<std::string> ops;
  int device_lookups = 0;  // netlink queries in production
};

Workload pod(std::string name, std::string node, const char* ip, std::string device = "", bool hbone = true) {
  Workload w;
  w.name = std::move(name);
  w.namespace_name = workloads::intern("default");
  w.service_account = workloads::intern("sa");
  w.node = workloads::intern(node);
  w.ips = {*common::parseIp(ip)};
  w.host_interface = std::move(device);
  w.hbone = hbone;
  return w;
}

Update upsert(Workload w) { return Update{w.displayName(), std::move(w)}; }

class PodSyncTest : public testing::Test {
 protected:
  void SetUp() override {
    // Many workloads, so that a delta touching everything would show in the op list.
    std::vector<Workload> all;
    for (int i = 1; i <= 200; ++i) {
      all.push_back(pod(absl::StrCat("r", i), "n2", absl::StrCat("10.2.0.", i).c_str()));
    }
    all.push_back(pod("a", "n1", "10.1.0.1", "fy-a"));
    all.push_back(pod("b", "n1", "10.1.0.2", "fy-b"));
    store_.replaceAll(std::move(all));
    sync_.syncAll(*store_.current(), {key("10.9.9.9")});  // a stale entry a previous ferryd left
    store_.subscribe([this](const workloads::Registry& after, const workloads::Delta& delta) {
      sync_.apply(after, delta);
    });
    kernel_.ops.clear();
  }
  Store store_{"n1"};
  FakeSteering kernel_;
  PodSync sync_{kernel_};
};

TEST_F(PodSyncTest, StartUpEnrolsLocalPodsCapturesEveryHboneIpAndDropsStaleEntries) {
  EXPECT_EQ(kernel_.pods.size(), 2u);
  EXPECT_EQ(kernel_.pods[key("10.1.0.1")].first, "fy-a");
  EXPECT_EQ(kernel_.capture.size(), 202u);
  EXPECT_FALSE(kernel_.capture.count(key("10.9.9.9")));
  EXPECT_EQ(sync_.enrolled(), 2u);
}

TEST_F(PodSyncTest, ANewLocalPodIsEnrolledAndCapturedAndNothingElseIsTouched) {
  store_.apply({upsert(pod("c", "n1", "10.1.0.3", "fy-c"))});
  EXPECT_THAT(kernel_.ops, testing::ElementsAre("capture+ 10.1.0.3", "enroll fy-c"));
}

TEST_F(PodSyncTest, ARemovedPodIsReleasedAndNoLongerCaptured) {
  store_.apply({Update{"default/a", std::nullopt}});
  EXPECT_THAT(kernel_.ops, testing::ElementsAre("capture- 10.1.0.1", "release fy-a"));
  EXPECT_FALSE(kernel_.pods.count(key("10.1.0.1")));
}

TEST_F(PodSyncTest, ARemotePodChangeTouchesOnlyItsCaptureEntry) {
  store_.apply({upsert(pod("r7", "n2", "10.2.0.7", "", /*hbone=*/false))});
  EXPECT_THAT(kernel_.ops, testing::ElementsAre("capture- 10.2.0.7"));
  store_.apply({upsert(pod("r7", "n2", "10.2.1.7"))});
  EXPECT_THAT(kernel_.ops, testing::ElementsAre("capture- 10.2.0.7", "capture+ 10.2.1.7"));
}

TEST_F(PodSyncTest, StrictModeRewritesFlagsWithoutReEnrolling) {
  Workload a = pod("a", "n1", "10.1.0.1", "fy-a");
  a.tls_mode = workloads::TlsMode::kStrict;
  store_.apply({upsert(a)});
  EXPECT_THAT(kernel_.ops, testing::ElementsAre(absl::StrCat("flags fy-a ", FERRY_POD_STRICT)));
}

TEST_F(PodSyncTest, RefreshedFlagsAreRewrittenForEnrolledPodsOnlyWithoutAnyOtherKernelStep) {
  // What ferryd does on a policy change: the answer of the flags function changed for "b".
  sync_.setFlagsOf([](const Workload& w) { return w.name == "b" ? FERRY_POD_STRICT : 0u; });
  kernel_.device_lookups = 0;
  sync_.refreshFlags(*store_.current());
  EXPECT_THAT(kernel_.ops, testing::ElementsAre(absl::StrCat("flags fy-b ", FERRY_POD_STRICT)));
  EXPECT_EQ(kernel_.device_lookups, 0) << "a policy change looks up no device";
  sync_.refreshFlags(*store_.current());
  EXPECT_EQ(kernel_.ops.size(), 1u) << "unchanged flags are not written again";
}

TEST_F(PodSyncTest, APodOnANewDeviceIsReleasedThenEnrolledAgain) {
  store_.apply({upsert(pod("a", "n1", "10.1.0.1", "fy-a2"))});
  EXPECT_THAT(kernel_.ops, testing::ElementsAre("release fy-a", "enroll fy-a2"));
}

TEST_F(PodSyncTest, AnIpMovingBetweenPodsOfOneDeltaEndsUpWithItsNewOwner) {
  // b leaves and a new local pod takes its IP on another device, in one batch.
  store_.apply({Update{"default/b", std::nullopt}, upsert(pod("c", "n1", "10.1.0.2", "fy-c"))});
  ASSERT_TRUE(kernel_.pods.count(key("10.1.0.2")));
  EXPECT_EQ(kernel_.pods[key("10.1.0.2")].first, "fy-c");
  EXPECT_TRUE(kernel_.capture.count(key("10.1.0.2")));
}

TEST_F(PodSyncTest, APodWhoseDeviceIsMissingIsRetriedUntilItAppears) {
  kernel_.missing_devices.insert("fy-c");
  store_.apply({upsert(pod("c", "n1", "10.1.0.3", "fy-c"))});
  EXPECT_EQ(sync_.failed(), 1u);
  EXPECT_FALSE(kernel_.pods.count(key("10.1.0.3")));
  kernel_.missing_devices.clear();
  sync_.retryFailed(*store_.current());
  EXPECT_EQ(sync_.failed(), 0u);
  EXPECT_EQ(kernel_.pods[key("10.1.0.3")].first, "fy-c");
}

TEST_F(PodSyncTest, APodNamingNoDeviceIsEnrolledOnTheOneFoundForItsIpOnceThereIsOne) {
  // The Kubernetes source names no devices: the node's routes do, once the CNI set them up.
  store_.apply({upsert(pod("k", "n1", "10.1.0.9"))});
  EXPECT_EQ(sync_.failed(), 1u) << "no route to the pod yet: retried";
  EXPECT_THAT(kernel_.ops, testing::ElementsAre("capture+ 10.1.0.9"));
  kernel_.routes[key("10.1.0.9")] = "cali1234";
  sync_.retryFailed(*store_.current());
  EXPECT_EQ(sync_.failed(), 0u);
  EXPECT_EQ(kernel_.pods[key("10.1.0.9")].first, "cali1234");
  // A lookup that fails later (a netlink hiccup) leaves the enrolled pod alone; a pod whose
  // IP now leads to another device (recreated by the CNI) moves there.
  kernel_.routes.clear();
  Workload k = pod("k", "n1", "10.1.0.9");
  k.tls_mode = workloads::TlsMode::kStrict;
  store_.apply({upsert(k)});
  EXPECT_EQ(kernel_.pods[key("10.1.0.9")].first, "cali1234");
  kernel_.routes[key("10.1.0.9")] = "cali5678";
  k.tls_mode = workloads::TlsMode::kPermissive;
  store_.apply({upsert(k)});
  EXPECT_EQ(kernel_.pods[key("10.1.0.9")].first, "cali5678");
}

TEST_F(PodSyncTest, APodThatLeavesWhileFailingIsForgotten) {
  kernel_.missing_devices.insert("fy-c");
  store_.apply({upsert(pod("c", "n1", "10.1.0.3", "fy-c"))});
  store_.apply({Update{"default/c", std::nullopt}});
  EXPECT_EQ(sync_.failed(), 0u);
}

}  // namespace
}  // namespace ferry::datapath
