#!/usr/bin/env bash
# The lab cluster works as a cluster (docs/k8s-lab.md): pods get addresses from the fy-
# bridge and reach each other, and a ClusterIP Service in front of two pods is routed by
# kube-proxy to both. Runs against a cluster started with scripts/k8s-lab/cluster.sh up;
# everything it creates lives in namespace fy-smoke and is deleted at the end.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
cluster=$repo/scripts/k8s-lab/cluster.sh
logs=${FY_K8S_LOGS:-$repo/build/k8s-lab}
readonly NS=fy-smoke
readonly POD_CIDR_PREFIX=10.244.0.
readonly IMAGE=docker.io/ferry/busybox:dev

KUBECONFIG=$("$cluster" kubeconfig)
export KUBECONFIG
k() { kubectl "$@" 2>&1 | grep -v -e 'version difference' -e 'WARNING: version' || true; }
kq() { kubectl "$@"; }

failures=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

on_exit() {
  local rc=$?
  if ((rc != 0 || failures != 0)); then
    echo "--- cluster state"
    k get nodes,pods,services,endpoints -A -o wide
    k -n "$NS" describe pods | tail -n 60
    for f in "$logs"/*.log; do
      echo "--- $(basename "$f") (last 25 lines)"
      tail -n 25 "$f"
    done
  fi
  kq delete namespace "$NS" --wait=true --timeout=60s >/dev/null 2>&1 || true
}
trap on_exit EXIT

kq delete namespace "$NS" --wait=true --timeout=60s >/dev/null 2>&1 || true
kq create namespace "$NS" >/dev/null

# Two echo servers (busybox httpd answering with the pod's name) and a client.
pod() { # pod NAME LABEL COMMAND
  cat <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: $NS, labels: {app: $2}}
spec:
  terminationGracePeriodSeconds: 0
  containers:
  - name: main
    image: $IMAGE
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "$3"]
    ports: [{containerPort: 8080, name: http}]
    readinessProbe:
      tcpSocket: {port: 8080}
      periodSeconds: 1
EOF
}
serve='mkdir -p /www && hostname > /www/index.html && exec httpd -f -p 8080 -h /www'
{
  pod fy-echo-a fy-echo "$serve"; echo ---
  pod fy-echo-b fy-echo "$serve"; echo ---
  pod fy-client fy-client "$serve"
} | kq apply -f - >/dev/null
cat <<EOF | kq apply -f - >/dev/null
apiVersion: v1
kind: Service
metadata: {name: fy-echo, namespace: $NS}
spec:
  type: ClusterIP
  selector: {app: fy-echo}
  ports: [{port: 80, targetPort: http}]
EOF

if kq -n "$NS" wait --for=condition=Ready pod --all --timeout=120s >/dev/null; then
  pass "three busybox pods are Ready"
else
  fail "pods did not become Ready"; exit 1
fi

declare -A ip
for p in fy-echo-a fy-echo-b fy-client; do
  ip[$p]=$(kq -n "$NS" get pod "$p" -o jsonpath='{.status.podIP}')
  if [[ ${ip[$p]} == "$POD_CIDR_PREFIX"* ]]; then pass "$p has ${ip[$p]} from the bridge's range"
  else fail "$p has address '${ip[$p]}', not one of ${POD_CIDR_PREFIX}0/24"; fi
done
[[ ${ip[fy-echo-a]} != "${ip[fy-echo-b]}" ]] || fail "two pods share ${ip[fy-echo-a]}"

# GET / with busybox nc: the static busybox's wget dies with SIGSEGV in this image (glibc's
# static getaddrinfo wants NSS modules the image does not carry); nc needs no resolver.
http_get() { # http_get FROM_POD HOST PORT: prints the body's last line
  kq -n "$NS" exec "$1" -- sh -c "printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 5 $2 $3 | tail -n 1" 2>&1 || true
}

# Pod to pod, over the bridge.
for p in fy-echo-a fy-echo-b; do
  got=$(http_get fy-client "${ip[$p]}" 8080)
  if [[ $got == "$p" ]]; then pass "fy-client reaches $p at ${ip[$p]}:8080"
  else fail "fy-client -> ${ip[$p]}:8080 answered '$got', expected '$p'"; fi
done
# The other direction, with nc: the server side sees the client's own address.
got=$(kq -n "$NS" exec fy-echo-a -- sh -c "echo ping | nc -w 5 ${ip[fy-client]} 8080 | head -1" 2>&1 || true)
if [[ $got == HTTP/1.* ]]; then pass "fy-echo-a reaches fy-client with nc"
else fail "nc fy-echo-a -> fy-client:8080 got '$got'"; fi

# The Service: both endpoints published, kube-proxy's rules present, both answer on the VIP.
vip=$(kq -n "$NS" get service fy-echo -o jsonpath='{.spec.clusterIP}')
for ((i = 0; i < 100; i++)); do
  n=$(kq -n "$NS" get endpoints fy-echo -o jsonpath='{.subsets[*].addresses[*].ip}' | wc -w)
  ((n == 2)) && break
  sleep 0.2
done
if ((n == 2)); then pass "Service fy-echo ($vip) has 2 endpoints"; else fail "Service fy-echo has $n endpoints"; fi
for ((i = 0; i < 100; i++)); do
  iptables -w -t nat -S KUBE-SERVICES 2>/dev/null | grep -q -- "-d $vip/32 .*--dport 80 .*-j KUBE-SVC-" && break
  sleep 0.2
done
if iptables -w -t nat -S KUBE-SERVICES 2>/dev/null | grep -q -- "-d $vip/32 .*--dport 80 .*-j KUBE-SVC-"; then
  pass "kube-proxy installed the rule for $vip:80"
else
  fail "no KUBE-SERVICES rule for $vip:80"
fi
declare -A seen=()
for ((i = 0; i < 40; i++)); do
  got=$(http_get fy-client "$vip" 80)
  seen[$got]=1
  [[ -n ${seen[fy-echo-a]:-} && -n ${seen[fy-echo-b]:-} ]] && break
done
if [[ -n ${seen[fy-echo-a]:-} && -n ${seen[fy-echo-b]:-} ]]; then
  pass "both endpoints answered on $vip:80 (after $((i + 1)) requests)"
else
  fail "answers on $vip:80 were: ${!seen[*]} (want fy-echo-a and fy-echo-b)"
fi

if ((failures)); then echo "cluster_smoke: $failures failure(s)"; exit 1; fi
echo "cluster_smoke: all passed"
