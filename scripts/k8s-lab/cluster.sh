#!/usr/bin/env bash
# A real single-node Kubernetes 1.20 on this machine (docs/k8s-lab.md):
#   etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd (+ runc behind a
#   wrapper), kubelet, kube-proxy, the reference CNI bridge plugin.
# Usage (root): cluster.sh up|down|status|kubeconfig|cni-dirs|import TARBALL...
#   up          starts everything from the cached binaries (build-kubernetes.sh builds them on
#               a cold cache) and returns once the node is Ready; prints the kubeconfig path
#   down        stops exactly what up started (by PID) and removes every file, mount, netns,
#               link and iptables chain it made; restores the sysctls the kubelet and
#               kube-proxy change. Safe to run twice or after a failed up.
#   status      one line per component
#   kubeconfig  prints the admin kubeconfig's path
#   cni-dirs    prints containerd's CNI plugin folder and configuration folder
#   import      imports OCI image archives into the cluster's containerd (namespace k8s.io)
# Works from any checkout: nothing here depends on the caller's directory. Component logs go
# to $FY_K8S_LOGS (default: build/k8s-lab/ of the checkout holding this script).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

# Everything the cluster writes lives under these two prefixes and goes away with `down`.
readonly STATE=/var/lib/fy-k8s          # etcd data, certs, kubelet and containerd roots
readonly RUN=/run/fy-k8s                # sockets, containerd state, PIDs, saved sysctls
readonly LOGS=${FY_K8S_LOGS:-$repo/build/k8s-lab}
readonly NODE=fy-node
readonly BRIDGE=fy-br0
# Pod and Service ranges: off the netns lab's 10.77.0.0/16 and off this machine's routes
# (checked at up). The bridge's address is the node's address: the apiserver and the kubelet
# listen there so that pods can reach them (Endpoints may not hold loopback addresses).
readonly POD_CIDR=10.244.0.0/24
readonly NODE_IP=10.244.0.1
readonly SERVICE_CIDR=10.96.0.0/16
readonly API_SERVICE_IP=10.96.0.1
readonly API_PORT=6443
readonly ETCD_CLIENT=127.0.0.1:12379     # off etcd's default ports: a system etcd may use them
readonly ETCD_PEER=127.0.0.1:12380
readonly CNI_NET=fy-pods
readonly SOCK=$RUN/containerd/containerd.sock
readonly KUBECONFIG_ADMIN=$STATE/admin.kubeconfig
# Images the lab builds itself (never pulled).
readonly PAUSE_IMAGE=docker.io/ferry/pause:v1.20.2
readonly BUSYBOX_IMAGE=docker.io/ferry/busybox:dev
# Host paths used whatever the flags say: the kubelet's pod logs (hard-coded in 1.20),
# libcni's result cache, containerd 1.6's shim sockets (/run/containerd/s); down removes
# only the entries that appeared after up.
readonly HOST_DIRS=(/var/log/pods /var/log/containers /var/lib/cni /run/containerd)
# The kubelet sets the first six at start, kube-proxy the seventh, the bridge plugin the
# eighth. The three named by the lab's facts have fixed machine values; the rest are saved.
readonly SYSCTLS=(kernel.panic kernel.panic_on_oops vm.overcommit_memory vm.panic_on_oom
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.ipv4.conf.all.route_localnet
  net.ipv4.ip_forward)
readonly COMPONENTS=(etcd kube-apiserver containerd kube-controller-manager kube-scheduler
  kubelet kube-proxy)

log() { echo "k8s-lab: $*" >&2; }
die() { log "$*"; exit 1; }
[[ $(id -u) -eq 0 ]] || die "run as root"

kubectl_admin() { kubectl --kubeconfig "$KUBECONFIG_ADMIN" "$@"; }
ctr_() { ctr --address "$SOCK" "$@"; }

# ---------------------------------------------------------------------------------------
# Processes: started with setsid so that they outlive this script, recorded by PID, stopped
# only by that PID and only while it still runs the binary it was started with.

start() {
  local name=$1; shift
  mkdir -p "$RUN/pids" "$LOGS"
  # 9>&-: the lock of up/down must not live on in the daemons.
  setsid "$@" >"$LOGS/$name.log" 2>&1 </dev/null 9>&- &
  echo "$! $(readlink -f "$1")" >"$RUN/pids/$name"
}

pid_of() {
  local f=$RUN/pids/$1 pid exe
  [[ -f $f ]] || return 1
  read -r pid exe <"$f"
  [[ -d /proc/$pid && $(readlink -f "/proc/$pid/exe" 2>/dev/null) == "$exe" ]] || return 1
  echo "$pid"
}

stop() { # stop NAME...: SIGTERM to all, then wait for all (SIGKILL after 10 s)
  local name pid i pids=()
  for name in "$@"; do
    if pid=$(pid_of "$name"); then kill -TERM "$pid" 2>/dev/null || true; pids+=("$pid:$name"); fi
  done
  for ((i = 0; i < 100; i++)); do
    local alive=0 p
    for p in "${pids[@]}"; do [[ -d /proc/${p%%:*} ]] && alive=1; done
    ((alive)) || break
    sleep 0.1
  done
  for p in "${pids[@]}"; do
    if [[ -d /proc/${p%%:*} ]]; then
      log "${p#*:} (${p%%:*}) ignored SIGTERM for 10 s: SIGKILL"
      kill -KILL "${p%%:*}" 2>/dev/null || true
    fi
  done
  for name in "$@"; do rm -f "$RUN/pids/$name"; done
}

# wait_for WHAT SECONDS COMMAND...: polls a readiness check; on timeout shows the log of the
# component (WHAT) and fails.
wait_for() {
  local what=$1 secs=$2 i; shift 2
  for ((i = 0; i < secs * 5; i++)); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    if [[ -f $RUN/pids/$what ]] && ! pid_of "$what" >/dev/null; then
      log "$what exited; its log ($LOGS/$what.log):"; tail -n 30 "$LOGS/$what.log" >&2 || true
      return 1
    fi
    sleep 0.2
  done
  log "$what not ready after $secs s; its log ($LOGS/$what.log):"
  tail -n 30 "$LOGS/$what.log" >&2 || true
  return 1
}

# ---------------------------------------------------------------------------------------
# Certificates: one CA signs every serving and client certificate; identities follow the
# names the Node and RBAC authorizers expect.

# scripts/k8s-lab/pki.sh has the openssl and kubeconfig steps (shared with
# tests/bench/k8s_registry_bench.py).
. "$here/pki.sh"
cert() { pki_cert "$STATE/pki" "$@"; } # cert NAME SUBJECT [SAN]
kubeconfig_for() { # kubeconfig_for NAME: a kubeconfig using certificate NAME
  pki_kubeconfig "$STATE/$1.kubeconfig" fy-lab "https://$NODE_IP:$API_PORT" "$STATE/pki" "$1"
}

make_pki() {
  pki_ca "$STATE/pki" fy-lab-ca
  cert apiserver "/CN=kube-apiserver" \
    "IP:$NODE_IP,IP:$API_SERVICE_IP,IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  cert kubelet-serving "/CN=$NODE" "IP:$NODE_IP,DNS:$NODE"
  cert admin "/O=system:masters/CN=fy-admin"
  cert kubelet "/O=system:nodes/CN=system:node:$NODE"
  cert controller-manager "/CN=system:kube-controller-manager"
  cert scheduler "/CN=system:kube-scheduler"
  cert kube-proxy "/CN=system:kube-proxy"
  pki_service_account_keys "$STATE/pki"
  local n
  for n in admin kubelet controller-manager scheduler kube-proxy; do kubeconfig_for "$n"; done
}

# ---------------------------------------------------------------------------------------
# Host state: sysctls, host directories, the bpffs, the bridge.

save_host_state() {
  local s d
  if [[ ! -f $RUN/sysctls ]]; then
    for s in "${SYSCTLS[@]}"; do echo "$s $(sysctl -n "$s")"; done >"$RUN/sysctls"
  fi
  if [[ ! -f $RUN/host-dirs ]]; then
    for d in "${HOST_DIRS[@]}"; do
      if [[ -d $d ]]; then echo "$d present"; find "$d" -mindepth 1 -maxdepth 2 | sed 's/^/  /'
      else echo "$d absent"; fi
    done >"$RUN/host-dirs"
  fi
}

restore_host_state() {
  local s v
  # This machine's values (the lab's facts), even when no record survived a crash.
  declare -A want=([kernel.panic]=1 [kernel.panic_on_oops]=0 [vm.overcommit_memory]=0)
  if [[ -f $RUN/sysctls ]]; then
    while read -r s v; do [[ -n ${want[$s]:-} ]] || want[$s]=$v; done <"$RUN/sysctls"
  fi
  for s in "${!want[@]}"; do
    [[ $(sysctl -n "$s" 2>/dev/null) == "${want[$s]}" ]] || sysctl -qw "$s=${want[$s]}" || true
  done
  rm -f "$RUN/sysctls"

  # Host directories: remove what appeared after up (pod logs of this cluster, libcni's
  # result cache for our network); a directory that did not exist goes entirely.
  [[ -f $RUN/host-dirs ]] || return 0
  local d state line e
  while read -r d state; do
    [[ $d == /* ]] || continue
    if [[ $state == absent ]]; then rm -rf "$d"; continue; fi
    [[ -d $d ]] || continue
    while IFS= read -r e; do
      if ! grep -qxF "  $e" "$RUN/host-dirs"; then rm -rf "$e"; fi
    done < <(find "$d" -mindepth 1 -maxdepth 2 | sort -r)
  done < <(grep -v '^  ' "$RUN/host-dirs")
  rm -f "$RUN/host-dirs"
}

# HostToContainer mounts need a shared mount at the source: /sys/fs/bpf (ferryd's pins) is
# not mounted at all on this machine, or mounted private.
setup_bpffs() {
  if ! mountpoint -q /sys/fs/bpf; then
    mount -t bpf fy-bpffs /sys/fs/bpf
    echo mounted >"$RUN/bpffs"
  elif ! grep -q ' /sys/fs/bpf .*shared:' /proc/self/mountinfo; then
    echo made-shared >"$RUN/bpffs"
  fi
  mount --make-shared /sys/fs/bpf
}

teardown_bpffs() {
  [[ -f $RUN/bpffs ]] || return 0
  case $(cat "$RUN/bpffs") in
    mounted) if findmnt -n -o SOURCE /sys/fs/bpf 2>/dev/null | grep -qx fy-bpffs; then umount /sys/fs/bpf; fi ;;
    made-shared) mount --make-private /sys/fs/bpf 2>/dev/null || true ;;
  esac
  rm -f "$RUN/bpffs"
}

# The pods' netns folder (containerd's CNI_NETNS paths, /var/run/netns -> /run/netns), which
# ferry's chart mounts HostToContainer: ferryd checks each ADD's device against the pod's netns
# (docs/install.md, "The CNI chain"). It must be a shared mount point, as `ip netns add` makes
# it on first use and as it is on a systemd node; on this machine "/" is private.
setup_netns_dir() {
  mkdir -p /run/netns
  if ! mountpoint -q /run/netns; then
    mount --bind /run/netns /run/netns
    echo mounted >"$RUN/netns-dir"
  elif ! grep -q ' /run/netns .*shared:' /proc/self/mountinfo; then
    echo made-shared >"$RUN/netns-dir"
  fi
  mount --make-shared /run/netns
}

teardown_netns_dir() {
  [[ -f $RUN/netns-dir ]] || return 0
  case $(cat "$RUN/netns-dir") in
    # Busy while a namespace of someone else's (the netns lab's) is mounted below it: then it
    # stays, as `ip netns` would have left it.
    mounted) umount /run/netns 2>/dev/null || log "/run/netns stays mounted: namespaces below it are in use" ;;
    made-shared) mount --make-private /run/netns 2>/dev/null || true ;;
  esac
  rm -f "$RUN/netns-dir"
}

# The lab's images, containerd's snapshots and etcd need a few GiB where STATE lives; the
# kubelet evicts every pod below its threshold (evictionHard below), and a node under
# DiskPressure rejects new pods one by one (each shows as Evicted): refuse to start instead.
readonly LAB_MIN_FREE_GIB=6
check_disk() {
  local free_kib
  free_kib=$(df -Pk "$(dirname "$STATE")" | awk 'NR == 2 {print $4}')
  ((free_kib >= LAB_MIN_FREE_GIB * 1024 * 1024)) ||
    die "$(dirname "$STATE") has $((free_kib / 1024 / 1024)) GiB free; the lab needs $LAB_MIN_FREE_GIB GiB (images, containerd, etcd): free some (an old checkout's build/ is the usual culprit)"
}
check_ranges() {
  local r
  r=$(ip -4 route show match "$API_SERVICE_IP" | grep -v '^default' || true)
  [[ -z $r ]] || die "service range $SERVICE_CIDR collides with a route on this machine: $r"
  r=$(ip -4 route show match "$NODE_IP" | grep -v -e '^default' -e "dev $BRIDGE" || true)
  [[ -z $r ]] || die "pod range $POD_CIDR collides with a route on this machine: $r"
}

setup_bridge() {
  if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
    ip link add "$BRIDGE" type bridge
  fi
  ip addr replace "$NODE_IP/${POD_CIDR#*/}" dev "$BRIDGE"
  ip link set "$BRIDGE" up
}

# ---------------------------------------------------------------------------------------
# Configuration files.

write_configs() {
  local runc
  runc=$(command -v runc) || die "runc missing: run scripts/bootstrap.sh k8s-lab"
  mkdir -p "$STATE/bin" "$STATE/cni/net.d" "$STATE/cni/ipam" "$STATE/cni/bin" "$STATE/kubelet" "$RUN/containerd"
  # containerd's CNI plugin folder is the cluster's own: the reference plugins linked in, and
  # room for a plugin a DaemonSet installs (ferry's chart puts ferry-cni here, as it would in
  # /opt/cni/bin on a real node) without writing into the system's /usr/lib/cni.
  local plugin
  for plugin in /usr/lib/cni/*; do ln -sf "$plugin" "$STATE/cni/bin/"; done

  # runc cannot lower oom_score_adj in this VM (no CAP_SYS_RESOURCE in the bounding set):
  # the kubelet asks -998 for sandboxes and negative values for Guaranteed pods, and runc
  # then fails with "can't get final child's PID from pipe". The wrapper clamps negative
  # values in the bundle's config.json to 0 on the way to runc; nothing else changes.
  cat >"$STATE/bin/fy-runc" <<EOF
#!/bin/sh
bundle=.
prev=
for a in "\$@"; do
  case "\$prev" in --bundle|-b) bundle=\$a ;; esac
  case "\$a" in --bundle=*) bundle=\${a#--bundle=} ;; esac
  prev=\$a
done
if [ -f "\$bundle/config.json" ]; then
  sed -i -E 's/"oomScoreAdj"[[:space:]]*:[[:space:]]*-[0-9]+/"oomScoreAdj":0/' "\$bundle/config.json"
fi
exec $runc "\$@"
EOF
  chmod 755 "$STATE/bin/fy-runc"

  cat >"$STATE/cni/net.d/10-$CNI_NET.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "$CNI_NET",
  "plugins": [{
    "type": "bridge",
    "bridge": "$BRIDGE",
    "isGateway": true,
    "ipMasq": false,
    "hairpinMode": true,
    "ipam": {
      "type": "host-local",
      "dataDir": "$STATE/cni/ipam",
      "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$NODE_IP"}]],
      "routes": [{"dst": "0.0.0.0/0"}]
    }
  }]
}
EOF

  # containerd: its own root, state, socket and plugin directories (a system containerd, if
  # any, is left alone); no registry is ever contacted (images are imported).
  cat >"$STATE/containerd.toml" <<EOF
version = 2
root = "$STATE/containerd"
state = "$RUN/containerd"
oom_score = 0
[grpc]
  address = "$SOCK"
[ttrpc]
  address = "$RUN/containerd/containerd.sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "$STATE/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$STATE/bin/fy-runc"
        Root = "$RUN/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$STATE/cni/bin"
    conf_dir = "$STATE/cni/net.d"
    max_conf_num = 1
EOF

  cat >"$STATE/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
tlsCertFile: $STATE/pki/kubelet-serving.crt
tlsPrivateKeyFile: $STATE/pki/kubelet-serving.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $STATE/pki/ca.crt}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
makeIPTablesUtilChains: false
# The lab's node is this shared machine: no evictions for its disk or memory use short of
# the last GiB (a percentage of a large shared disk is many GiB that the lab never uses).
evictionHard: {memory.available: "1Mi", nodefs.available: "1Gi", imagefs.available: "1Gi", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
EOF

  cat >"$STATE/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $STATE/kube-proxy.kubeconfig}
mode: iptables
clusterCIDR: $POD_CIDR
hostnameOverride: $NODE
bindAddress: 127.0.0.1
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
oomScoreAdj: 0
# 0 leaves the machine's conntrack table size and timeouts alone.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
}

# ---------------------------------------------------------------------------------------
# Images: pause (from the source tree's pause.c, built with the binaries) and busybox.

build_images() {
  local bin=$1 img=$STATE/images root
  mkdir -p "$img"
  root=$img/pause-root && mkdir -p "$root"
  cp "$bin/pause" "$root/pause"
  "$here/oci-image.sh" "$PAUSE_IMAGE" "$root" "$img/pause.tar" /pause
  root=$img/busybox-root && mkdir -p "$root/bin" "$root/tmp" "$root/etc" "$root/www"
  cp /bin/busybox "$root/bin/busybox"
  local applet
  for applet in sh ls cat echo sleep nc httpd wget hostname ip ifconfig ps kill true false \
                grep sed env id mkdir rm printf test tail head wc date; do
    ln -sf busybox "$root/bin/$applet"
  done
  echo "root:x:0:0:root:/:/bin/sh" >"$root/etc/passwd"
  echo "root:x:0:" >"$root/etc/group"
  "$here/oci-image.sh" "$BUSYBOX_IMAGE" "$root" "$img/busybox.tar" /bin/sh
  rm -rf "$img/pause-root" "$img/busybox-root"
}

import_images() {
  local t
  for t in "$@"; do
    ctr_ -n k8s.io images import "$t" >/dev/null || die "importing $t failed"
  done
}

# ---------------------------------------------------------------------------------------

api_ready() { kubectl_admin get --raw /readyz; }
etcd_ready() { ETCDCTL_API=3 etcdctl --endpoints "http://$ETCD_CLIENT" endpoint health; }
https_ok() { curl -fsk --max-time 2 "$1"; }
node_ready() {
  [[ $(kubectl_admin get node "$NODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}') == True ]]
}
default_sa() { kubectl_admin -n default get serviceaccount default; }

up() {
  local bin start_s=$SECONDS
  for c in etcd kubectl ctr containerd curl openssl; do
    command -v "$c" >/dev/null || die "$c missing: run scripts/bootstrap.sh k8s-lab"
  done
  if pid_of kube-apiserver >/dev/null || pid_of etcd >/dev/null || pid_of kubelet >/dev/null; then
    die "a lab cluster is already up (kubeconfig $KUBECONFIG_ADMIN); run $0 down first"
  fi
  bin=$("$here/build-kubernetes.sh" build)
  check_ranges
  check_disk
  # A failed earlier run may have left files: start from nothing.
  rm -rf "$STATE"
  mkdir -p "$STATE" "$RUN/pids" "$LOGS"
  chmod 700 "$STATE"
  save_host_state
  echo "$bin" >"$RUN/bin"
  log "certificates, configuration, images"
  make_pki
  write_configs
  build_images "$bin"
  setup_bridge
  setup_bpffs
  setup_netns_dir

  start etcd "$(command -v etcd)" --name fy-etcd --data-dir "$STATE/etcd" \
    --listen-client-urls "http://$ETCD_CLIENT" --advertise-client-urls "http://$ETCD_CLIENT" \
    --listen-peer-urls "http://$ETCD_PEER" --initial-advertise-peer-urls "http://$ETCD_PEER" \
    --initial-cluster "fy-etcd=http://$ETCD_PEER" --initial-cluster-state new
  start containerd "$(command -v containerd)" --config "$STATE/containerd.toml"
  wait_for etcd 30 etcd_ready

  start kube-apiserver "$bin/kube-apiserver" \
    --etcd-servers "http://$ETCD_CLIENT" \
    --bind-address "$NODE_IP" --advertise-address "$NODE_IP" --secure-port "$API_PORT" \
    --insecure-port 0 \
    --tls-cert-file "$STATE/pki/apiserver.crt" --tls-private-key-file "$STATE/pki/apiserver.key" \
    --client-ca-file "$STATE/pki/ca.crt" \
    --kubelet-client-certificate "$STATE/pki/admin.crt" --kubelet-client-key "$STATE/pki/admin.key" \
    --kubelet-certificate-authority "$STATE/pki/ca.crt" \
    --kubelet-preferred-address-types InternalIP \
    --service-account-key-file "$STATE/pki/sa.pub" \
    --service-account-signing-key-file "$STATE/pki/sa.key" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --api-audiences https://kubernetes.default.svc.cluster.local \
    --authorization-mode Node,RBAC --allow-privileged=true \
    --service-cluster-ip-range "$SERVICE_CIDR" --profiling=false
  wait_for containerd 30 ctr_ version
  import_images "$STATE/images/pause.tar" "$STATE/images/busybox.tar"
  wait_for kube-apiserver 60 api_ready

  start kube-controller-manager "$bin/kube-controller-manager" \
    --kubeconfig "$STATE/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$STATE/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$STATE/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --port 0 --leader-elect=false \
    --controllers '*,-nodelifecycle' --use-service-account-credentials=true \
    --service-account-private-key-file "$STATE/pki/sa.key" --root-ca-file "$STATE/pki/ca.crt" \
    --cluster-signing-cert-file "$STATE/pki/ca.crt" --cluster-signing-key-file "$STATE/pki/ca.key" \
    --service-cluster-ip-range "$SERVICE_CIDR" --cluster-cidr "$POD_CIDR" --profiling=false
  start kube-scheduler "$bin/kube-scheduler" \
    --kubeconfig "$STATE/scheduler.kubeconfig" \
    --authentication-kubeconfig "$STATE/scheduler.kubeconfig" \
    --authorization-kubeconfig "$STATE/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --port 0 --leader-elect=false --profiling=false
  start kubelet "$bin/kubelet" \
    --config "$STATE/kubelet.yaml" --kubeconfig "$STATE/kubelet.kubeconfig" \
    --root-dir "$STATE/kubelet" --cert-dir "$STATE/kubelet/pki" \
    --volume-plugin-dir "$STATE/kubelet/volume-plugins" \
    --hostname-override "$NODE" --node-ip "$NODE_IP" \
    --container-runtime remote --container-runtime-endpoint "unix://$SOCK" \
    --pod-infra-container-image "$PAUSE_IMAGE" --oom-score-adj 0
  start kube-proxy "$bin/kube-proxy" --config "$STATE/kube-proxy.yaml"

  wait_for kube-controller-manager 60 https_ok https://127.0.0.1:10257/healthz
  wait_for kube-scheduler 60 https_ok https://127.0.0.1:10259/healthz
  wait_for kube-controller-manager 60 default_sa
  wait_for kubelet 90 node_ready
  # Without the node lifecycle controller nobody lifts the registration taint.
  kubectl_admin taint node "$NODE" node.kubernetes.io/not-ready- >/dev/null 2>&1 || true
  wait_for kube-proxy 60 curl -fs --max-time 2 http://127.0.0.1:10256/healthz
  log "up in $((SECONDS - start_s)) s; kubeconfig $KUBECONFIG_ADMIN"
  echo "$KUBECONFIG_ADMIN"
}

# The sandboxes' network namespaces, as containerd recorded them, so that they can be removed
# by name even when the runtime is gone.
record_netns() {
  pid_of containerd >/dev/null || return 0
  local id
  for id in $(ctr_ -n k8s.io containers ls -q 2>/dev/null); do
    ctr_ -n k8s.io containers info "$id" 2>/dev/null |
      grep -o '"path": *"/var/run/netns/cni-[^"]*"' | sed 's/.*"\(\/var[^"]*\)"/\1/' || true
  done | sort -u >>"$RUN/netns"
}

down() {
  mkdir -p "$RUN"
  # Nothing may recreate pods while they go: controllers and scheduler first.
  stop kube-controller-manager kube-scheduler
  if pid_of kube-apiserver >/dev/null && pid_of kubelet >/dev/null && pid_of containerd >/dev/null; then
    # Pods next, through the kubelet: it unmounts their volumes and the runtime calls the
    # CNI plugin's DEL (veth, IP).
    kubectl_admin delete pods --all --all-namespaces --grace-period=0 --force --wait=false \
      >/dev/null 2>&1 || true
    local i
    for ((i = 0; i < 150; i++)); do
      [[ -z $(ctr_ -n k8s.io tasks ls -q 2>/dev/null) ]] && break
      sleep 0.2
    done
  fi
  # A containerd that died (or was killed) with sandboxes left: start it again on its own
  # state, so that its tasks and the sandboxes' netns can be found and removed.
  if ! pid_of containerd >/dev/null && [[ -f $STATE/containerd.toml && -d $STATE/containerd ]]; then
    start containerd "$(command -v containerd)" --config "$STATE/containerd.toml"
    wait_for containerd 30 ctr_ version || true
  fi
  record_netns
  stop kube-proxy kubelet
  if pid_of containerd >/dev/null; then
    local id
    for id in $(ctr_ -n k8s.io tasks ls -q 2>/dev/null); do
      ctr_ -n k8s.io tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
    done
    for id in $(ctr_ -n k8s.io tasks ls -q 2>/dev/null); do
      ctr_ -n k8s.io tasks delete -f "$id" >/dev/null 2>&1 || true
    done
    for id in $(ctr_ -n k8s.io containers ls -q 2>/dev/null); do
      ctr_ -n k8s.io containers delete "$id" >/dev/null 2>&1 || true
    done
  fi
  stop kube-apiserver containerd
  stop etcd
  # Shims of our containerd that outlived it: they carry our socket's path on their command
  # line.
  local p
  for p in /proc/[0-9]*; do
    if [[ $(readlink "$p/exe" 2>/dev/null) == */containerd-shim-runc-v2 ]] &&
       tr '\0' ' ' <"$p/cmdline" 2>/dev/null | grep -qF -- "-address $SOCK "; then
      kill -KILL "${p#/proc/}" 2>/dev/null || true
    fi
  done
  # kube-proxy's chains (KUBE-*: Kubernetes' names, used by nothing else here). Its own
  # clean-up removes the service rules and their jumps but 1.20 leaves KUBE-PROXY-CANARY
  # (nat, filter, mangle) and KUBE-MARK-{DROP,MASQ} (nat): those go by name.
  local bin t c ipt
  if [[ -f $RUN/bin ]] && bin=$(cat "$RUN/bin") && [[ -x $bin/kube-proxy ]]; then
    "$bin/kube-proxy" --cleanup >/dev/null 2>&1 || true
  fi
  for ipt in iptables ip6tables; do
    for t in nat filter mangle; do
      for c in $(kube_chains "$ipt" "$t"); do "$ipt" -w -t "$t" -F "$c" 2>/dev/null || true; done
      for c in $(kube_chains "$ipt" "$t"); do "$ipt" -w -t "$t" -X "$c" 2>/dev/null || true; done
    done
  done
  # Mounts under our prefixes (overlay rootfs, sandbox shm, pod volumes), deepest first.
  local m
  for m in $(awk '{print $5}' /proc/self/mountinfo | grep -E "^($STATE|$RUN)/" | sort -r); do
    umount -l "$m" 2>/dev/null || true
  done
  if [[ -f $RUN/netns ]]; then
    while read -r m; do
      [[ -e $m ]] || continue
      umount "$m" 2>/dev/null || true
      rm -f "$m"
    done <"$RUN/netns"
  fi
  teardown_bpffs
  teardown_netns_dir
  ip link del "$BRIDGE" 2>/dev/null || true
  restore_host_state
  local bindir
  bindir=$(cat "$RUN/bin" 2>/dev/null || true)
  rm -rf "$STATE" "$RUN"
  rm -f /run/fy-k8s.lock
  verify_clean "$bindir"
  log "down"
}

kube_chains() { "$1" -w -t "$2" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^KUBE-/ {print $2}'; }

# What down promises, checked: a leftover fails down (and so make k8s-lab).
verify_clean() {
  local bindir=$1 left=() p exe s
  ip link show "$BRIDGE" >/dev/null 2>&1 && left+=("link $BRIDGE")
  grep -qE " ($STATE|$RUN)(/| )" /proc/self/mountinfo && left+=("mounts under $STATE or $RUN")
  [[ $(findmnt -n -o SOURCE /sys/fs/bpf 2>/dev/null) == fy-bpffs ]] && left+=("bpffs on /sys/fs/bpf")
  for p in iptables ip6tables; do
    for s in nat filter mangle; do
      [[ -z $(kube_chains "$p" "$s") ]] || left+=("$p KUBE-* chains in table $s")
    done
  done
  for p in /proc/[0-9]*; do
    exe=$(readlink "$p/exe" 2>/dev/null) || continue
    # This cluster's processes name its directories in their arguments; another user of the
    # cached binaries (a benchmark's own API server) does not.
    if { [[ -n $bindir && $exe == "$bindir"/* ]] || [[ $exe == */containerd-shim-runc-v2 || $exe == */containerd ]]; } &&
       tr '\0' ' ' <"$p/cmdline" 2>/dev/null | grep -qE -- "($STATE|$RUN)/"; then
      left+=("process ${p#/proc/} ($exe)")
    fi
  done
  for s in kernel.panic=1 kernel.panic_on_oops=0 vm.overcommit_memory=0; do
    [[ $(sysctl -n "${s%=*}") == "${s#*=}" ]] || left+=("sysctl ${s%=*}=$(sysctl -n "${s%=*}")")
  done
  [[ -e $STATE || -e $RUN ]] && left+=("$STATE or $RUN")
  ((${#left[@]} == 0)) && return 0
  log "left behind: ${left[*]}"
  return 1
}

status() {
  local c pid rc=0
  for c in "${COMPONENTS[@]}"; do
    if pid=$(pid_of "$c"); then printf '%-24s running (pid %s)\n' "$c" "$pid"
    else printf '%-24s stopped\n' "$c"; rc=1; fi
  done
  if [[ $rc == 0 ]] && node_ready; then echo "node $NODE Ready; kubeconfig $KUBECONFIG_ADMIN"; fi
  return $rc
}

# up, down and import are serialised between checkouts that share this machine.
lock() { exec 9>/run/fy-k8s.lock; flock 9; }
case "${1:-}" in
  up) lock; up ;;
  down) lock; down ;;
  status) status ;;
  kubeconfig) echo "$KUBECONFIG_ADMIN" ;;
  cni-dirs) echo "$STATE/cni/bin $STATE/cni/net.d" ;;  # containerd's CNI bin_dir and conf_dir
  import) shift; [[ $# -gt 0 ]] || die "import needs a tarball"; lock; import_images "$@" ;;
  *) echo "usage: $0 up|down|status|kubeconfig|import TARBALL..." >&2; exit 2 ;;
esac
