// The injection choice (pure), the kernel probe on this machine and netns ids (root only).
#include <sched.h>
#include <unistd.h>

#include <thread>

#include <cstdlib>

#include <gtest/gtest.h>

#include "proxy/datapath/kernel_probe.h"
#include "proxy/datapath/netns.h"
#include "tests/support/shell.h"

namespace ferry::datapath {
namespace {

using ferry::test_support::mustRunAsRoot;

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
