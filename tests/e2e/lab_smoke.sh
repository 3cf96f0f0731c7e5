#!/usr/bin/env bash
# Smoke test of the network-namespace lab (scripts/ferry-lab, docs/lab.md), without ferryd:
# `ferry-lab up --no-ferryd`, then plain routing between pods (same node and across the
# wire, ICMP and TCP), node -> proxy netns, the proxy netns's mark rule and local table,
# the bpffs; then `ferry-lab down` and nothing of the lab may remain.
#
# Exit 0 pass, 1 fail, 77 skip (not root; under CI=true not being root is a failure).
# shellcheck disable=SC2016  # single-quoted scripts for bash -c are meant literally
set -euo pipefail

# lab_ping, the tests' HTTP server (HTTPD_PY: GET answers "hello from NAME; you are
# CLIENT-IP", each request logged as "CLIENT-IP:PORT METHOD PATH CODE"), the prelude and cleanup.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ME=lab_smoke

e2e_require_root "network namespaces"
e2e_require_tools ip curl python3 mountpoint flock
e2e_lock 300
e2e_tmpdir lab-smoke
on_exit e2e_lab_down
FAILS=0

step() { printf '\n== %s\n' "$*"; }
pass() { printf '  ok    %s\n' "$*"; }
fail() { printf '  FAIL  %s\n' "$*"; FAILS=$((FAILS + 1)); }
check() {  # check DESCRIPTION CMD...
  local d=$1; shift
  if "$@" >"$TMP/out" 2>&1; then pass "$d"; else fail "$d"; sed 's/^/        /' "$TMP/out"; fi
}

start_server() {  # start_server TARGET IP PORT NAME; returns when it answers
  local t=$1 ip=$2 port=$3 name=$4 pid
  "$LAB" exec "$t" -- python3 -c "$HTTPD_PY" "$ip" "$port" "$name" >"$TMP/$name.log" 2>&1 8<&- &
  pid=$!
  track "$pid"
  for _ in $(seq 100); do
    if "$LAB" exec "$t" -- curl -sf --max-time 1 -o /dev/null "http://$ip:$port/"; then return 0; fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "lab_smoke: server $name on $ip:$port did not come up:" >&2
  cat "$TMP/$name.log" >&2
  return 1
}
http_get_expect() {  # http_get_expect TARGET URL EXPECTED-SUBSTRING
  local out
  out=$("$LAB" exec "$1" -- curl -sS --max-time 5 "$2") || return 1
  echo "$out"
  grep -qF -- "$3" <<<"$out" || { echo "expected '$3'"; return 1; }
}
no_fy_netns() { ! ip netns list | grep -E '^fy-n[0-9]'; }
# The lab's own link names only (scripts/ferry-lab: fyN-pM, fyN-px, fy-wireN): other fy-
# objects (the Kubernetes lab's bridge) are not the lab's to judge.
no_fy_links() { ! ip -o link show | awk -F': ' '{print $2}' | grep -E '^(fy[0-9]+-|fy-wire[0-9])'; }

step "ferry-lab down (leftovers of a crashed run), then up --no-ferryd"
"$LAB" down
bpffs_preexisting=0   # a bpffs the lab did not mount must survive `down`
if mountpoint -q "$BPFFS"; then bpffs_preexisting=1; fi
"$LAB" up --no-ferryd

step "layout"
check "8 lab namespaces" bash -c '[ "$(ip netns list | grep -cE "^fy-n[12](-p[12]|-proxy)?( |$)")" -eq 8 ]'
check "pod n1/p1 eth0 is 10.77.1.11/32" bash -c "ip -n fy-n1-p1 -o addr show dev eth0 | grep -qF 'inet 10.77.1.11/32'"
check "pod n2/p2 eth0 is 10.77.2.12/32" bash -c "ip -n fy-n2-p2 -o addr show dev eth0 | grep -qF 'inet 10.77.2.12/32'"
check "pod default route via 169.254.1.1 onlink" bash -c "ip -n fy-n1-p1 route show default | grep -qE 'via 169.254.1.1 dev eth0.*onlink'"
check "node n1 routes pod /32s on fy1-pM" bash -c "ip -n fy-n1 route show 10.77.1.12 | grep -qF 'dev fy1-p2'"
check "node n1 routes 10.77.2.0/24 via 192.168.77.2" bash -c "ip -n fy-n1 route show 10.77.2.0/24 | grep -qF 'via 192.168.77.2 dev fy-wire1'"
check "proxy n2 eth0 is 10.77.2.2/32, host side fy2-px" bash -c "ip -n fy-n2-proxy -o addr show dev eth0 | grep -qF 'inet 10.77.2.2/32' && ip -n fy-n2 link show dev fy2-px >/dev/null"
check "proxy n1: fwmark 0x1000/0x1000 -> table 100" bash -c "ip -n fy-n1-proxy rule show | grep -qF 'fwmark 0x1000/0x1000 lookup 100'"
check "proxy n1: table 100 local default dev lo" bash -c "ip -n fy-n1-proxy route show table 100 | grep -qE '^local (default|0.0.0.0/0) dev lo'"
check "node netns forwards" bash -c '[ "$(ip netns exec fy-n2 cat /proc/sys/net/ipv4/ip_forward)" = 1 ]'
check "bpffs mounted at $BPFFS" bash -c "[ \"\$(stat -f -c %T $BPFFS)\" = bpf_fs ]"
check "pin dirs visible inside ip netns exec" "$LAB" exec n1 -- test -d "$BPFFS/n1" -a -d "$BPFFS/n2"
check "workloads file and node configs written" test -s "$STATE/workloads.yaml" -a -s "$STATE/n1/ferryd.yaml" -a -s "$STATE/n2/ferryd.yaml"

step "ICMP"
check "n1/p1 -> n2/p1 (across the wire)" lab_ping n1/p1 10.77.2.11
check "n1/p1 -> n1/p2 (same node)" lab_ping n1/p1 10.77.1.12
check "n2/p2 -> n1/p2 (across, other way)" lab_ping n2/p2 10.77.1.12
check "node n1 -> proxy n1 (10.77.1.2)" lab_ping n1 10.77.1.2
check "node n2 -> proxy n2 (10.77.2.2)" lab_ping n2 10.77.2.2

step "TCP (HTTP servers in pods, curl from pods)"
start_server n2/p1 10.77.2.11 8080 n2-p1
start_server n1/p2 10.77.1.12 8080 n1-p2
start_server n1/proxy 10.77.1.2 18080 n1-proxy
check "n1/p1 -> n2/p1:8080 across nodes, source IP kept" http_get_expect n1/p1 http://10.77.2.11:8080/ "hello from n2-p1; you are 10.77.1.11"
check "n2/p2 -> n2/p1:8080 same node" http_get_expect n2/p2 http://10.77.2.11:8080/ "you are 10.77.2.12"
check "n1/p1 -> n1/p2:8080 same node" http_get_expect n1/p1 http://10.77.1.12:8080/ "hello from n1-p2; you are 10.77.1.11"
check "n2/p2 -> n1/p2:8080 across nodes" http_get_expect n2/p2 http://10.77.1.12:8080/ "you are 10.77.2.12"
check "node n1 -> proxy n1:18080" http_get_expect n1 http://10.77.1.2:18080/ "hello from n1-proxy"
check "pod n1/p1 -> proxy n1:18080" http_get_expect n1/p1 http://10.77.1.2:18080/ "you are 10.77.1.11"
check "server log of n2-p1 names the client pod" grep -qE '^10\.77\.1\.11:[0-9]+ GET / 200' "$TMP/n2-p1.log"

step "ferry-lab down"
"$LAB" down
check "no lab network namespace" no_fy_netns
check "no lab link in the root netns" no_fy_links
check "state dir $STATE removed" test ! -e "$STATE"
if [ $bpffs_preexisting -eq 1 ]; then
  check "pre-existing bpffs at $BPFFS kept, lab pins gone" bash -c "mountpoint -q $BPFFS && [ ! -e $BPFFS/n1 ] && [ ! -e $BPFFS/n2 ]"
else
  check "no bpffs left at $BPFFS" bash -c "! mountpoint -q $BPFFS"
fi
# down stops every process in a lab netns; ours are then zombies until reaped here.
mapfile -t SERVERS < <(awk '{print $1}' "$PIDS")
check "test servers gone" bash -c 'for p in "$@"; do st=$(awk "{print \$3}" /proc/$p/stat 2>/dev/null || true); [ -z "$st" ] || [ "$st" = Z ] || { echo "pid $p alive ($st)"; exit 1; }; done' _ ${SERVERS[@]+"${SERVERS[@]}"}
e2e_reap
: >"$PIDS"
check "down again is a no-op" "$LAB" down

echo
if [ $FAILS -ne 0 ]; then echo "lab_smoke: FAIL ($FAILS checks)"; exit 1; fi
echo "lab_smoke: PASS"
