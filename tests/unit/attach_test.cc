// Attaching tc programs, both ways (TCX links, the cls_bpf fallback), and their repair, on
// a veth of a namespace of our own (root).
#include <bpf/bpf.h>
#include <linux/bpf.h>
#include <net/if.h>
#include <arpa/inet.h>
#include <sched.h>
#include <unistd.h>

#include <string>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "proxy/datapath/attach.h"
#include "tests/support/shell.h"

namespace ferry::datapath {
namespace {

using ferry::test_support::mustRunAsRoot;

std::string run(const std::string& cmd) { return ferry::test_support::runShell(cmd); }

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

}  // namespace
}  // namespace ferry::datapath
