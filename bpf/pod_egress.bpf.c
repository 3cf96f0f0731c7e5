// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * pod_egress: tc ingress of an enrolled pod's host-side device — packets the
 * pod sends (docs/datapath.md, "The programs"). Rules, in order:
 *   1. ferryd holds the reverse tuple: ferryd's own injected traffic  -> pass
 *   2. ferryd holds the tuple: a connection of the proxy               -> into the proxy
 *   3. SYN to a capture destination (or any, with capture: all)        -> into the proxy
 *   4. any other segment to a mesh destination (a flow that no ferryd
 *      socket holds: it predates enrolment, or ferryd restarted under
 *      it)                                                              -> RST to the pod
 *      except an RST (it carries no data) and, for a PERMISSIVE pod, a
 *      flow it serves (it listens on the source port: a client reached
 *      it directly, as PERMISSIVE allows, e.g. from a node whose ferryd
 *      failed open)                                                     -> pass
 *      A STRICT pod serves no direct client, so its segments of a flow
 *      ferryd no longer holds (the server leg ferryd just reset, still
 *      in flight) are reset, never routed in plaintext.
 *   5. anything else                                                    -> pass
 * Before the rules: TCP fragments and IPv6 TCP cannot be carried by the mesh
 * and would reach the destination in plaintext, so they are dropped.
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
#include "lib/reset.h"
#include "lib/sock.h"

static __always_inline int ferry_into_proxy(bool at_tc_ingress)
{
	return at_tc_ingress ? ferry_into_proxy_from_ingress() : ferry_into_proxy_from_egress();
}

/*
 * Rule 4: answer the pod with an RST, so that the application learns at once
 * that its connection is gone instead of sending in plaintext (or into
 * silence). From tc ingress the reset goes straight back into the pod with
 * bpf_redirect_peer; the netkit variant runs in the pod's own transmit path,
 * where that helper is not allowed, and drops (the pod's retransmissions time
 * out; nothing leaves in plaintext).
 */
static __always_inline int ferry_reset_stale(struct __sk_buff *skb, const struct ferry_pkt *pkt,
					      bool at_tc_ingress)
{
	const struct ferry_pod *pod = ferry_local_pod(pkt->saddr);

	if (!at_tc_ingress || !pod || ferry_rewrite_as_reset(skb) < 0)
		return FERRY_DROP;
	return (int)ferry_redirect_peer(pod->host_ifindex, 0);
}

static __always_inline int ferry_pod_egress(struct __sk_buff *skb, bool at_tc_ingress)
{
	const __u32 prog = FERRY_PROG_POD_EGRESS;
	struct ferry_pkt pkt;
	__u32 reason = ferry_parse(skb, &pkt);

	if (reason == FERRY_REASON_FRAGMENT || reason == FERRY_REASON_IPV6_TCP)
		return ferry_account(skb, prog, FERRY_DROP, reason);
	if (reason)
		return ferry_account(skb, prog, FERRY_PASS, reason);
	if (ferry_holds_reverse(skb, &pkt, proxy_netns_id))
		return ferry_account(skb, prog, FERRY_PASS, FERRY_REASON_OWN_TRAFFIC);
	if (ferry_holds(skb, &pkt, proxy_netns_id))
		return ferry_account(skb, prog, ferry_into_proxy(at_tc_ingress), FERRY_REASON_HELD);
	if (ferry_is_syn(&pkt) && ferry_is_capture_dst(pkt.daddr))
		return ferry_account(skb, prog, ferry_into_proxy(at_tc_ingress), FERRY_REASON_CAPTURE_SYN);
	/* Mesh destinations only, not capture: all: replies of a PERMISSIVE pod
	 * to plaintext clients (kubelet probes from the node) are not captured
	 * flows, and a stale flow to a non-mesh destination was plaintext
	 * (passthrough) anyway. */
	if (!ferry_is_syn(&pkt) && ferry_is_mesh_dst(pkt.daddr)) {
		if (pkt.tcp_flags & FERRY_TCP_RST)
			return ferry_account(skb, prog, FERRY_PASS, FERRY_REASON_STALE_RST);
		if (ferry_pod_permissive(pkt.saddr) && ferry_pod_serves(skb, &pkt))
			return ferry_account(skb, prog, FERRY_PASS, FERRY_REASON_POD_SERVES);
		return ferry_account(skb, prog, ferry_reset_stale(skb, &pkt, at_tc_ingress), FERRY_REASON_STALE_FLOW);
	}
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
