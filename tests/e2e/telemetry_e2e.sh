#!/usr/bin/env bash
# Istio's standard TCP metrics (issue 16; docs/operations.md) in the network-namespace lab,
# scraped by a real Prometheus, with real applications in the lab's pods and ferryd on both
# nodes.
#
#   16 Prometheus (Debian's server, in node n1's netns) scrapes both ferryd: exact connections
#      and bytes per workload pair as both reporters; promtool check metrics; every query of
#      the shipped Grafana dashboard answers
#
# The case number is the one it had in datapath_e2e.sh. It runs on both workload sources
# (FERRY_LAB_SOURCE=kubernetes: tests/k8s/lab_k8s_e2e.sh); with FERRY_LAB_CNI=ptp or bridge the
# pods are made by the reference CNI plugins (docs/lab.md).
#
# Exit 0 all passed, 1 any failed, 77 skip (not root; under CI=true not being root fails).
# shellcheck disable=SC2016  # single-quoted programs for python3 -c are meant literally
set -euo pipefail

# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ME=telemetry_e2e

e2e_require_root "network namespaces, BPF"
e2e_require_tools ip curl python3 jq ss flock prometheus promtool
e2e_lock 600
e2e_tmpdir telemetry-e2e
on_exit e2e_lab_down

# Issue 16: Istio's standard TCP metrics, scraped by a real Prometheus (Debian's server, in
# n1's node netns: it reaches both nodes' proxy addresses, :15020). Known traffic, then the
# queries Istio's workload and service dashboards use (and every query of the shipped Grafana
# dashboard) must return exactly what was sent, per source and destination workload, as
# each node reports it.
PROM_ADDR=127.0.0.1:19090       # Prometheus's own web port, inside fy-n1
start_prometheus() {
  mkdir -p "$TMP/prometheus"
  cat >"$TMP/prometheus/prometheus.yml" <<EOF
global: {scrape_interval: 1s, scrape_timeout: 900ms, evaluation_interval: 1s}
scrape_configs:
  - job_name: ferryd
    static_configs:
      - {targets: ["10.77.1.2:15020"], labels: {node: n1}}
      - {targets: ["10.77.2.2:15020"], labels: {node: n2}}
EOF
  promtool check config "$TMP/prometheus/prometheus.yml" >/dev/null
  bg n1 "$TMP/prometheus/log" prometheus --config.file="$TMP/prometheus/prometheus.yml" \
    --storage.tsdb.path="$TMP/prometheus/data" --web.listen-address="$PROM_ADDR" --log.level=warn
  wait_for 30 "Prometheus ready on $PROM_ADDR in fy-n1" \
    "$LAB" exec n1 -- curl -sf --max-time 1 -o /dev/null "http://$PROM_ADDR/-/ready" || { tail -n 20 "$TMP/prometheus/log"; return 1; }
}
# prom_query EXPR: the API's JSON answer to an instant query.
prom_query() {
  "$LAB" exec n1 -- curl -sf --max-time 5 "http://$PROM_ADDR/api/v1/query" --data-urlencode "query=$1"
}
# prom_value EXPR: the value of a query that yields one sample (0 when it yields none).
prom_value() {
  prom_query "$1" | jq -r 'if .status != "success" then error("query failed")
                           elif (.data.result | length) == 0 then "0" else .data.result[0].value[1] end'
}
prom_value_is() { [ "$(prom_value "$1")" = "$2" ]; }
targets_up() {
  "$LAB" exec n1 -- curl -sf --max-time 2 "http://$PROM_ADDR/api/v1/targets" |
    jq -e '[.data.activeTargets[] | select(.health == "up")] | length == 2'
}
# expo_sum NODE METRIC LABELS_JSON: the sum of METRIC's samples on node N's own /metrics whose
# labels include LABELS_JSON (the exposition, parsed: what Prometheus must end up with).
EXPO_PY='
import json, re, sys
metric, want = sys.argv[1], json.loads(sys.argv[2])
total = 0.0
for line in sys.stdin:
    m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)", line)
    if not m or m.group(1) != metric:
        continue
    labels = dict(re.findall(r"(\w+)=\"((?:[^\"\\\\]|\\\\.)*)\"", m.group(3) or ""))
    if all(labels.get(k) == v for k, v in want.items()):
        total += float(m.group(4))
print(int(total))'
expo_sum() {
  "$LAB" exec "$1/proxy" -- curl -sf --max-time 2 http://127.0.0.1:15020/metrics | python3 -c "$EXPO_PY" "$2" "$3"
}
# The traffic: a server on n2/p1:9416 that reads a request to its end and answers three times
# its size; a client that makes COUNT such connections of BYTES each, checking every answer.
TRIPLE_SERVER_PY='
import socket, threading
srv = socket.create_server(("10.77.2.11", 9416))
def serve(c):
    n = 0
    while True:
        d = c.recv(65536)
        if not d: break
        n += len(d)
    c.sendall(b"r" * (3 * n))
    c.close()
while True:
    c, _ = srv.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()'
TRIPLE_CLIENT_PY='
import socket, sys
count, size = int(sys.argv[1]), int(sys.argv[2])
for i in range(count):
    s = socket.create_connection(("10.77.2.11", 9416), timeout=10)
    s.sendall(b"q" * size)
    s.shutdown(socket.SHUT_WR)
    got = 0
    while True:
        d = s.recv(65536)
        if not d: break
        got += len(d)
    s.close()
    assert got == 3 * size, "connection %d: %d bytes back, expected %d" % (i, got, 3 * size)
print("ok", count, size)'
case_istio_metrics() {
  local ns id_src id_dst src dst sel q n v rep
  ns=$(lab_env FERRY_LAB_NAMESPACE)
  start_prometheus
  assert "Prometheus scrapes both ferryd (two targets up)" wait_for 20 "two targets up" targets_up
  for n in n1 n2; do
    "$LAB" exec "$n/proxy" -- curl -sf --max-time 2 -o "$TMP/metrics-$n.txt" http://127.0.0.1:15020/metrics
    assert "promtool check metrics passes on $n's exposition" bash -c "promtool check metrics <'$TMP/metrics-$n.txt'"
  done
  if ! listening n2/p1 9416; then
    bg n2/p1 "$TMP/triple-server.log" python3 -c "$TRIPLE_SERVER_PY"
    wait_for 10 "the server on n2/p1:9416" listening n2/p1 9416
  fi
  src=$(lab_env FERRY_LAB_NAME_PREFIX)n1-p1; dst=$(lab_env FERRY_LAB_NAME_PREFIX)n2-p1
  id_src=$(lab_id n1-p1); id_dst=$(lab_id n2-p1)
  # One connection first, seen by Prometheus from both nodes: the series then exist before the
  # measured traffic, so that rates over it are not zero (a series born with its final value
  # has no increase), and the counts to add to are settled.
  sel="source_workload=\"$src\",source_workload_namespace=\"$ns\",destination_workload=\"$dst\",destination_workload_namespace=\"$ns\""
  assert "a first connection n1/p1 -> n2/p1:9416" "$LAB" exec n1/p1 -- python3 -c "$TRIPLE_CLIENT_PY" 1 100
  prom_at_least() { [ "$(prom_value "$1")" -ge "$2" ]; }
  for rep in source destination; do
    assert "Prometheus has its close (reporter=$rep)" wait_for 20 "the scrape" \
      prom_at_least "sum(istio_tcp_connections_closed_total{reporter=\"$rep\",$sel})" 1
  done
  local -A before=()
  local labels='{"source_workload":"'$src'","destination_workload":"'$dst'"}'
  for n in n1 n2; do
    for m in connections_opened connections_closed sent_bytes received_bytes; do
      before[$n.$m]=$(expo_sum "$n" "istio_tcp_${m}_total" "$labels")
    done
  done
  local count=5 size=10000
  assert "$count connections n1/p1 -> n2/p1:9416, $size bytes each way in, 3x back" \
    "$LAB" exec n1/p1 -- python3 -c "$TRIPLE_CLIENT_PY" "$count" "$size"
  # Each node reports: n1 as the source's proxy, n2 as the destination's.
  assert "Prometheus has n2's closes (reporter=destination)" wait_for 20 "the scrape after the traffic" \
    prom_value_is "sum(istio_tcp_connections_closed_total{reporter=\"destination\",$sel})" "$((before[n2.connections_closed] + count))"
  assert "... and n1's (reporter=source)" wait_for 20 "the scrape after the traffic" \
    prom_value_is "sum(istio_tcp_connections_closed_total{reporter=\"source\",$sel})" "$((before[n1.connections_closed] + count))"
  local node
  for rep in source:n1 destination:n2; do
    node=${rep#*:}; rep=${rep%:*}
    q="sum(istio_tcp_connections_opened_total{reporter=\"$rep\",$sel})"
    assert "reporter=$rep: connections opened = $count more" prom_value_is "$q" "$((before[$node.connections_opened] + count))"
    # Istio's meaning: received = the request's bytes (client to server), sent = the response's.
    q="sum(istio_tcp_received_bytes_total{reporter=\"$rep\",$sel})"
    assert "reporter=$rep: received bytes = $((count * size)) more (the requests)" \
      prom_value_is "$q" "$((before[$node.received_bytes] + count * size))"
    q="sum(istio_tcp_sent_bytes_total{reporter=\"$rep\",$sel})"
    assert "reporter=$rep: sent bytes = $((3 * count * size)) more (the responses)" \
      prom_value_is "$q" "$((before[$node.sent_bytes] + 3 * count * size))"
    q="count(istio_tcp_connections_opened_total{reporter=\"$rep\",$sel,source_principal=\"$id_src\",destination_principal=\"$id_dst\",connection_security_policy=\"mutual_tls\",request_protocol=\"tcp\"})"
    assert "reporter=$rep: principals, mutual_tls, request_protocol=tcp on the series" prom_value_is "$q" 1
  done
  # The shape of Istio's workload dashboard panels: bytes by source workload into a workload,
  # and by destination out of one (rates are extrapolated: only their presence is exact).
  q="sum(istio_tcp_received_bytes_total{reporter=\"destination\",destination_workload_namespace=\"$ns\",destination_workload=\"$dst\"}) by (source_workload, source_workload_namespace, connection_security_policy)"
  v=$(prom_query "$q")
  note "$q -> $(jq -c '[.data.result[] | {m: .metric, v: .value[1]}]' <<<"$v")"
  assert "by source workload: $src/mutual_tls is one of the rows" \
    jqt "$v" "[.data.result[] | select(.metric.source_workload == \"$src\" and .metric.connection_security_policy == \"mutual_tls\")] | length == 1"
  q="sum(rate(istio_tcp_sent_bytes_total{reporter=\"source\",source_workload_namespace=\"$ns\",source_workload=\"$src\"}[1m])) by (destination_workload, destination_workload_namespace)"
  assert "a dashboard rate query answers for $src's destinations" \
    jqt "$(prom_query "$q")" "[.data.result[] | select(.metric.destination_workload == \"$dst\" and (.value[1] | tonumber) > 0)] | length == 1"
  # Every query of the shipped dashboard answers with data, its variables set to this traffic:
  # the workload is the server (inbound panels) or the client (outbound panels), each reporter.
  local dash=$ROOT/charts/ferry/dashboards/ferry-workloads.json expr w answered
  assert "the shipped Grafana dashboard is JSON with queries" jq -e '[.. | .expr? // empty] | length > 0' "$dash"
  local by label rows
  while IFS= read -r expr; do
    answered= rows='[]'
    for w in "$dst" "$src"; do
      for rep in destination source; do
        q=$(dashboard_query "$expr" "$ns" "$w" "$rep")
        v=$(prom_query "$q") || die_case "Prometheus refused the dashboard query: $q"
        jqt "$v" '.status == "success"' >/dev/null || die_case "dashboard query failed: $q: $v"
        if jqt "$v" '(.data.result | length) > 0' >/dev/null; then
          answered="$w/$rep"
          rows=$(jq -c --argjson r "$rows" '$r + [.data.result[].metric]' <<<"$v")
        fi
      done
    done
    assert "dashboard query answers with data${answered:+ (workload/reporter $answered)}: ${expr:0:100}" test -n "$answered"
    # A panel splits only on labels that tell rows apart: none is "-" in every row (one
    # split on response_flags, which ferry always sets to "-").
    by=$(sed -n 's/.*) by (\([^)]*\)).*/\1/p' <<<"$expr")
    for label in ${by//,/ }; do
      assert "... its split label $label is not \"-\" in every row" \
        jqt "$rows" "[.[] | .$label] | any(. != \"-\" and . != null)"
    done
  done < <(jq -r '[.. | .expr? // empty] | .[]' "$dash")
}
# dashboard_query EXPR NAMESPACE WORKLOAD REPORTER: a Grafana query with its variables set.
dashboard_query() {
  local e=$1
  e=${e//\$__rate_interval/1m}; e=${e//\$__interval/1m}; e=${e//\$__range/5m}
  e=${e//\$namespace/$2}; e=${e//\$workload/$3}; e=${e//\$qrep/$4}
  printf '%s' "$e"
}

e2e_lab_up
run_case 16 "Istio TCP metrics in a real Prometheus: exact connections and bytes per workload pair, both reporters; promtool; the dashboard's queries" case_istio_metrics

echo
e2e_summary
