// to_proxy: tc ingress of the proxy's eth0, inside the proxy netns (docs/datapath.md,
// "Packet walk", step 2). The real lookups run against real sockets in the test's netns; the
// sk_assign stub records which socket would have been assigned.
#include <linux/bpf.h>
#include <linux/if_packet.h>

#include "tests/bpf/datapath_fixture.h"

namespace ferry::bpftest {
namespace {

class ToProxyTest : public DatapathTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(DatapathTest::SetUp());
    if (IsSkipped()) return;
    ASSERT_NO_FATAL_FAILURE(enroll(kPodA));
    ASSERT_NO_FATAL_FAILURE(enroll(kPodB));
  }

  // ferryd's three transparent listeners, bound to the wildcard address.
  void listen() {
    outbound_ = tcpListener(FERRY_PORT_OUTBOUND);
    inbound_ = tcpListener(FERRY_PORT_INBOUND_PLAIN);
    hbone_ = tcpListener(FERRY_PORT_HBONE);
  }

  RunResult runToProxy(const Bytes& frame) { return run(skel_->progs.to_proxy, frame); }

  // The one socket the packet was assigned to.
  ferry_test_call assignedSocket() {
    const auto assigns = calls(FERRY_TEST_CALL_SK_ASSIGN);
    EXPECT_EQ(assigns.size(), 1u);
    return assigns.empty() ? ferry_test_call{} : assigns[0];
  }

  void expectAssignedToListener(const RunResult& result, uint16_t port, ferry_reason reason) {
    EXPECT_EQ(result.verdict, kPass) << "an assigned packet continues up the stack with TC_ACT_UNSPEC";
    EXPECT_EQ(result.mark, static_cast<uint32_t>(FERRY_DEFAULT_PROXY_MARK));
    const ferry_test_call sk = assignedSocket();
    EXPECT_EQ(ntohs(sk.sport), port) << "assigned to the listener on " << ntohs(sk.sport);
    EXPECT_EQ(sk.sk_state, static_cast<uint32_t>(BPF_TCP_LISTEN));
    EXPECT_EQ(packets(FERRY_PROG_TO_PROXY, FERRY_VERDICT_PASS, reason), 1u);
  }

  Fd outbound_, inbound_, hbone_;
};

TEST_F(ToProxyTest, SetsPacketHostAndProxyMarkOnSteeredPacket) {
  listen();
  // Redirected from pod_ingress (an egress hook): still addressed to podA's MAC.
  const RunResult result = runToProxy(tcpFrame(toPod(kRemotePod, kPodA), 40000, 80, kSyn));
  const auto type_changes = calls(FERRY_TEST_CALL_CHANGE_TYPE);
  ASSERT_EQ(type_changes.size(), 1u);
  EXPECT_EQ(type_changes[0].ifindex, static_cast<uint32_t>(PACKET_HOST));
  EXPECT_EQ(result.mark, static_cast<uint32_t>(FERRY_DEFAULT_PROXY_MARK));
}

TEST_F(ToProxyTest, UsesConfiguredProxyMark) {
  ASSERT_NO_FATAL_FAILURE(reload([](Config& c) { c.proxy_mark = 0x77; }));
  ASSERT_NO_FATAL_FAILURE(enroll(kPodA));
  listen();
  const RunResult result = runToProxy(tcpFrame(fromPod(kPodA, kRemotePod), 40000, 80, kSyn));
  EXPECT_EQ(result.mark, 0x77u);
}

TEST_F(ToProxyTest, SynFromLocalPodGoesToOutboundListener) {
  listen();
  const RunResult result = runToProxy(tcpFrame(fromPod(kPodA, kRemotePod), 40000, 80, kSyn));
  expectAssignedToListener(result, FERRY_PORT_OUTBOUND, FERRY_REASON_ASSIGN_OUTBOUND);
}

TEST_F(ToProxyTest, SynFromLocalPodToPort15008GoesToOutboundListener) {
  // Source first: an app connecting to a destination's HBONE port directly is
  // captured as outbound, never handed to the HBONE server as if it were a tunnel.
  listen();
  const RunResult result = runToProxy(tcpFrame(fromPod(kPodA, kRemotePod), 40000, FERRY_PORT_HBONE, kSyn));
  expectAssignedToListener(result, FERRY_PORT_OUTBOUND, FERRY_REASON_ASSIGN_OUTBOUND);
}

TEST_F(ToProxyTest, SynFromLocalPodToLocalPodGoesToOutboundListener) {
  listen();
  const RunResult result = runToProxy(tcpFrame(fromPod(kPodA, kPodB.ip), 40000, 80, kSyn));
  expectAssignedToListener(result, FERRY_PORT_OUTBOUND, FERRY_REASON_ASSIGN_OUTBOUND);
}

TEST_F(ToProxyTest, SynToLocalPodHbonePortGoesToHboneListener) {
  listen();
  const RunResult result = runToProxy(tcpFrame(toPod(kRemotePod, kPodA), 40000, FERRY_PORT_HBONE, kSyn));
  expectAssignedToListener(result, FERRY_PORT_HBONE, FERRY_REASON_ASSIGN_HBONE);
}

TEST_F(ToProxyTest, SynToLocalPodOtherPortGoesToInboundListener) {
  listen();
  const RunResult result = runToProxy(tcpFrame(toPod(kRemotePod, kPodA), 40000, 80, kSyn));
  expectAssignedToListener(result, FERRY_PORT_INBOUND_PLAIN, FERRY_REASON_ASSIGN_INBOUND);
}

TEST_F(ToProxyTest, FerrydsOwnHboneSynFromLocalPodGoesToHboneListener) {
  // Same node: ferryd's HBONE leg podA:40003 -> podB:15008 (sent as podA)
  // comes back through podB's pod_ingress. ferryd holds its reverse tuple,
  // so "source is a local pod" does not apply: it is inbound HBONE.
  listen();
  Fd leg = tcpConnection(kPodA.ip, 40003, kPodB.ip, FERRY_PORT_HBONE);
  const RunResult result = runToProxy(tcpFrame(fromPod(kPodA, kPodB.ip), 40003, FERRY_PORT_HBONE, kSyn));
  expectAssignedToListener(result, FERRY_PORT_HBONE, FERRY_REASON_ASSIGN_HBONE);
}

TEST_F(ToProxyTest, ListenerLookupsKeepAddressesAndRunInTheProxyNetnsItself) {
  listen();
  runToProxy(tcpFrame(fromPod(kPodA, kRemotePod), 40000, 80, kSyn));
  const auto lookups = calls(FERRY_TEST_CALL_SKC_LOOKUP);
  ASSERT_FALSE(lookups.empty());
  const ferry_test_call& listener = lookups.back();
  EXPECT_EQ(listener.netns, static_cast<uint64_t>(BPF_F_CURRENT_NETNS));
  EXPECT_EQ(listener.saddr, kPodA.ip);
  EXPECT_EQ(listener.sport, htons(40000));
  EXPECT_EQ(listener.daddr, kRemotePod);
  EXPECT_EQ(listener.dport, htons(FERRY_PORT_OUTBOUND));
  for (const ferry_test_call& lookup : lookups)
    EXPECT_EQ(lookup.netns, static_cast<uint64_t>(BPF_F_CURRENT_NETNS)) << "to_proxy runs in the proxy netns";
}

TEST_F(ToProxyTest, PacketOfFerrydConnectionIsAssignedToIt) {
  // ferryd accepted podA:40000 -> remote:80 on 15001: local=remote:80.
  listen();
  Fd accepted = tcpConnection(kRemotePod, 80, kPodA.ip, 40000);
  const RunResult result = runToProxy(tcpFrame(fromPod(kPodA, kRemotePod), 40000, 80, kAck | kPsh, 32));
  EXPECT_EQ(result.verdict, kPass);
  EXPECT_EQ(result.mark, static_cast<uint32_t>(FERRY_DEFAULT_PROXY_MARK));
  const ferry_test_call sk = assignedSocket();
  EXPECT_EQ(sk.saddr, kRemotePod);
  EXPECT_EQ(ntohs(sk.sport), 80);
  EXPECT_EQ(sk.daddr, kPodA.ip);
  EXPECT_EQ(ntohs(sk.dport), 40000);
  EXPECT_EQ(sk.sk_state, static_cast<uint32_t>(BPF_TCP_ESTABLISHED));
  EXPECT_EQ(packets(FERRY_PROG_TO_PROXY, FERRY_VERDICT_PASS, FERRY_REASON_ASSIGN_CONNECTION), 1u);
}

TEST_F(ToProxyTest, ReplyToFerrydsUpstreamLegIsAssignedToIt) {
  // Step 10 arriving: podB:15008 -> podA:40000 for ferryd's leg local=podA:40000.
  listen();
  Fd leg = tcpConnection(kPodA.ip, 40000, kRemotePod, FERRY_PORT_HBONE);
  const RunResult result = runToProxy(tcpFrame(toPod(kRemotePod, kPodA), FERRY_PORT_HBONE, 40000, kAck, 100));
  EXPECT_EQ(result.verdict, kPass);
  const ferry_test_call sk = assignedSocket();
  EXPECT_EQ(sk.saddr, kPodA.ip);
  EXPECT_EQ(ntohs(sk.sport), 40000);
  EXPECT_EQ(packets(FERRY_PROG_TO_PROXY, FERRY_VERDICT_PASS, FERRY_REASON_ASSIGN_CONNECTION), 1u);
}

TEST_F(ToProxyTest, PacketWithoutFerrydSocketIsDropped) {
  listen();
  const RunResult result = runToProxy(tcpFrame(fromPod(kPodA, kRemotePod), 40000, 80, kAck, 10));
  EXPECT_EQ(result.verdict, kShot);
  EXPECT_EQ(result.mark, 0u);
  EXPECT_TRUE(calls(FERRY_TEST_CALL_SK_ASSIGN).empty());
  EXPECT_EQ(packets(FERRY_PROG_TO_PROXY, FERRY_VERDICT_DROP, FERRY_REASON_NO_SOCKET), 1u);
}

TEST_F(ToProxyTest, SynWithoutListenerIsDropped) {
  // ferryd is not listening (restarting): the client retransmits the SYN
  // instead of receiving a reset in the server's name.
  const RunResult result = runToProxy(tcpFrame(fromPod(kPodA, kRemotePod), 40000, 80, kSyn));
  EXPECT_EQ(result.verdict, kShot);
  EXPECT_TRUE(calls(FERRY_TEST_CALL_SK_ASSIGN).empty());
  EXPECT_EQ(packets(FERRY_PROG_TO_PROXY, FERRY_VERDICT_DROP, FERRY_REASON_NO_LISTENER), 1u);
}

TEST_F(ToProxyTest, HboneSynWithoutListenerIsResetBackToThePeerFerryd) {
  // This node's ferryd is down: the peer ferryd's tunnel SYN gets a reset in
  // the HBONE port's name at once, instead of waiting out its connect timeout.
  ASSERT_NO_FATAL_FAILURE(enroll(kPodA));
  const Bytes syn = tcpFrame(toPod(kRemotePod, kPodA), 40000, FERRY_PORT_HBONE, kSyn);
  const RunResult result = runToProxy(syn);
  EXPECT_EQ(result.verdict, kRedirect);
  const auto redirects = calls(FERRY_TEST_CALL_REDIRECT);
  ASSERT_EQ(redirects.size(), 1u);
  EXPECT_EQ(redirects[0].flags, 0u) << "out of the proxy's eth0, to from_proxy";
  EXPECT_TRUE(calls(FERRY_TEST_CALL_SK_ASSIGN).empty());
  EXPECT_EQ(packets(FERRY_PROG_TO_PROXY, FERRY_VERDICT_REDIRECT, FERRY_REASON_NO_HBONE_LISTENER), 1u);
  const TcpView rst = readTcp(result.data);
  EXPECT_EQ(rst.saddr, kPodA.ip);
  EXPECT_EQ(rst.daddr, kRemotePod);
  EXPECT_EQ(rst.sport, FERRY_PORT_HBONE);
  EXPECT_EQ(rst.dport, 40000);
  EXPECT_EQ(rst.flags, kRst | kAck);
  EXPECT_EQ(rst.ack_seq, readTcp(syn).seq + 1) << "a SYN occupies one sequence number";
  EXPECT_TRUE(rst.ip_checksum_ok);
  EXPECT_TRUE(rst.tcp_checksum_ok);
}

TEST_F(ToProxyTest, RefusedAssignmentIsDropped) {
  listen();
  skel_->bss->ferry_test_sk_assign_ret = -95;  // -EOPNOTSUPP
  const RunResult result = runToProxy(tcpFrame(fromPod(kPodA, kRemotePod), 40000, 80, kSyn));
  EXPECT_EQ(result.verdict, kShot);
  EXPECT_EQ(packets(FERRY_PROG_TO_PROXY, FERRY_VERDICT_DROP, FERRY_REASON_ASSIGN_FAILED), 1u);
}

TEST_F(ToProxyTest, SynNeitherFromNorToLocalPodIsRoutedNormally) {
  listen();
  const Bytes frame = tcpFrame(between(kExternal, kRemotePod), 40000, 80, kSyn);
  const RunResult result = runToProxy(frame);
  EXPECT_EQ(result.verdict, kPass);
  EXPECT_EQ(result.mark, 0u) << "unmarked: routed normally, not as local";
  EXPECT_TRUE(calls(FERRY_TEST_CALL_SK_ASSIGN).empty());
  EXPECT_EQ(packets(FERRY_PROG_TO_PROXY, FERRY_VERDICT_PASS, FERRY_REASON_NOT_STEERED), 1u);
}

TEST_F(ToProxyTest, PacketAddressedToProxyItselfPassesUntouched) {
  // A metrics scrape from an enrolled pod to the proxy's own address: no
  // steering, no mark, no pkt_type change.
  listen();
  Fd metrics = tcpListener(15020);
  const Bytes frame = tcpFrame(fromPod(kPodA, kProxyIp), 40000, 15020, kSyn);
  const RunResult result = runToProxy(frame);
  EXPECT_EQ(result.verdict, kPass);
  EXPECT_EQ(result.data, frame);
  EXPECT_EQ(result.mark, 0u);
  EXPECT_TRUE(calls().empty());
  EXPECT_EQ(packets(FERRY_PROG_TO_PROXY, FERRY_VERDICT_PASS, FERRY_REASON_FOR_PROXY), 1u);
}

TEST_F(ToProxyTest, NonTcpPassesUntouched) {
  listen();
  const Bytes udp = udpFrame(fromPod(kPodA, kRemotePod), 5353, 53);
  const Bytes arp = arpFrame(fromPod(kPodA, kRemotePod));
  const RunResult udp_result = runToProxy(udp);
  const RunResult arp_result = runToProxy(arp);
  EXPECT_EQ(udp_result.verdict, kPass);
  EXPECT_EQ(udp_result.data, udp);
  EXPECT_EQ(udp_result.mark, 0u);
  EXPECT_EQ(arp_result.verdict, kPass);
  EXPECT_EQ(arp_result.data, arp);
  EXPECT_TRUE(calls().empty());
  EXPECT_EQ(packets(FERRY_PROG_TO_PROXY, FERRY_VERDICT_PASS, FERRY_REASON_NOT_TCP), 1u);
  EXPECT_EQ(packets(FERRY_PROG_TO_PROXY, FERRY_VERDICT_PASS, FERRY_REASON_NOT_IPV4), 1u);
}

TEST_F(ToProxyTest, UsesConfiguredListenerPorts) {
  ASSERT_NO_FATAL_FAILURE(reload([](Config& c) { c.port_outbound = 25001; }));
  ASSERT_NO_FATAL_FAILURE(enroll(kPodA));
  Fd outbound = tcpListener(25001);
  const RunResult result = runToProxy(tcpFrame(fromPod(kPodA, kRemotePod), 40000, 80, kSyn));
  expectAssignedToListener(result, 25001, FERRY_REASON_ASSIGN_OUTBOUND);
}

}  // namespace
}  // namespace ferry::bpftest
