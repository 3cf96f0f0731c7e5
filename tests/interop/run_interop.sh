#!/usr/bin/env bash
# Interoperability tests for ferryd's HBONE against independent HTTP/2 stacks.
#
#   run_interop.sh node      Node.js node:http2 client  -> ferryd HBONE server (n2)
#   run_interop.sh nghttpx   ferryd HBONE client (n1)   -> nghttpx --http2-proxy
#
# Environment:
#   FERRY_BUILD_DIR      build tree holding proxy/main/ferryd and proxy/ferryctl/ferryctl
#                        (default: <repo>/build/default; ctest sets it)
#   CI=true              a missing tool (node, nghttpx, python3, curl) is a failure, not a skip
#   FERRY_INTEROP_KEEP=1 keep the temp dir (configs, certs, logs) for debugging
#
# Exit: 0 pass, 1 fail, 77 skipped (tool missing and not CI), 2 usage.
# Addresses: 127.0.5.x (node n1, workload c1) and 127.0.6.x (node n2, workload s1)
# only; ports are fixed, so the cases run one at a time (ctest RESOURCE_LOCK).
set -uo pipefail

CASE=${1:-}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BUILD=${FERRY_BUILD_DIR:-$ROOT/build/default}
[[ -d "$BUILD" ]] && BUILD=$(cd "$BUILD" && pwd) # the lab cd's into its temp dir
FERRYD=$BUILD/proxy/main/ferryd
FERRYCTL=$BUILD/proxy/ferryctl/ferryctl

TD=cluster.local
CLIENT_IP=127.0.5.10 # workload c1 (default/client) on node n1
SERVER_IP=127.0.6.10 # workload s1 (default/server) on node n2
N1_IP=127.0.5.1
N2_IP=127.0.6.1
HBONE_PORT=15008
CLIENT_ID=spiffe://$TD/ns/default/sa/client
SERVER_ID=spiffe://$TD/ns/default/sa/server
PAYLOAD=$((4 * 1024 * 1024))
# Fixed per-case app ports (the HBONE/ferry ports are shared, hence the lock).
NODE_ECHO_PORT=18080
NGHTTPX_ECHO_PORT=18081
CONNECT_PROXY_PORT=18090

say() { printf '[interop %s] %s\n' "$CASE" "$*"; }
# The prelude's skip-or-fail and the cleanup registry (on_exit) of the lab's tests.
# shellcheck source=tests/e2e/lib.sh
source "$ROOT/tests/e2e/lib.sh"
ME="[interop $CASE]"

usage() {
  echo "usage: $0 node|nghttpx" >&2
  exit 2
}
case "$CASE" in node | nghttpx) ;; *) usage ;; esac

# ---------------------------------------------------------------- prerequisites
need_tools=(python3 curl openssl)
case "$CASE" in
  node) need_tools+=(node) ;;
  nghttpx) need_tools+=(nghttpx) ;;
esac
for t in "${need_tools[@]}"; do
  command -v "$t" >/dev/null 2>&1 || e2e_skip_or_fail "required tool '$t' not found"
done
if [[ "$CASE" == node ]]; then
  node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
  ((node_major >= 20)) || e2e_skip_or_fail "node >= 20 required, found $(node --version 2>&1)"
fi
for b in "$FERRYD" "$FERRYCTL"; do
  if [[ ! -x "$b" ]]; then
    say "FAIL: $b not found or not executable (set FERRY_BUILD_DIR to the build tree)"
    exit 1
  fi
done

# ---------------------------------------------------------------- process/cleanup
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ferry-interop-$CASE.XXXXXX") || exit 1
PROC_PIDS=()
PROC_NAMES=()
CLIENT_PID=

# Exit steps, the last registered first: the client, the started processes (SIGTERM to all,
# then up to 5 s each before SIGKILL), then the temp dir.
remove_tmp() {
  if [[ "${FERRY_INTEROP_KEEP:-}" == 1 ]]; then
    say "keeping $TMP"
  else
    rm -rf "$TMP"
  fi
}
stop_all() {
  local i pid n
  if [[ -n "$CLIENT_PID" ]]; then
    kill -TERM "$CLIENT_PID" 2>/dev/null
    wait "$CLIENT_PID" 2>/dev/null
  fi
  for i in "${!PROC_PIDS[@]}"; do
    kill -TERM "${PROC_PIDS[$i]}" 2>/dev/null
  done
  for i in "${!PROC_PIDS[@]}"; do
    pid=${PROC_PIDS[$i]}
    for ((n = 0; n < 50; n++)); do # up to 5 s each
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
      say "warning: ${PROC_NAMES[$i]} (pid $pid) ignored SIGTERM, sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null
    fi
    wait "$pid" 2>/dev/null
  done
}
on_exit remove_tmp
on_exit stop_all

show_logs() {
  local f
  for f in "$TMP"/*.log; do
    [[ -e "$f" ]] || continue
    echo "----- tail -n 40 ${f##*/} -----"
    tail -n 40 "$f"
  done
  echo "-----"
}

fail() {
  say "FAIL: $*"
  show_logs
  exit 1
}

# start NAME CMD...: runs CMD in the background with output in $TMP/NAME.log.
start() {
  local name=$1
  shift
  "$@" >"$TMP/$name.log" 2>&1 &
  PROC_PIDS+=("$!")
  PROC_NAMES+=("$name")
  say "started $name (pid $!): $*"
}

# run_client LOG CMD...: runs a test client (bounded by `timeout`) with its output
# appended to $TMP/LOG.log; waits in a way that lets INT/TERM run the cleanup.
run_client() {
  local log=$1 rc
  shift
  timeout 60 "$@" >>"$TMP/$log.log" 2>&1 &
  CLIENT_PID=$!
  wait "$CLIENT_PID"
  rc=$?
  CLIENT_PID=
  ((rc == 124)) && say "client timed out (60 s): $*"
  return "$rc"
}

# stop NAME: stops one started process (SIGTERM, bounded wait, SIGKILL) and forgets it.
stop() {
  local i n pid
  for i in "${!PROC_NAMES[@]}"; do
    [[ "${PROC_NAMES[$i]}" == "$1" ]] || continue
    pid=${PROC_PIDS[$i]}
    kill -TERM "$pid" 2>/dev/null
    for ((n = 0; n < 50; n++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    unset 'PROC_PIDS[i]' 'PROC_NAMES[i]'
    say "stopped $1 (pid $pid)"
  done
}

pid_of() {
  local i
  for i in "${!PROC_NAMES[@]}"; do
    [[ "${PROC_NAMES[$i]}" == "$1" ]] && echo "${PROC_PIDS[$i]}"
  done
}

# wait_log NAME REGEX [SECONDS]: waits until NAME's log matches REGEX.
wait_log() {
  local name=$1 re=$2 secs=${3:-10} pid deadline
  pid=$(pid_of "$name")
  deadline=$((SECONDS + secs))
  while ((SECONDS <= deadline)); do
    grep -Eq -- "$re" "$TMP/$name.log" 2>/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || fail "$name exited before logging /$re/"
    sleep 0.1
  done
  fail "$name did not log /$re/ within ${secs}s"
}

# wait_ready NAME HOST: polls ferryd's readiness endpoint.
wait_ready() {
  local name=$1 host=$2 pid deadline
  pid=$(pid_of "$name")
  deadline=$((SECONDS + 15))
  while ((SECONDS <= deadline)); do
    curl -sf --max-time 2 "http://$host:15021/healthz/ready" >/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || fail "$name exited before becoming ready"
    sleep 0.1
  done
  fail "$name not ready on http://$host:15021/healthz/ready within 15s"
}

# port_free HOST PORT: fails if something already listens there (a stale run).
port_free() {
  if timeout 2 bash -c "exec 3<>/dev/tcp/$1/$2" 2>/dev/null; then
    fail "$1:$2 is already in use (a stale process from an earlier run?)"
  fi
}

# metric HOST NAME: prints the value of one sample (exact name incl. labels), or "".
metric() {
  curl -sf --max-time 3 "http://$1:15020/metrics" |
    awk -v n="$2" '$1 == n { v = $2 } END { if (v != "") printf "%d\n", v }'
}

# cmp_num A OP B: integer comparison, OP one of == != >= <= > <.
cmp_num() {
  case "$2" in
    '==') (($1 == $3)) ;; '!=') (($1 != $3)) ;;
    '>=') (($1 >= $3)) ;; '<=') (($1 <= $3)) ;;
    '>') (($1 > $3)) ;; '<') (($1 < $3)) ;;
    *) fail "cmp_num: bad operator $2" ;;
  esac
}

# expect_metric HOST NAME OP VALUE: polls (5 s) until `metric OP VALUE` holds.
expect_metric() {
  local host=$1 name=$2 op=$3 want=$4 got="" deadline=$((SECONDS + 5))
  while ((SECONDS <= deadline)); do
    got=$(metric "$host" "$name")
    if [[ "$got" =~ ^[0-9]+$ ]] && cmp_num "$got" "$op" "$want"; then
      say "metric ok: $name = $got ($op $want)"
      return 0
    fi
    sleep 0.1
  done
  fail "metric $name on $host = '${got:-missing}', want $op $want"
}

# expect_log NAME REGEX WHAT: the log must match REGEX.
expect_log() {
  grep -Eq -- "$2" "$TMP/$1.log" || fail "$3 (no /$2/ in $1.log)"
  say "ok: $3"
}

# ---------------------------------------------------------------- lab setup
setup_lab() {
  cd "$TMP" || fail "cd $TMP"
  "$FERRYCTL" ca init --dir CA --trust-domain "$TD" >ca.log 2>&1 || fail "ferryctl ca init"
  local sa
  for sa in client server; do
    "$FERRYCTL" ca issue --ca CA --out CERTS --namespace default --service-account "$sa" >>ca.log 2>&1 ||
      fail "ferryctl ca issue $sa"
    [[ -s CERTS/default/$sa/cert.pem && -s CERTS/default/$sa/key.pem ]] || fail "no SVID files for $sa"
  done
  [[ -s CERTS/bundle.pem ]] || fail "no CERTS/bundle.pem"

  cat >workloads.yaml <<EOF
workloads:
  - {name: c1, namespace: default, service_account: client, node: n1, ips: [$CLIENT_IP], hbone: true}
  - {name: s1, namespace: default, service_account: server, node: n2, ips: [$SERVER_IP], hbone: true}
EOF
  local n node_ip wl_ip
  for n in 1 2; do
    if ((n == 1)); then node_ip=$N1_IP wl_ip=$CLIENT_IP; else node_ip=$N2_IP wl_ip=$SERVER_IP; fi
    cat >n$n.yaml <<EOF
node: n$n
trust_domain: $TD
workloads_file: workloads.yaml
cert_dir: CERTS
listen:
  outbound: ["$node_ip:15001"]
  inbound_plaintext: ["$node_ip:15006"]
  hbone: ["$wl_ip:$HBONE_PORT"]
  admin: $node_ip:15000
  metrics: $node_ip:15020
  readiness: $node_ip:15021
transparent: false
original_destination: proxy_protocol
workers: 1
log_level: debug
EOF
  done
}

# ---------------------------------------------------------------- case: node
# A foreign HBONE client (Node's nghttp2-based node:http2 + OpenSSL via node:tls)
# against ferryd's HBONE server.
run_node() {
  local client=$HERE/node_connect_client.mjs
  local common=(--ca CERTS/bundle.pem --cert CERTS/default/client/cert.pem --key CERTS/default/client/key.pem
    --server "$SERVER_IP" --hbone-port "$HBONE_PORT" --local "$CLIENT_IP" --expect-san "$SERVER_ID")

  port_free "$N2_IP" 15021
  port_free "$SERVER_IP" "$HBONE_PORT"
  port_free "$SERVER_IP" "$NODE_ECHO_PORT"

  start echo python3 -u "$HERE/echo_server.py" "$SERVER_IP" "$NODE_ECHO_PORT"
  wait_log echo '^LISTENING '
  start ferryd-n2 "$FERRYD" --config n2.yaml
  wait_ready ferryd-n2 "$N2_IP"

  say "1/5 echo with ztunnel's HTTP/2 windows (4 MiB stream, 16 MiB conn, 1 MiB frames)"
  run_client node-client node "$client" --mode echo --windows ztunnel --port "$NODE_ECHO_PORT" \
    --bytes "$PAYLOAD" "${common[@]}" || fail "node client: echo (ztunnel windows)"
  say "2/5 echo with Node's default 64 KiB windows (flow-control heavy)"
  run_client node-client node "$client" --mode echo --windows default --port "$NODE_ECHO_PORT" \
    --bytes "$PAYLOAD" "${common[@]}" || fail "node client: echo (default windows)"
  say "3/5 CONNECT to a foreign authority IP and to the HBONE port itself -> 400"
  run_client node-client node "$client" --mode reject --port "$NODE_ECHO_PORT" \
    --bad-authority "127.0.6.99:$NODE_ECHO_PORT" "${common[@]}" || fail "node client: reject"
  say "4/5 anti-spoofing: the server's SVID presented from c1's IP -> 401"
  run_client node-client node "$client" --mode status --authority "$SERVER_IP:$NODE_ECHO_PORT" --expect-status 401 \
    --ca CERTS/bundle.pem --cert CERTS/default/server/cert.pem --key CERTS/default/server/key.pem \
    --server "$SERVER_IP" --hbone-port "$HBONE_PORT" --local "$CLIENT_IP" --expect-san "$SERVER_ID" ||
    fail "node client: spoofed identity"
  say "5/5 self-check: the client's URI SAN verification rejects a wrong server identity"
  local wrong=spiffe://$TD/ns/default/sa/not-the-server
  if run_client node-client-wrong-san node "$client" --mode echo --port "$NODE_ECHO_PORT" --bytes 1024 \
    --ca CERTS/bundle.pem --cert CERTS/default/client/cert.pem --key CERTS/default/client/key.pem \
    --server "$SERVER_IP" --hbone-port "$HBONE_PORT" --local "$CLIENT_IP" --expect-san "$wrong"; then
    fail "node client accepted server identity $SERVER_ID while expecting $wrong"
  fi
  expect_log node-client-wrong-san "server URI SAN $SERVER_ID != expected $wrong" \
    "client refused the server when expecting $wrong"

  expect_log node-client "echo ok: $PAYLOAD bytes byte-exact" "4 MiB echoed byte-exact (twice)"
  [[ $(grep -c 'echo ok: ' "$TMP/node-client.log") == 2 ]] || fail "expected 2 successful echo runs"
  expect_log node-client 'TLSv1.3 alpn=h2' "TLS 1.3 + ALPN h2 negotiated with ferryd"
  expect_log echo "^echo: accepted $CLIENT_IP:" "ferryd connected to the app from the tunnel's source IP $CLIENT_IP"
  [[ $(grep -c "done (peer EOF), $PAYLOAD bytes" "$TMP/echo.log") == 2 ]] ||
    fail "echo server did not see 2 clean half-closes after $PAYLOAD bytes (END_STREAM -> FIN)"
  say "ok: END_STREAM from the client reached the app as FIN, twice"

  # 5 connections: echo, echo, reject, spoof, wrong-SAN; the last one is aborted by the client
  # during the handshake (TLS 1.3: the client verifies the server before its Finished).
  expect_metric "$N2_IP" ferry_hbone_connections_accepted_total '==' 4
  expect_metric "$N2_IP" ferry_hbone_handshake_failures_total '==' 1
  expect_metric "$N2_IP" ferry_hbone_streams_accepted_total '==' 2
  expect_metric "$N2_IP" ferry_hbone_streams_rejected_total '==' 3
  expect_metric "$N2_IP" 'ferry_connections_closed_total{direction="inbound",reason="ok"}' '==' 2
  expect_metric "$N2_IP" 'ferry_connections_closed_total{direction="inbound",reason="bad_request"}' '==' 2
  expect_metric "$N2_IP" 'ferry_connections_closed_total{direction="inbound",reason="denied"}' '==' 1
  expect_metric "$N2_IP" 'ferry_bytes_received_total{direction="inbound"}' '==' $((2 * PAYLOAD))
  expect_metric "$N2_IP" 'ferry_bytes_sent_total{direction="inbound"}' '==' $((2 * PAYLOAD))
}

# ---------------------------------------------------------------- case: nghttpx
# start_nghttpx NAME SA: nghttpx as s1's HBONE server on $SERVER_IP:15008, presenting
# SA's SVID, requiring a client cert from the mesh bundle, TLS 1.3 only, ALPN h2.
start_nghttpx() {
  start "$1" nghttpx --conf=/dev/null --http2-proxy \
    --frontend="$SERVER_IP,$HBONE_PORT" --backend="$N2_IP,$CONNECT_PROXY_PORT" \
    --verify-client --verify-client-cacert=CERTS/bundle.pem \
    --tls-min-proto-version=TLSv1.3 --tls-max-proto-version=TLSv1.3 \
    --no-ocsp --single-process --log-level=INFO --accesslog-file="$TMP/$1-access.log" \
    "CERTS/default/$2/key.pem" "CERTS/default/$2/cert.pem"
  wait_log "$1" "Listening on $SERVER_IP:$HBONE_PORT"
}

# ferryd's HBONE client (node n1, outbound with a PROXY v2 header) against nghttpx
# (nghttp2 + OpenSSL) standing in for the destination's HBONE server.
run_nghttpx() {
  port_free "$N1_IP" 15021
  port_free "$N1_IP" 15001
  port_free "$SERVER_IP" "$HBONE_PORT"
  port_free "$SERVER_IP" "$NGHTTPX_ECHO_PORT"
  port_free "$N2_IP" "$CONNECT_PROXY_PORT"

  # nghttpx does not turn an END_STREAM from its HTTP/2 client into a FIN
  # towards an HTTP/1.1 CONNECT backend, so the echo server ends each exchange
  # itself after $PAYLOAD bytes (the reverse direction: FIN -> END_STREAM -> FIN).
  start echo python3 -u "$HERE/echo_server.py" "$SERVER_IP" "$NGHTTPX_ECHO_PORT" --close-after "$PAYLOAD"
  wait_log echo '^LISTENING '
  start connect-proxy python3 -u "$HERE/http1_connect_proxy.py" "$N2_IP" "$CONNECT_PROXY_PORT"
  wait_log connect-proxy '^LISTENING '
  start_nghttpx nghttpx server
  start ferryd-n1 "$FERRYD" --config n1.yaml
  wait_ready ferryd-n1 "$N1_IP"

  local i
  for i in 1 2; do
    say "$i/3 app -> n1:15001 (PROXY v2, dst $SERVER_IP:$NGHTTPX_ECHO_PORT) -> HBONE -> nghttpx -> echo"
    run_client pp2-client python3 -u "$HERE/proxy_protocol_client.py" --listener "$N1_IP:15001" \
      --src "$CLIENT_IP" --dst "$SERVER_IP:$NGHTTPX_ECHO_PORT" --bytes "$PAYLOAD" --timeout 30 ||
      fail "PROXY-protocol client run $i"
  done
  [[ $(grep -c "echo ok: $PAYLOAD bytes byte-exact" "$TMP/pp2-client.log") == 2 ]] ||
    fail "expected 2 byte-exact echoes"
  say "ok: 4 MiB echoed byte-exact through ferryd -> nghttpx, twice, clean EOF"

  expect_log nghttpx-access "^$CLIENT_IP .*\"CONNECT $SERVER_IP:$NGHTTPX_ECHO_PORT HTTP/2\" 200 " \
    "nghttpx accepted ferryd's mTLS (TLS 1.3, client cert) and HTTP/2 CONNECT from $CLIENT_IP"
  [[ $(grep -c "\"CONNECT $SERVER_IP:$NGHTTPX_ECHO_PORT HTTP/2\" 200 $PAYLOAD " "$TMP/nghttpx-access.log") == 2 ]] ||
    fail "nghttpx access log does not show 2 CONNECTs that returned $PAYLOAD bytes"
  expect_log connect-proxy "request: 'CONNECT $SERVER_IP:$NGHTTPX_ECHO_PORT HTTP/1.1'" \
    "the CONNECT authority is the original destination $SERVER_IP:$NGHTTPX_ECHO_PORT"
  expect_log connect-proxy "'Forwarded: for=\"$CLIENT_IP:[0-9]+\"'" "ferryd sent forwarded: for=\"<client ip:port>\""
  expect_log connect-proxy "'Traceparent: 00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]'" "ferryd sent a W3C traceparent"
  expect_log connect-proxy "'Baggage: [^']*k8s.namespace.name=default" "ferryd sent baggage"
  [[ $(grep -c "done, up $PAYLOAD bytes, down $PAYLOAD bytes" "$TMP/connect-proxy.log") == 2 ]] ||
    fail "CONNECT proxy did not relay $PAYLOAD bytes each way, twice"

  # One pooled HTTP/2 connection (c1 -> s1) carrying both streams.
  expect_metric "$N1_IP" ferry_hbone_connections_opened_total '==' 1
  expect_metric "$N1_IP" ferry_hbone_streams_opened_total '==' 2
  expect_metric "$N1_IP" ferry_hbone_handshake_failures_total '==' 0
  expect_metric "$N1_IP" 'ferry_connections_closed_total{direction="outbound",reason="ok"}' '==' 2
  expect_metric "$N1_IP" 'ferry_bytes_sent_total{direction="outbound"}' '==' $((2 * PAYLOAD))
  expect_metric "$N1_IP" 'ferry_bytes_received_total{direction="outbound"}' '==' $((2 * PAYLOAD))

  # Negative: the same address now answered by an HBONE server with the wrong identity
  # (c1's SVID instead of s1's). ferryd must refuse it: no tunnel, no CONNECT.
  say "3/3 nghttpx presenting $CLIENT_ID at $SERVER_IP:15008 -> ferryd refuses"
  stop nghttpx
  start_nghttpx nghttpx-wrong-id client
  run_client pp2-client-refused python3 -u "$HERE/proxy_protocol_client.py" --listener "$N1_IP:15001" \
    --src "$CLIENT_IP" --dst "$SERVER_IP:$NGHTTPX_ECHO_PORT" --bytes 65536 --timeout 30 --expect-refused ||
    fail "ferryd tunnelled to an HBONE server with the wrong identity (or did not close the app connection)"
  say "ok: the app connection was closed without data"
  if grep -q CONNECT "$TMP/nghttpx-wrong-id-access.log" 2>/dev/null; then
    fail "ferryd sent a CONNECT to a server with the wrong identity"
  fi
  say "ok: no CONNECT reached the wrong-identity server"
  expect_metric "$N1_IP" ferry_hbone_streams_opened_total '==' 2
  expect_metric "$N1_IP" ferry_hbone_handshake_failures_total '==' 1
}

say "build dir $BUILD, temp dir $TMP"
setup_lab
"run_$CASE"
say "PASS"
