/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Load-time configuration. ferryd writes these through the skeleton's rodata
 * before loading; the verifier then sees constants and prunes the branches of
 * the modes not in use. Defaults are what a test or a forgotten field gets.
 */
#ifndef FERRY_BPF_LIB_CONFIG_H
#define FERRY_BPF_LIB_CONFIG_H

#include "lib/common.h"

/* How from_proxy injects into a source pod's egress path (enum
 * ferry_injection_mode). ingress-redirect is the default because it works on
 * veth with every kernel; ferryd sets the mode its probe chose. */
const volatile __u32 injection_mode FERRY_SHARED = FERRY_INJECT_INGRESS_REDIRECT;

/* The flags argument bpf_redirect_peer takes for "egress of the peer" in
 * peer-egress mode (see FERRY_DEFAULT_EGRESS_FLAG). */
const volatile __u64 egress_flag FERRY_SHARED = FERRY_DEFAULT_EGRESS_FLAG;

/* The proxy netns's id as seen from the node netns (`ip netns set`,
 * RTM_NEWNSID): the netns argument of the "ferryd holds it" lookups run by the
 * node-side programs. BPF_F_CURRENT_NETNS until ferryd sets it. */
const volatile __u64 proxy_netns_id FERRY_SHARED = (__u64)BPF_F_CURRENT_NETNS;

/* The proxy's host-side device in the node netns ("hostP"): where "into the
 * proxy" redirects. */
const volatile __u32 proxy_host_ifindex FERRY_SHARED = 0;

/* The proxy netns's own IPv4 address (network order). to_proxy leaves packets
 * addressed to it alone: metrics, health checks and ferryd's own connections
 * are delivered by normal routing. 0: no such address. */
const volatile __u32 proxy_ipv4 FERRY_SHARED = 0;

/* skb->mark that to_proxy sets on assigned packets (FERRY_DEFAULT_PROXY_MARK). */
const volatile __u32 proxy_mark FERRY_SHARED = FERRY_DEFAULT_PROXY_MARK;

/* Connections that sockets of the node's own netns open to a pod (the kubelet's
 * probes, host-network pods) reach STRICT pods directly, as Istio's ambient mode
 * lets probes through (docs/security.md, "Probes"). 0: they go to ferryd like
 * any plaintext client (and a STRICT pod refuses them). */
const volatile __u32 exempt_node FERRY_SHARED = 1;

/* ferryd's listener ports in the proxy netns (host byte order). */
const volatile __u16 port_outbound FERRY_SHARED = FERRY_PORT_OUTBOUND;
const volatile __u16 port_inbound_plain FERRY_SHARED = FERRY_PORT_INBOUND_PLAIN;
const volatile __u16 port_hbone FERRY_SHARED = FERRY_PORT_HBONE;

#endif /* FERRY_BPF_LIB_CONFIG_H */
