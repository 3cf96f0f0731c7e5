// The injection choice (pure), and the kernel probe on this machine (root only).
#include <sched.h>
#include <unistd.h>

#include <thread>

#include <cstdlib>

#include <gtest/gtest.h>

#include "proxy/datapath/kernel_probe.h"
#include "proxy/datapath/netns.h"

namespace ferry::datapath {
namespace {

using config::Injection;

TEST(InjectionChoice, AutoPicksPeerEgressWhenTheKernelAcceptsTheFlag) {
  KernelFeatures f;
  f.redirect_peer = f.egress_flag = true;
  auto c = chooseInjection(f, Injection::kAuto, 32);
  EXPECT_EQ(c.mode, Injection::kPeerEgress);
  EXPECT_NE(c.why.find("accepts egress flag 32"), std::string::npos) << c.why;
}

TEST(InjectionChoice, AutoFallsBackToIngressRedirectAndSaysWhy) {
  KernelFeatures f;
  f.redirect_peer = true;
  auto c = chooseInjection(f, Injection::kAuto, 32);
  EXPECT_EQ(c.mode, Injection::kIngressRedirect);
  EXPECT_NE(c.why.find("rejects egress flag 32"), std::string::npos) << c.why;
  EXPECT_EQ(c.why.find("netkit"), std::string::npos);
  f.netkit = true;
  EXPECT_NE(chooseInjection(f, Injection::kAuto, 32).why.find("skips the peer's programs"), std::string::npos);
}

TEST(InjectionChoice, ConfiguredPeerEgressOnAKernelWithoutTheFlagInjectsNothing) {
  KernelFeatures f;
  f.redirect_peer = true;
  auto c = chooseInjection(f, Injection::kPeerEgress, 64);
  EXPECT_EQ(c.mode, Injection::kNone);
  EXPECT_NE(c.why.find("rejects flag 64"), std::string::npos) << c.why;
}

TEST(InjectionChoice, ExplicitModesAreHonoured) {
  KernelFeatures f;
  EXPECT_EQ(chooseInjection(f, Injection::kNone, 32).mode, Injection::kNone);
  EXPECT_EQ(chooseInjection(f, Injection::kIngressRedirect, 32).mode, Injection::kIngressRedirect);
}

bool mustRunAsRoot() {
  if (geteuid() == 0) return true;
  const char* ci = std::getenv("CI");
  if (ci && std::string(ci) == "true") ADD_FAILURE() << "CI runs as root; this test must not skip";
  return false;
}

TEST(KernelProbe, FindsRedirectPeerAndReportsEveryFeature) {
  if (!mustRunAsRoot()) GTEST_SKIP() << "loading probe programs needs root (CAP_BPF)";
  // The TCX probe attaches to `lo` for an instant: do it in a namespace of our own.
  KernelFeatures f;
  KernelFeatures bogus;
  std::thread t([&] {
    if (unshare(CLONE_NEWNET) != 0) return;
    f = probeKernel(32);
    bogus = probeKernel(1u << 30);
  });
  t.join();
  // Every kernel ferry supports has bpf_redirect_peer (5.10+).
  EXPECT_TRUE(f.redirect_peer) << describe(f);
  auto text = describe(f);
  for (const char* key : {"tcx=", "redirect_peer=", "egress_flag=", "netkit=", "ktls="}) {
    EXPECT_NE(text.find(key), std::string::npos) << text;
  }
  // Every probe could run; "no netkit in this kernel" is an answer, not an error.
  EXPECT_TRUE(f.errors.empty()) << f.errors;
  // An unknown high bit is refused: the probe really distinguishes flags.
  EXPECT_FALSE(bogus.egress_flag) << "bit 30 is no redirect flag on any kernel";
}

TEST(Netns, AssignsAndReadsThePeerIdThatBpfLookupsNeed) {
  if (!mustRunAsRoot()) GTEST_SKIP() << "netns ids need CAP_NET_ADMIN";
  // Two namespaces of our own, each made by a thread (setns/unshare are per thread), so
  // the host's namespaces are not touched; they vanish with their last fd.
  auto makeNetns = [] {
    absl::StatusOr<NetnsFd> out = absl::InternalError("unset");
    std::thread t([&] {
      if (unshare(CLONE_NEWNET) == 0) out = NetnsFd::current();
    });
    t.join();
    return out;
  };
  auto node = makeNetns();
  auto proxy = makeNetns();
  ASSERT_TRUE(node.ok() && proxy.ok());
  absl::StatusOr<int32_t> id = absl::InternalError("unset");
  absl::StatusOr<int32_t> again = absl::InternalError("unset");
  std::thread t([&] {
    if (!enterNetns(*node).ok()) return;
    id = netnsIdOf(*proxy);
    again = netnsIdOf(*proxy);
  });
  t.join();
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_GE(*id, 0);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *id) << "the id is stable once assigned";
}

}  // namespace
}  // namespace ferry::datapath

// Attaching, both ways, on a veth of a namespace of our own.
#include <bpf/bpf.h>
#include <linux/bpf.h>
#include <net/if.h>
#include <arpa/inet.h>
#include <gmock/gmock.h>

#include <array>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <vector>

#include "proxy/datapath/attach.h"
#include "proxy/rtnetlink/rtnetlink.h"
#include "proxy/datapath/proxy_netns.h"

namespace ferry::datapath {
namespace {

std::string run(const std::string& cmd) {
  std::string out;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return out;
  std::array<char, 512> buf{};
  while (fgets(buf.data(), buf.size(), p)) out += buf.data();
  pclose(p);
  return out;
}

int loadPassProgram() {
  // return TC_ACT_UNSPEC (-1): lets every other program run.
  const bpf_insn insns[] = {{BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, -1},
                            {BPF_JMP | BPF_EXIT, 0, 0, 0, 0}};
  return bpf_prog_load(BPF_PROG_TYPE_SCHED_CLS, "fy_test_pass", "GPL", insns, 2, nullptr);
}

TEST(Attachment, ClsBpfFallbackAttachesAtPriorityOneAndDetachesExactlyItsFilter) {
  if (!mustRunAsRoot()) GTEST_SKIP() << "attaching tc programs needs root";
  std::string before, during, after, error;
  std::thread t([&] {
    if (unshare(CLONE_NEWNET) != 0) {
      error = "unshare failed";
      return;
    }
    // Children of this thread (system/popen) share its network namespace.
    run("ip link add fy-at0 type veth peer name fy-at1");
    // A "CNI" filter that must survive ferry's detach.
    run("tc qdisc add dev fy-at0 clsact");
    run("tc filter add dev fy-at0 ingress pref 100 bpf bytecode '1,6 0 0 0,'");
    int ifindex = static_cast<int>(if_nametoindex("fy-at0"));
    int prog = loadPassProgram();
    if (ifindex == 0 || prog < 0) {
      error = "setup failed";
      return;
    }
    before = run("tc filter show dev fy-at0 ingress");
    {
      auto a = Attachment::attach(prog, ifindex, Hook::kIngress, /*tcx=*/false, "test");
      if (!a.ok()) {
        error = std::string(a.status().message());
        return;
      }
      during = run("tc filter show dev fy-at0 ingress");
    }
    after = run("tc filter show dev fy-at0 ingress");
    close(prog);
  });
  t.join();
  ASSERT_TRUE(error.empty()) << error;
  EXPECT_EQ(before.find("pref 1 "), std::string::npos) << before;
  EXPECT_NE(during.find("pref 1 bpf"), std::string::npos) << during;
  EXPECT_NE(during.find("fy_test_pass"), std::string::npos) << during;
  EXPECT_NE(during.find("pref 100 bpf"), std::string::npos) << during;
  EXPECT_EQ(after.find("fy_test_pass"), std::string::npos) << "ferry's filter is gone:\n" << after;
  EXPECT_NE(after.find("bytecode '1,6 0 0 0'"), std::string::npos) << "the CNI's filter stays:\n" << after;
}

TEST(Attachment, TcxLinkIsPinnedAdoptedAndDetachedWithItsPin) {
  if (!mustRunAsRoot()) GTEST_SKIP() << "attaching tc programs needs root";
  std::string error;
  bool pinned_during = false, adopted = false, pin_gone = false;
  std::thread t([&] {
    if (unshare(CLONE_NEWNET) != 0 || unshare(CLONE_NEWNS) != 0) {
      error = "unshare failed";
      return;
    }
    // A private bpffs for the pin (this thread's own mount namespace).
    run("mount --make-rprivate / && mkdir -p /run/fy-attach-test && mount -t bpf bpf /run/fy-attach-test");
    run("ip link add fy-at0 type veth peer name fy-at1");
    int ifindex = static_cast<int>(if_nametoindex("fy-at0"));
    int prog = loadPassProgram();
    if (ifindex == 0 || prog < 0) {
      error = "setup failed";
      return;
    }
    const std::string pin = "/run/fy-attach-test/link_fy-at0_in";
    {
      auto a = Attachment::attach(prog, ifindex, Hook::kIngress, /*tcx=*/true, "first", pin);
      if (!a.ok()) {
        error = std::string(a.status().message());
        return;
      }
      pinned_during = access(pin.c_str(), F_OK) == 0;
      a->release();  // as a closed-mode ferryd leaving: the pinned link stays
    }
    {
      auto b = Attachment::attach(prog, ifindex, Hook::kIngress, /*tcx=*/true, "second", pin);
      adopted = b.ok() && access(pin.c_str(), F_OK) == 0;
    }  // detached, pin removed
    pin_gone = access(pin.c_str(), F_OK) != 0;
    run("umount /run/fy-attach-test; rmdir /run/fy-attach-test");
    close(prog);
  });
  t.join();
  ASSERT_TRUE(error.empty()) << error;
  EXPECT_TRUE(pinned_during);
  EXPECT_TRUE(adopted);
  EXPECT_TRUE(pin_gone);
}

// The TCX link's device as the kernel reports it: 0 once the link was detached.
uint32_t linkIfindex(int link_fd) {
  bpf_link_info info{};
  uint32_t len = sizeof(info);
  if (bpf_obj_get_info_by_fd(link_fd, &info, &len) != 0) return 0;
  uint32_t ifindex = 0;
  std::memcpy(&ifindex, reinterpret_cast<const char*>(&info) + offsetof(bpf_link_info, raw_tracepoint),
              sizeof(ifindex));
  return ifindex;
}

TEST(Attachment, RepairPutsBackATcxLinkDetachedUnderneathAndItsRemovedPin) {
  if (!mustRunAsRoot()) GTEST_SKIP() << "attaching tc programs needs root";
  std::string error;
  std::vector<int> repairs;  // Repair values, in order
  uint32_t ifindex_after_reattach = 0, detached_ifindex = 1;
  bool repinned = false;
  std::thread t([&] {
    if (unshare(CLONE_NEWNET) != 0 || unshare(CLONE_NEWNS) != 0) {
      error = "unshare failed";
      return;
    }
    run("mount --make-rprivate / && mkdir -p /run/fy-attach-repair-test && mount -t bpf bpf /run/fy-attach-repair-test");
    run("ip link add fy-at0 type veth peer name fy-at1");
    int ifindex = static_cast<int>(if_nametoindex("fy-at0"));
    int prog = loadPassProgram();
    if (ifindex == 0 || prog < 0) {
      error = "setup failed";
      return;
    }
    const std::string pin = "/run/fy-attach-repair-test/link_fy-at0_in";
    {
      auto a = Attachment::attach(prog, ifindex, Hook::kIngress, /*tcx=*/true, "pod_egress on fy-at0", pin);
      if (!a.ok()) {
        error = std::string(a.status().message());
        return;
      }
      auto record = [&] {
        auto r = a->repair();
        repairs.push_back(r.ok() ? static_cast<int>(*r) : -1);
      };
      record();  // intact
      // What `bpftool link detach` does: BPF_LINK_DETACH through another fd of the link.
      int other = bpf_obj_get(pin.c_str());
      bpf_link_detach(other);
      detached_ifindex = linkIfindex(other);
      close(other);
      record();  // re-attached
      int now = bpf_obj_get(pin.c_str());
      ifindex_after_reattach = now >= 0 ? linkIfindex(now) : 0;
      if (now >= 0) close(now);
      unlink(pin.c_str());
      record();  // pinned again
      repinned = access(pin.c_str(), F_OK) == 0;
      record();  // intact
    }
    run("umount /run/fy-attach-repair-test; rmdir /run/fy-attach-repair-test");
    close(prog);
  });
  t.join();
  ASSERT_TRUE(error.empty()) << error;
  EXPECT_EQ(detached_ifindex, 0u) << "BPF_LINK_DETACH took the link off the device";
  using R = Attachment::Repair;
  EXPECT_EQ(repairs, (std::vector<int>{static_cast<int>(R::kIntact), static_cast<int>(R::kReattached),
                                       static_cast<int>(R::kRepinned), static_cast<int>(R::kIntact)}));
  EXPECT_NE(ifindex_after_reattach, 0u) << "the pin names a link on the device again";
  EXPECT_TRUE(repinned);
}

TEST(Attachment, RepairPutsBackAClsBpfFilterDeletedUnderneath) {
  if (!mustRunAsRoot()) GTEST_SKIP() << "attaching tc programs needs root";
  std::string error, after_filter_del, after_qdisc_del;
  std::vector<int> repairs;
  std::thread t([&] {
    if (unshare(CLONE_NEWNET) != 0) {
      error = "unshare failed";
      return;
    }
    run("ip link add fy-at0 type veth peer name fy-at1");
    int ifindex = static_cast<int>(if_nametoindex("fy-at0"));
    int prog = loadPassProgram();
    if (ifindex == 0 || prog < 0) {
      error = "setup failed";
      return;
    }
    auto a = Attachment::attach(prog, ifindex, Hook::kIngress, /*tcx=*/false, "pod_egress on fy-at0");
    if (!a.ok()) {
      error = std::string(a.status().message());
      return;
    }
    auto record = [&] {
      auto r = a->repair();
      repairs.push_back(r.ok() ? static_cast<int>(*r) : -1);
    };
    record();  // intact
    run("tc filter del dev fy-at0 ingress pref 1");
    record();  // re-attached
    after_filter_del = run("tc filter show dev fy-at0 ingress");
    run("tc qdisc del dev fy-at0 clsact");  // a CNI recreating its qdisc
    record();  // re-attached, qdisc created again
    after_qdisc_del = run("tc filter show dev fy-at0 ingress");
    record();  // intact
    a->detach();
    close(prog);
  });
  t.join();
  ASSERT_TRUE(error.empty()) << error;
  using R = Attachment::Repair;
  EXPECT_EQ(repairs, (std::vector<int>{static_cast<int>(R::kIntact), static_cast<int>(R::kReattached),
                                       static_cast<int>(R::kReattached), static_cast<int>(R::kIntact)}));
  EXPECT_NE(after_filter_del.find("fy_test_pass"), std::string::npos) << after_filter_del;
  EXPECT_NE(after_qdisc_del.find("fy_test_pass"), std::string::npos) << after_qdisc_del;
}

TEST(Attachment, NetkitHooksRefuseTheClsBpfFallback) {
  // netkit programs exist only as BPF links; a kernel without links cannot have netkit.
  auto a = Attachment::attach(/*prog_fd=*/-1, /*ifindex=*/1, Hook::kNetkitPeer, /*tcx=*/false, "pod_egress_netkit");
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(a.status().message().find("netkit"), std::string::npos) << a.status().message();
}

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
    auto link = rtnetlink::linkByName("fy-at0");
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
  absl::StatusOr<rtnetlink::PodInterface> ptp = absl::InternalError("unset"), bridged = ptp, remote = ptp, unrouted = ptp,
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
    ptp = rtnetlink::findPodInterface(ip("10.250.0.5"));
    bridged = rtnetlink::findPodInterface(ip("10.250.1.5"));
    remote = rtnetlink::findPodInterface(ip("10.251.3.4"));
    unrouted = rtnetlink::findPodInterface(ip("10.252.0.1"));
    unseen = rtnetlink::findPodInterface(ip("10.250.1.6"));
    unlearnt = rtnetlink::findPodInterface(ip("10.250.1.7"));
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
