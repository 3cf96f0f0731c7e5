/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Per-program counters: every verdict a program returns goes through
 * ferry_account() with the reason from the shared table. */
#ifndef FERRY_BPF_LIB_COUNTERS_H
#define FERRY_BPF_LIB_COUNTERS_H

#include "lib/common.h"
#include "lib/maps.h"

static __always_inline __u32 ferry_verdict_of(int ret)
{
	if (ret == TC_ACT_REDIRECT)
		return FERRY_VERDICT_REDIRECT;
	if (ret == TC_ACT_SHOT)
		return FERRY_VERDICT_DROP;
	return FERRY_VERDICT_PASS;
}

/* Count the packet under (prog, verdict of ret, reason) and return ret. */
static __always_inline int ferry_account(struct __sk_buff *skb, __u32 prog, int ret, __u32 reason)
{
	__u32 key = ferry_counter_index(prog, ferry_verdict_of(ret), reason);
	struct ferry_counter *counter = bpf_map_lookup_elem(&ferry_counters, &key);

	if (counter) {
		counter->packets++;
		counter->bytes += skb->len;
	}
	return ret;
}

#endif /* FERRY_BPF_LIB_COUNTERS_H */
