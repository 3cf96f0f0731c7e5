#!/usr/bin/env bash
# A two-"node" ferry demo on loopback: two ferryd instances, pods as loopback addresses,
# real TLS 1.3 mTLS and HBONE between them, a real HTTP server. (The network-namespace
# lab with the tc datapath is the full demo; this one needs no BPF.)
set -euo pipefail
# (make demo runs scripts/demo.sh, the network-namespace lab; this is the no-BPF variant.)
cd "$(dirname "$0")/.."
B=${FERRY_BUILD_DIR:-build/default}
FERRYD=$B/proxy/main/ferryd
FERRYCTL=$B/proxy/ferryctl/ferryctl
D=/tmp/ferry-demo
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

rm -rf "$D" && mkdir -p "$D/www"
say "A CA for trust domain cluster.local and one SVID per workload (ferryctl ca)"
$FERRYCTL ca init --dir "$D/ca" --trust-domain cluster.local
$FERRYCTL ca issue --ca "$D/ca" --out "$D/certs" --namespace default --service-account client
$FERRYCTL ca issue --ca "$D/ca" --out "$D/certs" --namespace default --service-account web
cat > "$D/workloads.yaml" <<YAML
workloads:
  - {name: client, namespace: default, service_account: client, node: n1, ips: [127.0.1.10], hbone: true}
  - {name: web, namespace: default, service_account: web, node: n2, ips: [127.0.2.10], hbone: true}
YAML
for n in 1 2; do
  cat > "$D/n$n.yaml" <<YAML
node: n$n
trust_domain: cluster.local
workloads_file: workloads.yaml
cert_dir: certs
listen:
  outbound: ["127.0.$n.1:15001"]
  inbound_plaintext: ["127.0.$n.1:15006"]
  hbone: ["127.0.$n.10:15008"]
  admin: 127.0.$n.1:15000
  metrics: 127.0.$n.1:15020
  readiness: 127.0.$n.1:15021
transparent: false
original_destination: proxy_protocol
log_level: info
YAML
  $FERRYD --check-config "$D/n$n.yaml"
done

say "Starting ferryd for node n1 (client pod 127.0.1.10) and n2 (web pod 127.0.2.10)"
for n in 1 2; do
  $FERRYD --config "$D/n$n.yaml" >"$D/n$n.log" 2>&1 &
  PIDS+=($!)
done
for n in 1 2; do
  for _ in $(seq 100); do
    curl -sf "http://127.0.$n.1:15021/healthz/ready" >/dev/null && break
    sleep 0.1
  done
  curl -sf "http://127.0.$n.1:15021/healthz/ready" >/dev/null || { echo "ferryd n$n not ready"; cat "$D/n$n.log"; exit 1; }
done
echo "both ready"

say "A real HTTP server in the web pod (python3 -m http.server on 127.0.2.10:8080)"
echo "hello from the web pod, over HBONE" > "$D/www/index.html"
python3 -m http.server 8080 --bind 127.0.2.10 --directory "$D/www" >"$D/http.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 50); do curl -sf http://127.0.2.10:8080/ >/dev/null 2>&1 && break; sleep 0.1; done

say "Capturing port 15008 on loopback while the client pod calls the web pod"
CAP=""
if command -v tcpdump >/dev/null && [ "$(id -u)" = 0 ]; then
  tcpdump -i lo --immediate-mode -w "$D/wire.pcap" -U 'tcp port 15008' >/dev/null 2>"$D/tcpdump.log" &
  CAP=$!
  PIDS+=($CAP)
  for _ in $(seq 100); do grep -q "listening on" "$D/tcpdump.log" && break; sleep 0.1; done
fi
python3 scripts/demo_client.py 127.0.1.10 127.0.1.1:15001 127.0.2.10 8080 /index.html | tee "$D/answer.txt"
grep -q "hello from the web pod" "$D/answer.txt"
if [ -n "$CAP" ]; then kill -INT "$CAP"; wait "$CAP" 2>/dev/null || true; fi

say "What the web server saw (the client pod's own address, not ferryd's)"
grep "GET /index.html" "$D/http.log"

if [ -n "$CAP" ]; then
  say "What the wire carried on 15008"
  pkts=$(tcpdump -r "$D/wire.pcap" 2>/dev/null | wc -l)
  [ "$pkts" -gt 0 ] || { echo "the capture saw no packets on 15008"; exit 1; }
  tcpdump -r "$D/wire.pcap" -nn 2>/dev/null | head -4
  if tcpdump -r "$D/wire.pcap" -A 2>/dev/null | grep -q "hello from the web pod"; then
    echo "PLAINTEXT FOUND ON THE WIRE"; exit 1
  fi
  echo "$pkts packets on port 15008, none contains the page: TLS 1.3 only"
fi

say "Access logs"
grep access "$D/n1.log" "$D/n2.log" | sed 's/^[^ ]* //'
say "Counters (n1 /metrics)"
curl -s http://127.0.1.1:15020/metrics | grep -E '^ferry_(hbone_connections_opened|hbone_streams_opened|connections_closed_total\{direction="outbound",reason="ok"\}|bytes_(sent|received)_total\{direction="outbound"\})'
say "Done. Files are in $D; ferryd and the server are stopped."
