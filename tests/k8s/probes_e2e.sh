#!/usr/bin/env bash
# The kubelet's probes under STRICT on a real cluster (issue 33; docs/security.md, "Probes"):
# pods of a namespace with a STRICT PeerAuthentication, probed over HTTP and TCP, with no
# change to their spec. First the negative control (datapath.exemptNode=false: ferryd
# refuses the HTTP and the TCP probe as plaintext, the HTTP-probed pod stays unready and no
# TCP probe reaches its pod), then the
# chart's default: every pod Ready and still Ready a minute
# later, while plaintext from another pod is still refused and an ALLOW policy naming one
# caller still shuts the others out. Kubernetes 1.20 (the lab's) has no gRPC probes (beta
# in 1.24): the rule does not read the bytes, so a gRPC probe passes as the HTTP one does.
# Runs against the lab cluster (scripts/k8s-lab/cluster.sh up, ferryd-image.sh imported).
# Everything it creates is named fy-*/ferry-* and removed at the end, also on failure.
# shellcheck disable=SC2016  # exit steps (on_exit) are single-quoted: evaluated at exit
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
cluster=$repo/scripts/k8s-lab/cluster.sh
build=${FERRY_BUILD_DIR:-$repo/build/default}
readonly REL=ferry RNS=ferry-system MESH=fy-probe-mesh PLAIN=fy-probe-plain
readonly IMAGE=docker.io/ferry/busybox:dev
readonly CRDS="authorizationpolicies.security.istio.io peerauthentications.security.istio.io"
# The bridge's address: the node's source address toward its pods (the kubelet's probes).
readonly NODE_IP=10.244.0.1

# shellcheck source=tests/k8s/lib.sh
source "$here/lib.sh"
k8s_prelude k8s-probes
on_exit 'rm -rf -- /sys/fs/bpf/ferry'
on_exit 'k8s_uninstall "$MESH" "$PLAIN"'
dump() {
  echo "--- ferryd's log but its access lines (last 60 lines)"; flog 2>/dev/null | grep -v ' access ' | tail -n 60
  echo "--- ferryd's last 30 access lines"; flog 2>/dev/null | grep ' access ' | tail -n 30
  echo "--- the previous ferryd's, before the upgrade (last 30 lines)"; grep -v ' access ' "$TMP/ferryd-1.log" 2>/dev/null | tail -n 30
  echo "--- ... its last 20 access lines"; grep ' access ' "$TMP/ferryd-1.log" 2>/dev/null | tail -n 20
  lab_diagnose
  kq -n "$MESH" get events 2>/dev/null | tail -n 20
}
on_failure dump

# The TCP echo on 9000 notes each connection it is handed in /hits: whether a probe reached
# the pod itself, which the kubelet's TCP probe cannot tell (below).
serve='mkdir -p /www && hostname > /www/index.html && httpd -p 8080 -h /www && printf \"#!/bin/sh\\necho hit >>/hits\\nexec cat\\n\" >/echo && chmod +x /echo && : >/hits && exec nc -ll -p 9000 -e /echo'
hits() { kq -n "$MESH" exec "$1" -- sh -c 'wc -l </hits'; }
get() { kq -n "$1" exec "$2" -- sh -c "printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 5 $3 8080 | tail -n 1"; }
ready() { [ "$(kubectl -n "$MESH" get pod "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]; }
ready_since() { kq -n "$MESH" get pod "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].lastTransitionTime}'; }
restarts() { kq -n "$MESH" get pod "$1" -o jsonpath='{.status.containerStatuses[0].restartCount}'; }
probe_said() { kubectl -n "$MESH" get events --field-selector "involvedObject.name=$1" -o jsonpath='{.items[*].message}' 2>/dev/null | grep -q -- "$2"; }
metric() {  # NAME{LABELS}: its value on the node's ferryd, 0 when absent
  curl -sf --max-time 5 http://$NODE_IP:15020/metrics | awk -v s="$1" '$1 == s {v = $2} END {print v + 0}'
}
readonly NODE_SYN='ferry_datapath_reason_packets_total{reason="NODE_SYN"}'
export -f ready probe_said metric hits
export MESH NODE_IP

# probed_pod NAME READINESS LIVENESS: a server pod (HTTP on 8080, TCP echo on 9000) whose
# probes are the kubelet's own, as an application would declare them.
probed_pod() {
  pod_yaml "$1" "$MESH" "$serve" "" "    readinessProbe: {$2, periodSeconds: 1, failureThreshold: 1}
    livenessProbe: {$3, periodSeconds: 2, failureThreshold: 15}"
}

echo "== install, the probe exemption off (the negative control)"
kq delete namespace "$MESH" "$PLAIN" --ignore-not-found --wait=true --timeout=120s >/dev/null
k8s_ca_secret "$TMP/ca" "$TMP/cluster-ca" cluster.local
read -r cni_bin cni_conf < <("$cluster" cni-dirs)
k8s_new_crds
"$HELM" install "$REL" "$repo/charts/ferry" -n "$RNS" --set image.repository=docker.io/ferry/ferryd \
  --set image.tag=dev --set image.pullPolicy=Never --set identity.source=ca \
  --set cni.binDir="$cni_bin" --set cni.confDir="$cni_conf" --set datapath.exemptNode=false \
  --wait --timeout 90s >/dev/null
kq -n "$RNS" wait --for=condition=Ready pod -l app.kubernetes.io/component=node-proxy --timeout=60s >/dev/null
check "ferryd runs with exempt_node: false (/config_dump)" \
  bash -c "kubectl -n $RNS exec $(ferry_pod) -- /usr/local/bin/ferryctl config 2>/dev/null | grep -q 'exempt_node.*false'"

kq create namespace "$MESH" >/dev/null
kq label namespace "$MESH" ferry.io/dataplane=enabled >/dev/null
kq create namespace "$PLAIN" >/dev/null
kq apply -f - >/dev/null <<EOF
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: fy-strict, namespace: $MESH}
spec:
  mtls: {mode: STRICT}
EOF
check "ferryd took the namespace's STRICT PeerAuthentication" wait_for 10 "the PeerAuthentication" \
  flog_has "policy: kubernetes PeerAuthentication $MESH/fy-strict added: applied"
kq -n "$MESH" create serviceaccount fy-caller >/dev/null
{ probed_pod fy-http 'httpGet: {path: /, port: 8080}' 'httpGet: {path: /, port: 8080}'; echo ---
  probed_pod fy-tcp 'tcpSocket: {port: 9000}' 'tcpSocket: {port: 9000}'; echo ---
  # Nothing listens on 9001: reached for real, this probe can only fail.
  probed_pod fy-tcp-closed 'tcpSocket: {port: 9001}' 'tcpSocket: {port: 9000}'; echo ---
  pod_yaml fy-client "$MESH" 'exec sleep 3600'; echo ---
  pod_yaml fy-caller "$MESH" 'exec sleep 3600' | sed 's/^spec:$/spec:\n  serviceAccountName: fy-caller/'; echo ---
  pod_yaml fy-outsider "$PLAIN" 'exec sleep 3600'; } | kq apply -f - >/dev/null
kq -n "$MESH" wait --for=condition=Ready pod fy-client fy-caller --timeout=60s >/dev/null
kq -n "$PLAIN" wait --for=condition=Ready pod fy-outsider --timeout=60s >/dev/null
http=$(pod_ip "$MESH" fy-http); tcp=$(pod_ip "$MESH" fy-tcp)
check "the kubelet's HTTP probe of the STRICT pod is refused: 'Readiness probe failed'" \
  wait_for 60 "the probe's failure" probe_said fy-http 'Readiness probe failed'
check "... by ferryd, as plaintext to a STRICT port (from the node's $NODE_IP)" \
  wait_for 10 "ferryd's access line" flog_has "direction=inbound_plaintext src=$NODE_IP:[0-9]+ dst=$http:8080 .*reason=strict_plaintext"
check "... and fy-http is not ready" bash -c "! ready fy-http"
check "the kubelet's TCP probes are refused too, by ferryd (strict_plaintext from $NODE_IP to :9000)" \
  wait_for 30 "ferryd's access line" flog_has "direction=inbound_plaintext src=$NODE_IP:[0-9]+ dst=$tcp:9000 .*reason=strict_plaintext"
# A TCP probe passes when its connect returns: ferryd completes the handshake before it
# resets, so the kubelet sees the refusal only when the reset wins the race with its own
# connect (the same holds for any proxy that accepts to judge). What is certain is where the
# probes went: none reached the pod's own server.
check "... none of them reached the pod ($(hits fy-tcp) connections at fy-tcp's server)" test "$(hits fy-tcp)" = 0
check "no connection was let through as the node's ($NODE_SYN 0)" test "$(metric "$NODE_SYN")" = 0

echo "== the chart's default: probes of STRICT pods let through"
flog >"$TMP/ferryd-1.log" 2>&1 || true
"$HELM" upgrade "$REL" "$repo/charts/ferry" -n "$RNS" --reuse-values --set datapath.exemptNode=true >/dev/null
kq -n "$RNS" rollout status daemonset "$REL" --timeout=120s >/dev/null
kq -n "$RNS" wait --for=condition=Ready pod -l app.kubernetes.io/component=node-proxy --timeout=60s >/dev/null
check "ferryd runs with exempt_node: true" \
  bash -c "kubectl -n $RNS exec $(ferry_pod) -- /usr/local/bin/ferryctl config 2>/dev/null | grep -q 'exempt_node.*true'"
check "fy-http (HTTP probes) becomes Ready with no change to its spec" \
  kq -n "$MESH" wait --for=condition=Ready pod fy-http --timeout=60s
check "fy-tcp (TCP probes) is Ready" kq -n "$MESH" wait --for=condition=Ready pod fy-tcp --timeout=60s
check "... its probes reach the pod's own server now" wait_for 10 "a probe at fy-tcp's server" \
  bash -c '[ "$(hits fy-tcp)" -gt 0 ]'
declare -A since=() restarted=()
for p in fy-http fy-tcp; do since[$p]=$(ready_since "$p"); restarted[$p]=$(restarts "$p"); done
syn0=$(metric "$NODE_SYN")
minute_end=$((SECONDS + 60))

# Within that minute: plaintext from elsewhere is still refused, mTLS still served.
outsider=$(pod_ip "$PLAIN" fy-outsider); client=$(pod_ip "$MESH" fy-client); caller=$(pod_ip "$MESH" fy-caller)
body=$(get "$PLAIN" fy-outsider "$http") || true
check "plaintext from a pod outside the mesh to the probed port is still refused ('$body')" test -z "$body"
check "... by ferryd (strict_plaintext from $outsider)" \
  wait_for 10 "the refusal" flog_has "direction=inbound_plaintext src=$outsider:[0-9]+ dst=$http:8080 .*reason=strict_plaintext"
body=$(get "$MESH" fy-client "$http") || true
check "a mesh client reaches the same port over mTLS ($body)" test "$body" = fy-http
allow_only_caller "$MESH" fy-http-callers fy-http fy-caller
check "ferryd applied an ALLOW policy naming one caller" wait_for 10 "the policy" \
  flog_has "policy: kubernetes AuthorizationPolicy $MESH/fy-http-callers added: applied"
body=$(get "$MESH" fy-caller "$http") || true
check "the named caller (sa fy-caller) reaches fy-http ($body)" test "$body" = fy-http
check "... allowed by the policy" wait_for 5 "the allowed line" \
  flog_has "direction=inbound src=$caller:[0-9]+ dst=$http:8080 .*reason=ok .*policy=\"allowed by ALLOW policy $MESH/fy-http-callers rule 0\""
body=$(get "$MESH" fy-client "$http") || true
check "another mesh client (sa default) is shut out ('$body')" test -z "$body"
check "... by the policy (policy_denied)" \
  wait_for 5 "the denied line" flog_has "direction=inbound src=$client:[0-9]+ dst=$http:8080 .*reason=policy_denied"
body=$(get "$PLAIN" fy-outsider "$http") || true
check "plaintext from outside the mesh is still refused under the policy ('$body')" test -z "$body"
out=$(kq -n "$RNS" exec "$(ferry_pod)" -- /usr/local/bin/ferryctl policy check --from node --to "$MESH/fy-http:8080" 2>&1) && rc=0 || rc=$?
while IFS= read -r line; do echo "  policy check| $line"; done <<<"$out"
check "ferryctl policy check --from node explains the probe's verdict: allowed, without ferryd (exit $rc)" \
  test "$rc" = 0 -a -n "$(grep -F 'source: the node itself' <<<"$out")" -a -n "$(grep -F 'datapath.exempt_node' <<<"$out")"
out=$(kq -n "$RNS" exec "$(ferry_pod)" -- /usr/local/bin/ferryctl policy check --from "$outsider" --to "$MESH/fy-http:8080" 2>&1) && rc=0 || rc=$?
check "... and plaintext from the outsider's address: denied (exit $rc)" test "$rc" = 3

# The rest of the minute, watched: a probe failure would turn a pod unready at once
# (failureThreshold 1, every second).
unready=
while ((SECONDS < minute_end)); do
  for p in fy-http fy-tcp; do ready "$p" || unready="$unready $p@$((60 - minute_end + SECONDS))s"; done
  sleep 1
done
check "both pods stayed Ready for the whole minute${unready:+ (not ready:$unready)}" test -z "$unready"
for p in fy-http fy-tcp; do
  check "$p: Ready since ${since[$p]}, unchanged; ${restarted[$p]} restarts, unchanged" \
    bash -c "[ '$(ready_since "$p")' = '${since[$p]}' ] && [ '$(restarts "$p")' = '${restarted[$p]}' ]"
done
syn1=$(metric "$NODE_SYN")
echo "probes let through in that minute: $((syn1 - syn0)) ($NODE_SYN $syn0 -> $syn1)"
# Two pods probed for readiness every second and for liveness every two seconds.
check "the metric counted them (at least 150 in the minute)" test $((syn1 - syn0)) -ge 150
check "a TCP probe of a port nobody listens on still fails: probes reach the pod itself" \
  bash -c "probe_said fy-tcp-closed 'Readiness probe failed' && ! ready fy-tcp-closed"

((failures == 0)) || { echo "probes_e2e: $failures check(s) failed"; exit 1; }
echo "probes_e2e: all passed"
