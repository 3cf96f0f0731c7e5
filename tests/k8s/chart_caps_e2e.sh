#!/usr/bin/env bash
# The chart's capabilities are enough, and each of them is needed: ferryd runs in the
# network-namespace lab (scripts/ferry-lab, docs/lab.md) as root whose capability bounding
# set is exactly what charts/ferry adds (read from `helm template`), as a container
# runtime starts it, and then with each of those capabilities taken away in turn.
#
#   1  with the chart's set: both ferryds become ready holding exactly that set, and a
#      cross-node curl n1/p1 -> n2/p1 answers 200 through the mesh, the server seeing
#      10.77.1.11 (the datapath attached, IP_TRANSPARENT, setns into the proxy netns)
#   2  without any one of them: ferryd refuses to start ("Operation not permitted"), so no
#      capability of the chart is there for nothing
#
# Exit 0 pass, 1 fail, 77 skip (not root; under CI=true not being root is a failure).
set -euo pipefail

# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../e2e/lib.sh"
ME=chart_caps_e2e

e2e_require_root "network namespaces, capabilities"
e2e_require_tools ip curl python3 setpriv flock
BUILD=${FERRY_BUILD_DIR:-$ROOT/build/default}
FERRYD_BIN=$BUILD/proxy/main/ferryd
[ -x "$FERRYD_BIN" ] || { echo "$ME: FAIL: no $FERRYD_BIN (make build)" >&2; exit 1; }
helm="$("$ROOT/scripts/k8s-tools/install.sh" --dir)/bin/helm"
e2e_lock 600
e2e_tmpdir chart-caps
on_exit e2e_lab_down

# The capabilities the chart's DaemonSet adds (default values), lower case for setpriv.
mapfile -t CAPS < <("$helm" template fy "$ROOT/charts/ferry" --values "$ROOT/tests/k8s/values/registry.yaml" \
  --show-only templates/daemonset.yaml |
  python3 -c '
import sys, yaml
ds = yaml.safe_load(sys.stdin)
for cap in ds["spec"]["template"]["spec"]["containers"][0]["securityContext"]["capabilities"]["add"]:
    print(cap.lower())')
[ ${#CAPS[@]} -gt 0 ] || { echo "$ME: FAIL: no capabilities read from the chart" >&2; exit 1; }
echo "$ME: the chart adds: ${CAPS[*]}"

# wrapper NAME CAP...: ferryd as root with only CAP... in its bounding set (exec in place,
# so ferry-lab's pid file names ferryd; ferryd's own re-exec keeps the set).
wrapper() {
  local name=$1 bounding=-all c
  shift
  for c in "$@"; do bounding="$bounding,+$c"; done
  printf '#!/bin/sh\nexec setpriv --bounding-set %s --inh-caps -all -- %q "$@"\n' "$bounding" "$FERRYD_BIN" >"$TMP/$name"
  chmod +x "$TMP/$name"
  echo "$TMP/$name"
}
cap_eff() { awk '/^CapEff/ {print $2}' "/proc/$1/status"; }

run_case() {  # run_case NAME FUNCTION: in a subshell, so that die_case ends only the case
  printf '\n== %s\n' "$1"
  if (set -e; "$2"); then PASSED=$((PASSED + 1)); else FAILED=$((FAILED + 1)); echo "FAIL  $1"; fi
}

case_enough() {
  local w want n pid before after body
  w=$(wrapper chart "${CAPS[@]}")
  want=$(setpriv --bounding-set "-all$(printf ',+%s' "${CAPS[@]}")" --inh-caps -all -- awk '/^CapEff/ {print $2}' /proc/self/status)
  FERRYD=$w FERRY_LAB_READY_TIMEOUT=20 "$LAB" up >"$TMP/up.log" 2>&1 || { cat "$TMP/up.log"; die_case "ferry-lab up failed with the chart's capabilities"; }
  ok "both ferryds ready with only ${CAPS[*]}"
  for n in n1 n2; do
    pid=$(cat "$STATE/$n/ferryd.pid")
    [ "$(cap_eff "$pid")" = "$want" ] || die_case "$n's ferryd holds CapEff $(cap_eff "$pid"), expected $want"
  done
  ok "each ferryd's effective set is exactly that ($want)"
  start_httpd n2/p1 10.77.2.11
  before=$(metric n1 ferry_hbone_connections_opened_total)
  body=$("$LAB" exec n1/p1 -- curl -sf --max-time 5 "http://10.77.2.11:$HTTP_PORT/") || die_case "curl n1/p1 -> n2/p1 failed"
  [[ $body == *"you are 10.77.1.11"* ]] || die_case "the server did not see the client pod's IP: $body"
  ok "curl n1/p1 -> n2/p1: 200, the server sees 10.77.1.11"
  after=$(metric n1 ferry_hbone_connections_opened_total)
  [ "${after%.*}" -gt "${before%.*}" ] || die_case "n1 opened no HBONE connection ($before -> $after): not through the mesh"
  ok "through the mesh (n1's ferry_hbone_connections_opened_total $before -> $after)"
  "$LAB" down >/dev/null
}

case_each_needed() {
  local drop rest w n c
  for drop in "${CAPS[@]}"; do
    rest=()
    for c in "${CAPS[@]}"; do [ "$c" = "$drop" ] || rest+=("$c"); done
    w=$(wrapper "without-$drop" "${rest[@]}")
    if FERRYD=$w FERRY_LAB_READY_TIMEOUT=5 "$LAB" up >"$TMP/up-$drop.log" 2>&1; then
      die_case "ferryd became ready without $drop: the chart grants it for nothing"
    fi
    for n in n1 n2; do
      grep -q "Operation not permitted" "$STATE/$n/ferryd.log" 2>/dev/null \
        || { cat "$TMP/up-$drop.log"; die_case "$n's ferryd did not fail for want of a permission without $drop"; }
    done
    ok "without $drop ferryd does not start: $(grep -m1 -o 'ferryd: .*Operation not permitted' "$STATE/n1/ferryd.log")"
    "$LAB" down >/dev/null
  done
}

T0=$SECONDS
run_case "1: the chart's capabilities are enough" case_enough
run_case "2: each of them is needed" case_each_needed
echo
echo "$ME: $PASSED passed, $FAILED failed ($((SECONDS - T0)) s)"
[ "$FAILED" -eq 0 ]
