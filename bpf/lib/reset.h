/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Turn a TCP segment into an RST, so that an application whose flow the mesh
 * cannot carry sees a reset instead of silence or plaintext. The frame is
 * rewritten in place, options and payload cut, both checksums recomputed:
 *   as a reply: the RST its sender would get from a peer that has no such
 *     connection (RFC 9293 3.10.7.1): addresses, ports and MACs swapped; the
 *     caller sends it back to the sender;
 *   forward: the segment's receiver gets an RST in the sender's name, at the
 *     segment's own sequence number (the next one it expects, RFC 5961), in
 *     place of the segment's bytes.
 */
#ifndef FERRY_BPF_LIB_RESET_H
#define FERRY_BPF_LIB_RESET_H

#include "lib/common.h"
#include "lib/parse.h"

/* IPv4 + TCP, both without options: the reset's whole L3/L4 part. */
struct ferry_reset_hdrs {
	struct iphdr ip;
	struct tcphdr tcp;
};

/* What the checksum of a TCP segment covers besides the segment itself. */
struct ferry_pseudo_tcp {
	__u32 saddr;
	__u32 daddr;
	__u8 zero;
	__u8 protocol;
	__be16 length;
	struct tcphdr tcp;
};
_Static_assert(sizeof(struct ferry_pseudo_tcp) == 32, "bpf_csum_diff takes whole 4-byte words");
_Static_assert(sizeof(struct ferry_reset_hdrs) == 40, "a reset has no IP or TCP options");

static __always_inline __u16 ferry_csum_fold(__s64 sum)
{
	__u32 folded = (__u32)sum;

	folded = (folded & 0xffff) + (folded >> 16);
	folded = (folded & 0xffff) + (folded >> 16);
	return (__u16)~folded;
}

/*
 * Rewrite skb (Ethernet + IPv4 + TCP, as ferry_parse accepted it) into an RST,
 * as a reply or forward (above). Only packets with a 20-byte IPv4 header
 * qualify: pods do not send IP options, and a packet that does is dropped by
 * the caller instead. Returns 0, or a negative value when the frame could not
 * be rewritten. Invalidates packet pointers.
 */
static __always_inline long ferry_rewrite_as_rst(struct __sk_buff *skb, bool reply)
{
	const __u32 hdrs_len = sizeof(struct ferry_reset_hdrs);
	struct ferry_pseudo_tcp pseudo = {};
	struct ferry_reset_hdrs out = {};
	__u8 macs[2 * ETH_ALEN];
	struct ethhdr *eth;
	struct iphdr *ip;
	struct tcphdr *tcp;
	void *data, *data_end;
	__u32 seq, ack_seq, segment_len;
	__u16 ip_len, tcp_hdr_len;
	__u8 flags;

	if (!ferry_linear(skb, ETH_HLEN + hdrs_len))
		return -1;
	data = (void *)(long)skb->data;
	data_end = (void *)(long)skb->data_end;
	eth = data;
	ip = data + ETH_HLEN;
	tcp = data + ETH_HLEN + sizeof(struct iphdr);
	if ((void *)(tcp + 1) > data_end || ip->ihl != 5)
		return -1;

	__builtin_memcpy(macs, eth->h_source, ETH_ALEN);
	__builtin_memcpy(macs + ETH_ALEN, eth->h_dest, ETH_ALEN);
	ip_len = bpf_ntohs(ip->tot_len);
	tcp_hdr_len = tcp->doff * 4;
	flags = ((__u8 *)tcp)[13];
	seq = bpf_ntohl(tcp->seq);
	ack_seq = tcp->ack_seq;
	segment_len = ip_len > sizeof(struct iphdr) + tcp_hdr_len ? ip_len - sizeof(struct iphdr) - tcp_hdr_len : 0;
	if (flags & FERRY_TCP_SYN)
		segment_len++;
	if (flags & FERRY_TCP_FIN)
		segment_len++;

	out.ip.version = 4;
	out.ip.ihl = 5;
	out.ip.tot_len = bpf_htons(hdrs_len);
	out.ip.frag_off = bpf_htons(0x4000); /* DF */
	out.ip.ttl = 64;
	out.ip.protocol = IPPROTO_TCP;
	out.tcp.doff = 5;
	out.tcp.rst = 1;
	if (!reply) {
		out.ip.saddr = ip->saddr;
		out.ip.daddr = ip->daddr;
		out.tcp.source = tcp->source;
		out.tcp.dest = tcp->dest;
		out.tcp.seq = tcp->seq;
		goto checksums;
	}
	out.ip.saddr = ip->daddr;
	out.ip.daddr = ip->saddr;
	out.tcp.source = tcp->dest;
	out.tcp.dest = tcp->source;
	if (flags & FERRY_TCP_ACK) {
		/* The sender accepts a reset whose sequence number is exactly the
		 * next one it expects (RFC 5961), which is what it acknowledged. */
		out.tcp.seq = ack_seq;
	} else {
		out.tcp.ack = 1;
		out.tcp.ack_seq = bpf_htonl(seq + segment_len);
	}
checksums:
	out.ip.check = ferry_csum_fold(bpf_csum_diff(NULL, 0, (__be32 *)&out.ip, sizeof(out.ip), 0));

	pseudo.saddr = out.ip.saddr;
	pseudo.daddr = out.ip.daddr;
	pseudo.protocol = IPPROTO_TCP;
	pseudo.length = bpf_htons(sizeof(struct tcphdr));
	pseudo.tcp = out.tcp;
	out.tcp.check = ferry_csum_fold(bpf_csum_diff(NULL, 0, (__be32 *)&pseudo, sizeof(pseudo), 0));

	if (bpf_skb_change_tail(skb, ETH_HLEN + hdrs_len, 0))
		return -1;
	if (reply && bpf_skb_store_bytes(skb, 0, macs, sizeof(macs), 0))
		return -1;
	return bpf_skb_store_bytes(skb, ETH_HLEN, &out, hdrs_len, 0);
}

/* The RST a peer without the connection sends back (see above). */
static __always_inline long ferry_rewrite_as_reset(struct __sk_buff *skb)
{
	return ferry_rewrite_as_rst(skb, true);
}

/* The segment's receiver gets an RST in place of its bytes (see above). */
static __always_inline long ferry_rewrite_as_forward_reset(struct __sk_buff *skb)
{
	return ferry_rewrite_as_rst(skb, false);
}

#endif /* FERRY_BPF_LIB_RESET_H */
