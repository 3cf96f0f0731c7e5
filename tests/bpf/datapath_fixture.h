// Fixture for the datapath programs: the test build's skeleton loaded in a
// fresh netns per test, with maps filled by the test, programs run through
// BPF_PROG_TEST_RUN, and the helper-stub call log and counters read back.
#pragma once

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <cstdint>
#include <functional>
#include <vector>

#include <gtest/gtest.h>

#include "bpf/shared/datapath.h"
#include "ferry_datapath_test.skel.h"
#include "tests/bpf/ferry_test_calls.h"
#include "tests/bpf/packets.h"
#include "tests/bpf/test_support.h"

namespace ferry::bpftest {

// The test world. Addresses are in 127.0.0.0/8, which is local on lo, so that
// real sockets (standing in for ferryd's) can carry them without any interface
// being set up; the programs do not care which range a pod lives in.
struct TestPod {
  uint32_t ip;  // network order
  uint32_t host_ifindex;
  Mac pod_mac;
  Mac host_mac;
};

inline const TestPod kPodA{ipv4(127, 77, 1, 11), 11, {0x02, 0xaa, 0, 0, 0, 0x11}, {0x02, 0xee, 0, 0, 0, 0x11}};
inline const TestPod kPodB{ipv4(127, 77, 1, 12), 12, {0x02, 0xaa, 0, 0, 0, 0x12}, {0x02, 0xee, 0, 0, 0, 0x12}};
// A pod on another node: HBONE-capable, so a capture destination.
inline const uint32_t kRemotePod = ipv4(127, 77, 2, 21);
// Neither a local pod nor a capture destination (an external service).
inline const uint32_t kExternal = ipv4(127, 77, 9, 9);
// The proxy netns's own address (proxy_ipv4).
inline const uint32_t kProxyIp = ipv4(127, 77, 0, 1);
// The proxy's host-side device (proxy_host_ifindex). Redirects are stubbed, so
// no such device needs to exist.
inline constexpr uint32_t kProxyHostIfindex = 100;
// MACs on frames that arrive at a hook before any rewrite.
inline const Mac kNodeMac{0x02, 0x00, 0, 0, 0, 0x01};
inline const Mac kProxyMac{0x02, 0x00, 0, 0, 0, 0xfe};

inline constexpr int32_t kPass = -1;     // TC_ACT_UNSPEC == TCX_NEXT
inline constexpr int32_t kRedirect = 7;  // TC_ACT_REDIRECT
inline constexpr int32_t kShot = 2;      // TC_ACT_SHOT

struct RunResult {
  int32_t verdict;  // the program's return value
  Bytes data;       // the frame as the program left it
  uint32_t mark;    // skb->mark as the program left it
};

class DatapathTest : public ::testing::Test {
 protected:
  using Config = ferry_datapath_test::ferry_datapath_test__rodata;

  // Root check, fresh netns, skeleton loaded with defaultConfig().
  void SetUp() override;
  void TearDown() override;

  // Load-time configuration every test starts from: lookups by kTestNsid,
  // proxy at kProxyHostIfindex / kProxyIp, the object's other defaults.
  static void defaultConfig(Config& config);
  // Destroy and load again with defaultConfig() then `configure`; maps start
  // empty. Use as ASSERT_NO_FATAL_FAILURE(reload(...)).
  void reload(const std::function<void(Config&)>& configure);

  void enroll(const TestPod& pod, uint32_t flags = 0);
  void addCaptureDestination(uint32_t ip);
  void setCaptureAll(bool on);

  RunResult run(bpf_program* prog, const Bytes& frame);
  // `prog` let `frame` go on as it came (TC_ACT_UNSPEC), redirected nothing and counted one
  // pass for `reason`: a pod's hook that leaves a packet to the kernel.
  void expectPassedUnchanged(ferry_prog prog, const RunResult& result, const Bytes& frame, ferry_reason reason);

  // Helper-stub calls of every run so far, in order, and those of one kind.
  std::vector<ferry_test_call> calls() const;
  std::vector<ferry_test_call> calls(ferry_test_call_kind kind) const;

  // Counter cells summed over CPUs.
  ferry_counter counter(ferry_prog prog, ferry_verdict verdict, ferry_reason reason) const;
  uint64_t packets(ferry_prog prog, ferry_verdict verdict, ferry_reason reason) const {
    return counter(prog, verdict, reason).packets;
  }

  ferry_datapath_test* skel_ = nullptr;

 private:
  void load(const std::function<void(Config&)>& configure);
};

// Frames as they arrive at each hook.
// Sent by `pod` (pod_egress, or from_proxy when ferryd speaks as the pod).
Path fromPod(const TestPod& pod, uint32_t daddr);
// Going to `pod` (pod_ingress, or from_proxy when delivering).
Path toPod(uint32_t saddr, const TestPod& pod);
// Any addresses, with the node's MACs.
Path between(uint32_t saddr, uint32_t daddr);

}  // namespace ferry::bpftest
