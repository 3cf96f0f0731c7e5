// pod_egress: tc ingress of an enrolled pod's host-side device (docs/datapath.md, "The programs").
#include <linux/bpf.h>

#include "tests/bpf/datapath_fixture.h"

namespace ferry::bpftest {
namespace {

class PodEgressTest : public DatapathTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(DatapathTest::SetUp());
    if (IsSkipped()) return;
    ASSERT_NO_FATAL_FAILURE(enroll(kPodA));
    ASSERT_NO_FATAL_FAILURE(addCaptureDestination(kRemotePod));
  }

  RunResult runPodEgress(const Bytes& frame) { return run(skel_->progs.pod_egress, frame); }

  void expectIntoProxy(const RunResult& result, ferry_reason reason) {
    EXPECT_EQ(result.verdict, kRedirect);
    const auto redirects = calls(FERRY_TEST_CALL_REDIRECT_PEER);
    ASSERT_EQ(redirects.size(), 1u);
    EXPECT_EQ(redirects[0].ifindex, kProxyHostIfindex);
    EXPECT_EQ(redirects[0].flags, 0u) << "into the proxy is ingress to ingress: no flags";
    EXPECT_TRUE(calls(FERRY_TEST_CALL_REDIRECT).empty());
    EXPECT_EQ(packets(FERRY_PROG_POD_EGRESS, FERRY_VERDICT_REDIRECT, reason), 1u);
  }

  void expectPassed(const RunResult& result, const Bytes& frame, ferry_reason reason) {
    expectPassedUnchanged(FERRY_PROG_POD_EGRESS, result, frame, reason);
  }
};

TEST_F(PodEgressTest, SynToCaptureDestinationGoesIntoProxy) {
  const RunResult result = runPodEgress(tcpFrame(fromPod(kPodA, kRemotePod), 40000, 80, kSyn));
  expectIntoProxy(result, FERRY_REASON_CAPTURE_SYN);
}

TEST_F(PodEgressTest, SynToNonCaptureDestinationPasses) {
  const Bytes frame = tcpFrame(fromPod(kPodA, kExternal), 40000, 80, kSyn);
  expectPassed(runPodEgress(frame), frame, FERRY_REASON_NOT_CAPTURED);
}

TEST_F(PodEgressTest, CaptureAllSendsSynToAnyDestinationIntoProxy) {
  ASSERT_NO_FATAL_FAILURE(setCaptureAll(true));
  const RunResult result = runPodEgress(tcpFrame(fromPod(kPodA, kExternal), 40000, 443, kSyn));
  expectIntoProxy(result, FERRY_REASON_CAPTURE_SYN);
}

TEST_F(PodEgressTest, MidStreamSegmentToMeshDestinationNotHeldIsResetBackIntoThePod) {
  // A flow that no ferryd socket holds (ferryd restarted under it, or it
  // predates enrolment) must not continue in plaintext to a mesh workload: the
  // pod gets the RST a peer without the connection would send.
  const Bytes frame = tcpFrame(fromPod(kPodA, kRemotePod), 40000, 80, kAck | kPsh, 100);
  const RunResult result = runPodEgress(frame);
  EXPECT_EQ(result.verdict, kRedirect);
  const auto redirects = calls(FERRY_TEST_CALL_REDIRECT_PEER);
  ASSERT_EQ(redirects.size(), 1u);
  EXPECT_EQ(redirects[0].ifindex, kPodA.host_ifindex) << "back into the pod, through its own device's peer";
  EXPECT_EQ(redirects[0].flags, 0u);
  EXPECT_EQ(packets(FERRY_PROG_POD_EGRESS, FERRY_VERDICT_REDIRECT, FERRY_REASON_STALE_FLOW), 1u);

  ASSERT_EQ(result.data.size(), 14u + 20u + 20u) << "payload and options cut";
  EXPECT_EQ(frameDstMac(result.data), frameSrcMac(frame));
  EXPECT_EQ(frameSrcMac(result.data), frameDstMac(frame));
  const TcpView rst = readTcp(result.data);
  EXPECT_EQ(rst.saddr, kRemotePod);
  EXPECT_EQ(rst.daddr, kPodA.ip);
  EXPECT_EQ(rst.sport, 80);
  EXPECT_EQ(rst.dport, 40000);
  EXPECT_EQ(rst.flags, kRst) << "an ACK-bearing segment is answered by a bare RST";
  EXPECT_EQ(rst.seq, readTcp(frame).ack_seq) << "exactly what the pod expects next (RFC 5961)";
  EXPECT_EQ(rst.payload, 0u);
  EXPECT_TRUE(rst.ip_checksum_ok);
  EXPECT_TRUE(rst.tcp_checksum_ok);
}

TEST_F(PodEgressTest, SegmentWithoutAckIsAnsweredWithRstAckCoveringIt) {
  const Bytes frame = tcpFrame(fromPod(kPodA, kRemotePod), 40000, 80, kPsh | kFin, 10);
  const RunResult result = runPodEgress(frame);
  EXPECT_EQ(result.verdict, kRedirect);
  const TcpView rst = readTcp(result.data);
  EXPECT_EQ(rst.flags, kRst | kAck);
  EXPECT_EQ(rst.seq, 0u);
  EXPECT_EQ(rst.ack_seq, readTcp(frame).seq + 10 + 1) << "payload and FIN acknowledged";
  EXPECT_TRUE(rst.ip_checksum_ok);
  EXPECT_TRUE(rst.tcp_checksum_ok);
}

TEST_F(PodEgressTest, RstToMeshDestinationNotHeldPassesSinceItCarriesNoData) {
  const Bytes frame = tcpFrame(fromPod(kPodA, kRemotePod), 40000, 80, kRst | kAck);
  expectPassed(runPodEgress(frame), frame, FERRY_REASON_STALE_RST);
}

TEST_F(PodEgressTest, MidStreamSegmentToNonMeshDestinationPassesEvenWithCaptureAll) {
  // Replies of a PERMISSIVE pod to plaintext clients (kubelet probes) are not
  // captured flows; capture: all widens SYN capture, not the stale-flow reset.
  ASSERT_NO_FATAL_FAILURE(setCaptureAll(true));
  const Bytes frame = tcpFrame(fromPod(kPodA, kExternal), 8080, 40000, kSyn | kAck);
  expectPassed(runPodEgress(frame), frame, FERRY_REASON_NOT_CAPTURED);
}

TEST_F(PodEgressTest, StrictPodServesNoDirectClientSoItsStaleSegmentsAreReset) {
  // ferryd just reset its server leg to a STRICT pod; the pod's reply was already in
  // flight. The pod listens on the port, yet nothing of it may cross in plaintext.
  ASSERT_NO_FATAL_FAILURE(enroll(kPodA, FERRY_POD_STRICT));
  Fd pod_listener = tcpListener(80);
  const RunResult result = runPodEgress(tcpFrame(fromPod(kPodA, kRemotePod), 80, 40000, kAck | kPsh, 10));
  EXPECT_EQ(result.verdict, kRedirect);
  EXPECT_EQ(readTcp(result.data).flags, kRst);
  EXPECT_EQ(packets(FERRY_PROG_POD_EGRESS, FERRY_VERDICT_REDIRECT, FERRY_REASON_STALE_FLOW), 1u);
  EXPECT_EQ(packets(FERRY_PROG_POD_EGRESS, FERRY_VERDICT_PASS, FERRY_REASON_POD_SERVES), 0u);
}

TEST_F(PodEgressTest, NetkitVariantDropsStaleSegmentItCannotBounce) {
  const RunResult result =
      run(skel_->progs.pod_egress_netkit, tcpFrame(fromPod(kPodA, kRemotePod), 40000, 80, kAck | kPsh, 10));
  EXPECT_EQ(result.verdict, kShot);
  EXPECT_TRUE(calls(FERRY_TEST_CALL_REDIRECT_PEER).empty());
  EXPECT_EQ(packets(FERRY_PROG_POD_EGRESS, FERRY_VERDICT_DROP, FERRY_REASON_STALE_FLOW), 1u);
}

TEST_F(PodEgressTest, TcpFragmentsAreDroppedNeverPassedInPlaintext) {
  // Fragments carry no steerable ports (later ones no TCP header at all) and
  // would reassemble at the destination past the mesh.
  EXPECT_EQ(runPodEgress(tcpFragmentFrame(fromPod(kPodA, kRemotePod), 0, true)).verdict, kShot);
  EXPECT_EQ(runPodEgress(tcpFragmentFrame(fromPod(kPodA, kRemotePod), 9, false)).verdict, kShot);
  EXPECT_EQ(runPodEgress(tcpFragmentFrame(fromPod(kPodA, kExternal), 9, true)).verdict, kShot);
  EXPECT_EQ(packets(FERRY_PROG_POD_EGRESS, FERRY_VERDICT_DROP, FERRY_REASON_FRAGMENT), 3u);
  EXPECT_TRUE(calls(FERRY_TEST_CALL_REDIRECT_PEER).empty());
}

TEST_F(PodEgressTest, UdpFragmentsPass) {
  const Bytes frame = udpFragmentFrame(fromPod(kPodA, kRemotePod));
  expectPassed(runPodEgress(frame), frame, FERRY_REASON_NOT_TCP);
}

TEST_F(PodEgressTest, Ipv6TcpIsDroppedWhereverItHidesInTheHeaderChain) {
  const Path path = fromPod(kPodA, kRemotePod);
  EXPECT_EQ(runPodEgress(ipv6Frame(path, {}, 6)).verdict, kShot);
  EXPECT_EQ(runPodEgress(ipv6Frame(path, {0, 60}, 6)).verdict, kShot) << "behind hop-by-hop and dest options";
  EXPECT_EQ(runPodEgress(ipv6Frame(path, {44}, 6)).verdict, kShot) << "a fragment of TCP";
  EXPECT_EQ(runPodEgress(ipv6Frame(path, {51}, 6)).verdict, kShot) << "behind an authentication header";
  EXPECT_EQ(runPodEgress(ipv6Frame(path, {0, 43, 60, 0, 43, 60, 0}, 17)).verdict, kShot)
      << "a chain too long to see through is refused";
  EXPECT_EQ(packets(FERRY_PROG_POD_EGRESS, FERRY_VERDICT_DROP, FERRY_REASON_IPV6_TCP), 5u);
}

TEST_F(PodEgressTest, Ipv6WithoutTcpPasses) {
  const Path path = fromPod(kPodA, kRemotePod);
  const Bytes icmp6 = ipv6Frame(path, {}, 58);  // neighbour discovery must keep working
  const Bytes udp6 = ipv6Frame(path, {0, 44}, 17);
  EXPECT_EQ(runPodEgress(icmp6).verdict, kPass);
  EXPECT_EQ(runPodEgress(udp6).verdict, kPass);
  EXPECT_EQ(packets(FERRY_PROG_POD_EGRESS, FERRY_VERDICT_PASS, FERRY_REASON_NOT_IPV4), 2u);
}

TEST_F(PodEgressTest, SynAckIsNotTreatedAsNewConnection) {
  const Bytes frame = tcpFrame(fromPod(kPodA, kExternal), 80, 40000, kSyn | kAck);
  expectPassed(runPodEgress(frame), frame, FERRY_REASON_NOT_CAPTURED);
  EXPECT_EQ(packets(FERRY_PROG_POD_EGRESS, FERRY_VERDICT_REDIRECT, FERRY_REASON_CAPTURE_SYN), 0u);
}

TEST_F(PodEgressTest, FlowThePodServesToAMeshClientPasses) {
  // A mesh client reached the pod directly (its own node's ferryd failed open;
  // PERMISSIVE accepts plaintext): the pod listens on its source port, so its
  // replies are not a lost flow of its own.
  Fd pod_listener = tcpListener(80);
  const Bytes synack = tcpFrame(fromPod(kPodA, kRemotePod), 80, 40000, kSyn | kAck);
  const Bytes data = tcpFrame(fromPod(kPodA, kRemotePod), 80, 40000, kAck | kPsh, 10);
  EXPECT_EQ(runPodEgress(synack).verdict, kPass);
  EXPECT_EQ(runPodEgress(data).verdict, kPass);
  EXPECT_EQ(packets(FERRY_PROG_POD_EGRESS, FERRY_VERDICT_PASS, FERRY_REASON_POD_SERVES), 2u);
  const auto lookups = calls(FERRY_TEST_CALL_SKC_LOOKUP);
  ASSERT_FALSE(lookups.empty());
  EXPECT_EQ(lookups.back().netns, static_cast<uint64_t>(kTestNsid)) << "asked in the pod's own netns";
  EXPECT_EQ(lookups.back().sport, 0) << "a remote port no connection has: only a listener matches";
  EXPECT_EQ(lookups.back().daddr, kPodA.ip);
  EXPECT_EQ(lookups.back().dport, htons(80));
}

TEST_F(PodEgressTest, UdpPassesUntouched) {
  const Bytes frame = udpFrame(fromPod(kPodA, kRemotePod), 5353, 53);
  expectPassed(runPodEgress(frame), frame, FERRY_REASON_NOT_TCP);
  EXPECT_TRUE(calls(FERRY_TEST_CALL_SKC_LOOKUP).empty()) << "non-TCP costs no socket lookup";
}

TEST_F(PodEgressTest, IcmpPassesUntouched) {
  const Bytes frame = icmpEchoFrame(fromPod(kPodA, kRemotePod));
  expectPassed(runPodEgress(frame), frame, FERRY_REASON_NOT_TCP);
}

TEST_F(PodEgressTest, ArpPassesUntouched) {
  const Bytes frame = arpFrame(fromPod(kPodA, kRemotePod));
  expectPassed(runPodEgress(frame), frame, FERRY_REASON_NOT_IPV4);
}

TEST_F(PodEgressTest, TruncatedTcpHeaderPassesToTheKernel) {
  const Bytes frame = truncatedTcpFrame(fromPod(kPodA, kRemotePod), 40000, 80);
  expectPassed(runPodEgress(frame), frame, FERRY_REASON_MALFORMED);
}

TEST_F(PodEgressTest, SourcePort15008ToNonCaptureDestinationPasses) {
  // ferryd listens on 0.0.0.0:15008. An app that binds source port 15008 makes
  // the reverse lookup hit that listener; a listener is not "ferryd holds it",
  // so this is not mistaken for ferryd's own traffic (nor captured).
  Fd hbone_listener = tcpListener(FERRY_PORT_HBONE);
  const Bytes frame = tcpFrame(fromPod(kPodA, kExternal), FERRY_PORT_HBONE, 80, kSyn);
  expectPassed(runPodEgress(frame), frame, FERRY_REASON_NOT_CAPTURED);
  EXPECT_EQ(packets(FERRY_PROG_POD_EGRESS, FERRY_VERDICT_PASS, FERRY_REASON_OWN_TRAFFIC), 0u);
}

TEST_F(PodEgressTest, SourcePort15008ToCaptureDestinationIsStillCaptured) {
  Fd hbone_listener = tcpListener(FERRY_PORT_HBONE);
  const RunResult result = runPodEgress(tcpFrame(fromPod(kPodA, kRemotePod), FERRY_PORT_HBONE, 80, kSyn));
  expectIntoProxy(result, FERRY_REASON_CAPTURE_SYN);
}

TEST_F(PodEgressTest, DirectConnectionToHbonePortOfCaptureDestinationIsCaptured) {
  Fd hbone_listener = tcpListener(FERRY_PORT_HBONE);
  const RunResult result = runPodEgress(tcpFrame(fromPod(kPodA, kRemotePod), 40000, FERRY_PORT_HBONE, kSyn));
  expectIntoProxy(result, FERRY_REASON_CAPTURE_SYN);
}

TEST_F(PodEgressTest, PacketOfConnectionFerrydHoldsGoesIntoProxy) {
  // ferryd accepted podA:40000 -> external:80 on 15001 (capture: all at the
  // time): its socket is local=external:80 remote=podA:40000.
  Fd accepted = tcpConnection(kExternal, 80, kPodA.ip, 40000);
  const RunResult result = runPodEgress(tcpFrame(fromPod(kPodA, kExternal), 40000, 80, kAck | kPsh, 10));
  expectIntoProxy(result, FERRY_REASON_HELD);
}

TEST_F(PodEgressTest, FerrydsOwnInjectedTrafficPasses) {
  // Step 4: ferryd's HBONE leg from podA's address (local=podA:40001,
  // remote=remote:15008) re-enters podA's device after injection. It goes to a
  // capture destination and is a SYN, yet it must pass.
  Fd upstream = tcpConnection(kPodA.ip, 40001, kRemotePod, FERRY_PORT_HBONE);
  const Bytes frame = tcpFrame(fromPod(kPodA, kRemotePod), 40001, FERRY_PORT_HBONE, kSyn);
  expectPassed(runPodEgress(frame), frame, FERRY_REASON_OWN_TRAFFIC);
}

TEST_F(PodEgressTest, AsksTheProxyNetnsByIdReverseTupleFirst) {
  runPodEgress(tcpFrame(fromPod(kPodA, kExternal), 40000, 80, kSyn));
  const auto lookups = calls(FERRY_TEST_CALL_SKC_LOOKUP);
  ASSERT_EQ(lookups.size(), 2u);
  // Reverse: would ferryd have sent this (socket local=podA:40000)?
  EXPECT_EQ(lookups[0].netns, static_cast<uint64_t>(kTestNsid));
  EXPECT_EQ(lookups[0].saddr, kExternal);
  EXPECT_EQ(lookups[0].sport, htons(80));
  EXPECT_EQ(lookups[0].daddr, kPodA.ip);
  EXPECT_EQ(lookups[0].dport, htons(40000));
  // Forward: does ferryd hold this connection (socket local=external:80)?
  EXPECT_EQ(lookups[1].netns, static_cast<uint64_t>(kTestNsid));
  EXPECT_EQ(lookups[1].saddr, kPodA.ip);
  EXPECT_EQ(lookups[1].sport, htons(40000));
  EXPECT_EQ(lookups[1].daddr, kExternal);
  EXPECT_EQ(lookups[1].dport, htons(80));
}

TEST_F(PodEgressTest, CountsBytesOfEveryVerdict) {
  const Bytes syn = tcpFrame(fromPod(kPodA, kRemotePod), 40000, 80, kSyn);
  const Bytes udp = udpFrame(fromPod(kPodA, kRemotePod), 5353, 53, 100);
  runPodEgress(syn);
  runPodEgress(udp);
  runPodEgress(udp);
  const ferry_counter captured = counter(FERRY_PROG_POD_EGRESS, FERRY_VERDICT_REDIRECT, FERRY_REASON_CAPTURE_SYN);
  EXPECT_EQ(captured.packets, 1u);
  EXPECT_EQ(captured.bytes, syn.size());
  const ferry_counter passed = counter(FERRY_PROG_POD_EGRESS, FERRY_VERDICT_PASS, FERRY_REASON_NOT_TCP);
  EXPECT_EQ(passed.packets, 2u);
  EXPECT_EQ(passed.bytes, 2 * udp.size());
  EXPECT_EQ(packets(FERRY_PROG_POD_INGRESS, FERRY_VERDICT_PASS, FERRY_REASON_NOT_TCP), 0u)
      << "counters are per program";
}

// pod_egress_netkit: the same rules as a BPF_NETKIT_PEER program, where the pod's own
// transmit path runs it and bpf_redirect_peer (tc ingress only) is not allowed.

TEST_F(PodEgressTest, NetkitVariantTransmitsCapturedSynIntoProxy) {
  const RunResult result =
      run(skel_->progs.pod_egress_netkit, tcpFrame(fromPod(kPodA, kRemotePod), 40000, 80, kSyn));
  EXPECT_EQ(result.verdict, kRedirect);
  EXPECT_TRUE(calls(FERRY_TEST_CALL_REDIRECT_PEER).empty()) << "bpf_redirect_peer drops outside tc ingress";
  const auto redirects = calls(FERRY_TEST_CALL_REDIRECT);
  ASSERT_EQ(redirects.size(), 1u);
  EXPECT_EQ(redirects[0].ifindex, kProxyHostIfindex);
  EXPECT_EQ(redirects[0].flags, 0u) << "out of the proxy's host-side device, into its eth0";
  EXPECT_EQ(packets(FERRY_PROG_POD_EGRESS, FERRY_VERDICT_REDIRECT, FERRY_REASON_CAPTURE_SYN), 1u);
}

TEST_F(PodEgressTest, NetkitVariantPassesNonCapturedTrafficToTheNextProgram) {
  const Bytes frame = tcpFrame(fromPod(kPodA, kExternal), 40000, 80, kSyn);
  const RunResult result = run(skel_->progs.pod_egress_netkit, frame);
  EXPECT_EQ(result.verdict, kPass) << "NETKIT_NEXT (-1), so that a CNI's peer program still runs";
  EXPECT_EQ(result.data, frame);
  EXPECT_TRUE(calls(FERRY_TEST_CALL_REDIRECT).empty());
  EXPECT_EQ(packets(FERRY_PROG_POD_EGRESS, FERRY_VERDICT_PASS, FERRY_REASON_NOT_CAPTURED), 1u);
}

}  // namespace
}  // namespace ferry::bpftest
