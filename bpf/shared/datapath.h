/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The contract between ferry's tc programs and ferryd: map keys and values,
 * constants, the counter layout and the one verdict/reason table. Included from
 * BPF C (clang -target bpf) and from C++20; keep it plain C with fixed-size
 * types, explicit padding and asserted sizes, so both compilers agree on every
 * byte. Design §2 describes what the programs do with it; docs/datapath.md
 * describes it for operators.
 */
#ifndef FERRY_BPF_SHARED_DATAPATH_H
#define FERRY_BPF_SHARED_DATAPATH_H

#include <linux/types.h>

#ifdef __cplusplus
#define FERRY_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
#else
#define FERRY_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif

/* Ports ferryd listens on in the proxy netns (docs/architecture.md, "Ports").
 * The programs take them from .rodata (port_outbound, ...) so that tests and
 * labs may move them; these are the defaults. */
#define FERRY_PORT_OUTBOUND 15001      /* captured outbound TCP */
#define FERRY_PORT_INBOUND_PLAIN 15006 /* captured inbound plaintext (PERMISSIVE/STRICT) */
#define FERRY_PORT_HBONE 15008         /* HBONE: mTLS + HTTP/2 CONNECT */

/* Names under which the maps are pinned (LIBBPF_PIN_BY_NAME: <pin root>/<name>).
 * The pin root is chosen by ferryd (a ferry directory on a bpffs that
 * `ip netns exec` does not hide); the ferry_ prefix keeps them apart from a
 * CNI's pins if both share a directory. Kernel object names are at most 15
 * characters, so every name fits whole. */
#define FERRY_MAP_PODS "ferry_pods"
#define FERRY_MAP_CAPTURE "ferry_capture"
#define FERRY_MAP_SETTINGS "ferry_settings"
#define FERRY_MAP_COUNTERS "ferry_counters"

/* Map sizes. Part of the pinned maps' identity: a ferryd that adopts pinned
 * maps must declare the same sizes, so change them only with a migration
 * (ferry_capture has one: Datapath::create re-creates a pin of another size). */
#define FERRY_MAX_PODS 1024        /* local enrolled pods; kubelet's default max is 110 */
/* HBONE-capable workload IPs cluster-wide: 2^18 holds a cluster of 150,000 pods
 * and 10,000 Service VIPs with room to spare. Preallocated (no allocation on
 * the update path): 80 bytes an entry, 20 MiB of kernel memory per node
 * (bpftool's memlock on 6.18; 65,536 entries were 5 MiB). docs/datapath.md. */
#define FERRY_MAX_CAPTURE 262144

/* How from_proxy puts ferryd's upstream packets into the source pod's egress
 * path (docs/datapath.md, "Injection modes"). Chosen by ferryd's probe at start-up. */
enum ferry_injection_mode {
	FERRY_INJECT_NONE = 0,             /* plain routing; the pod's egress programs do not see proxied traffic */
	FERRY_INJECT_PEER_EGRESS = 1,      /* bpf_redirect_peer(host_ifindex, egress_flag) */
	FERRY_INJECT_INGRESS_REDIRECT = 2, /* L2 rewrite + bpf_redirect(host_ifindex, BPF_F_INGRESS) */
};

/* The egress flag of bpf_redirect_peer is not settled upstream (v1 of the patch
 * reused BPF_F_INGRESS, review asked for a new BPF_F_EGRESS). Bit 5 is the bit
 * the kernel lab's patch uses (bpf/kernel/README.md); ferryd's config can override it. */
#define FERRY_DEFAULT_EGRESS_FLAG (1ULL << 5)

/* Mark that to_proxy puts on packets it assigns to a ferryd socket. The proxy
 * netns routes marked packets as local (`ip rule fwmark M lookup T` +
 * `ip route add local 0.0.0.0/0 dev lo table T`), without which bpf_sk_assign'ed
 * packets are forwarded instead of delivered. 0x539 is the value Istio's TPROXY
 * setup uses for the same rule; the proxy netns has no other mark user. */
#define FERRY_DEFAULT_PROXY_MARK 0x539

/* ---- ferry_pods: local enrolled pod, keyed by its IPv4 address ---------- */

/* Key: the pod's IPv4 address, __u32 in network byte order. IPv6 will get its
 * own map (ferry_pods6, keyed by struct ferry_in6_addr) with the same value,
 * as Katran and Cilium keep one map per family. */
typedef __u32 ferry_ipv4_key;

struct ferry_in6_addr {
	__u8 addr[16];
};
FERRY_STATIC_ASSERT(sizeof(struct ferry_in6_addr) == 16, "ferry_in6_addr is 16 bytes");

/* STRICT: pod_ingress sends every new TCP connection to the pod into the proxy
 * (15006), where ferryd refuses plaintext (mTLS STRICT) or judges it by the pod's
 * authorization policies (docs/policy.md); without it (PERMISSIVE, no policy) only
 * HBONE and connections ferryd holds go there. */
#define FERRY_POD_STRICT (1U << 0)

struct ferry_pod {
	__u32 host_ifindex; /* the pod's host-side device, in the node netns */
	__u8 pod_mac[6];    /* MAC of the pod's eth0 (inside the pod) */
	__u8 host_mac[6];   /* MAC of host_ifindex */
	__u32 flags;        /* FERRY_POD_* */
};
FERRY_STATIC_ASSERT(sizeof(struct ferry_pod) == 20, "ferry_pod is 20 bytes");

/* ---- ferry_pod_netns: where a local enrolled pod's own sockets live ----- */

/* Key: ferry_ipv4_key. The id of the pod's network namespace as the node netns
 * sees it (the host-side device's link netnsid), so that a program on the pod's
 * device can ask whether the pod itself listens on a port (lib/sock.h). A
 * separate map rather than a field of ferry_pod: the pinned ferry_pods keeps
 * its layout across upgrades. */
struct ferry_pod_netns {
	__u32 netnsid;
};
FERRY_STATIC_ASSERT(sizeof(struct ferry_pod_netns) == 4, "ferry_pod_netns is 4 bytes");

/* ---- ferry_capture: destinations whose new connections are captured ----- */

/* Key: ferry_ipv4_key. HBONE: the destination is a workload that terminates
 * HBONE on its port 15008 (on another node or this one). Entries without a flag
 * are reserved for later kinds of destination; today every entry is captured. */
#define FERRY_DST_HBONE (1U << 0)

struct ferry_capture_dst {
	__u32 flags; /* FERRY_DST_* */
};
FERRY_STATIC_ASSERT(sizeof(struct ferry_capture_dst) == 4, "ferry_capture_dst is 4 bytes");

/* ---- ferry_settings: switches that a config reload flips live ----------- */

/* CAPTURE_ALL: `capture: all` — every TCP SYN an enrolled pod sends goes into
 * the proxy, not only those to ferry_capture destinations. */
#define FERRY_SETTING_CAPTURE_ALL (1U << 0)
/* HBONE_PAUSED: ferryd's HBONE listener is away for a planned restart (set from the
 * start of a drain, and by a starting ferryd until it listens): to_proxy drops SYNs to
 * 15008 that find no listener, so the peer's retransmission reaches the next ferryd,
 * instead of resetting them as it does when ferryd died (no one set the flag). */
#define FERRY_SETTING_HBONE_PAUSED (1U << 1)

struct ferry_settings {
	__u32 flags;    /* FERRY_SETTING_* */
	__u32 reserved; /* zero */
};
FERRY_STATIC_ASSERT(sizeof(struct ferry_settings) == 8, "ferry_settings is 8 bytes");

/* ---- ferry_counters: packets and bytes by program, verdict and reason --- */

enum ferry_prog {
	FERRY_PROG_POD_EGRESS = 0,  /* tc ingress of a pod's host-side device */
	FERRY_PROG_POD_INGRESS = 1, /* tc egress of a pod's host-side device */
	FERRY_PROG_TO_PROXY = 2,    /* tc ingress of the proxy's eth0 (proxy netns) */
	FERRY_PROG_FROM_PROXY = 3,  /* tc ingress of the proxy's host-side device */
	FERRY_PROG_COUNT = 4,
};

/* What the program returned: PASS is TC_ACT_UNSPEC (== TCX_NEXT, so the next
 * program — a CNI's — still runs), REDIRECT is TC_ACT_REDIRECT, DROP is
 * TC_ACT_SHOT (including a redirect helper that refused its flags). */
enum ferry_verdict {
	FERRY_VERDICT_PASS = 0,
	FERRY_VERDICT_REDIRECT = 1,
	FERRY_VERDICT_DROP = 2,
	FERRY_VERDICT_COUNT = 3,
};

/*
 * The one reason table, Cilium-style: X(NAME, value, "what happened"). Every
 * verdict a program returns is counted with exactly one of these. Values are
 * stable (they index the pinned counters map): append, never renumber.
 */
#define FERRY_REASONS(X)                                                                     \
	X(UNSPEC, 0, "no reason recorded")                                                   \
	X(NOT_IPV4, 1, "not IPv4, and not IPv6 TCP: left to the kernel")                     \
	X(NOT_TCP, 2, "IPv4 but not TCP (UDP, ICMP, ...): untouched")                        \
	X(FRAGMENT, 3, "IPv4 TCP fragment: cannot be steered; refused at a pod's device")    \
	X(MALFORMED, 4, "truncated or invalid IPv4/TCP header: left to the kernel")          \
	X(OWN_TRAFFIC, 5, "ferryd holds the reverse tuple: ferryd's own traffic")            \
	X(HELD, 6, "ferryd holds the tuple: a connection of the proxy")                      \
	X(CAPTURE_SYN, 7, "SYN to a capture destination")                                    \
	X(HBONE_SYN, 8, "SYN to the HBONE port of an enrolled pod")                          \
	X(STRICT_SYN, 9, "new connection to a STRICT pod")                                   \
	X(NOT_CAPTURED, 10, "nothing to capture")                                            \
	X(FOR_PROXY, 11, "addressed to the proxy netns itself")                              \
	X(ASSIGN_CONNECTION, 12, "assigned to ferryd's connection or request socket")        \
	X(ASSIGN_OUTBOUND, 13, "SYN from a local enrolled pod: outbound listener")           \
	X(ASSIGN_HBONE, 14, "SYN to the HBONE port: HBONE listener")                         \
	X(ASSIGN_INBOUND, 15, "other SYN to a local enrolled pod: inbound plaintext listener") \
	X(NOT_STEERED, 16, "SYN neither from nor to a local enrolled pod: normal routing")   \
	X(NO_SOCKET, 17, "steered packet for which ferryd has no socket")                    \
	X(NO_LISTENER, 18, "ferryd's listener for this SYN is missing")                      \
	X(ASSIGN_FAILED, 19, "bpf_sk_assign refused the socket")                             \
	X(INJECT_PEER_EGRESS, 20, "injected into the source pod's egress path (peer-egress)") \
	X(INJECT_INGRESS_REDIRECT, 21, "injected into the source pod's egress path (ingress-redirect)") \
	X(INJECT_DISABLED, 22, "from a local pod, injection mode none: plain routing")       \
	X(DELIVER, 23, "delivered into the destination pod with bpf_redirect_peer")          \
	X(NOT_LOCAL, 24, "neither from nor to a local enrolled pod: ferryd's own traffic")   \
	X(L2_REWRITE_FAILED, 25, "could not rewrite the Ethernet header")                    \
	X(IPV6_TCP, 26, "IPv6 TCP: the mesh carries IPv4 only; refused at a pod's device")   \
	X(STALE_FLOW, 27, "mid-stream segment to a mesh destination, not held: reset")        \
	X(STALE_RST, 28, "RST to a mesh destination, not held: passes (carries no data)")      \
	X(POD_SERVES, 29, "segment of a flow the pod serves (it listens on the source port): not captured") \
	X(NO_HBONE_LISTENER, 30, "SYN to 15008 with no HBONE listener (ferryd down): reset to the peer") \
	X(STRICT_STALE, 31, "segment of a plaintext flow a STRICT pod serves, not held: reset to the pod") \
	X(NODE_SYN, 32, "new connection from a socket of the node's own netns (kubelet probes): not captured") \
	X(NODE_FLOW, 33, "segment of a connection with a socket of the node's own netns: not captured")

enum ferry_reason {
#define FERRY_REASON_ENUM(name, value, text) FERRY_REASON_##name = value,
	FERRY_REASONS(FERRY_REASON_ENUM)
#undef FERRY_REASON_ENUM
};

/* Counter slots reserved per (program, verdict): more than today's reasons, so
 * that new reasons do not change the pinned map's size. */
#define FERRY_REASON_SLOTS 64

#define FERRY_COUNTER_ENTRIES ((__u32)FERRY_PROG_COUNT * (__u32)FERRY_VERDICT_COUNT * FERRY_REASON_SLOTS)

struct ferry_counter {
	__u64 packets;
	__u64 bytes; /* skb->len: L2 frame length as the hook saw it */
};
FERRY_STATIC_ASSERT(sizeof(struct ferry_counter) == 16, "ferry_counter is 16 bytes");

/* Index of a (program, verdict, reason) cell in ferry_counters. */
static inline __u32 ferry_counter_index(__u32 prog, __u32 verdict, __u32 reason)
{
	return (prog * FERRY_VERDICT_COUNT + verdict) * FERRY_REASON_SLOTS + reason;
}

#define FERRY_REASON_CHECK_SLOT(name, value, text) \
	FERRY_STATIC_ASSERT((value) < FERRY_REASON_SLOTS, "reason " #name " exceeds FERRY_REASON_SLOTS");
FERRY_REASONS(FERRY_REASON_CHECK_SLOT)
#undef FERRY_REASON_CHECK_SLOT

#endif /* FERRY_BPF_SHARED_DATAPATH_H */
