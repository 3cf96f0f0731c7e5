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
#include <thread>

#include "absl/strings/str_cat.h"
#include "proxy/rtnetlink/rtnetlink.h"

namespace ferry::datapath {
namespace {

// TCX attach types; libbpf 1.1's headers predate them (kernel 6.6).
constexpr int kTcxIngress = 46;
// TC_ACT_UNSPEC == TCX_NEXT: the probe program lets every other program run.
constexpr int32_t kActUnspec = -1;
constexpr int32_t kActShot = 2;
constexpr int32_t kActRedirect = 7;
constexpr int kHelperRedirectPeer = 155;  // BPF_FUNC_redirect_peer

bpf_insn mov64Imm(uint8_t reg, int32_t imm) {
  return bpf_insn{BPF_ALU64 | BPF_MOV | BPF_K, reg, 0, 0, imm};
}
bpf_insn call(int32_t helper) { return bpf_insn{BPF_JMP | BPF_CALL, 0, 0, 0, helper}; }
bpf_insn exitInsn() { return bpf_insn{BPF_JMP | BPF_EXIT, 0, 0, 0, 0}; }

int loadSchedCls(const bpf_insn* insns, size_t count, std::string& error) {
  LIBBPF_OPTS(bpf_prog_load_opts, opts);
  int fd = bpf_prog_load(BPF_PROG_TYPE_SCHED_CLS, "ferry_probe", "GPL", insns, count, &opts);
  if (fd < 0) error = absl::StrCat("loading a probe program: ", strerror(errno));
  return fd;
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
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  static const char kUlp[] = "tls";
  int rc = ::setsockopt(fd, IPPROTO_TCP, TCP_ULP, kUlp, sizeof(kUlp) - 1);
  int err = errno;
  ::close(fd);
  return rc == 0 || err != ENOENT;
}

}  // namespace

KernelFeatures probeKernel(uint32_t egress_flag) {
  KernelFeatures f;
  std::string err;

  // TCX: attach a do-nothing program (TCX_NEXT) to lo's ingress, then detach at once.
  {
    const bpf_insn prog[] = {mov64Imm(BPF_REG_0, kActUnspec), exitInsn()};
    int fd = loadSchedCls(prog, 2, err);
    if (fd >= 0) {
      LIBBPF_OPTS(bpf_link_create_opts, lopts);
      int link = bpf_link_create(fd, 1 /* lo */, static_cast<bpf_attach_type>(kTcxIngress), &lopts);
      if (link >= 0) {
        f.tcx = true;
        ::close(link);
      }
      ::close(fd);
    } else {
      absl::StrAppend(&f.errors, err, "; ");
    }
  }

  f.redirect_peer = libbpf_probe_bpf_helper(BPF_PROG_TYPE_SCHED_CLS,
                                            static_cast<bpf_func_id>(kHelperRedirectPeer), nullptr) == 1;

  // The egress flag: run `return bpf_redirect_peer(1, flag)` under BPF_PROG_TEST_RUN:
  // TC_ACT_REDIRECT means the kernel accepted the flag, TC_ACT_SHOT that it did not.
  if (f.redirect_peer) {
    const bpf_insn prog[] = {mov64Imm(BPF_REG_1, 1), mov64Imm(BPF_REG_2, static_cast<int32_t>(egress_flag)),
                             call(kHelperRedirectPeer), exitInsn()};
    int fd = loadSchedCls(prog, 4, err);
    if (fd >= 0) {
      // Ethernet + IPv4 header: the smallest packet test_run accepts for SCHED_CLS.
      unsigned char pkt[64] = {};
      pkt[12] = 0x08;
      pkt[14] = 0x45;
      LIBBPF_OPTS(bpf_test_run_opts, topts, .data_in = pkt, .data_size_in = sizeof(pkt), .repeat = 1);
      if (bpf_prog_test_run_opts(fd, &topts) == 0) {
        f.egress_flag = static_cast<int32_t>(topts.retval) == kActRedirect;
        if (!f.egress_flag && static_cast<int32_t>(topts.retval) != kActShot) {
          absl::StrAppend(&f.errors, "egress-flag probe returned ", topts.retval, "; ");
        }
      } else {
        absl::StrAppend(&f.errors, "egress-flag probe test_run: ", strerror(errno), "; ");
      }
      ::close(fd);
    } else {
      absl::StrAppend(&f.errors, err, "; ");
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
