/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The record that the test build's helper stubs (ferry_test_stubs.h) write
 * into the map ferry_test_calls, one per call, read back by the tests. Shared
 * by BPF C and C++. */
#ifndef FERRY_TESTS_BPF_FERRY_TEST_CALLS_H
#define FERRY_TESTS_BPF_FERRY_TEST_CALLS_H

#include <linux/types.h>

#include "bpf/shared/datapath.h"

#define FERRY_TEST_MAX_CALLS 16

enum ferry_test_call_kind {
	FERRY_TEST_CALL_REDIRECT_PEER = 1,
	FERRY_TEST_CALL_REDIRECT = 2,
	FERRY_TEST_CALL_SK_ASSIGN = 3,
	FERRY_TEST_CALL_SKC_LOOKUP = 4,
	FERRY_TEST_CALL_CHANGE_TYPE = 5,
};

struct ferry_test_call {
	__u32 kind;    /* enum ferry_test_call_kind */
	__s32 ret;     /* what the stub returned (lookup: 1 found, 0 not) */
	__u64 flags;   /* redirect flags */
	__u64 netns;   /* lookup: netns argument */
	__u32 ifindex; /* redirect target; change_type: the new pkt_type */
	/* lookup: the tuple asked for; sk_assign: the socket assigned (local
	 * address and port as src, remote as dst). Addresses and ports in
	 * network order. */
	__u32 saddr;
	__u32 daddr;
	__u16 sport;
	__u16 dport;
	__u32 sk_state; /* lookup (when found) and sk_assign: BPF_TCP_* */
	__u32 pad;
};
FERRY_STATIC_ASSERT(sizeof(struct ferry_test_call) == 48, "ferry_test_call is 48 bytes");

#endif /* FERRY_TESTS_BPF_FERRY_TEST_CALLS_H */
