#!/usr/bin/env bash
# Upgrades and restarts that drop nothing (issue 19; docs/operations.md, "Upgrades and
# restarts") in the network-namespace lab: `ferry-lab upgrade nN` starts a new ferryd beside
# the running one, which takes its listening sockets over handover.socket while the old one
# retires, carrying its connections until they end.
#
#   a  under load (tests/e2e/handover_load.py in n1/p1, through the mesh to an echo server in
#      n2/p1): 200 long-lived connections, each sending its own byte pattern every 100 ms
#      and checking the echo byte for byte, and 20 new short connections a second, each
#      timed. Meanwhile 3 upgrades of n1, 3 of n2, then n1 and n2 at once. No long-lived
#      connection sees an error, no new connection fails, both ferryds carried them (access
#      log); the longest wait of a new connection is reported. A retiring ferryd ignores
#      SIGTERM. Once the long-lived connections close, every retiring ferryd exits.
#   b  a new ferryd that fails half-way: its config moves listen.admin to an address the test
#      holds in n2's proxy netns (the lab's operator endpoints live there), so it takes the
#      listeners and the datapath, then cannot bind. It exits non-zero; the running one goes
#      on serving (connections during and after it succeed, carried by n2's ferryd) and
#      counts ferry_handovers_total{result="failed"} once.
#
# FY_E2E_CASES="b" runs only some cases (b alone works: it needs no earlier upgrade). Exit 0
# all passed, 1 any failed, 77 skip (not root; under CI=true not being root fails).
# shellcheck disable=SC2016  # single-quoted programs for python3 -c are meant literally
set -euo pipefail

# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
LOAD=$ROOT/tests/e2e/handover_load.py
ME=handover_e2e
BUILD=${FERRY_BUILD_DIR:-build/default}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
FERRYD=${FERRYD:-$BUILD/proxy/main/ferryd}

e2e_require_root "network namespaces, BPF"
e2e_require_tools ip curl python3 jq ss flock
e2e_lock 600
e2e_tmpdir handover-e2e
# The lab's `down` also stops the retiring ferryds it lists.
on_exit e2e_lab_down
# FY_E2E_KEEP_LOGS=DIR: the ferryd logs (every generation writes to its node's) and the
# load's output are kept there (a developer's knob for a failure's timeline).
keep_logs() {
  local n
  mkdir -p "$FY_E2E_KEEP_LOGS"
  for n in 1 2; do cp "$STATE/n$n/ferryd.log" "$FY_E2E_KEEP_LOGS/n$n-ferryd.log" 2>/dev/null; done
  cp "$TMP"/*.out "$TMP"/*.log "$FY_E2E_KEEP_LOGS/" 2>/dev/null
  echo "$ME: logs kept in $FY_E2E_KEEP_LOGS"
}
on_exit '[ -z "${FY_E2E_KEEP_LOGS:-}" ] || keep_logs'

ECHO_PORT=9595   # the echo server's (start_echo) in n2/p1

# load NAME LONG: the load client in n1/p1 (log $TMP/NAME.out), stopped by $TMP/NAME.stop;
# returns once its long-lived connections had their first echo.
load() {
  bg n1/p1 "$TMP/$1.out" python3 "$LOAD" client --dst 10.77.2.11 --port "$ECHO_PORT" --stop "$TMP/$1.stop" \
    --long "$2" --interval 0.1 --rate 20 --short-bytes 100
  echo "$BG_PID" >"$TMP/$1.pid"
  assert "the load runs: $2 long-lived connections echoed once" \
    wait_for 60 "the load's long-lived connections" grep -q "^ready long=$2 failed=0" "$TMP/$1.out"
}
short_ok() { sed -n 's/^progress .*short_ok=\([0-9]*\).*/\1/p' "$TMP/$1.out" | tail -n 1; }
ok_reached() { [ "${2:-0}" -le "$(short_ok "$1")" ]; }
# more_short NAME N: N more short connections completed (after an upgrade: they went
# through the new generation).
more_short() {
  local base
  base=$(short_ok "$1")
  wait_for 30 "$2 more short connections" ok_reached "$1" $((${base:-0} + $2))
}
has_report() { grep -q '^{' "$TMP/$1.out"; }
# load_stop NAME: stops the load and prints its JSON report.
load_stop() {
  touch "$TMP/$1.stop"
  wait_for 60 "the load's report" has_report "$1" || { tail -n 5 "$TMP/$1.out"; return 1; }
  grep '^{' "$TMP/$1.out" | tail -n 1
}

# upgrade NODE...: ferry-lab upgrade, its lines shown; the times to serving are kept.
upgrade() {
  local out rc=0
  note "ferry-lab upgrade $* at $(date -u +%H:%M:%S.%3N)"
  out=$("$LAB" upgrade "$@" 8<&- 2>&1) || rc=$?
  printf '%s\n' "$out" | sed 's/^/      /'
  [ $rc -eq 0 ] || die_case "ferry-lab upgrade $* failed"
  sed -n 's/.*: pid [0-9]* serves, \([0-9]*\) ms after it was started.*/\1/p' <<<"$out" >>"$TMP/serve-ms"
}
gone() { ! alive "$1"; }
metric_is() { [ "$(metric "$1" "$2")" = "$3" ]; }
# both CMD1... -- CMD2...: both succeed.
both() {
  local a=()
  while [ "$1" != -- ]; do a+=("$1"); shift; done
  shift
  "${a[@]}" && "$@"
}
retiring_pids() { cat "$STATE/n1/ferryd.retiring" "$STATE/n2/ferryd.retiring" 2>/dev/null || true; }
prev_conns_at_least() { [ "$(metric "$1" ferry_handover_previous_generation_connections | cut -d. -f1)" -ge "$2" ]; }
# Access-log lines of connections to the echo port closed with another reason than ok.
not_ok_lines() { grep -hE "dst=10\.77\.2\.11:$ECHO_PORT " "$(flog n1)" "$(flog n2)" | grep -v ' reason=ok' || true; }

# ---------------------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------------------
case_upgrades_under_load() {
  local g1 h1 m1 report pid left=() i
  start_echo "$ECHO_PORT"
  load casea 200
  more_short casea 20

  g1=$(cat "$STATE/n1/ferryd.pid")
  h1=$(cat "$STATE/n2/ferryd.pid")
  note "upgrade n1 (1 of 3): pid $g1 carries the 200 long-lived connections"
  upgrade n1
  assert "n1's new ferryd sees pid $g1 retiring with the 200 long-lived connections" \
    wait_for 5 "ferry_handover_previous_generation_connections >= 200" prev_conns_at_least n1 200
  assert "n1's new ferryd counts the handover as taken" \
    test "$(metric n1 'ferry_handovers_total{result="taken"}')" = 1
  m1=$(flog_mark n1)
  kill -TERM "$g1"
  assert "the retiring pid $g1 logs SIGTERM as ignored" flog_wait n1 "$m1" "signal 15: handed over already"
  assert "... and still runs" alive "$g1"
  more_short casea 20
  for i in 2 3; do
    note "upgrade n1 ($i of 3)"
    upgrade n1
    more_short casea 20
  done
  for i in 1 2 3; do
    note "upgrade n2 ($i of 3)"
    upgrade n2
    if [ "$i" = 1 ]; then
      assert "n2's new ferryd sees its predecessor retiring with the 200 long-lived connections" \
        wait_for 5 "ferry_handover_previous_generation_connections >= 200" prev_conns_at_least n2 200
    fi
    more_short casea 20
  done
  note "upgrade n1 n2 (both at once)"
  upgrade n1 n2
  m1=$(flog_mark n1)
  more_short casea 20
  assert "the new connections are carried by the mesh (n1 outbound to n2-p1's identity, reason=ok)" \
    flog_wait n1 "$m1" "direction=outbound src=10\.77\.1\.11:[0-9]+ dst=10\.77\.2\.11:$ECHO_PORT peer=$(lab_id_re n2-p1) reason=ok"

  assert "the first generations (n1 pid $g1, n2 pid $h1) still run: they carry the long-lived connections" \
    both alive "$g1" -- alive "$h1"
  report=$(load_stop casea) || die_case "the load gave no report"
  echo "$report" >"$TMP/casea.json"
  note "load: $report"
  assert "the long-lived connections: 200, none with an error" jqt "$report" '.long == 200 and .long_errors == 0'
  assert "the short connections: more than 100 made, none failed" jqt "$report" '.short_attempted > 100 and .short_failed == 0'
  assert "every short connection's echo came back (ok = attempted)" jqt "$report" '.short_ok == .short_attempted'
  note "longest wait of a new connection: $(jq .short_max_ms <<<"$report") ms (p99 $(jq .short_p99_ms <<<"$report") ms," \
    "median $(jq .short_p50_ms <<<"$report") ms, $(jq .short_attempted <<<"$report") connections)"

  # The client closed its long-lived connections: every earlier generation holds nothing.
  for pid in $(retiring_pids); do
    if alive "$pid"; then left+=("$pid"); fi
  done
  note "retiring ferryds still running once the load had closed its connections: ${left[*]:-none} (of $(retiring_pids | wc -l) generations)"
  for pid in $(retiring_pids); do
    assert "retiring ferryd pid $pid exits once it carries nothing" wait_for 20 "pid $pid to exit" gone "$pid"
  done
  assert "no connection to :$ECHO_PORT closed with a reason other than ok (both nodes' access logs)" \
    test -z "$(not_ok_lines)"
  assert "n1 and n2 show no previous generation any more" \
    wait_for 5 "ferry_handover_previous_generation_pid 0 on both" \
    both metric_is n1 ferry_handover_previous_generation_pid 0 -- metric_is n2 ferry_handover_previous_generation_pid 0
}

case_halfway_failure() {
  local cfg=$STATE/n2/ferryd-halfway.yaml old failed0 pid rc m2 report
  start_echo "$ECHO_PORT"
  old=$(cat "$STATE/n2/ferryd.pid")
  failed0=$(metric n2 'ferry_handovers_total{result="failed"}')
  # The lab's operator endpoints live in the proxy netns (a proxy_netns given, not auto):
  # the address the new ferryd will want is held there first.
  bg n2/proxy "$TMP/holder.log" python3 -c '
import socket
s = socket.create_server(("127.0.0.1", 15099))
while True:
    s.accept()[0].close()'
  wait_for 10 "the holder of 127.0.0.1:15099 in fy-n2-proxy" listening n2/proxy 15099
  sed 's|^  admin: 127\.0\.0\.1:15000$|  admin: 127.0.0.1:15099|' "$STATE/n2/ferryd.yaml" >"$cfg"
  assert "the half-way config differs in listen.admin only" \
    bash -c "[ \"\$(diff '$STATE/n2/ferryd.yaml' '$cfg' | grep -c '^[<>]')\" = 2 ] && grep -q '^  admin: 127.0.0.1:15099$' '$cfg'"
  assert "ferryd accepts it (--check-config)" "$FERRYD" --check-config "$cfg"

  load caseb 50
  more_short caseb 20
  m2=$(flog_mark n2)
  bg n2 "$TMP/halfway.log" "$FERRYD" --config "$cfg"
  pid=$BG_PID
  note "a new ferryd (pid $pid) for n2 with listen.admin 127.0.0.1:15099, held by the test"
  wait_for 60 "the half-way ferryd to exit" gone "$pid" || { tail -n 20 "$TMP/halfway.log"; die_case "it still runs"; }
  rc=0
  wait "$pid" 2>/dev/null || rc=$?
  note "it exited with status $rc; its last lines:"
  tail -n 4 "$TMP/halfway.log" | sed 's/^/        /'
  assert "it exited non-zero" test "$rc" -ne 0
  assert "it had taken the sockets from pid $old" grep -qE "handover: took [0-9]+ sockets from ferryd pid $old" "$TMP/halfway.log"
  assert "it failed on the admin address" grep -q "15099" "$TMP/halfway.log"
  assert "n2's ferryd (pid $old) goes on serving (its log)" flog_wait n2 "$m2" "handover: ferryd pid $pid did not take over"
  assert "n2 counts ferry_handovers_total{result=\"failed\"} once more (it was $failed0)" \
    wait_for 5 "the failed handover counted" metric_is n2 'ferry_handovers_total{result="failed"}' $((failed0 + 1))
  assert "... so it is 1" metric_is n2 'ferry_handovers_total{result="failed"}' 1
  assert "pid $old still answers n2's endpoints and is ready" \
    bash -c "\"$LAB\" exec n2/proxy -- curl -sf http://127.0.0.1:15000/status | jq -e '.pid == $old and .ready == true'"
  m2=$(flog_mark n2)
  more_short caseb 20
  assert "new connections after it are carried by n2's ferryd (inbound from n1-p1's identity, reason=ok)" \
    flog_wait n2 "$m2" "direction=inbound src=10\.77\.1\.11:[0-9]+ dst=10\.77\.2\.11:$ECHO_PORT peer=$(lab_id_re n1-p1) reason=ok"
  report=$(load_stop caseb) || die_case "the load gave no report"
  note "load during and after: $report"
  assert "no long-lived connection saw an error, no new connection failed" \
    jqt "$report" '.long == 50 and .long_errors == 0 and .short_failed == 0 and .short_ok == .short_attempted'
  echo "$report" >"$TMP/caseb.json"
}

# ---------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------
e2e_lab_up

run_case a "upgrades under load (3x n1, 3x n2, n1+n2 at once): no long-lived connection broken, no new one failed; the old generations exit" case_upgrades_under_load
run_case b "a new ferryd that fails half-way (after taking the listeners) exits non-zero; the running one goes on serving" case_halfway_failure

echo
if [ -s "$TMP/serve-ms" ]; then
  echo "upgrades: $(wc -l <"$TMP/serve-ms") new ferryds served $(sort -n "$TMP/serve-ms" | head -n 1)-$(sort -n "$TMP/serve-ms" | tail -n 1) ms after their start"
fi
if [ -s "$TMP/casea.json" ]; then
  jq -r '"under load: \(.long) long-lived connections, \(.long_errors) errors, \(.long_messages) messages echoed (slowest echo \(.long_max_rtt_ms) ms); \(.short_attempted) new connections, \(.short_failed) failed, longest wait \(.short_max_ms) ms, p99 \(.short_p99_ms) ms"' "$TMP/casea.json"
fi
e2e_summary
