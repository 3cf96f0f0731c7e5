/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * "ferryd holds it": socket lookups in the proxy netns, and assignment of a
 * packet to a ferryd socket.
 *
 * A lookup takes the packet's tuple as the receiving side sees it (saddr is
 * the remote end, daddr the local end), so:
 *   - ferryd holds the tuple: ferryd has a socket local=daddr:dport,
 *     remote=saddr:sport — the packet belongs to one of ferryd's connections;
 *   - ferryd holds the reverse tuple: ferryd has a socket local=saddr:sport,
 *     remote=daddr:dport — ferryd sent the packet (its own upstream leg).
 *
 * Listeners never count as "held": ferryd's listeners are bound to the
 * wildcard address, so a listener matches any packet to its port, and an
 * application that binds source port 15008 would otherwise look like ferryd's
 * own traffic (the prototype's bypass). Connections, request sockets
 * (handshake's final ACK) and TIME_WAIT sockets count.
 *
 * Node-side programs (pod_egress, pod_ingress) look up in the proxy netns by
 * id (proxy_netns_id); to_proxy runs inside the proxy netns and looks up in
 * its own (BPF_F_CURRENT_NETNS).
 */
#ifndef FERRY_BPF_LIB_SOCK_H
#define FERRY_BPF_LIB_SOCK_H

#include "lib/common.h"
#include "lib/config.h"
#include "lib/kernel.h"
#include "lib/maps.h"
#include "lib/parse.h"

#define FERRY_NETNS_CURRENT ((__u64)BPF_F_CURRENT_NETNS)

static __always_inline struct bpf_sock *ferry_lookup(struct __sk_buff *skb, __u32 saddr, __be16 sport,
						     __u32 daddr, __be16 dport, __u64 netns)
{
	struct bpf_sock_tuple tuple = {};

	tuple.ipv4.saddr = saddr;
	tuple.ipv4.sport = sport;
	tuple.ipv4.daddr = daddr;
	tuple.ipv4.dport = dport;
	return ferry_skc_lookup_tcp(skb, &tuple, sizeof(tuple.ipv4), netns);
}

/* A socket of one of ferryd's connections (anything but a listener) matches
 * saddr:sport -> daddr:dport in netns. */
static __always_inline bool ferry_holds_tuple(struct __sk_buff *skb, __u32 saddr, __be16 sport,
					      __u32 daddr, __be16 dport, __u64 netns)
{
	struct bpf_sock *sk = ferry_lookup(skb, saddr, sport, daddr, dport, netns);
	bool held;

	if (!sk)
		return false;
	held = sk->state != BPF_TCP_LISTEN;
	bpf_sk_release(sk);
	return held;
}

/* The packet belongs to a connection ferryd holds. */
static __always_inline bool ferry_holds(struct __sk_buff *skb, const struct ferry_pkt *pkt, __u64 netns)
{
	return ferry_holds_tuple(skb, pkt->saddr, pkt->sport, pkt->daddr, pkt->dport, netns);
}

/* ferryd sent the packet: it holds the connection the other way round. */
static __always_inline bool ferry_holds_reverse(struct __sk_buff *skb, const struct ferry_pkt *pkt,
						__u64 netns)
{
	return ferry_holds_tuple(skb, pkt->daddr, pkt->dport, pkt->saddr, pkt->sport, netns);
}

/*
 * The pod listens on the packet's source port: it is the server of this flow
 * (a client reached it directly, as PERMISSIVE allows), not a client whose
 * flow the mesh lost. Asked in the pod's own netns with a tuple no established
 * connection has (remote port 0), so only a listener can match. Unknown netns:
 * false (the caller then treats the flow as the pod's own, and fails closed).
 */
static __always_inline bool ferry_pod_listens(struct __sk_buff *skb, __u32 pod_ip, __be16 port, __u32 peer_ip)
{
	const struct ferry_pod_netns *ns = bpf_map_lookup_elem(&ferry_pod_netns, &pod_ip);
	struct bpf_sock *sk;
	bool listens;

	if (!ns)
		return false;
	sk = ferry_lookup(skb, peer_ip, 0, pod_ip, port, ns->netnsid);
	if (!sk)
		return false;
	listens = sk->state == BPF_TCP_LISTEN;
	bpf_sk_release(sk);
	return listens;
}

/* A packet the pod sends on a flow it serves. */
static __always_inline bool ferry_pod_serves(struct __sk_buff *skb, const struct ferry_pkt *pkt)
{
	return ferry_pod_listens(skb, pkt->saddr, pkt->sport, pkt->daddr);
}

/* A packet to the pod on a flow it serves. */
static __always_inline bool ferry_pod_is_server_of(struct __sk_buff *skb, const struct ferry_pkt *pkt)
{
	return ferry_pod_listens(skb, pkt->daddr, pkt->dport, pkt->saddr);
}

/*
 * A socket of the node's own netns (the one the program runs in: a pod's
 * host-side device lives there) sent the packet: the kubelet probing the pod,
 * a host-network pod, anything else of the node. Asked of the node's socket
 * table, not of the source address: a pod that forges the node's address owns
 * no socket there (docs/security.md, "Probes").
 */
static __always_inline bool ferry_node_sent(struct __sk_buff *skb, const struct ferry_pkt *pkt)
{
	return ferry_holds_tuple(skb, pkt->daddr, pkt->dport, pkt->saddr, pkt->sport, FERRY_NETNS_CURRENT);
}

/* Outcome of an assignment attempt. */
enum ferry_assign_result {
	FERRY_ASSIGNED = 0,
	FERRY_ASSIGN_NO_SOCKET = 1, /* no socket of the wanted kind */
	FERRY_ASSIGN_REFUSED = 2,   /* bpf_sk_assign failed */
};

/* Assign the packet to the connection (or request socket) of ferryd in this
 * netns that its tuple matches. */
static __always_inline enum ferry_assign_result ferry_assign_connection(struct __sk_buff *skb,
									const struct ferry_pkt *pkt)
{
	struct bpf_sock *sk = ferry_lookup(skb, pkt->saddr, pkt->sport, pkt->daddr, pkt->dport,
					   FERRY_NETNS_CURRENT);
	long err;

	if (!sk)
		return FERRY_ASSIGN_NO_SOCKET;
	if (sk->state == BPF_TCP_LISTEN) {
		bpf_sk_release(sk);
		return FERRY_ASSIGN_NO_SOCKET;
	}
	err = ferry_sk_assign(skb, sk, 0);
	bpf_sk_release(sk);
	return err ? FERRY_ASSIGN_REFUSED : FERRY_ASSIGNED;
}

/*
 * Assign a SYN to ferryd's listener on port (host order) in this netns. The
 * lookup keeps the SYN's addresses and replaces the destination port, which
 * finds the listener bound to the wildcard address the way the kernel would
 * for a SYN sent to that port: ferryd must bind its listeners to 0.0.0.0
 * (IP_TRANSPARENT), not to the proxy's address.
 */
static __always_inline enum ferry_assign_result ferry_assign_listener(struct __sk_buff *skb,
								      const struct ferry_pkt *pkt,
								      __u16 port)
{
	struct bpf_sock *sk = ferry_lookup(skb, pkt->saddr, pkt->sport, pkt->daddr, bpf_htons(port),
					   FERRY_NETNS_CURRENT);
	long err;

	if (!sk)
		return FERRY_ASSIGN_NO_SOCKET;
	if (sk->state != BPF_TCP_LISTEN) {
		bpf_sk_release(sk);
		return FERRY_ASSIGN_NO_SOCKET;
	}
	err = ferry_sk_assign(skb, sk, 0);
	bpf_sk_release(sk);
	return err ? FERRY_ASSIGN_REFUSED : FERRY_ASSIGNED;
}

#endif /* FERRY_BPF_LIB_SOCK_H */
