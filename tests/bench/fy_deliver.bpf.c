// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The "datapath alone" configurations of the benchmark suite (tests/bench/run_bench.py):
 * delivery of pod-bound packets that arrive at a lab node from the wire, without any
 * proxy, so that the cost of the delivery primitive can be seen on its own.
 *
 * Attached with cls_bpf on tc ingress of fy-wireN (the node's end of the wire). For an
 * IPv4 packet whose route is a local device (a pod's host-side veth):
 *   FY_DELIVER_MODE 1: bpf_redirect(host veth, 0)  -> transmitted by the host veth, the
 *                      pod's eth0 receives it through the veth's backlog (netif_rx);
 *   FY_DELIVER_MODE 2: bpf_redirect_peer(host veth, 0) -> straight into the pod's eth0
 *                      ingress in the pod's netns, no second pass through the backlog.
 * Mode 0 (plain routing) attaches nothing. Both modes skip the node's IP forwarding
 * path, so they do what forwarding would have done to the packet: decrement the TTL
 * (with the checksum) and rewrite the Ethernet header. The lab's MACs are fixed
 * (docs/lab.md): pod 10.77.N.(10+M) is 02:77:0N:00:0M:01, its host side ...:02.
 *
 * Compiled at bench time: clang -O2 -target bpf -DFY_DELIVER_MODE=1|2 -c.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <linux/types.h>

#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#ifndef FY_DELIVER_MODE
#error "define FY_DELIVER_MODE (1 = bpf_redirect, 2 = bpf_redirect_peer)"
#endif

#define FY_AF_INET 2 /* AF_INET; the socket headers do not build for -target bpf */
#define IP_CSUM_OFF (ETH_HLEN + __builtin_offsetof(struct iphdr, check))
#define IP_TTL_OFF (ETH_HLEN + __builtin_offsetof(struct iphdr, ttl))

SEC("tc")
int fy_deliver(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + ETH_HLEN;

	if ((void *)(ip + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP))
		return TC_ACT_UNSPEC;
	__u32 daddr = ip->daddr;
	__u8 *d = (__u8 *)&daddr;
	/* Only lab pods: 10.77.N.(10+M). Everything else (ARP, the node's own address) passes. */
	if (d[0] != 10 || d[1] != 77 || d[3] < 11 || d[3] > 19 || ip->ttl <= 1)
		return TC_ACT_UNSPEC;

	struct bpf_fib_lookup fib = {};
	fib.family = FY_AF_INET;
	fib.ipv4_dst = daddr;
	fib.ifindex = skb->ingress_ifindex;
	long rc = bpf_fib_lookup(skb, &fib, sizeof(fib), BPF_FIB_LOOKUP_DIRECT);
	/* The node never resolves its pods' neighbours itself in this benchmark: the
	 * output device is what matters, the MACs are the lab's fixed ones. */
	if (rc != BPF_FIB_LKUP_RET_SUCCESS && rc != BPF_FIB_LKUP_RET_NO_NEIGH)
		return TC_ACT_UNSPEC;

	__u8 old_ttl = ip->ttl;
	__u16 old = bpf_htons((__u16)old_ttl << 8);
	__u16 new = bpf_htons((__u16)(old_ttl - 1) << 8);
	__u8 new_ttl = old_ttl - 1;
	bpf_skb_store_bytes(skb, IP_TTL_OFF, &new_ttl, 1, 0);
	bpf_l3_csum_replace(skb, IP_CSUM_OFF, old, new, 2);

	__u8 macs[2 * ETH_ALEN] = {0x02, 0x77, d[2], 0x00, (__u8)(d[3] - 10), 0x01,
				   0x02, 0x77, d[2], 0x00, (__u8)(d[3] - 10), 0x02};
	bpf_skb_store_bytes(skb, 0, macs, sizeof(macs), 0);
#if FY_DELIVER_MODE == 2
	return bpf_redirect_peer(fib.ifindex, 0);
#else
	return bpf_redirect(fib.ifindex, 0);
#endif
}

char _license[] SEC("license") = "Dual BSD/GPL";
