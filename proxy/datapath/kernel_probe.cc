#include "proxy/datapath/kernel_probe.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "ferry_probe.skel.h"
#include "proxy/common/unique_fd.h"
#include "proxy/rtnetlink/rtnetlink.h"

namespace ferry::datapath {
namespace {

// TCX attach types; libbpf 1.1's headers predate them (kernel 6.6).
constexpr int kTcxIngress = 46;
constexpr int32_t kActShot = 2;
constexpr int32_t kActRedirect = 7;
constexpr int kHelperRedirectPeer = 155;  // BPF_FUNC_redirect_peer

struct ProbeDeleter {
  void operator()(ferry_probe* skel) const { ferry_probe__destroy(skel); }
};
using ProbeSkeleton = std::unique_ptr<ferry_probe, ProbeDeleter>;

// TCX: attach probe_next (TCX_NEXT: lets every other program run) to lo's ingress, then
// detach at once.
bool probeTcx(const ferry_probe& skel) {
  LIBBPF_OPTS(bpf_link_create_opts, lopts);
  common::UniqueFd link(
      bpf_link_create(bpf_program__fd(skel.progs.probe_next), 1 /* lo */, static_cast<bpf_attach_type>(kTcxIngress), &lopts));
  return static_cast<bool>(link);
}

// The egress flag: run probe_redirect (`return bpf_redirect_peer(1, probe_flags)`) under
// BPF_PROG_TEST_RUN: TC_ACT_REDIRECT means the kernel accepted the flag, TC_ACT_SHOT that
// it did not.
bool probeEgressFlag(const ferry_probe& skel, std::string& errors) {
  // Ethernet + IPv4 header: the smallest packet test_run accepts for SCHED_CLS.
  unsigned char pkt[64] = {};
  pkt[12] = 0x08;
  pkt[14] = 0x45;
  LIBBPF_OPTS(bpf_test_run_opts, topts, .data_in = pkt, .data_size_in = sizeof(pkt), .repeat = 1);
  if (bpf_prog_test_run_opts(bpf_program__fd(skel.progs.probe_redirect), &topts) != 0) {
    absl::StrAppend(&errors, "egress-flag probe test_run: ", strerror(errno), "; ");
    return false;
  }
  const auto verdict = static_cast<int32_t>(topts.retval);
  if (verdict != kActRedirect && verdict != kActShot) absl::StrAppend(&errors, "egress-flag probe returned ", verdict, "; ");
  return verdict == kActRedirect;
}

// netkit: create a pair in a throwaway netns (a thread's own; the pair goes with it when
// the thread ends). /proc/kallsyms cannot tell: kernels without CONFIG_KALLSYMS exist, and
// a built-in netkit has no /sys/module entry.
bool probeNetkit(std::string& error) {
  bool created = false;
  std::thread t([&] {
    if (::unshare(CLONE_NEWNET) != 0) {
      error = absl::StrCat("netkit probe: unshare: ", strerror(errno), "; ");
      return;
    }
    rtnetlink::NetkitPairSpec spec;
    spec.name = "fy-nkprobe0";
    spec.peer_name = "fy-nkprobe1";
    absl::Status st = rtnetlink::createNetkitPair(spec);
    created = st.ok();
    // FailedPrecondition is "no netkit in this kernel": an answer, not an error.
    if (!st.ok() && st.code() != absl::StatusCode::kFailedPrecondition) {
      error = absl::StrCat("netkit probe: ", st.message(), "; ");
    }
  });
  t.join();
  return created;
}

// kTLS: ask for the "tls" ULP on a fresh TCP socket. ENOENT means the kernel has no such
// ULP (and could not load it); with it, the ULP refuses an unconnected socket (ENOTCONN).
// /proc/sys/net/ipv4/tcp_available_ulp cannot tell: it exists only in the initial netns,
// and a built-in tls has no /sys/module entry.
bool hasTlsUlp() {
  common::UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return false;
  static const char kUlp[] = "tls";
  int rc = ::setsockopt(fd.get(), IPPROTO_TCP, TCP_ULP, kUlp, sizeof(kUlp) - 1);
  return rc == 0 || errno != ENOENT;
}

}  // namespace

KernelFeatures probeKernel(uint32_t egress_flag) {
  KernelFeatures f;
  f.redirect_peer = libbpf_probe_bpf_helper(BPF_PROG_TYPE_SCHED_CLS,
                                            static_cast<bpf_func_id>(kHelperRedirectPeer), nullptr) == 1;
  ProbeSkeleton skel(ferry_probe__open());
  if (skel == nullptr) {
    absl::StrAppend(&f.errors, "opening the probe programs: ", strerror(errno), "; ");
  } else {
    skel->rodata->probe_flags = egress_flag;
    // Without the helper the verifier refuses probe_redirect: only probe_next is loaded.
    if (!f.redirect_peer) bpf_program__set_autoload(skel->progs.probe_redirect, false);
    if (ferry_probe__load(skel.get()) != 0) {
      absl::StrAppend(&f.errors, "loading the probe programs: ", strerror(errno), "; ");
    } else {
      f.tcx = probeTcx(*skel);
      if (f.redirect_peer) f.egress_flag = probeEgressFlag(*skel, f.errors);
    }
  }

  std::string netkit_error;
  f.netkit = probeNetkit(netkit_error);
  f.errors += netkit_error;
  f.ktls = hasTlsUlp();
  return f;
}

InjectionChoice chooseInjection(const KernelFeatures& f, config::Injection requested,
                                uint32_t egress_flag) {
  using config::Injection;
  switch (requested) {
    case Injection::kNone:
      return {Injection::kNone, "configured: injection none (pods' egress programs do not see proxied traffic)"};
    case Injection::kPeerEgress:
      if (f.egress_flag) return {Injection::kPeerEgress, "configured, and the kernel accepts the egress flag"};
      return {Injection::kNone, absl::StrCat("configured peer-egress but the kernel rejects flag ",
                                             egress_flag, " of bpf_redirect_peer")};
    case Injection::kIngressRedirect:
      return {Injection::kIngressRedirect, "configured: ingress-redirect"};
    case Injection::kAuto:
      break;
  }
  if (f.egress_flag) {
    return {Injection::kPeerEgress,
            absl::StrCat("probe: bpf_redirect_peer accepts egress flag ", egress_flag)};
  }
  return {Injection::kIngressRedirect,
          absl::StrCat("probe: bpf_redirect_peer rejects egress flag ", egress_flag,
                       "; falling back to bpf_redirect(BPF_F_INGRESS) with an L2 rewrite",
                       f.netkit ? " (on netkit devices this skips the peer's programs)" : "")};
}

const char* injectionName(config::Injection mode) {
  switch (mode) {
    case config::Injection::kAuto: return "auto";
    case config::Injection::kPeerEgress: return "peer-egress";
    case config::Injection::kIngressRedirect: return "ingress-redirect";
    case config::Injection::kNone: return "none";
  }
  return "?";
}

std::string describe(const KernelFeatures& f) {
  auto yn = [](bool b) { return b ? "yes" : "no"; };
  return absl::StrCat("tcx=", yn(f.tcx), " redirect_peer=", yn(f.redirect_peer),
                      " egress_flag=", yn(f.egress_flag), " netkit=", yn(f.netkit),
                      " ktls=", yn(f.ktls), f.errors.empty() ? "" : " probe_errors=\"" + f.errors + "\"");
}

}  // namespace ferry::datapath
