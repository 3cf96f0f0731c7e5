// pod_ingress: tc egress of an enrolled pod's host-side device (docs/datapath.md, "The programs").
#include <linux/bpf.h>

#include "tests/bpf/datapath_fixture.h"

namespace ferry::bpftest {
namespace {

class PodIngressTest : public DatapathTest {
 protected:
  RunResult runPodIngress(const Bytes& frame) { return run(skel_->progs.pod_ingress, frame); }

  void expectIntoProxy(const RunResult& result, ferry_reason reason) {
    EXPECT_EQ(result.verdict, kRedirect);
    const auto redirects = calls(FERRY_TEST_CALL_REDIRECT);
    ASSERT_EQ(redirects.size(), 1u);
    EXPECT_EQ(redirects[0].ifindex, kProxyHostIfindex);
    EXPECT_EQ(redirects[0].flags, 0u) << "out of the proxy's host-side device, no flags";
    EXPECT_TRUE(calls(FERRY_TEST_CALL_REDIRECT_PEER).empty())
        << "bpf_redirect_peer is not allowed from an egress hook";
    EXPECT_EQ(packets(FERRY_PROG_POD_INGRESS, FERRY_VERDICT_REDIRECT, reason), 1u);
  }

  void expectPassed(const RunResult& result, const Bytes& frame, ferry_reason reason) {
    expectPassedUnchanged(FERRY_PROG_POD_INGRESS, result, frame, reason);
  }
};

TEST_F(PodIngressTest, SynToHbonePortGoesIntoProxy) {
  ASSERT_NO_FATAL_FAILURE(enroll(kPodA));
  // ferryd's HBONE listener matches every SYN to port 15008; it must not make
  // the SYN look "held" (that would also send it to the proxy, for the wrong reason).
  Fd hbone_listener = tcpListener(FERRY_PORT_HBONE);
  const RunResult result = runPodIngress(tcpFrame(toPod(kRemotePod, kPodA), 40000, FERRY_PORT_HBONE, kSyn));
  expectIntoProxy(result, FERRY_REASON_HBONE_SYN);
}

TEST_F(PodIngressTest, StrictPodSynToOtherPortGoesIntoProxy) {
  ASSERT_NO_FATAL_FAILURE(enroll(kPodA, FERRY_POD_STRICT));
  const RunResult result = runPodIngress(tcpFrame(toPod(kRemotePod, kPodA), 40000, 80, kSyn));
  expectIntoProxy(result, FERRY_REASON_STRICT_SYN);
}

TEST_F(PodIngressTest, PermissivePodSynToOtherPortPasses) {
  ASSERT_NO_FATAL_FAILURE(enroll(kPodA));
  const Bytes frame = tcpFrame(toPod(kRemotePod, kPodA), 40000, 80, kSyn);
  expectPassed(runPodIngress(frame), frame, FERRY_REASON_NOT_CAPTURED);
}

TEST_F(PodIngressTest, StrictPodPacketOfUnheldConnectionPasses) {
  // Only new connections are refused plaintext; an ACK of a connection that
  // predates STRICT is left to the pod.
  ASSERT_NO_FATAL_FAILURE(enroll(kPodA, FERRY_POD_STRICT));
  const Bytes frame = tcpFrame(toPod(kRemotePod, kPodA), 40000, 80, kAck, 20);
  expectPassed(runPodIngress(frame), frame, FERRY_REASON_NOT_CAPTURED);
}

TEST_F(PodIngressTest, StrictPodUdpPassesUntouched) {
  ASSERT_NO_FATAL_FAILURE(enroll(kPodA, FERRY_POD_STRICT));
  const Bytes frame = udpFrame(toPod(kRemotePod, kPodA), 5353, 53);
  expectPassed(runPodIngress(frame), frame, FERRY_REASON_NOT_TCP);
}

TEST_F(PodIngressTest, StrictPodIcmpPassesUntouched) {
  ASSERT_NO_FATAL_FAILURE(enroll(kPodA, FERRY_POD_STRICT));
  const Bytes frame = icmpEchoFrame(toPod(kRemotePod, kPodA));
  expectPassed(runPodIngress(frame), frame, FERRY_REASON_NOT_TCP);
}

TEST_F(PodIngressTest, PacketOfConnectionFerrydHoldsGoesIntoProxy) {
  // Step 10: the tunnel's reply to ferryd's HBONE leg, whose socket in the
  // proxy is local=podA:40000 remote=remote:15008.
  ASSERT_NO_FATAL_FAILURE(enroll(kPodA));
  Fd upstream = tcpConnection(kPodA.ip, 40000, kRemotePod, FERRY_PORT_HBONE);
  const RunResult result = runPodIngress(tcpFrame(toPod(kRemotePod, kPodA), FERRY_PORT_HBONE, 40000, kAck, 64));
  expectIntoProxy(result, FERRY_REASON_HELD);
  const auto lookups = calls(FERRY_TEST_CALL_SKC_LOOKUP);
  ASSERT_FALSE(lookups.empty());
  EXPECT_EQ(lookups[0].netns, static_cast<uint64_t>(kTestNsid)) << "looked up in the proxy netns by id";
}

TEST_F(PodIngressTest, SynAckToFerrydsLegGoesIntoProxy) {
  // Step 8's mirror on the client node: the server's SYN-ACK to ferryd's leg.
  ASSERT_NO_FATAL_FAILURE(enroll(kPodA, FERRY_POD_STRICT));
  Fd upstream = tcpConnection(kPodA.ip, 40000, kRemotePod, FERRY_PORT_HBONE);
  const RunResult result =
      runPodIngress(tcpFrame(toPod(kRemotePod, kPodA), FERRY_PORT_HBONE, 40000, kSyn | kAck));
  expectIntoProxy(result, FERRY_REASON_HELD);
}

TEST_F(PodIngressTest, FerrydsOwnConnectionToStrictPodPasses) {
  // Same node: ferryd connects to podA:80 from podB's address (step 6); the
  // SYN leaves the proxy as podB's traffic and reaches podA's device. ferryd
  // holds the reverse tuple (local=podB:40002 remote=podA:80): deliver it,
  // do not send it back to 15006 as a new plaintext connection.
  ASSERT_NO_FATAL_FAILURE(enroll(kPodA, FERRY_POD_STRICT));
  ASSERT_NO_FATAL_FAILURE(enroll(kPodB));
  Fd leg = tcpConnection(kPodB.ip, 40002, kPodA.ip, 80);
  const Bytes frame = tcpFrame(toPod(kPodB.ip, kPodA), 40002, 80, kSyn);
  expectPassed(runPodIngress(frame), frame, FERRY_REASON_OWN_TRAFFIC);
}

TEST_F(PodIngressTest, FerrydsOwnSameNodeHboneSynGoesIntoProxyNotToThePod) {
  // Same node: ferryd's HBONE client leg podB:40004 -> podA:15008 exists (SYN_SENT), so
  // the reverse tuple is held; the SYN must still reach ferryd's HBONE listener, since
  // podA itself has nothing on 15008 (found in the lab: "connection refused").
  ASSERT_NO_FATAL_FAILURE(enroll(kPodA));
  ASSERT_NO_FATAL_FAILURE(enroll(kPodB));
  Fd client_leg = tcpConnection(kPodB.ip, 40004, kPodA.ip, FERRY_PORT_HBONE);
  const RunResult result = runPodIngress(tcpFrame(toPod(kPodB.ip, kPodA), 40004, FERRY_PORT_HBONE, kSyn));
  expectIntoProxy(result, FERRY_REASON_HBONE_SYN);
}

TEST_F(PodIngressTest, HeldConnectionWinsOverOwnTrafficWhenBothLegsAreLocal) {
  // Same node, tunnel: ferryd holds both ends of podB:40003 -> podA:15008 (its
  // HBONE client leg and the accepted HBONE server socket). Packets to podA
  // on it belong to the proxy.
  ASSERT_NO_FATAL_FAILURE(enroll(kPodA));
  ASSERT_NO_FATAL_FAILURE(enroll(kPodB));
  Fd client_leg = tcpConnection(kPodB.ip, 40003, kPodA.ip, FERRY_PORT_HBONE);
  Fd server_side = tcpConnection(kPodA.ip, FERRY_PORT_HBONE, kPodB.ip, 40003);
  const RunResult result = runPodIngress(tcpFrame(toPod(kPodB.ip, kPodA), 40003, FERRY_PORT_HBONE, kAck, 10));
  expectIntoProxy(result, FERRY_REASON_HELD);
}

TEST_F(PodIngressTest, UnknownDestinationSynPasses) {
  // Attached only to enrolled pods' devices, but a packet to an address not in
  // ferry_pods (say, a second address of the pod) is not STRICT-checked.
  const Bytes frame = tcpFrame(toPod(kRemotePod, kPodA), 40000, 80, kSyn);
  expectPassed(runPodIngress(frame), frame, FERRY_REASON_NOT_CAPTURED);
}

TEST_F(PodIngressTest, TcpFragmentsToThePodAreDroppedSoStrictCannotBeBypassed) {
  ASSERT_NO_FATAL_FAILURE(enroll(kPodA, FERRY_POD_STRICT));
  EXPECT_EQ(runPodIngress(tcpFragmentFrame(toPod(kExternal, kPodA), 0, true)).verdict, kShot);
  EXPECT_EQ(runPodIngress(tcpFragmentFrame(toPod(kExternal, kPodA), 9, false)).verdict, kShot);
  EXPECT_EQ(packets(FERRY_PROG_POD_INGRESS, FERRY_VERDICT_DROP, FERRY_REASON_FRAGMENT), 2u);
  EXPECT_TRUE(calls(FERRY_TEST_CALL_REDIRECT).empty());
}

TEST_F(PodIngressTest, StrictPodGetsAResetInPlaceOfPlaintextOnAFlowItServes) {
  // A plaintext connection to the pod's port 80 that predates STRICT (or enrolment):
  // the pod gets an RST at the segment's own sequence number, never its bytes.
  ASSERT_NO_FATAL_FAILURE(enroll(kPodA, FERRY_POD_STRICT));
  Fd pod_listener = tcpListener(80);
  const Bytes frame = tcpFrame(toPod(kExternal, kPodA), 40000, 80, kAck | kPsh, 50);
  const RunResult result = runPodIngress(frame);
  EXPECT_EQ(result.verdict, kPass) << "on to the pod, as a reset";
  ASSERT_EQ(result.data.size(), 14u + 20u + 20u) << "the payload is gone";
  EXPECT_EQ(frameDstMac(result.data), frameDstMac(frame));
  const TcpView rst = readTcp(result.data);
  EXPECT_EQ(rst.saddr, kExternal);
  EXPECT_EQ(rst.daddr, kPodA.ip);
  EXPECT_EQ(rst.sport, 40000);
  EXPECT_EQ(rst.dport, 80);
  EXPECT_EQ(rst.flags, kRst);
  EXPECT_EQ(rst.seq, readTcp(frame).seq);
  EXPECT_TRUE(rst.ip_checksum_ok);
  EXPECT_TRUE(rst.tcp_checksum_ok);
  EXPECT_EQ(packets(FERRY_PROG_POD_INGRESS, FERRY_VERDICT_PASS, FERRY_REASON_STRICT_STALE), 1u);
}

TEST_F(PodIngressTest, RepliesToAStrictPodsOwnConnectionsPass) {
  // The pod called a non-mesh service directly: nothing listens on its ephemeral port.
  ASSERT_NO_FATAL_FAILURE(enroll(kPodA, FERRY_POD_STRICT));
  Fd pod_listener = tcpListener(80);
  const Bytes frame = tcpFrame(toPod(kExternal, kPodA), 443, 40000, kAck | kPsh, 50);
  expectPassed(runPodIngress(frame), frame, FERRY_REASON_NOT_CAPTURED);
}

TEST_F(PodIngressTest, PermissivePodKeepsItsDirectPlaintextFlows) {
  ASSERT_NO_FATAL_FAILURE(enroll(kPodA));
  Fd pod_listener = tcpListener(80);
  const Bytes frame = tcpFrame(toPod(kExternal, kPodA), 40000, 80, kAck | kPsh, 50);
  expectPassed(runPodIngress(frame), frame, FERRY_REASON_NOT_CAPTURED);
}

// Rule 3b (docs/security.md, "Probes"). ferryd's lookups go to a netns id nobody has, so
// only the node's own socket table (the netns the program runs in, the test's) holds the
// test's sockets, as on a node where the kubelet probes a pod.
class PodIngressNodeTest : public PodIngressTest {
 protected:
  static constexpr uint64_t kNoSuchNsid = 43;
  void SetUp() override {
    PodIngressTest::SetUp();
    if (IsSkipped()) return;
    ASSERT_NO_FATAL_FAILURE(reload([](Config& c) { c.proxy_netns_id = kNoSuchNsid; }));
  }
};

TEST_F(PodIngressNodeTest, ProbeFromTheNodeToAStrictPodPasses) {
  ASSERT_NO_FATAL_FAILURE(enroll(kPodA, FERRY_POD_STRICT));
  Fd pod_listener = tcpListener(8080);
  Fd kubelet = tcpConnection(kExternal, 50000, kPodA.ip, 8080);
  const Bytes syn = tcpFrame(toPod(kExternal, kPodA), 50000, 8080, kSyn);
  expectPassed(runPodIngress(syn), syn, FERRY_REASON_NODE_SYN);
  // The probe's request: a segment of a flow the STRICT pod serves, which rule 4b would
  // turn into a reset if the node held no socket of it.
  const Bytes request = tcpFrame(toPod(kExternal, kPodA), 50000, 8080, kAck | kPsh, 80);
  const RunResult result = runPodIngress(request);
  EXPECT_EQ(result.data, request) << "the request reaches the pod intact, not as a reset";
  EXPECT_EQ(packets(FERRY_PROG_POD_INGRESS, FERRY_VERDICT_PASS, FERRY_REASON_NODE_FLOW), 1u);
  EXPECT_EQ(packets(FERRY_PROG_POD_INGRESS, FERRY_VERDICT_PASS, FERRY_REASON_STRICT_STALE), 0u);
}

TEST_F(PodIngressNodeTest, ForgedNodeAddressWithoutANodeSocketIsRefused) {
  // A pod sending from the node's address owns no socket in the node's netns: its SYN
  // goes to ferryd (15006) like any plaintext client's, and its segments become resets.
  ASSERT_NO_FATAL_FAILURE(enroll(kPodA, FERRY_POD_STRICT));
  Fd pod_listener = tcpListener(8080);
  Fd other = tcpConnection(kExternal, 50001, kPodA.ip, 8080);  // same address, another port
  expectIntoProxy(runPodIngress(tcpFrame(toPod(kExternal, kPodA), 50000, 8080, kSyn)), FERRY_REASON_STRICT_SYN);
  EXPECT_EQ(runPodIngress(tcpFrame(toPod(kExternal, kPodA), 50000, 8080, kAck | kPsh, 80)).data.size(),
            14u + 20u + 20u)
      << "a reset in place of the segment";
  EXPECT_EQ(packets(FERRY_PROG_POD_INGRESS, FERRY_VERDICT_PASS, FERRY_REASON_STRICT_STALE), 1u);
  EXPECT_EQ(packets(FERRY_PROG_POD_INGRESS, FERRY_VERDICT_PASS, FERRY_REASON_NODE_SYN), 0u);
}

TEST_F(PodIngressNodeTest, PermissivePodTrafficFromTheNodeIsNotCountedAsExempt) {
  ASSERT_NO_FATAL_FAILURE(enroll(kPodA));
  Fd kubelet = tcpConnection(kExternal, 50000, kPodA.ip, 8080);
  const Bytes syn = tcpFrame(toPod(kExternal, kPodA), 50000, 8080, kSyn);
  expectPassed(runPodIngress(syn), syn, FERRY_REASON_NOT_CAPTURED);
}

TEST_F(PodIngressNodeTest, ExemptionTurnedOffSendsTheNodesProbeToFerryd) {
  ASSERT_NO_FATAL_FAILURE(reload([](Config& c) {
    c.proxy_netns_id = kNoSuchNsid;
    c.exempt_node = 0;
  }));
  ASSERT_NO_FATAL_FAILURE(enroll(kPodA, FERRY_POD_STRICT));
  Fd kubelet = tcpConnection(kExternal, 50000, kPodA.ip, 8080);
  expectIntoProxy(runPodIngress(tcpFrame(toPod(kExternal, kPodA), 50000, 8080, kSyn)), FERRY_REASON_STRICT_SYN);
}

TEST_F(PodIngressTest, Ipv6TcpToThePodIsDropped) {
  ASSERT_NO_FATAL_FAILURE(enroll(kPodA));
  EXPECT_EQ(runPodIngress(ipv6Frame(toPod(kExternal, kPodA), {}, 6)).verdict, kShot);
  EXPECT_EQ(packets(FERRY_PROG_POD_INGRESS, FERRY_VERDICT_DROP, FERRY_REASON_IPV6_TCP), 1u);
}

}  // namespace
}  // namespace ferry::bpftest
