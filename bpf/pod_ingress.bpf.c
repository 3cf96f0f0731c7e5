// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * pod_ingress: tc egress of an enrolled pod's host-side device — packets going
 * to the pod (docs/datapath.md, "The programs"). Rules, in order:
 *   1. ferryd holds the tuple: a connection of the proxy            -> into the proxy
 *   2. SYN to the HBONE port                                          -> into the proxy (15008)
 *   3. ferryd holds the reverse tuple: ferryd's own traffic          -> pass
 *   3b. the pod is STRICT (or policy-judged) and a socket of the node's
 *      own netns holds the reverse tuple: the kubelet's probe, a host-
 *      network pod (exempt_node)                                      -> pass
 *   4. the pod is STRICT and this is a new TCP connection             -> into the proxy (15006)
 *   4b. the pod is STRICT and this is a segment of a flow it serves
 *      (it listens on the port) that ferryd does not hold: a plaintext
 *      connection that predates STRICT or enrolment                    -> RST to the pod
 *      in place of the segment (an RST itself passes)
 *   5. anything else                                                   -> pass
 * 4b asks the pod's own netns for a listener (ferry_pod_netns), so replies to
 * the STRICT pod's own outbound connections (to non-mesh destinations) pass.
 * Before the rules: TCP fragments and IPv6 TCP to the pod cannot be steered
 * and would reach it in plaintext past STRICT, so they are dropped.
 * Rule 3 was added while building the datapath (docs/datapath.md, "Rules found
 * building it"); it is what makes same-node STRICT work: ferryd's connection
 * to the server pod (step 6) carries the client pod's address, leaves the
 * proxy as the client pod's egress and would otherwise be sent back to 15006
 * as a new plaintext connection to a STRICT pod.
 * Rule 2 comes before it: on the same node, ferryd's own HBONE SYN (client pod
 * -> server pod:15008) has its reverse tuple held by ferryd's client socket,
 * yet must reach ferryd's HBONE listener, not the pod.
 */
#include "lib/common.h"
#include "lib/config.h"
#include "lib/counters.h"
#include "lib/maps.h"
#include "lib/parse.h"
#include "lib/redirect.h"
#include "lib/reset.h"
#include "lib/sock.h"

SEC("tc")
int pod_ingress(struct __sk_buff *skb)
{
	const __u32 prog = FERRY_PROG_POD_INGRESS;
	const struct ferry_pod *pod;
	struct ferry_pkt pkt;
	__u32 reason = ferry_parse(skb, &pkt);

	if (reason == FERRY_REASON_FRAGMENT || reason == FERRY_REASON_IPV6_TCP)
		return ferry_account(skb, prog, FERRY_DROP, reason);
	if (reason)
		return ferry_account(skb, prog, FERRY_PASS, reason);
	if (ferry_holds(skb, &pkt, proxy_netns_id))
		return ferry_account(skb, prog, ferry_into_proxy_from_egress(), FERRY_REASON_HELD);
	if (ferry_is_syn(&pkt) && pkt.dport == bpf_htons(port_hbone))
		return ferry_account(skb, prog, ferry_into_proxy_from_egress(), FERRY_REASON_HBONE_SYN);
	if (ferry_holds_reverse(skb, &pkt, proxy_netns_id))
		return ferry_account(skb, prog, FERRY_PASS, FERRY_REASON_OWN_TRAFFIC);
	pod = ferry_local_pod(pkt.daddr);
	if (exempt_node && pod && (pod->flags & FERRY_POD_STRICT) && ferry_node_sent(skb, &pkt))
		return ferry_account(skb, prog, FERRY_PASS,
				     ferry_is_syn(&pkt) ? FERRY_REASON_NODE_SYN : FERRY_REASON_NODE_FLOW);
	if (!ferry_is_syn(&pkt)) {
		if (pod && (pod->flags & FERRY_POD_STRICT) && !(pkt.tcp_flags & FERRY_TCP_RST) &&
		    ferry_pod_is_server_of(skb, &pkt)) {
			int ret = ferry_rewrite_as_forward_reset(skb) < 0 ? FERRY_DROP : FERRY_PASS;

			return ferry_account(skb, prog, ret, FERRY_REASON_STRICT_STALE);
		}
		return ferry_account(skb, prog, FERRY_PASS, FERRY_REASON_NOT_CAPTURED);
	}
	if (pod && (pod->flags & FERRY_POD_STRICT))
		return ferry_account(skb, prog, ferry_into_proxy_from_egress(), FERRY_REASON_STRICT_SYN);
	return ferry_account(skb, prog, FERRY_PASS, FERRY_REASON_NOT_CAPTURED);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
