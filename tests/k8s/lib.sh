# Helpers of the chart's tests on the lab's cluster (tests/k8s/*_e2e.sh), sourced after the
# caller has set RNS (ferry's release namespace), REL (its Helm release) and IMAGE (the test
# pods' image). The prelude and the cleanup registry (on_exit, on_failure, e2e_tmpdir) are
# tests/e2e/lib.sh's; its helpers of the same names as the ones below (wait_for, flog) are
# the netns lab's and replaced here.
# shellcheck shell=bash
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../e2e/lib.sh"

# k8s_prelude NAME: KUBECONFIG (the lab cluster's), HELM (the project's, scripts/k8s-tools),
# TMP (/tmp/fy-NAME.XXXXXX, removed at exit); the helpers that `bash -c` checks call exported.
k8s_prelude() {
  KUBECONFIG=$("$ROOT/scripts/k8s-lab/cluster.sh" kubeconfig)
  export KUBECONFIG
  HELM=$("$ROOT/scripts/k8s-tools/install.sh" --dir)/bin/helm
  e2e_tmpdir "$1"
  export -f kq ferry_pod flog flog_has
  export RNS
}
# k8s_uninstall NAMESPACE...: the test's namespaces, ferry's release and its namespace, and the
# CRDs this run's install brought (new_crds: Helm leaves a chart's CRDs behind on uninstall),
# each by name. An exit step: `on_exit 'k8s_uninstall "$MESH"'`.
k8s_uninstall() {
  local crd
  kq delete namespace "$@" --wait=true --timeout=60s >/dev/null 2>&1
  "$HELM" uninstall "$REL" -n "$RNS" --wait --timeout 60s >/dev/null 2>&1
  kq delete namespace "$RNS" --wait=true --timeout=60s >/dev/null 2>&1
  for crd in ${new_crds:-}; do kq delete crd "$crd" --wait=true --timeout=60s >/dev/null 2>&1; done
}

# kubectl without the version-skew warning of a newer client (the CI image's is 1.32).
kq() { kubectl "$@" 2> >(grep -v -e 'version difference' -e 'WARNING: version' >&2); }

failures=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
check() { local what=$1; shift; if "$@"; then pass "$what"; else fail "$what"; fi; }
# wait_for SECONDS WHAT CMD...: polls CMD every 0.2 s (a readiness signal, not a sleep).
wait_for() {
  local seconds=$1 deadline=$((SECONDS + $1)) what=$2; shift 2
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || { echo "timed out after $seconds s waiting for $what" >&2; return 1; }
    sleep 0.2
  done
}
# wait_namespaces_gone NS...: a namespace the previous test deleted may still be terminating
# (its pods' grace periods), and creating it again would fail "object is being deleted".
wait_namespaces_gone() {
  local ns
  for ns in "$@"; do
    wait_for 180 "namespace $ns to go" bash -c "! kubectl get namespace '$ns' >/dev/null 2>&1"
  done
}
# lab_diagnose: what a failed test prints about the cluster. The node's pressure conditions
# and the pods that are not running, counted by phase and reason (a node under DiskPressure
# rejects every new pod: listing each of hundreds of Evicted pods hid the one line that
# said why), the newest warnings and the free space where the kubelet keeps its files.
lab_diagnose() {
  echo "--- node conditions"
  kq get nodes -o jsonpath='{range .items[*]}{.metadata.name}{range .status.conditions[*]}{"  "}{.type}={.status}{end}{"\n"}{end}' 2>/dev/null
  echo "--- pods by namespace, phase and reason (not Running)"
  kq get pods -A -o jsonpath='{range .items[*]}{.metadata.namespace} {.status.phase} {.status.reason}{"\n"}{end}' 2>/dev/null |
    grep -v ' Running $' | sort | uniq -c
  echo "--- pods running"
  kq get pods -A -o wide --field-selector=status.phase=Running 2>/dev/null
  echo "--- newest warnings"
  kq get events -A --field-selector=type=Warning --sort-by=.lastTimestamp 2>/dev/null | tail -n 15
  echo "--- free space of the kubelet's filesystem"
  df -h /var/lib 2>/dev/null | tail -n 1
}
# ferryd's pod (the DaemonSet's; ferry-ca's pods carry another component) and its log.
ferry_pod() {
  kq -n "$RNS" get pods -l app.kubernetes.io/name=ferry,app.kubernetes.io/component=node-proxy \
    -o jsonpath='{.items[0].metadata.name}'
}
flog() { kq -n "$RNS" logs "$(ferry_pod)"; }
# grep reads the whole log: with -q it would stop at the first match, and under pipefail the
# SIGPIPE that kubectl then gets would fail a check that matched (a long log: thousands of
# access lines).
flog_has() { flog | grep -E -- "$1" >/dev/null; }
# pod_ip NS NAME: the pod's IP. The kubelet reports it a moment after the pod's sandbox is up,
# which may be after another pod of the same apply is Ready: waited for (60 s), never empty.
pod_ip() {
  local ip deadline=$((SECONDS + 60))
  until ip=$(kq -n "$1" get pod "$2" -o jsonpath='{.status.podIP}') && [ -n "$ip" ]; do
    ((SECONDS < deadline)) || { echo "pod $1/$2 has no IP after 60 s" >&2; return 1; }
    sleep 0.2
  done
  echo "$ip"
}

# netns_of_ip IP: the pod network namespace (containerd's, in /run/netns) holding IP.
netns_of_ip() {
  local ns
  for ns in $(ip netns list | awk '{print $1}'); do
    ip -n "$ns" -4 -o addr show 2>/dev/null | grep -q " inet $1/" && { echo "$ns"; return 0; }
  done
  return 1
}

# pod_yaml NAME NAMESPACE COMMAND [SERVICEACCOUNT [CONTAINER_LINES]]: a test pod running
# COMMAND under /bin/sh in IMAGE (imported into the lab's containerd, never pulled), as
# SERVICEACCOUNT when given, its container with CONTAINER_LINES (probes) added.
pod_yaml() {
  cat <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: $2, labels: {app: $1}}
spec:${4:+
  serviceAccountName: $4}
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: $IMAGE
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "$3"]${5:+
$5}
EOF
}

# allow_only_caller NAMESPACE POLICY APP SERVICEACCOUNT: the AuthorizationPolicy POLICY in
# NAMESPACE that lets only SERVICEACCOUNT of NAMESPACE reach the pods labelled app: APP.
allow_only_caller() {
  kq apply -f - >/dev/null <<EOF
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: $2, namespace: $1}
spec:
  selector: {matchLabels: {app: $3}}
  action: ALLOW
  rules:
  - from: [{source: {principals: [cluster.local/ns/$1/sa/$4]}}]
EOF
}

# bridge_cap_start NAME: TCP on the lab's bridge (BRIDGE) captured into $TMP/NAME.pcap (128
# bytes a packet: the headers), returning once tcpdump listens; its PID is tcpdump_pid, which
# the caller's exit step kills. bridge_cap_stop ends it (SIGINT: it flushes the file).
bridge_cap_start() {
  tcpdump -i "$BRIDGE" -n -s 128 -U --immediate-mode -w "$TMP/$1.pcap" "tcp" >"$TMP/tcpdump-$1.log" 2>&1 &
  tcpdump_pid=$!
  wait_for 10 "tcpdump" grep -q "listening on" "$TMP/tcpdump-$1.log"
}
bridge_cap_stop() {
  kill -INT "$tcpdump_pid" 2>/dev/null; wait "$tcpdump_pid" 2>/dev/null || true
  tcpdump_pid=
}

# k8s_ca_secret ROOT_DIR SIGNER_DIR TRUST_DOMAIN: a root CA kept in ROOT_DIR (as `ferryctl ca
# init` on an operator's machine), an intermediate of it in SIGNER_DIR, and RNS made afresh
# holding them as the Secret ferry-ca (ca.pem, ca.key: the intermediate; bundle.pem: the root).
k8s_ca_secret() {
  local ferryctl=${FERRY_BUILD_DIR:-$ROOT/build/default}/proxy/ferryctl/ferryctl
  "$ferryctl" ca init --dir "$1" --trust-domain "$3" >/dev/null
  "$ferryctl" ca intermediate --ca "$1" --out "$2" --lifetime 720h >/dev/null
  wait_namespaces_gone "$RNS"
  kq create namespace "$RNS" >/dev/null
  kq -n "$RNS" create secret generic ferry-ca --from-file=ca.pem="$2/ca.pem" \
    --from-file=ca.key="$2/ca.key" --from-file=bundle.pem="$1/ca.pem" >/dev/null
}
# k8s_new_crds: new_crds, the chart's CRDs (CRDS) the cluster does not have yet: the install
# brings them, k8s_uninstall removes them (by name).
k8s_new_crds() {
  local crd
  new_crds=
  for crd in $CRDS; do kq get crd "$crd" >/dev/null 2>&1 || new_crds="$new_crds $crd"; done
}
