// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Packet loss on the lab's wire for tests/e2e/faults_e2e.sh (issue 12, "1 % loss"). The
 * lab's kernel has no netem and no matchall/gact, so a cls_bpf program on tc egress of
 * fy-wire1 and fy-wire2 drops a random fraction of the packets it sees:
 * FY_LOSS_PER_MILLION of every million (compile time: -DFY_LOSS_PER_MILLION=10000 is 1 %).
 *
 *   fy_loss_stats (array, 2 slots): [0] packets seen, [1] packets dropped.
 *
 * Pass verdict TC_ACT_UNSPEC: never end the chain for others.
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <linux/types.h>

#include <bpf/bpf_helpers.h>

#ifndef FY_LOSS_PER_MILLION
#define FY_LOSS_PER_MILLION 10000
#endif

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} fy_loss_stats SEC(".maps");

static __always_inline void count(__u32 slot)
{
	__u64 *v = bpf_map_lookup_elem(&fy_loss_stats, &slot);

	if (v)
		__sync_fetch_and_add(v, 1);
}

SEC("tc")
int fy_loss(struct __sk_buff *skb)
{
	count(0);
	if (bpf_get_prandom_u32() % 1000000 < FY_LOSS_PER_MILLION) {
		count(1);
		return TC_ACT_SHOT;
	}
	return TC_ACT_UNSPEC;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
