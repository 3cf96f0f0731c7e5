/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Ethernet / IPv4 / TCP parsing with bounds checks. Copies what the rules need
 * into struct ferry_pkt, so that no packet pointer outlives a helper call that
 * may move the data (skb_store_bytes, redirect, ...). */
#ifndef FERRY_BPF_LIB_PARSE_H
#define FERRY_BPF_LIB_PARSE_H

#include "lib/common.h"

struct ferry_pkt {
	__u32 saddr;   /* network order */
	__u32 daddr;   /* network order */
	__be16 sport;  /* network order; TCP only */
	__be16 dport;  /* network order; TCP only */
	__u8 protocol; /* IPPROTO_* */
	__u8 tcp_flags;
	__u8 pad[2];
};

/* Make the first len bytes directly readable. Headers are nearly always in the
 * linear part already; when not (some drivers, GRO), pull them in once. */
static __always_inline bool ferry_linear(struct __sk_buff *skb, __u32 len)
{
	if ((void *)(long)skb->data + len <= (void *)(long)skb->data_end)
		return true;
	if (len > skb->len || bpf_skb_pull_data(skb, len) != 0)
		return false;
	return (void *)(long)skb->data + len <= (void *)(long)skb->data_end;
}

/*
 * Parse the headers. Returns 0 when pkt holds an IPv4 TCP packet's addresses,
 * ports and flags; otherwise the reason the packet is not steered on ports:
 * NOT_IPV4, MALFORMED (nothing in pkt is valid), NOT_TCP or FRAGMENT (pkt's
 * addresses and protocol are valid, its ports are not).
 */
static __always_inline __u32 ferry_parse(struct __sk_buff *skb, struct ferry_pkt *pkt)
{
	void *data, *data_end;
	struct ethhdr *eth;
	struct iphdr *ip;
	struct tcphdr *tcp;
	__u32 l4;

	__builtin_memset(pkt, 0, sizeof(*pkt));

	if (!ferry_linear(skb, ETH_HLEN + sizeof(struct iphdr)))
		return skb->protocol == bpf_htons(ETH_P_IP) ? FERRY_REASON_MALFORMED
							       : FERRY_REASON_NOT_IPV4;
	data = (void *)(long)skb->data;
	data_end = (void *)(long)skb->data_end;
	eth = data;
	ip = data + ETH_HLEN;
	if ((void *)(ip + 1) > data_end)
		return FERRY_REASON_MALFORMED;
	if (eth->h_proto != bpf_htons(ETH_P_IP))
		return FERRY_REASON_NOT_IPV4;
	if (ip->version != 4 || ip->ihl < 5)
		return FERRY_REASON_MALFORMED;

	pkt->saddr = ip->saddr;
	pkt->daddr = ip->daddr;
	pkt->protocol = ip->protocol;
	if (ip->protocol != IPPROTO_TCP)
		return FERRY_REASON_NOT_TCP;
	/* MF set or a non-zero offset: only the first fragment has ports, and
	 * TCP sets DF (PMTU discovery), so fragments are left alone. */
	if (ip->frag_off & bpf_htons(0x3fff))
		return FERRY_REASON_FRAGMENT;

	l4 = ETH_HLEN + ip->ihl * 4;
	if (!ferry_linear(skb, l4 + sizeof(struct tcphdr)))
		return FERRY_REASON_MALFORMED;
	data = (void *)(long)skb->data;
	data_end = (void *)(long)skb->data_end;
	tcp = data + l4;
	if ((void *)(tcp + 1) > data_end || tcp->doff < 5)
		return FERRY_REASON_MALFORMED;

	pkt->sport = tcp->source;
	pkt->dport = tcp->dest;
	pkt->tcp_flags = ((__u8 *)tcp)[13];
	return 0;
}

/* A connection's first packet: SYN without ACK (a SYN-ACK belongs to a
 * connection some socket already holds). */
static __always_inline bool ferry_is_syn(const struct ferry_pkt *pkt)
{
	return (pkt->tcp_flags & (FERRY_TCP_SYN | FERRY_TCP_ACK)) == FERRY_TCP_SYN;
}

#endif /* FERRY_BPF_LIB_PARSE_H */
