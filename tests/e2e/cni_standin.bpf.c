// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * A "CNI policy" stand-in for tests/e2e/datapath_e2e.sh (issue 3; docs/datapath.md,
 * "Ordering with a CNI"). It is attached with cls_bpf (pref 100) on tc ingress
 * of an enrolled pod's host-side device, i.e. AFTER ferry's TCX program, on the
 * path of the packets the pod sends, exactly where a CNI's egress policy runs.
 *
 *   cni_seen    (hash, TCP destination port in host order -> packets): every
 *               IPv4 TCP packet that reaches this program, by destination port.
 *               Tunnel packets (pod -> peer:15008) counted here prove that
 *               ferry injected them into the pod's egress path; packets to an
 *               application port prove that ferry let them through uncaptured.
 *   cni_deny    (hash, IPv4 destination in network order -> any): "policy":
 *               TCP packets to <listed address>:15008 are dropped.
 *   cni_dropped (array, one slot): packets dropped by that policy.
 *
 * Pass verdict TC_ACT_UNSPEC: like ferry, never end the chain for others.
 * Compiled at test time: clang -O2 -g -target bpf -c cni_standin.bpf.c.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <linux/tcp.h>
#include <linux/types.h>

#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#define CNI_HBONE_PORT 15008
#define CNI_HDRS (ETH_HLEN + sizeof(struct iphdr) + sizeof(struct tcphdr))

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u16);
	__type(value, __u64);
} cni_seen SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} cni_deny SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} cni_dropped SEC(".maps");

static __always_inline void count_port(__u16 port)
{
	__u64 one = 1, *v = bpf_map_lookup_elem(&cni_seen, &port);

	if (v)
		__sync_fetch_and_add(v, 1);
	else if (bpf_map_update_elem(&cni_seen, &port, &one, BPF_NOEXIST) != 0) {
		/* Lost a race with another CPU creating the entry: add to it. */
		v = bpf_map_lookup_elem(&cni_seen, &port);
		if (v)
			__sync_fetch_and_add(v, 1);
	}
}

SEC("tc")
int cni_standin(struct __sk_buff *skb)
{
	void *data, *data_end;
	struct ethhdr *eth;
	struct iphdr *ip;
	struct tcphdr *tcp;
	__u32 l4, daddr, zero = 0;
	__u64 *dropped;
	__u16 dport;

	/* Headers are normally linear; pull them once if not. */
	if ((void *)(long)skb->data + CNI_HDRS > (void *)(long)skb->data_end && skb->len >= CNI_HDRS)
		bpf_skb_pull_data(skb, CNI_HDRS);
	data = (void *)(long)skb->data;
	data_end = (void *)(long)skb->data_end;
	eth = data;
	ip = data + ETH_HLEN;
	if ((void *)(ip + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP))
		return TC_ACT_UNSPEC;
	if (ip->protocol != IPPROTO_TCP || ip->ihl < 5 || (ip->frag_off & bpf_htons(0x1fff)))
		return TC_ACT_UNSPEC;
	l4 = ETH_HLEN + ip->ihl * 4;
	if (l4 > ETH_HLEN + 60) /* bounds l4 for the verifier */
		return TC_ACT_UNSPEC;
	tcp = data + l4;
	if ((void *)(tcp + 1) > data_end)
		return TC_ACT_UNSPEC;

	dport = bpf_ntohs(tcp->dest);
	daddr = ip->daddr;
	count_port(dport);
	if (dport == CNI_HBONE_PORT && bpf_map_lookup_elem(&cni_deny, &daddr)) {
		dropped = bpf_map_lookup_elem(&cni_dropped, &zero);
		if (dropped)
			__sync_fetch_and_add(dropped, 1);
		return TC_ACT_SHOT;
	}
	return TC_ACT_UNSPEC;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
