// fy_attach: attaches a pinned BPF program to a device and pins the link, so that a shell
// test can put a "CNI" program where a CNI would (bpftool 7.1 and tc cannot attach to
// netkit or TCX). The link stays attached until its pin is removed.
//
//   fy_attach PROG_PIN DEVICE HOOK LINK_PIN      HOOK: netkit-peer | netkit-primary |
//                                                      tcx-ingress | tcx-egress
// The program is appended after those already attached (ferry's run first).
#include <bpf/bpf.h>
#include <net/if.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "proxy/datapath/attach.h"

int main(int argc, char** argv) {
  using ferry::datapath::Hook;
  if (argc != 5) {
    std::fprintf(stderr, "usage: fy_attach PROG_PIN DEVICE netkit-peer|netkit-primary|tcx-ingress|tcx-egress LINK_PIN\n");
    return 2;
  }
  const std::string hook_name = argv[3];
  Hook hook;
  if (hook_name == "netkit-peer") {
    hook = Hook::kNetkitPeer;
  } else if (hook_name == "netkit-primary") {
    hook = Hook::kNetkitPrimary;
  } else if (hook_name == "tcx-ingress") {
    hook = Hook::kIngress;
  } else if (hook_name == "tcx-egress") {
    hook = Hook::kEgress;
  } else {
    std::fprintf(stderr, "fy_attach: unknown hook '%s'\n", argv[3]);
    return 2;
  }
  int prog = bpf_obj_get(argv[1]);
  if (prog < 0) {
    std::fprintf(stderr, "fy_attach: %s: %s\n", argv[1], std::strerror(errno));
    return 1;
  }
  int ifindex = static_cast<int>(if_nametoindex(argv[2]));
  if (ifindex == 0) {
    std::fprintf(stderr, "fy_attach: device %s: %s\n", argv[2], std::strerror(errno));
    return 1;
  }
  auto a = ferry::datapath::Attachment::attach(prog, ifindex, hook, /*tcx=*/true,
                                               std::string(argv[1]) + " on " + argv[2], argv[4],
                                               ferry::datapath::Position::kLast);
  if (!a.ok()) {
    std::fprintf(stderr, "fy_attach: %s\n", std::string(a.status().message()).c_str());
    return 1;
  }
  a->release();  // the pin keeps it attached
  std::printf("attached %s to %s (%s), link pinned at %s\n", argv[1], argv[2], argv[3], argv[4]);
  return 0;
}
