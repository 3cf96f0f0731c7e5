# Helpers of the chart's tests on the lab's cluster (tests/k8s/*_e2e.sh), sourced after the
# caller has set RNS (ferry's release namespace) and IMAGE (the test pods' image).
# shellcheck shell=bash

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

# pod_yaml NAME NAMESPACE COMMAND: a test pod running COMMAND under /bin/sh in IMAGE (imported
# into the lab's containerd, never pulled).
pod_yaml() {
  cat <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: $2, labels: {app: $1}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: $IMAGE
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "$3"]
EOF
}
