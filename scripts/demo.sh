#!/usr/bin/env bash
# make demo: the two-node network-namespace lab with ferryd and the tc datapath on each
# node, real servers in pods (an HTTP server and iperf3) and real clients across nodes.
# Leaves the lab up; `scripts/ferry-lab down` removes it.
set -euo pipefail
cd "$(dirname "$0")/.."
LAB=scripts/ferry-lab
FERRYCTL=${FERRYCTL:-${FERRY_BUILD_DIR:-build/default}/proxy/ferryctl/ferryctl}
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
if [ "$(id -u)" != 0 ]; then
  echo "make demo builds network namespaces and loads BPF programs: run it as root" >&2
  echo "(scripts/demo-loopback.sh shows ferryd without the datapath, as any user)" >&2
  exit 1
fi
T=/run/ferry-lab-demo
rm -rf "$T" && mkdir -p "$T"

say "Bringing up the lab: nodes fy-n1, fy-n2; pods 10.77.1.11/12 and 10.77.2.11/12; ferryd on each node"
$LAB up

say "Kernel features and the injection mode ferryd chose (node n1)"
$LAB exec n1/proxy -- curl -s http://127.0.0.1:15000/datapath

say "Servers in pod n2/p1 (10.77.2.11): an HTTP server on :8080 and iperf3 on :5201"
echo "hello from pod n2/p1, reached over HBONE" > "$T/index.html"
$LAB exec n2/p1 -- sh -c "cd $T && exec python3 -m http.server 8080 --bind 10.77.2.11 >$T/http.log 2>&1" &
$LAB exec n2/p1 -- iperf3 -s -B 10.77.2.11 -D --logfile "$T/iperf3-server.log"
for _ in $(seq 100); do
  $LAB exec n2/p1 -- curl -sf -o /dev/null http://10.77.2.11:8080/ 2>/dev/null && break
  sleep 0.1
done

say "Capturing the wire between the nodes (fy-wire1) while pod n1/p1 calls pod n2/p1"
$LAB exec n1 -- tcpdump -ni fy-wire1 --immediate-mode -U -w "$T/wire.pcap" tcp >/dev/null 2>"$T/tcpdump.log" &
CAP=$!
for _ in $(seq 100); do grep -q "listening on" "$T/tcpdump.log" 2>/dev/null && break; sleep 0.1; done
$LAB exec n1/p1 -- curl -s http://10.77.2.11:8080/index.html | tee "$T/answer.txt"
grep -q "reached over HBONE" "$T/answer.txt"
kill -INT "$CAP" 2>/dev/null || true
wait "$CAP" 2>/dev/null || true

say "What the HTTP server saw: the client pod's own address"
grep "GET /index.html" "$T/http.log"

say "What the wire carried"
tcpdump -nr "$T/wire.pcap" 2>/dev/null | awk '{print $3, $4, $5}' | sort | uniq -c | sort -rn | head -4
if tcpdump -r "$T/wire.pcap" -A 2>/dev/null | grep -q "reached over HBONE"; then
  echo "PLAINTEXT ON THE WIRE"; exit 1
fi
echo "only port 15008 (HBONE, TLS 1.3) between the pods; the page never appears in plaintext"

say "iperf3 from pod n1/p1 to pod n2/p1 through the mesh (5 s)"
$LAB exec n1/p1 -- iperf3 -c 10.77.2.11 -t 5 | tail -4

say "An authorization policy (Istio's AuthorizationPolicy): only pod n1/p1 may call pod n2/p1"
POLICIES=/run/ferry-lab/policies.yaml
generation() { $LAB exec n2/proxy -- curl -s http://127.0.0.1:15020/metrics | awk '$1 == "ferry_policy_generation" {print $2}'; }
before=$(generation)
cat >"$POLICIES.tmp" <<'EOF'
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: n2-p1-callers, namespace: default}
spec:
  selector: {matchLabels: {app: n2-p1}}
  action: ALLOW
  rules:
  - from: [{source: {principals: [cluster.local/ns/default/sa/n1-p1]}}]
EOF
mv "$POLICIES.tmp" "$POLICIES"
sed 's/^/    /' "$POLICIES"
for _ in $(seq 100); do [ "$(generation)" != "$before" ] && break; sleep 0.1; done
printf 'pod n1/p1: '
$LAB exec n1/p1 -- curl -s -o /dev/null -w 'HTTP %{http_code}\n' http://10.77.2.11:8080/index.html
printf 'pod n1/p2: '
if $LAB exec n1/p2 -- curl -s -o /dev/null --max-time 5 http://10.77.2.11:8080/index.html; then
  echo "ALLOWED, but the policy denies it"; exit 1
fi
echo "refused (the connection was reset: n2's ferryd answered the tunnel's CONNECT with 401)"
for _ in $(seq 50); do grep -q 'reason=policy_denied' /run/ferry-lab/n2/ferryd.log && break; sleep 0.1; done
echo "n2's access log:"
grep 'reason=policy_denied' /run/ferry-lab/n2/ferryd.log | tail -1 | sed 's/^/    /'
echo "# ferry lab policies (none)" >"$POLICIES"

say "Istio's standard TCP metrics, as node n2's ferryd reports the calls it received (reporter=destination)"
$LAB exec n2/proxy -- curl -s http://127.0.0.1:15020/metrics |
  grep -E '^istio_tcp_(connections_opened|sent_bytes|received_bytes)_total\{reporter="destination"' |
  sed -E 's/\{reporter="destination",source_workload="([^"]*)",.*destination_workload="([^"]*)",.*connection_security_policy="([^"]*)".*\} /{\1 -> \2, \3} /' |
  sed 's/^/    /'
echo "(every series also names namespaces, principals, app, version, canonical service and cluster: docs/operations.md)"

say "ferryctl status on node n1 (the admin API, docs/operations.md)"
$LAB exec n1/proxy -- "$FERRYCTL" status | sed 's/^/    /'

say "The lab stays up. Try: scripts/ferry-lab exec n1/p2 -- curl http://10.77.2.11:8080/   Remove it: scripts/ferry-lab down"
