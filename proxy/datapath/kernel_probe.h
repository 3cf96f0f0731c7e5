#pragma once
// What this kernel can do for the datapath, probed at start-up and reported in the log,
// in /metrics and in the admin status (docs/datapath.md, "Injection modes").
#include <cstdint>
#include <string>

#include "proxy/config/config.h"

namespace ferry::datapath {

struct KernelFeatures {
  bool tcx = false;             // BPF_LINK_CREATE with BPF_TCX_INGRESS/EGRESS (6.6+)
  bool redirect_peer = false;   // bpf_redirect_peer helper (5.10+)
  bool egress_flag = false;     // bpf_redirect_peer accepts the configured egress flag
  bool netkit = false;          // netkit devices (6.7+, CONFIG_NETKIT)
  bool ktls = false;            // kernel TLS ULP (CONFIG_TLS)
  std::string errors;           // probes that could not run, and why
};

// Runs every probe. Needs CAP_BPF/CAP_NET_ADMIN; a probe that cannot run counts as "no".
KernelFeatures probeKernel(uint32_t egress_flag);

// The injection mode to use, and why, given the features and what the config asks.
struct InjectionChoice {
  config::Injection mode = config::Injection::kNone;
  std::string why;
};
InjectionChoice chooseInjection(const KernelFeatures& features, config::Injection requested,
                                uint32_t egress_flag);

const char* injectionName(config::Injection mode);
std::string describe(const KernelFeatures& f);

}  // namespace ferry::datapath
