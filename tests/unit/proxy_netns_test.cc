// The proxy netns ferryd builds itself (datapath.proxy_netns: auto), in a namespace of our
// own standing for the node (root).
#include <arpa/inet.h>
#include <sched.h>
#include <unistd.h>

#include <string>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "proxy/datapath/proxy_netns.h"
#include "proxy/rtnetlink/rtnetlink.h"
#include "tests/support/shell.h"

namespace ferry::datapath {
namespace {

using ferry::test_support::mustRunAsRoot;

std::string run(const std::string& cmd) { return ferry::test_support::runShell(cmd); }

// What the lab script's proxy netns has, on a node-side device of this name.
ProxyNetnsSpec labSpec(const std::string& host_interface) {
  ProxyNetnsSpec spec;
  spec.host_interface = host_interface;
  spec.proxy_interface = "eth0";
  inet_pton(AF_INET, "169.254.77.1", &spec.proxy_address);
  spec.mark = 0x539;
  spec.table = 100;
  spec.rule_priority = 1000;
  return spec;
}

TEST(ProxyNetns, AutoBuildsTheProxyNetnsTheLabScriptWouldAndItGoesWithItsFd) {
  if (!mustRunAsRoot()) GTEST_SKIP() << "creating namespaces and links needs CAP_SYS_ADMIN/CAP_NET_ADMIN";
  ProxyNetnsSpec spec = labSpec("fy-px0");
  std::string node_side, inside, ping, error;
  absl::Status again;
  bool gone = false;
  rtnetlink::LinkInfo host;
  std::thread t([&] {
    if (unshare(CLONE_NEWNET) != 0) return;  // the "node": a netns of our own
    run("ip link set lo up");
    auto claim = HostInterfaceClaim::take("fy-px0");
    if (!claim.ok()) {
      error = std::string(claim.status().message());
      return;
    }
    auto ns = createProxyNetns(spec, *claim);
    if (!ns.ok()) {
      error = std::string(ns.status().message());
      return;
    }
    if (auto l = rtnetlink::linkByName("fy-px0"); l.ok()) host = *l;
    node_side = run("ip -4 -o addr show dev fy-px0; ip route show dev fy-px0; sysctl -n net.ipv4.conf.fy-px0.rp_filter");
    again = HostInterfaceClaim::take("fy-px0").status();  // a second ferryd
    {
      auto in = ScopedNetns::enter(*ns);
      if (!in.ok()) return;
      inside = run("ip -4 -o addr show dev eth0; ip route show; ip rule show; ip route show table 100;"
                   " sysctl -n net.ipv4.conf.all.rp_filter net.ipv4.conf.eth0.rp_filter");
      ping = run("ping -c 1 -W 5 169.254.77.2 >/dev/null && echo reached");
    }
    // Dropping the last fd removes the netns, and with it the pair (the kernel does it
    // asynchronously: poll for it).
    { auto drop = std::move(*ns); }
    for (int i = 0; i < 500 && !gone; ++i) {
      gone = absl::IsNotFound(rtnetlink::linkByName("fy-px0").status());
      if (!gone) usleep(10000);
    }
  });
  t.join();
  ASSERT_TRUE(error.empty()) << error;
  EXPECT_EQ(host.kind, "veth");
  EXPECT_GE(host.peer_netnsid, 0) << "the peer lives in another netns";
  EXPECT_THAT(node_side, testing::HasSubstr("inet 169.254.77.2/32"));
  EXPECT_THAT(node_side, testing::HasSubstr("169.254.77.1 proto static scope link"));
  EXPECT_THAT(node_side, testing::EndsWith("0\n"));
  EXPECT_THAT(inside, testing::HasSubstr("inet 169.254.77.1/32"));
  EXPECT_THAT(inside, testing::HasSubstr("default via 169.254.77.2 dev eth0 proto static onlink"));
  EXPECT_THAT(inside, testing::HasSubstr("1000:\tfrom all fwmark 0x539/0x539 lookup 100"));
  EXPECT_THAT(inside, testing::HasSubstr("local default dev lo proto static scope host"));
  EXPECT_THAT(inside, testing::EndsWith("0\n0\n"));
  EXPECT_EQ(ping, "reached\n") << "the proxy netns reaches the node through the pair";
  EXPECT_TRUE(absl::IsAlreadyExists(again)) << again;
  EXPECT_THAT(std::string(again.message()), testing::HasSubstr("another ferryd on this node uses fy-px0"));
  EXPECT_TRUE(gone) << "the pair outlived the proxy netns's last fd";
}

TEST(ProxyNetns, ADeadFerrydsPairIsReplacedAtOnceEvenWhileItsNetnsLivesOn) {
  if (!mustRunAsRoot()) GTEST_SKIP() << "creating namespaces and links needs CAP_SYS_ADMIN/CAP_NET_ADMIN";
  ProxyNetnsSpec spec = labSpec("fy-px1");
  spec.stale_wait = std::chrono::milliseconds(200);
  std::string error, foreign;
  int old_ifindex = 0, new_ifindex = 0;
  std::thread t([&] {
    if (unshare(CLONE_NEWNET) != 0) return;  // the "node"
    std::optional<NetnsFd> orphaned;         // the dead ferryd's netns, alive (as orphaned sockets keep it)
    {
      auto claim = HostInterfaceClaim::take("fy-px1");
      if (!claim.ok()) return void(error = std::string(claim.status().message()));
      auto ns = createProxyNetns(spec, *claim);
      if (!ns.ok()) return void(error = std::string(ns.status().message()));
      orphaned.emplace(std::move(*ns));
      old_ifindex = rtnetlink::linkByName("fy-px1")->ifindex;
    }  // the process "died": its claim is gone, its pair is not
    auto claim = HostInterfaceClaim::take("fy-px1");
    if (!claim.ok()) return void(error = std::string(claim.status().message()));
    auto ns = createProxyNetns(spec, *claim);
    if (!ns.ok()) return void(error = std::string(ns.status().message()));
    new_ifindex = rtnetlink::linkByName("fy-px1")->ifindex;
    // Not a veth of ferry's shape (a bridge of the name; this kernel has no dummy): never
    // deleted, an error.
    run("ip link del fy-px1; ip link add fy-px1 type bridge");
    foreign = std::string(createProxyNetns(spec, *claim).status().message());
  });
  t.join();
  ASSERT_TRUE(error.empty()) << error;
  EXPECT_NE(old_ifindex, 0);
  EXPECT_NE(new_ifindex, 0);
  EXPECT_NE(new_ifindex, old_ifindex) << "the dead ferryd's pair was replaced";
  EXPECT_THAT(foreign, testing::HasSubstr("already has a device named fy-px1"));
  EXPECT_THAT(foreign, testing::HasSubstr("someone else's device"));
}

}  // namespace
}  // namespace ferry::datapath
