/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Test build only (-DFERRY_BPF_TEST; bpf/lib/kernel.h includes this): the
 * kernel helpers that BPF_PROG_TEST_RUN cannot observe, replaced by stubs that
 * append a struct ferry_test_call to ferry_test_calls and return fixed values
 * (the .bss knobs below). The socket lookup still runs for real — in whatever
 * netns the tests made — so the tests use real sockets.
 */
#ifndef FERRY_TESTS_BPF_FERRY_TEST_STUBS_H
#define FERRY_TESTS_BPF_FERRY_TEST_STUBS_H

#include "lib/common.h"
#include "ferry_test_calls.h"

/* The call log: FERRY_TEST_MAX_CALLS slots, filled in order. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct ferry_test_call);
	__uint(max_entries, FERRY_TEST_MAX_CALLS);
} ferry_test_calls SEC(".maps") FERRY_SHARED;

/* Calls made since the tests last zeroed it (may exceed the log's size). */
__u32 ferry_test_ncalls FERRY_SHARED;
/* What the redirect stubs return: TC_ACT_REDIRECT unless a test sets
 * TC_ACT_SHOT to play a kernel that refuses the flags. */
__s32 ferry_test_redirect_ret FERRY_SHARED = TC_ACT_REDIRECT;
/* What the sk_assign stub returns: 0 unless a test plays a refusal. */
__s32 ferry_test_sk_assign_ret FERRY_SHARED;

static __always_inline void ferry_test_record(struct ferry_test_call *call)
{
	__u32 slot = ferry_test_ncalls;

	ferry_test_ncalls = slot + 1;
	if (slot < FERRY_TEST_MAX_CALLS)
		bpf_map_update_elem(&ferry_test_calls, &slot, call, BPF_ANY);
}

static __always_inline long ferry_redirect_peer(__u32 ifindex, __u64 flags)
{
	struct ferry_test_call call = {
		.kind = FERRY_TEST_CALL_REDIRECT_PEER,
		.ret = ferry_test_redirect_ret,
		.flags = flags,
		.ifindex = ifindex,
	};

	ferry_test_record(&call);
	return call.ret;
}

static __always_inline long ferry_redirect(__u32 ifindex, __u64 flags)
{
	struct ferry_test_call call = {
		.kind = FERRY_TEST_CALL_REDIRECT,
		.ret = ferry_test_redirect_ret,
		.flags = flags,
		.ifindex = ifindex,
	};

	ferry_test_record(&call);
	return call.ret;
}

static __always_inline long ferry_sk_assign(struct __sk_buff *skb, struct bpf_sock *sk, __u64 flags)
{
	struct ferry_test_call call = {
		.kind = FERRY_TEST_CALL_SK_ASSIGN,
		.ret = ferry_test_sk_assign_ret,
		.flags = flags,
		.saddr = sk->src_ip4,
		.daddr = sk->dst_ip4,
		.sport = bpf_htons((__u16)sk->src_port), /* bpf_sock.src_port is host order */
		.dport = (__u16)sk->dst_port,
		.sk_state = sk->state,
	};

	ferry_test_record(&call);
	return call.ret;
}

static __always_inline struct bpf_sock *ferry_skc_lookup_tcp(struct __sk_buff *skb, struct bpf_sock_tuple *tuple,
							     __u32 len, __u64 netns)
{
	struct bpf_sock *sk = bpf_skc_lookup_tcp(skb, tuple, len, netns, 0);
	struct ferry_test_call call = {
		.kind = FERRY_TEST_CALL_SKC_LOOKUP,
		.ret = sk != NULL,
		.netns = netns,
		.saddr = tuple->ipv4.saddr,
		.daddr = tuple->ipv4.daddr,
		.sport = tuple->ipv4.sport,
		.dport = tuple->ipv4.dport,
	};

	if (sk)
		call.sk_state = sk->state;
	ferry_test_record(&call);
	return sk;
}

static __always_inline long ferry_skb_change_type(struct __sk_buff *skb, __u32 type)
{
	struct ferry_test_call call = {
		.kind = FERRY_TEST_CALL_CHANGE_TYPE,
		.ifindex = type,
	};

	call.ret = (__s32)bpf_skb_change_type(skb, type);
	ferry_test_record(&call);
	return call.ret;
}

#endif /* FERRY_TESTS_BPF_FERRY_TEST_STUBS_H */
