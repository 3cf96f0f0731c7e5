// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The kernel probe (docs/datapath.md, "Injection modes"; proxy/datapath/kernel_probe.cc).
 * probe_redirect: ferryd runs it once with BPF_PROG_TEST_RUN and reads the return value —
 * TC_ACT_REDIRECT (7): the kernel accepts probe_flags for bpf_redirect_peer;
 * TC_ACT_SHOT (2): it does not. test_run performs no redirect, so ifindex 1
 * (loopback) is never used. Calls the real helper: that is the point.
 * probe_next: does nothing (TC_ACT_UNSPEC, TCX_NEXT): attached to lo's ingress with TCX for
 * an instant, it tells whether the kernel has TCX.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "shared/datapath.h"

/* The flag under test; ferryd writes its configured egress flag here. */
const volatile __u64 probe_flags = FERRY_DEFAULT_EGRESS_FLAG;

SEC("tc")
int probe_redirect(struct __sk_buff *skb)
{
	return (int)bpf_redirect_peer(1, probe_flags);
}

SEC("tc")
int probe_next(struct __sk_buff *skb)
{
	return -1; /* TC_ACT_UNSPEC: every other program runs */
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
