/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Ethernet header rewrite. A packet redirected into a device's ingress gets
 * its pkt_type recomputed from the destination MAC after the tc hook; a
 * foreign MAC makes it PACKET_OTHERHOST and the stack drops it. */
#ifndef FERRY_BPF_LIB_L2_H
#define FERRY_BPF_LIB_L2_H

#include "lib/common.h"

/* Write dst and src MACs (6 bytes each) at the start of the frame. Returns 0 or
 * a negative errno from bpf_skb_store_bytes. Invalidates packet pointers. */
static __always_inline long ferry_l2_rewrite(struct __sk_buff *skb, const __u8 *dst, const __u8 *src)
{
	__u8 macs[2 * ETH_ALEN];

	__builtin_memcpy(macs, dst, ETH_ALEN);
	__builtin_memcpy(macs + ETH_ALEN, src, ETH_ALEN);
	return bpf_skb_store_bytes(skb, 0, macs, sizeof(macs), 0);
}

#endif /* FERRY_BPF_LIB_L2_H */
