// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * from_proxy: tc ingress of the proxy's host-side device — everything ferryd
 * sends (design §2). Rules, in order:
 *   1. source is a local enrolled pod: ferryd speaks as that pod (tunnel,
 *      tunnel replies, passthrough)   -> inject into the pod's egress path
 *                                        (per injection_mode; none: pass)
 *   2. destination is a local enrolled pod  -> deliver with bpf_redirect_peer
 *   3. anything else (ferryd's own traffic) -> pass
 * Applies to every IPv4 packet, whatever its protocol: the rule is about whose
 * address ferryd uses.
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
