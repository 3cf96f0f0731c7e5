// from_proxy: tc ingress of the proxy's host-side device (docs/datapath.md, "The programs").
// One test per row of the rule table, per injection mode for the first row.
#include <linux/bpf.h>
#include <linux/if_packet.h>

#include <algorithm>

#include "tests/bpf/datapath_fixture.h"

namespace ferry::bpftest {
namespace {

class FromProxyTest : public DatapathTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(DatapathTest::SetUp());
    if (IsSkipped()) return;
    ASSERT_NO_FATAL_FAILURE(enrollPods());
  }

  void enrollPods() {
    ASSERT_NO_FATAL_FAILURE(enroll(kPodA));
    ASSERT_NO_FATAL_FAILURE(enroll(kPodB));
  }

  void reloadInMode(ferry_injection_mode mode) {
    ASSERT_NO_FATAL_FAILURE(reload([mode](Config& c) { c.injection_mode = mode; }));
    ASSERT_NO_FATAL_FAILURE(enrollPods());
  }

  RunResult runFromProxy(const Bytes& frame) { return run(skel_->progs.from_proxy, frame); }

  // ferryd's HBONE leg as podA: podA:40000 -> remote:15008, as it leaves the proxy.
  static Bytes tunnelSynFromPodA() { return tcpFrame(between(kPodA.ip, kRemotePod), 40000, FERRY_PORT_HBONE, kSyn); }
};

// Row 1: source is a local enrolled pod -> inject into its egress path.

TEST_F(FromProxyTest, PeerEgressModeInjectsWithRedirectPeerAndEgressFlag) {
  ASSERT_NO_FATAL_FAILURE(reloadInMode(FERRY_INJECT_PEER_EGRESS));
  const Bytes frame = tunnelSynFromPodA();
  const RunResult result = runFromProxy(frame);
  EXPECT_EQ(result.verdict, kRedirect);
  const auto redirects = calls(FERRY_TEST_CALL_REDIRECT_PEER);
  ASSERT_EQ(redirects.size(), 1u);
  EXPECT_EQ(redirects[0].ifindex, kPodA.host_ifindex);
  EXPECT_EQ(redirects[0].flags, FERRY_DEFAULT_EGRESS_FLAG);
  EXPECT_TRUE(calls(FERRY_TEST_CALL_REDIRECT).empty());
  // The pod's device hands the frame to the host side, which computes pkt_type from the
  // destination MAC (veth and netkit alike): as if podA had sent it to its gateway.
  ASSERT_EQ(result.data.size(), frame.size());
  EXPECT_EQ(frameDstMac(result.data), kPodA.host_mac);
  EXPECT_EQ(frameSrcMac(result.data), kPodA.pod_mac);
  EXPECT_TRUE(std::equal(frame.begin() + 12, frame.end(), result.data.begin() + 12)) << "only the MACs change";
  EXPECT_EQ(packets(FERRY_PROG_FROM_PROXY, FERRY_VERDICT_REDIRECT, FERRY_REASON_INJECT_PEER_EGRESS), 1u);
}

TEST_F(FromProxyTest, PeerEgressModeUsesConfiguredEgressFlag) {
  // v1 of the kernel patch reused BPF_F_INGRESS for "egress of the peer".
  ASSERT_NO_FATAL_FAILURE(reload([](Config& c) {
    c.injection_mode = FERRY_INJECT_PEER_EGRESS;
    c.egress_flag = BPF_F_INGRESS;
  }));
  ASSERT_NO_FATAL_FAILURE(enrollPods());
  runFromProxy(tunnelSynFromPodA());
  const auto redirects = calls(FERRY_TEST_CALL_REDIRECT_PEER);
  ASSERT_EQ(redirects.size(), 1u);
  EXPECT_EQ(redirects[0].flags, static_cast<uint64_t>(BPF_F_INGRESS));
}

TEST_F(FromProxyTest, PeerEgressRefusedByKernelIsCountedAsDrop) {
  // A kernel without the flag returns TC_ACT_SHOT from bpf_redirect_peer.
  ASSERT_NO_FATAL_FAILURE(reloadInMode(FERRY_INJECT_PEER_EGRESS));
  skel_->data->ferry_test_redirect_ret = kShot;
  const RunResult result = runFromProxy(tunnelSynFromPodA());
  EXPECT_EQ(result.verdict, kShot);
  EXPECT_EQ(packets(FERRY_PROG_FROM_PROXY, FERRY_VERDICT_DROP, FERRY_REASON_INJECT_PEER_EGRESS), 1u);
}

TEST_F(FromProxyTest, IngressRedirectModeRewritesL2AndRedirectsIntoHostIngress) {
  ASSERT_NO_FATAL_FAILURE(reloadInMode(FERRY_INJECT_INGRESS_REDIRECT));
  const Bytes frame = tunnelSynFromPodA();
  const RunResult result = runFromProxy(frame);
  EXPECT_EQ(result.verdict, kRedirect);
  const auto redirects = calls(FERRY_TEST_CALL_REDIRECT);
  ASSERT_EQ(redirects.size(), 1u);
  EXPECT_EQ(redirects[0].ifindex, kPodA.host_ifindex);
  EXPECT_EQ(redirects[0].flags, static_cast<uint64_t>(BPF_F_INGRESS));
  EXPECT_TRUE(calls(FERRY_TEST_CALL_REDIRECT_PEER).empty());
  // As if podA had sent it to its gateway: dst = host side, src = pod.
  ASSERT_EQ(result.data.size(), frame.size());
  EXPECT_EQ(frameDstMac(result.data), kPodA.host_mac);
  EXPECT_EQ(frameSrcMac(result.data), kPodA.pod_mac);
  EXPECT_TRUE(std::equal(frame.begin() + 12, frame.end(), result.data.begin() + 12)) << "only the MACs change";
  EXPECT_EQ(packets(FERRY_PROG_FROM_PROXY, FERRY_VERDICT_REDIRECT, FERRY_REASON_INJECT_INGRESS_REDIRECT), 1u);
}

TEST_F(FromProxyTest, IngressRedirectIsTheDefaultMode) {
  // The object's default, for a loader that forgets to set the probed mode.
  runFromProxy(tunnelSynFromPodA());
  EXPECT_EQ(calls(FERRY_TEST_CALL_REDIRECT).size(), 1u);
}

TEST_F(FromProxyTest, NoneModePassesPacketFromLocalPod) {
  ASSERT_NO_FATAL_FAILURE(reloadInMode(FERRY_INJECT_NONE));
  const Bytes frame = tunnelSynFromPodA();
  const RunResult result = runFromProxy(frame);
  EXPECT_EQ(result.verdict, kPass);
  EXPECT_EQ(result.data, frame);
  EXPECT_TRUE(calls(FERRY_TEST_CALL_REDIRECT).empty());
  EXPECT_TRUE(calls(FERRY_TEST_CALL_REDIRECT_PEER).empty());
  // test_run receives the frame on lo, whose MAC it does not carry: PACKET_OTHERHOST,
  // which plain routing would drop. The pass makes it PACKET_HOST (to_proxy's resets
  // leave with the MACs of the SYN they answer), and changes nothing else.
  for (const auto& call : calls(FERRY_TEST_CALL_CHANGE_TYPE)) EXPECT_EQ(call.ifindex, static_cast<uint32_t>(PACKET_HOST));
  EXPECT_EQ(calls().size(), calls(FERRY_TEST_CALL_CHANGE_TYPE).size());
  EXPECT_EQ(packets(FERRY_PROG_FROM_PROXY, FERRY_VERDICT_PASS, FERRY_REASON_INJECT_DISABLED), 1u);
}

TEST_F(FromProxyTest, SourceRuleWinsWhenBothEndsAreLocalPods) {
  // Same node: ferryd's leg podA -> podB is injected into podA's egress path
  // (where podA's CNI policy sees it), not delivered straight to podB.
  ASSERT_NO_FATAL_FAILURE(reloadInMode(FERRY_INJECT_PEER_EGRESS));
  runFromProxy(tcpFrame(between(kPodA.ip, kPodB.ip), 40000, FERRY_PORT_HBONE, kSyn));
  const auto redirects = calls(FERRY_TEST_CALL_REDIRECT_PEER);
  ASSERT_EQ(redirects.size(), 1u);
  EXPECT_EQ(redirects[0].ifindex, kPodA.host_ifindex);
  EXPECT_EQ(redirects[0].flags, FERRY_DEFAULT_EGRESS_FLAG);
}

// Row 0: an application leg between two local pods is delivered, both ways.

TEST_F(FromProxyTest, SameNodeApplicationLegsAreDeliveredNotInjected) {
  // The outbound listener's SYN-ACK to its client (ferryd as podB:80 -> podA), and the
  // inbound leg's SYN to the server (ferryd as podA -> podB:80): their other directions
  // are taken into the proxy by pod_egress, so these must not cross the node's stack
  // either (conntrack would see half a connection; kube-proxy drops it as INVALID).
  ASSERT_NO_FATAL_FAILURE(reloadInMode(FERRY_INJECT_PEER_EGRESS));
  RunResult reply = runFromProxy(tcpFrame(between(kPodB.ip, kPodA.ip), 80, 40000, kSyn | kAck));
  RunResult syn = runFromProxy(tcpFrame(between(kPodA.ip, kPodB.ip), 40001, 80, kSyn));
  EXPECT_EQ(reply.verdict, kRedirect);
  EXPECT_EQ(syn.verdict, kRedirect);
  const auto redirects = calls(FERRY_TEST_CALL_REDIRECT_PEER);
  ASSERT_EQ(redirects.size(), 2u);
  EXPECT_EQ(redirects[0].ifindex, kPodA.host_ifindex);
  EXPECT_EQ(redirects[0].flags, 0u) << "delivered into podA, not injected with the egress flag";
  EXPECT_EQ(redirects[1].ifindex, kPodB.host_ifindex);
  EXPECT_EQ(redirects[1].flags, 0u);
  EXPECT_EQ(frameDstMac(reply.data), kPodA.pod_mac);
  EXPECT_EQ(packets(FERRY_PROG_FROM_PROXY, FERRY_VERDICT_REDIRECT, FERRY_REASON_DELIVER), 2u);
}

TEST_F(FromProxyTest, SameNodeTunnelReplyIsStillInjected) {
  // The HBONE listener's reply as podB:15008 to podA: the tunnel crosses the stack both ways.
  ASSERT_NO_FATAL_FAILURE(reloadInMode(FERRY_INJECT_PEER_EGRESS));
  runFromProxy(tcpFrame(between(kPodB.ip, kPodA.ip), FERRY_PORT_HBONE, 40000, kSyn | kAck));
  const auto redirects = calls(FERRY_TEST_CALL_REDIRECT_PEER);
  ASSERT_EQ(redirects.size(), 1u);
  EXPECT_EQ(redirects[0].ifindex, kPodB.host_ifindex);
  EXPECT_EQ(redirects[0].flags, FERRY_DEFAULT_EGRESS_FLAG);
}

TEST_F(FromProxyTest, TunnelReplyFromLocalPodIsInjected) {
  // Step 9: the HBONE server's reply, podB:15008 -> remote client.
  ASSERT_NO_FATAL_FAILURE(reloadInMode(FERRY_INJECT_PEER_EGRESS));
  const RunResult result = runFromProxy(tcpFrame(between(kPodB.ip, kRemotePod), FERRY_PORT_HBONE, 40000, kSyn | kAck));
  EXPECT_EQ(result.verdict, kRedirect);
  const auto redirects = calls(FERRY_TEST_CALL_REDIRECT_PEER);
  ASSERT_EQ(redirects.size(), 1u);
  EXPECT_EQ(redirects[0].ifindex, kPodB.host_ifindex);
}

TEST_F(FromProxyTest, NonTcpFromLocalPodIsInjectedToo) {
  // The rule is about whose address ferryd uses, not about the protocol.
  const RunResult result = runFromProxy(icmpEchoFrame(between(kPodA.ip, kRemotePod)));
  EXPECT_EQ(result.verdict, kRedirect);
  EXPECT_EQ(calls(FERRY_TEST_CALL_REDIRECT).size(), 1u);
}

// Row 2: destination is a local enrolled pod -> deliver with bpf_redirect_peer.

TEST_F(FromProxyTest, DeliversToLocalPodWithRedirectPeer) {
  // Step 7: ferryd's connection to podA:80 from the remote client's address.
  const Bytes frame = tcpFrame(between(kRemotePod, kPodA.ip), 40000, 80, kSyn);
  const RunResult result = runFromProxy(frame);
  EXPECT_EQ(result.verdict, kRedirect);
  const auto redirects = calls(FERRY_TEST_CALL_REDIRECT_PEER);
  ASSERT_EQ(redirects.size(), 1u);
  EXPECT_EQ(redirects[0].ifindex, kPodA.host_ifindex);
  EXPECT_EQ(redirects[0].flags, 0u) << "delivery is into the pod's ingress: no flags";
  EXPECT_TRUE(calls(FERRY_TEST_CALL_REDIRECT).empty());
  EXPECT_EQ(frameDstMac(result.data), kPodA.pod_mac);
  EXPECT_EQ(frameSrcMac(result.data), kPodA.host_mac);
  EXPECT_EQ(packets(FERRY_PROG_FROM_PROXY, FERRY_VERDICT_REDIRECT, FERRY_REASON_DELIVER), 1u);
}

TEST_F(FromProxyTest, DeliveryDoesNotDependOnInjectionMode) {
  for (ferry_injection_mode mode : {FERRY_INJECT_NONE, FERRY_INJECT_PEER_EGRESS, FERRY_INJECT_INGRESS_REDIRECT}) {
    SCOPED_TRACE(mode);
    ASSERT_NO_FATAL_FAILURE(reloadInMode(mode));
    const RunResult result = runFromProxy(tcpFrame(between(kRemotePod, kPodB.ip), 40000, 80, kAck, 10));
    EXPECT_EQ(result.verdict, kRedirect);
    const auto redirects = calls(FERRY_TEST_CALL_REDIRECT_PEER);
    ASSERT_EQ(redirects.size(), 1u);
    EXPECT_EQ(redirects[0].ifindex, kPodB.host_ifindex);
    EXPECT_EQ(redirects[0].flags, 0u);
  }
}

// Row 3: neither -> ferryd's own traffic, pass.

TEST_F(FromProxyTest, PassesFerrydsOwnTraffic) {
  // ferryd talking as itself (to the API server, a certificate authority, ...).
  const Bytes frame = tcpFrame(between(kProxyIp, kExternal), 40000, 443, kSyn);
  const RunResult result = runFromProxy(frame);
  EXPECT_EQ(result.verdict, kPass) << "pass must be TC_ACT_UNSPEC (TCX_NEXT), never TC_ACT_OK";
  EXPECT_EQ(result.data, frame);
  EXPECT_TRUE(calls().empty());
  EXPECT_EQ(packets(FERRY_PROG_FROM_PROXY, FERRY_VERDICT_PASS, FERRY_REASON_NOT_LOCAL), 1u);
}

TEST_F(FromProxyTest, PassesNonIpv4) {
  const Bytes frame = arpFrame(between(kProxyIp, kPodA.ip));
  const RunResult result = runFromProxy(frame);
  EXPECT_EQ(result.verdict, kPass);
  EXPECT_EQ(result.data, frame);
  EXPECT_TRUE(calls().empty());
  EXPECT_EQ(packets(FERRY_PROG_FROM_PROXY, FERRY_VERDICT_PASS, FERRY_REASON_NOT_IPV4), 1u);
}

TEST_F(FromProxyTest, LooksUpNoSockets) {
  // The rule is by address only; ferryd's sockets are irrelevant here.
  runFromProxy(tunnelSynFromPodA());
  runFromProxy(tcpFrame(between(kRemotePod, kPodA.ip), 40000, 80, kSyn));
  EXPECT_TRUE(calls(FERRY_TEST_CALL_SKC_LOOKUP).empty());
}

}  // namespace
}  // namespace ferry::bpftest
