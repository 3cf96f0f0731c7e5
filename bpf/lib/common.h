/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* What every ferry BPF file needs: kernel UAPI, libbpf's helper declarations,
 * the verdict constants, and the one linkage rule for shared definitions. */
#ifndef FERRY_BPF_LIB_COMMON_H
#define FERRY_BPF_LIB_COMMON_H

#include <stdbool.h>

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <linux/tcp.h>
#include <linux/types.h>

#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "shared/datapath.h"

/*
 * Each entry program is compiled on its own and `bpftool gen object` links them
 * into one object (one skeleton, shared maps and .rodata). Maps and .rodata
 * variables are defined in headers that every entry file includes, so they are
 * weak: the linker keeps one definition and checks that the others match.
 */
#define FERRY_SHARED __attribute__((weak))

/*
 * Pass verdict. TC_ACT_UNSPEC (-1) equals TCX_NEXT: the next program on the
 * device (a CNI's) still runs, under TCX and under cls_bpf alike. TC_ACT_OK
 * would end the chain there and silently disable whatever runs after ferry.
 */
#ifndef TCX_NEXT
#define TCX_NEXT -1
#endif
#define FERRY_PASS TC_ACT_UNSPEC
_Static_assert(FERRY_PASS == TCX_NEXT, "the pass verdict must be TCX_NEXT");

#define FERRY_REDIRECT TC_ACT_REDIRECT
#define FERRY_DROP TC_ACT_SHOT

/* TCP flag bits of the 13th header byte. */
#define FERRY_TCP_FIN 0x01
#define FERRY_TCP_SYN 0x02
#define FERRY_TCP_RST 0x04
#define FERRY_TCP_ACK 0x10

#endif /* FERRY_BPF_LIB_COMMON_H */
