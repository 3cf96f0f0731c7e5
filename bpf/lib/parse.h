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

/* IPv6 extension headers walked before giving up on finding the transport:
 * real traffic carries one or two; more is treated as hiding TCP. */
#define FERRY_IPV6_MAX_EXT_HEADERS 6

#ifndef IPPROTO_HOPOPTS
#define IPPROTO_HOPOPTS 0
#endif
#ifndef IPPROTO_ROUTING
#define IPPROTO_ROUTING 43
#endif
#ifndef IPPROTO_FRAGMENT
#define IPPROTO_FRAGMENT 44
#endif
#ifndef IPPROTO_DSTOPTS
#define IPPROTO_DSTOPTS 60
#endif
#ifndef IPPROTO_ICMPV6
#define IPPROTO_ICMPV6 58
#endif
#ifndef IPPROTO_AH
#define IPPROTO_AH 51
#endif

/*
 * An IPv6 packet: does it carry TCP? The mesh carries IPv4 only, so IPv6 TCP
 * of an enrolled pod must not leave in plaintext. The transport is found
 * through the extension headers (hop-by-hop, routing, destination options,
 * AH), up to a fragment header, whose next header names the fragmented
 * payload's protocol in every fragment and decides alone. Returns
 * IPV6_TCP, or NOT_IPV4 for IPv6 that carries something else (ICMPv6 for
 * neighbour discovery, UDP).
 */
static __always_inline __u32 ferry_parse_ipv6(struct __sk_buff *skb)
{
	__u32 off = ETH_HLEN + 40; /* fixed IPv6 header */
	__u8 ext[2];
	__u8 next;
	int i;

	if (bpf_skb_load_bytes(skb, ETH_HLEN + 6, &next, 1))
		return FERRY_REASON_MALFORMED;
#pragma unroll
	for (i = 0; i < FERRY_IPV6_MAX_EXT_HEADERS; i++) {
		if (next == IPPROTO_TCP)
			return FERRY_REASON_IPV6_TCP;
		if (next != IPPROTO_HOPOPTS && next != IPPROTO_ROUTING && next != IPPROTO_DSTOPTS &&
		    next != IPPROTO_FRAGMENT && next != IPPROTO_AH)
			return FERRY_REASON_NOT_IPV4;
		if (bpf_skb_load_bytes(skb, off, ext, sizeof(ext)))
			return FERRY_REASON_IPV6_TCP; /* cut inside the chain: cannot tell, refuse */
		if (next == IPPROTO_FRAGMENT) {
			/* What follows a fragment header may be payload (a later
			 * fragment), not a header to walk: decide on its next
			 * header alone. TCP, or headers that may hide it: refuse. */
			next = ext[0];
			return next == IPPROTO_UDP || next == IPPROTO_ICMPV6 ? FERRY_REASON_NOT_IPV4
									   : FERRY_REASON_IPV6_TCP;
		}
		off += next == IPPROTO_AH ? ((__u32)ext[1] + 2) * 4 : ((__u32)ext[1] + 1) * 8;
		next = ext[0];
	}
	return next == IPPROTO_TCP || next == IPPROTO_HOPOPTS || next == IPPROTO_ROUTING ||
			       next == IPPROTO_DSTOPTS || next == IPPROTO_FRAGMENT || next == IPPROTO_AH
		       ? FERRY_REASON_IPV6_TCP
		       : FERRY_REASON_NOT_IPV4;
}

/*
 * Parse the headers. Returns 0 when pkt holds an IPv4 TCP packet's addresses,
 * ports and flags; otherwise the reason the packet is not steered on ports:
 * NOT_IPV4, IPV6_TCP, MALFORMED (nothing in pkt is valid), NOT_TCP or FRAGMENT
 * (a TCP fragment: pkt's addresses and protocol are valid, its ports are not).
 */
static __always_inline __u32 ferry_parse(struct __sk_buff *skb, struct ferry_pkt *pkt)
{
	void *data, *data_end;
	struct ethhdr *eth;
	struct iphdr *ip;
	struct tcphdr *tcp;
	__u32 l4;

	__builtin_memset(pkt, 0, sizeof(*pkt));

	if (skb->protocol == bpf_htons(ETH_P_IPV6))
		return ferry_parse_ipv6(skb);
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
	/* MF set or a non-zero offset: only the first fragment has ports, so a
	 * fragment cannot be steered; pods' TCP sets DF (PMTU discovery), so a
	 * TCP fragment at a pod's device is crafted, and the pod programs
	 * refuse it (it would reassemble into plaintext past the mesh). */
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
