// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * from_proxy: tc ingress of the proxy's host-side device — everything ferryd
 * sends (docs/datapath.md, "The programs"). Rules, in order:
 *   0. both ends are local enrolled pods and it is not the tunnel (neither
 *      port is HBONE's): an application leg of a same-node connection,
 *      ferryd speaking as the server to the client it captured, or as the
 *      client to the server it connects -> deliver with bpf_redirect_peer
 *   1. source is a local enrolled pod: ferryd speaks as that pod (tunnel,
 *      tunnel replies, passthrough)   -> inject into the pod's egress path
 *                                        (per injection_mode; none: pass)
 *   2. destination is a local enrolled pod  -> deliver with bpf_redirect_peer
 *   3. anything else (ferryd's own traffic) -> pass
 * Applies to every IPv4 packet, whatever its protocol: the rule is about whose
 * address ferryd uses.
 * Why rule 0: the other direction of an application leg never crosses the
 * node's stack (pod_egress takes it into the proxy), so injected through the
 * stack this direction would be the only one conntrack sees: a SYN-ACK or an
 * ACK without its SYN, INVALID, which kube-proxy's KUBE-FORWARD chain drops
 * (seen on the Kubernetes lab's bridge). The tunnel itself crosses the stack
 * both ways, where the source pod's CNI policy sees it.
 */
#include "lib/common.h"
#include "lib/counters.h"
#include "lib/maps.h"
#include "lib/parse.h"
#include "lib/redirect.h"

SEC("tc")
int from_proxy(struct __sk_buff *skb)
{
	const __u32 prog = FERRY_PROG_FROM_PROXY;
	const struct ferry_pod *pod;
	struct ferry_pkt pkt;
	__u32 reason = ferry_parse(skb, &pkt);
	int ret;

	if (reason == FERRY_REASON_NOT_IPV4 || reason == FERRY_REASON_MALFORMED)
		return ferry_account(skb, prog, FERRY_PASS, reason);

	pod = ferry_local_pod(pkt.daddr);
	if (pod && ferry_local_pod(pkt.saddr) &&
	    !(pkt.protocol == IPPROTO_TCP && (pkt.dport == bpf_htons(port_hbone) || pkt.sport == bpf_htons(port_hbone)))) {
		ret = ferry_deliver(skb, pod, &reason);
		return ferry_account(skb, prog, ret, reason);
	}
	pod = ferry_local_pod(pkt.saddr);
	if (pod) {
		ret = ferry_inject(skb, pod, &reason);
		return ferry_account(skb, prog, ret, reason);
	}
	pod = ferry_local_pod(pkt.daddr);
	if (pod) {
		ret = ferry_deliver(skb, pod, &reason);
		return ferry_account(skb, prog, ret, reason);
	}
	return ferry_account(skb, prog, FERRY_PASS, FERRY_REASON_NOT_LOCAL);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
