/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Every map of the datapath, with the reason it exists. Pinned by name under
 * ferryd's pin root so that a restarted ferryd adopts them and existing
 * connections keep flowing. Keys and values: shared/datapath.h. */
#ifndef FERRY_BPF_LIB_MAPS_H
#define FERRY_BPF_LIB_MAPS_H

#include "lib/common.h"

/* Local enrolled pods by IPv4: which device injects/delivers, which MACs the
 * L2 rewrite writes, and STRICT. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, ferry_ipv4_key);
	__type(value, struct ferry_pod);
	__uint(max_entries, FERRY_MAX_PODS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} ferry_pods SEC(".maps") FERRY_SHARED;

/* The netns id of each local enrolled pod, for pod_egress's question "does
 * the pod itself listen on this port?" (shared/datapath.h). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, ferry_ipv4_key);
	__type(value, struct ferry_pod_netns);
	__uint(max_entries, FERRY_MAX_PODS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} ferry_pod_netns SEC(".maps") FERRY_SHARED;

/* Destinations whose SYNs pod_egress captures (HBONE-capable workloads), so
 * that traffic to everything else keeps its direct path. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, ferry_ipv4_key);
	__type(value, struct ferry_capture_dst);
	__uint(max_entries, FERRY_MAX_CAPTURE);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} ferry_capture SEC(".maps") FERRY_SHARED;

/* Switches a config reload flips without reloading programs (capture: all). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct ferry_settings);
	__uint(max_entries, 1);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} ferry_settings SEC(".maps") FERRY_SHARED;

/* Packets and bytes per (program, verdict, reason), per CPU so that counting
 * needs no atomics; ferryd sums the CPUs for /metrics. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct ferry_counter);
	__uint(max_entries, FERRY_COUNTER_ENTRIES);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} ferry_counters SEC(".maps") FERRY_SHARED;

static __always_inline const struct ferry_pod *ferry_local_pod(__u32 addr)
{
	return bpf_map_lookup_elem(&ferry_pods, &addr);
}

static __always_inline bool ferry_setting(__u32 flag)
{
	const __u32 zero = 0;
	const struct ferry_settings *settings = bpf_map_lookup_elem(&ferry_settings, &zero);

	return settings && (settings->flags & flag);
}

static __always_inline bool ferry_is_capture_dst(__u32 addr)
{
	if (ferry_setting(FERRY_SETTING_CAPTURE_ALL))
		return true;
	return bpf_map_lookup_elem(&ferry_capture, &addr) != NULL;
}

/* A local enrolled pod that accepts plaintext (not STRICT). */
static __always_inline bool ferry_pod_permissive(__u32 addr)
{
	const struct ferry_pod *pod = ferry_local_pod(addr);

	return pod && !(pod->flags & FERRY_POD_STRICT);
}

/* A mesh workload (HBONE-capable), whatever capture: all says: traffic to it
 * never travels in plaintext. */
static __always_inline bool ferry_is_mesh_dst(__u32 addr)
{
	return bpf_map_lookup_elem(&ferry_capture, &addr) != NULL;
}

#endif /* FERRY_BPF_LIB_MAPS_H */
