// The injection-mode probe (docs/datapath.md, "Injection modes"): a one-line program
// returning bpf_redirect_peer(1, probe_flags), run with BPF_PROG_TEST_RUN.
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/bpf.h>

#include <cstdint>
#include <cstdio>

#include <gtest/gtest.h>

#include "bpf/shared/datapath.h"
#include "ferry_probe.skel.h"
#include "tests/bpf/packets.h"
#include "tests/bpf/test_support.h"

namespace ferry::bpftest {
namespace {

constexpr int32_t kRedirect = 7;  // TC_ACT_REDIRECT: the kernel accepts the flags
constexpr int32_t kShot = 2;      // TC_ACT_SHOT: it does not

class ProbeTest : public ::testing::Test {
 protected:
  void SetUp() override { FERRY_BPF_REQUIRE_ROOT(); }

  // Loads the probe with `flags` and runs probe_redirect (probe_next with `next`) once;
  // returns its verdict.
  int32_t probe(uint64_t flags, bool next = false) {
    ferry_probe* skel = ferry_probe__open();
    if (skel == nullptr) {
      ADD_FAILURE() << "opening the probe skeleton failed";
      return -1;
    }
    skel->rodata->probe_flags = flags;
    int32_t verdict = -1;
    if (ferry_probe__load(skel) != 0) {
      ADD_FAILURE() << "the verifier refused the probe";
    } else {
      const Bytes frame = tcpFrame(Path{{2, 0, 0, 0, 0, 1}, {2, 0, 0, 0, 0, 2}, ipv4(10, 0, 0, 1), ipv4(10, 0, 0, 2)},
                                   40000, 80, kSyn);
      bpf_test_run_opts opts{};
      opts.sz = sizeof(opts);
      opts.data_in = frame.data();
      opts.data_size_in = static_cast<uint32_t>(frame.size());
      opts.repeat = 1;
      bpf_program* program = next ? skel->progs.probe_next : skel->progs.probe_redirect;
      EXPECT_EQ(bpf_prog_test_run_opts(bpf_program__fd(program), &opts), 0);
      verdict = static_cast<int32_t>(opts.retval);
    }
    ferry_probe__destroy(skel);
    return verdict;
  }
};

TEST_F(ProbeTest, ReportsRedirectForPlainRedirectPeer) {
  // flags 0 is plain bpf_redirect_peer, which every kernel since 5.10 has.
  EXPECT_EQ(probe(0), kRedirect);
}

TEST_F(ProbeTest, ReportsShotForFlagTheKernelDoesNotKnow) { EXPECT_EQ(probe(1ULL << 62), kShot); }

TEST_F(ProbeTest, DefaultEgressFlagGivesOneOfTheTwoAnswers) {
  // TC_ACT_SHOT on kernels without the egress patch (the CI kernel),
  // TC_ACT_REDIRECT on the kernel lab's.
  const int32_t verdict = probe(FERRY_DEFAULT_EGRESS_FLAG);
  EXPECT_TRUE(verdict == kRedirect || verdict == kShot) << "probe returned " << verdict;
  std::printf("this kernel %s the egress flag %#llx\n", verdict == kRedirect ? "accepts" : "refuses",
              static_cast<unsigned long long>(FERRY_DEFAULT_EGRESS_FLAG));
}

// The program the TCX probe attaches to lo for an instant passes every packet on to the
// next program (TC_ACT_UNSPEC, TCX_NEXT): lo's traffic is never touched by the probe.
TEST_F(ProbeTest, TcxProbeProgramLetsEveryOtherProgramRun) { EXPECT_EQ(probe(0, /*next=*/true), -1); }

}  // namespace
}  // namespace ferry::bpftest
