// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * to_proxy: tc ingress of the proxy's eth0, inside the proxy netns — every
 * packet steered into the proxy arrives here (docs/datapath.md, "Packet walk",
 * step 2). Rules:
 *   0. not IPv4 TCP, or addressed to the proxy's own address      -> pass untouched
 *   1. pkt_type := PACKET_HOST (packets redirected from an egress hook still
 *      carry the pod's MAC and would be dropped as PACKET_OTHERHOST)
 *   2. ferryd has a connection or request socket for the tuple    -> assign it, mark
 *   3. not a SYN                                                   -> drop (ferryd has no socket)
 *   4. SYN from a local enrolled pod that ferryd did not send     -> assign 15001, mark
 *   5. SYN to a local enrolled pod: port 15008                    -> assign 15008, mark
 *                                    any other port               -> assign 15006, mark
 *   6. SYN neither from nor to a local enrolled pod               -> pass (normal routing)
 *   A missing socket or listener, or a refused assignment         -> drop, except:
 *   no HBONE listener for a SYN to port 15008                      -> RST to the sender
 *     (unless ferryd paused HBONE for a planned restart: drop)
 * The exception: a SYN to 15008 comes from a peer ferryd (or a ztunnel), never
 * from an application, so a reset in the HBONE port's name tells the peer at
 * once that this node's ferryd is not there (it fails the connection fast and
 * says which node), where a drop would hold it for its whole connect timeout.
 * A ferryd that drains, and one that starts, sets FERRY_SETTING_HBONE_PAUSED
 * until it listens: then the SYN is dropped and its retransmission reaches the
 * next ferryd, as for applications. Only a ferryd that died (SIGKILL, a crash)
 * leaves the flag clear.
 * An application's SYN without a listener (ferryd restarting on this node) is
 * still dropped: its retransmission reaches the restarted ferryd, and a reset
 * would answer in the name of a server that never saw it.
 * Source first (rule 4 before 5): an application's own SYN to port 15008 is
 * outbound capture, not HBONE. "ferryd did not send": on the same node, ferryd's
 * HBONE leg to the server pod (from the client pod's address) comes back here
 * and must reach the HBONE listener. The mark makes the proxy netns route the
 * packet as local, without which an assigned packet is not delivered. Assigned
 * packets pass with TC_ACT_UNSPEC like every other pass.
 */
#include "lib/common.h"
#include "lib/config.h"
#include "lib/counters.h"
#include "lib/maps.h"
#include "lib/parse.h"
#include "lib/reset.h"
#include "lib/sock.h"

static __always_inline int assign_verdict(struct __sk_buff *skb, enum ferry_assign_result result, __u32 ok_reason,
					  __u32 *reason)
{
	if (result == FERRY_ASSIGN_NO_SOCKET) {
		*reason = FERRY_REASON_NO_LISTENER;
		return FERRY_DROP;
	}
	if (result == FERRY_ASSIGN_REFUSED) {
		*reason = FERRY_REASON_ASSIGN_FAILED;
		return FERRY_DROP;
	}
	/* Only assigned packets are marked: the mark routes them as local. */
	skb->mark = proxy_mark;
	*reason = ok_reason;
	return FERRY_PASS;
}

/*
 * No HBONE listener: send the SYN back as an RST out of the proxy's eth0. On
 * the proxy's host-side device from_proxy treats it as any of ferryd's packets
 * from the local pod it names as source: injected into that pod's egress path
 * (or, with injection none, passed to routing as PACKET_HOST) and routed to the
 * peer, whose ferryd holds the connecting socket.
 */
static __always_inline int refuse_hbone(struct __sk_buff *skb, __u32 *reason)
{
	if (ferry_setting(FERRY_SETTING_HBONE_PAUSED)) {
		*reason = FERRY_REASON_NO_LISTENER;
		return FERRY_DROP;
	}
	*reason = FERRY_REASON_NO_HBONE_LISTENER;
	if (ferry_rewrite_as_reset(skb) < 0)
		return FERRY_DROP;
	return (int)ferry_redirect(skb->ifindex, 0);
}

static __always_inline int steer(struct __sk_buff *skb, const struct ferry_pkt *pkt, __u32 *reason)
{
	enum ferry_assign_result result;

	ferry_skb_change_type(skb, PACKET_HOST);

	result = ferry_assign_connection(skb, pkt);
	if (result != FERRY_ASSIGN_NO_SOCKET)
		return assign_verdict(skb, result, FERRY_REASON_ASSIGN_CONNECTION, reason);
	if (!ferry_is_syn(pkt)) {
		*reason = FERRY_REASON_NO_SOCKET;
		return FERRY_DROP;
	}

	if (ferry_local_pod(pkt->saddr) && !ferry_holds_reverse(skb, pkt, FERRY_NETNS_CURRENT))
		return assign_verdict(skb, ferry_assign_listener(skb, pkt, port_outbound), FERRY_REASON_ASSIGN_OUTBOUND,
				reason);
	if (ferry_local_pod(pkt->daddr)) {
		if (pkt->dport == bpf_htons(port_hbone)) {
			result = ferry_assign_listener(skb, pkt, port_hbone);
			if (result == FERRY_ASSIGN_NO_SOCKET)
				return refuse_hbone(skb, reason);
			return assign_verdict(skb, result, FERRY_REASON_ASSIGN_HBONE, reason);
		}
		return assign_verdict(skb, ferry_assign_listener(skb, pkt, port_inbound_plain),
				FERRY_REASON_ASSIGN_INBOUND, reason);
	}
	*reason = FERRY_REASON_NOT_STEERED;
	return FERRY_PASS;
}

SEC("tc")
int to_proxy(struct __sk_buff *skb)
{
	const __u32 prog = FERRY_PROG_TO_PROXY;
	struct ferry_pkt pkt;
	__u32 reason = ferry_parse(skb, &pkt);
	int ret;

	if (reason)
		return ferry_account(skb, prog, FERRY_PASS, reason);
	if (proxy_ipv4 && pkt.daddr == proxy_ipv4)
		return ferry_account(skb, prog, FERRY_PASS, FERRY_REASON_FOR_PROXY);
	ret = steer(skb, &pkt, &reason);
	return ferry_account(skb, prog, ret, reason);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
