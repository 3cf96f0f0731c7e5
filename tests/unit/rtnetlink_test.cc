// rtnetlink (proxy/rtnetlink): link kinds, and a pod's host-side device found from the route
// or the bridge it sits behind, on links of a namespace of our own (root).
#include <arpa/inet.h>
#include <sched.h>
#include <unistd.h>

#include <string>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "proxy/rtnetlink/rtnetlink.h"
#include "tests/support/shell.h"

namespace ferry::rtnetlink {
namespace {

using ferry::test_support::mustRunAsRoot;

std::string run(const std::string& cmd) { return ferry::test_support::runShell(cmd); }

TEST(Netlink, ReportsTheLinkKindThatDecidesHowPodsAreAttached) {
  if (!mustRunAsRoot()) GTEST_SKIP() << "creating links needs CAP_NET_ADMIN";
  std::string error, kind;
  bool is_netkit = true;
  std::thread t([&] {
    if (unshare(CLONE_NEWNET) != 0) {
      error = "unshare failed";
      return;
    }
    run("ip link add fy-at0 type veth peer name fy-at1");
    auto link = linkByName("fy-at0");
    if (!link.ok()) {
      error = std::string(link.status().message());
      return;
    }
    kind = link->kind;
    is_netkit = link->isNetkit();
  });
  t.join();
  ASSERT_TRUE(error.empty()) << error;
  EXPECT_EQ(kind, "veth");
  EXPECT_FALSE(is_netkit);
}

TEST(Netlink, FindsAPodsHostSideDeviceFromTheRouteOrTheBridgeItSitsBehind) {
  if (!mustRunAsRoot()) GTEST_SKIP() << "creating links needs CAP_NET_ADMIN";
  auto ip = [](const char* s) {
    in_addr a{};
    inet_pton(AF_INET, s, &a);
    return a.s_addr;
  };
  std::string setup;
  absl::StatusOr<PodInterface> ptp = absl::InternalError("unset"), bridged = ptp, remote = ptp, unrouted = ptp,
                               unseen = ptp, unlearnt = ptp;
  std::thread t([&] {
    if (unshare(CLONE_NEWNET) != 0) return;
    // ptp-style (Calico, Cilium, the ptp plugin): a /32 route to the host side.
    setup += run("ip link add fy-hr0 type veth peer name fy-hr1 && ip link set fy-hr0 up && ip link set fy-hr1 up"
                 " && ip route add 10.250.0.5/32 dev fy-hr0 && ip addr add 10.250.9.1/24 dev fy-hr1"
                 " && ip route add 10.251.0.0/16 via 10.250.9.2");
    // Bridge-style: the pod's MAC behind a port. Static entries stand for what the bridge
    // and ARP learn from the pod's first packets.
    setup += run("ip link add fy-br0 type bridge && ip addr add 10.250.1.1/24 dev fy-br0 && ip link set fy-br0 up"
                 " && ip link add fy-hb0 type veth peer name fy-hb1 && ip link set fy-hb0 master fy-br0 up"
                 " && ip link set fy-hb1 up"
                 " && ip neigh add 10.250.1.5 lladdr 02:fe:00:00:01:05 dev fy-br0 nud permanent"
                 " && bridge fdb add 02:fe:00:00:01:05 dev fy-hb0 master static"
                 " && ip neigh add 10.250.1.7 lladdr 02:fe:00:00:01:07 dev fy-br0 nud permanent");
    ptp = findPodInterface(ip("10.250.0.5"));
    bridged = findPodInterface(ip("10.250.1.5"));
    remote = findPodInterface(ip("10.251.3.4"));
    unrouted = findPodInterface(ip("10.252.0.1"));
    unseen = findPodInterface(ip("10.250.1.6"));
    unlearnt = findPodInterface(ip("10.250.1.7"));
  });
  t.join();
  ASSERT_TRUE(setup.empty()) << setup;
  ASSERT_TRUE(ptp.ok()) << ptp.status();
  EXPECT_EQ(ptp->link.name, "fy-hr0");
  EXPECT_EQ(ptp->how, "route");
  ASSERT_TRUE(bridged.ok()) << bridged.status();
  EXPECT_EQ(bridged->link.name, "fy-hb0");
  EXPECT_EQ(bridged->link.kind, "veth");
  EXPECT_EQ(bridged->how, "bridge fy-br0");
  // Each miss says why, and is NotFound: the caller retries (the pod may not be set up yet).
  EXPECT_TRUE(absl::IsNotFound(remote.status())) << remote.status();
  EXPECT_THAT(std::string(remote.status().message()), testing::HasSubstr("via gateway 10.250.9.2"));
  EXPECT_TRUE(absl::IsNotFound(unrouted.status())) << unrouted.status();
  EXPECT_TRUE(absl::IsNotFound(unseen.status())) << unseen.status();
  EXPECT_THAT(std::string(unseen.status().message()), testing::HasSubstr("neighbour entry of 10.250.1.6 on fy-br0"));
  EXPECT_TRUE(absl::IsNotFound(unlearnt.status())) << unlearnt.status();
  EXPECT_THAT(std::string(unlearnt.status().message()),
              testing::HasSubstr("forwarding entry of 02:fe:00:00:01:07 on bridge fy-br0"));
}

}  // namespace
}  // namespace ferry::rtnetlink
