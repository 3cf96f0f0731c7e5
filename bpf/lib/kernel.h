/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The kernel helpers whose effect BPF_PROG_TEST_RUN cannot show or cannot
 * perform, behind names that a test build replaces (as Cilium's unit tests
 * replace redirect_peer with a macro). Production code calls only these names.
 *
 *   ferry_redirect_peer   bpf_redirect_peer: test_run returns the verdict but
 *                         shows neither target nor flags.
 *   ferry_redirect        bpf_redirect: likewise.
 *   ferry_sk_assign       bpf_sk_assign: refuses outside a real tc ingress.
 *   ferry_skc_lookup_tcp  bpf_skc_lookup_tcp: the test build records the tuple
 *                         and netns, then runs the real lookup.
 *   ferry_skb_change_type bpf_skb_change_type: pkt_type is not in test_run's
 *                         ctx_out, so the test build records the call.
 *
 * The test build (-DFERRY_BPF_TEST) gets the stubs from ferry_test_stubs.h,
 * found on its include path (tests/bpf/); they record every call in the map
 * ferry_test_calls.
 */
#ifndef FERRY_BPF_LIB_KERNEL_H
#define FERRY_BPF_LIB_KERNEL_H

#include "lib/common.h"

#ifdef FERRY_BPF_TEST
#include "ferry_test_stubs.h"
#else
#define ferry_redirect_peer(ifindex, flags) bpf_redirect_peer(ifindex, flags)
#define ferry_redirect(ifindex, flags) bpf_redirect(ifindex, flags)
#define ferry_sk_assign(skb, sk, flags) bpf_sk_assign(skb, sk, flags)
#define ferry_skc_lookup_tcp(skb, tuple, len, netns) bpf_skc_lookup_tcp(skb, tuple, len, netns, 0)
#define ferry_skb_change_type(skb, type) bpf_skb_change_type(skb, type)
#endif

#endif /* FERRY_BPF_LIB_KERNEL_H */
