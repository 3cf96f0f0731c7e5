// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * pod_egress: tc ingress of an enrolled pod's host-side device — packets the
 * pod sends (design §2). Rules, in order:
 *   1. ferryd holds the reverse tuple: ferryd's own injected traffic  -> pass
 *   2. ferryd holds the tuple: a connection of the proxy               -> into the proxy
 *   3. SYN to a capture destination (or any, with capture: all)        -> into the proxy
 *   4. anything else                                                    -> pass
 * Never on port 15008 alone: an application may bind source port 15008, and
 * ferryd's wildcard listeners do not count as "held" (lib/sock.h).
 *
 * Two entry points, one rule set. pod_egress runs at tc ingress of a veth's
 * host side and moves packets into the proxy with bpf_redirect_peer (ingress
 * to ingress). pod_egress_netkit runs as a BPF_NETKIT_PEER program of a netkit
 * pair, i.e. in the pod's own transmit path, where bpf_redirect_peer is not
 * allowed (it needs tc ingress): it transmits into the proxy instead, like an
 * egress hook. Its skb->dev is already the host-side device, so the socket
 * lookups resolve the proxy netns id exactly as at tc ingress.
 */
#include "lib/common.h"
#include "lib/config.h"
#include "lib/counters.h"
#include "lib/maps.h"
#include "lib/parse.h"
#include "lib/redirect.h"
#include "lib/sock.h"

static __always_inline int ferry_into_proxy(bool at_tc_ingress)
{
	return at_tc_ingress ? ferry_into_proxy_from_ingress() : ferry_into_proxy_from_egress();
}

static __always_inline int ferry_pod_egress(struct __sk_buff *skb, bool at_tc_ingress)
{
	const __u32 prog = FERRY_PROG_POD_EGRESS;
	struct ferry_pkt pkt;
	__u32 reason = ferry_parse(skb, &pkt);

	if (reason)
		return ferry_account(skb, prog, FERRY_PASS, reason);
	if (ferry_holds_reverse(skb, &pkt, proxy_netns_id))
		return ferry_account(skb, prog, FERRY_PASS, FERRY_REASON_OWN_TRAFFIC);
	if (ferry_holds(skb, &pkt, proxy_netns_id))
		return ferry_account(skb, prog, ferry_into_proxy(at_tc_ingress), FERRY_REASON_HELD);
	if (ferry_is_syn(&pkt) && ferry_is_capture_dst(pkt.daddr))
		return ferry_account(skb, prog, ferry_into_proxy(at_tc_ingress), FERRY_REASON_CAPTURE_SYN);
	return ferry_account(skb, prog, FERRY_PASS, FERRY_REASON_NOT_CAPTURED);
}

SEC("tc")
int pod_egress(struct __sk_buff *skb)
{
	return ferry_pod_egress(skb, true);
}

SEC("tc")
int pod_egress_netkit(struct __sk_buff *skb)
{
	return ferry_pod_egress(skb, false);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
