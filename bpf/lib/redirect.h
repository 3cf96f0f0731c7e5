/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The three ways a packet changes place (docs/datapath.md, "Packet walk"):
 *   into the proxy — from a pod's host-side device to the proxy's eth0;
 *   inject         — ferryd's upstream packet into the source pod's egress path;
 *   deliver        — ferryd's packet straight into the destination pod.
 * Each returns the tc verdict; redirect helpers return TC_ACT_SHOT when the
 * kernel refuses their flags, which the counters show as a drop.
 */
#ifndef FERRY_BPF_LIB_REDIRECT_H
#define FERRY_BPF_LIB_REDIRECT_H

#include "lib/common.h"
#include "lib/config.h"
#include "lib/kernel.h"
#include "lib/l2.h"

/* From a tc ingress hook: ingress to ingress of the proxy's eth0, no backlog
 * queue. */
static __always_inline int ferry_into_proxy_from_ingress(void)
{
	return (int)ferry_redirect_peer(proxy_host_ifindex, 0);
}

/* From a tc egress hook, where bpf_redirect_peer is not allowed: out of the
 * proxy's host-side device, into its eth0. */
static __always_inline int ferry_into_proxy_from_egress(void)
{
	return (int)ferry_redirect(proxy_host_ifindex, 0);
}

/*
 * Put a packet ferryd sent as pod (its upstream leg) into that pod's egress
 * path, so that it re-enters the pod's host-side device at tc ingress as the
 * pod's own traffic and the CNI's egress programs run on it. Sets *reason.
 */
static __always_inline int ferry_inject(struct __sk_buff *skb, const struct ferry_pod *pod, __u32 *reason)
{
	if (injection_mode == FERRY_INJECT_NONE) {
		*reason = FERRY_REASON_INJECT_DISABLED;
		/* Plain routing takes it from here. to_proxy's resets (bpf/lib/reset.h)
		 * leave with the MACs of the SYN they answer, not this device's: as
		 * PACKET_OTHERHOST the stack would drop them. */
		if (skb->pkt_type == PACKET_OTHERHOST)
			ferry_skb_change_type(skb, PACKET_HOST);
		return FERRY_PASS;
	}
	/* As if the pod had sent it to its gateway: in both modes the
	 * host-side device computes pkt_type from the destination MAC
	 * (veth and netkit on crossing, the stack on BPF_F_INGRESS), and
	 * anything but its own MAC is PACKET_OTHERHOST, dropped by IP. */
	if (ferry_l2_rewrite(skb, pod->host_mac, pod->pod_mac) < 0) {
		*reason = FERRY_REASON_L2_REWRITE_FAILED;
		return FERRY_DROP;
	}
	if (injection_mode == FERRY_INJECT_PEER_EGRESS) {
		*reason = FERRY_REASON_INJECT_PEER_EGRESS;
		return (int)ferry_redirect_peer(pod->host_ifindex, egress_flag);
	}
	if (injection_mode == FERRY_INJECT_INGRESS_REDIRECT) {
		*reason = FERRY_REASON_INJECT_INGRESS_REDIRECT;
		return (int)ferry_redirect(pod->host_ifindex, BPF_F_INGRESS);
	}
	*reason = FERRY_REASON_INJECT_DISABLED;
	return FERRY_PASS;
}

/*
 * Deliver ferryd's packet into the destination pod's netns, skipping the host
 * side's egress hook. bpf_redirect_peer resets pkt_type, so the MACs are
 * rewritten only to make the frame look as the pod's gateway would send it
 * (tcpdump in the pod, packet sockets). Sets *reason.
 */
static __always_inline int ferry_deliver(struct __sk_buff *skb, const struct ferry_pod *pod, __u32 *reason)
{
	if (ferry_l2_rewrite(skb, pod->pod_mac, pod->host_mac) < 0) {
		*reason = FERRY_REASON_L2_REWRITE_FAILED;
		return FERRY_DROP;
	}
	*reason = FERRY_REASON_DELIVER;
	return (int)ferry_redirect_peer(pod->host_ifindex, 0);
}

#endif /* FERRY_BPF_LIB_REDIRECT_H */
