#!/usr/bin/env bash
# ferry-cni chained after a real CNI plugin (issue 14; docs/install.md, "The CNI chain"), in
# the netns lab on FERRY_LAB_CNI=ptp or bridge (the reference plugins, invoked as a runtime
# invokes them: scripts/cni-chain.py). The lab's own pods are made before ferryd starts; the
# cases add pods n1/p3 and n1/p4 (10.77.1.13, .14: static IPAM in the node's /29) with the
# node's plugin, followed by ferry-cni or not:
#   1  first packet: a pod whose process connects the moment ADD returns is captured: the
#      server sees its IP, n1's ferryd logs the connection, the wire shows only :15008
#   2  negative control: the same without ferry-cni leaves the first connection uncaptured
#      (plaintext on the wire): the gap the plugin closes
#   3  DEL releases the pod at once; ADD of the same pod name in a new sandbox is captured
#      from its first packet, on the new device
#   4  ferryd down: ADD fails (CNI error 11, "not reachable") and nothing is left; the same
#      ADD succeeds once ferryd is up. Without ferry-cni in the chain (the entry removed) a pod
#      starts with plain networking while ferryd is down
#   5  a ferryd restart with pods in place: the recorded sandbox is enrolled again, a
#      connection from the pod that ferryd does not hold stays established across it, new
#      connections are captured; the sandbox that vanished while ferryd was down is dropped
#      and its pinned links released
#   6  the endpoint is root's: a non-root client is refused (file mode, then SO_PEERCRED)
#   7  CHECK answers from ferryd: success for an enrolled pod
# Prints ADD's duration with and without ferry-cni (a figure, not an assertion).
#
# Exit 0 all passed, 1 any failed, 77 skip (not root; under CI=true not being root fails).
set -euo pipefail

# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ME=cni_e2e
BUILD=${FERRY_BUILD_DIR:-$ROOT/build/default}
export FERRY_LAB_CNI=${FERRY_LAB_CNI:-ptp}

e2e_require_root "network namespaces, BPF"
case $FERRY_LAB_CNI in ptp|bridge) ;; *) echo "$ME: FAIL: FERRY_LAB_CNI must be ptp or bridge" >&2; exit 1 ;; esac
e2e_require_tools ip curl python3 tcpdump jq ss flock setpriv
for b in proxy/main/ferry-cni tests/e2e/fy_first_connect; do
  [ -x "$BUILD/$b" ] || { echo "$ME: FAIL: $BUILD/$b missing (make build)" >&2; exit 1; }
done
e2e_lock 600
e2e_tmpdir cni-e2e
EXTRA=(3 4)   # the pods the cases add: n1/p3, n1/p4
on_exit e2e_lab_down
# The added pods: DEL through the plain chain (ferryd may be gone), then their netns.
remove_extra_pods() {
  local p
  for p in "${EXTRA[@]}"; do
    [ -f "$TMP/p$p.result.json" ] && chain "$p" plain DEL >/dev/null 2>&1
    ip netns del "fy-n1-p$p" 2>/dev/null
  done
}
on_exit remove_extra_pods

# ---------------------------------------------------------------------------------------
# The added pods
# ---------------------------------------------------------------------------------------
pod_ip3() { echo "10.77.1.$((10 + $1))"; }
# conflist P ferry|plain: node 1's plugin (as the lab configured it) with static IPAM for pod
# P, followed by ferry-cni or not.
conflist() {
  local p=$1 kind=$2
  python3 - "$STATE/cni/n1/conflist.json" "$(pod_ip3 "$p")" "$kind" "$STATE/n1/cni.sock" <<'PYEOF'
import json, sys
path, ip, kind, sock = sys.argv[1:]
c = json.load(open(path))
primary = c["plugins"][0]
gateway = primary["ipam"]["ranges"][0][0]["gateway"]
primary["ipam"] = {"type": "static", "addresses": [{"address": ip + "/29", "gateway": gateway}],
                   "routes": [{"dst": "0.0.0.0/0"}]}
c["plugins"] = [primary]
if kind == "ferry":
    c["plugins"].append({"type": "ferry-cni", "socket": sock, "failurePolicy": "closed", "timeoutMs": 5000})
json.dump(c, sys.stdout)
PYEOF
}
# chain P ferry|plain ADD|DEL|CHECK [cmd prefix...]: the chain for pod P as a runtime runs it,
# in node 1's netns, with CNI_ARGS as containerd sets them.
chain() {
  local p=$1 kind=$2 cmd=$3 netns=/run/netns/fy-n1-p$1
  shift 3
  conflist "$p" "$kind" >"$TMP/p$p.$kind.conflist"
  [ "$cmd" != DEL ] || [ -e "$netns" ] || netns=""
  ip netns exec fy-n1 "$@" python3 "$ROOT/scripts/cni-chain.py" "$cmd" --conflist "$TMP/p$p.$kind.conflist" \
    --cache "$TMP/p$p.result.json" --netns "$netns" --containerid "fy-n1-p$p-$(cat "$TMP/p$p.sandbox" 2>/dev/null || echo 0)" \
    --ifname eth0 --cni-path "$(lab_env FERRY_LAB_CNI_PATH):$BUILD/proxy/main" \
    --args "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=n1-p$p;K8S_POD_INFRA_CONTAINER_ID=fy-n1-p$p"
}
# new_sandbox P: a fresh netns for pod P (as a runtime makes one per sandbox), with a new
# container id.
new_sandbox() {
  local p=$1
  ip netns del "fy-n1-p$p" 2>/dev/null || true
  ip netns add "fy-n1-p$p"
  ip netns exec "fy-n1-p$p" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
  ip -n "fy-n1-p$p" link set lo up
  echo $(($(cat "$TMP/p$p.sandbox" 2>/dev/null || echo 0) + 1)) >"$TMP/p$p.sandbox"
}
# first_connect P ferry|plain NAME: a new sandbox for P, ADD, and the pod's connection to
# n2/p1 the moment ADD returns; prints fy_first_connect's JSON line.
first_connect() {
  local p=$1 kind=$2 name=$3
  new_sandbox "$p"
  chain "$p" "$kind" ADD "$BUILD/tests/e2e/fy_first_connect" --netns "/run/netns/fy-n1-p$p" \
    --connect 10.77.2.11:8080 --send $'GET /'"$name"$' HTTP/1.0\r\n\r\n' --out "$TMP/p$p.add.out" -- 2>"$TMP/p$p.add.err"
}
# in_pod P CMD...: CMD in added pod P's netns (the lab's `exec` knows its own pods only);
# pod_bg P LOG CMD...: the same in the background, its PID recorded.
in_pod() { local p=$1; shift; ip netns exec "fy-n1-p$p" "$@"; }
pod_bg() {
  local p=$1 log=$2
  shift 2
  ip netns exec "fy-n1-p$p" "$@" >"$log" 2>&1 8<&- &
  BG_PID=$!
  track "$BG_PID"
}
host_dev() {  # host_dev P: pod P's host-side device, from its cached ADD result
  python3 - "$TMP/p$1.result.json" "fy-cbr1" <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1]))
print([i["name"] for i in r["interfaces"] if not i.get("sandbox") and i["name"] != sys.argv[2]][0])
PYEOF
}
# The workloads file's entry for pod P (file source: the file decides who is in the mesh).
local_workloads_above() { [ "$(metric n1 'ferry_workloads{scope="local"}')" -gt "$1" ]; }
metric_is() { [ "$(metric n1 "$1")" = "$2" ]; }
add_workload() {
  local p=$1 before
  before=$(metric n1 'ferry_workloads{scope="local"}')
  echo "  - {name: n1-p$p, namespace: default, service_account: n1-p$p, node: n1, ips: [$(pod_ip3 "$p")], hbone: true}" \
    >>"$STATE/workloads.yaml"
  wait_for 10 "n1's ferryd loading n1-p$p" local_workloads_above "$before"
}
remove_workload() { sed -i "/name: n1-p$1,/d" "$STATE/workloads.yaml"; }
wire_stats() { pcap_stats "$TMP/$1.pcap" "nomarker" 8080; }
cni_metric() { metric n1 "ferry_cni_requests_total{verb=\"$1\",verdict=\"$2\"}"; }

# ---------------------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------------------
case_first_packet() {
  local out st m1
  start_httpd n2/p1 10.77.2.11
  add_workload 3
  m1=$(flog_mark n1)
  cap_start case1
  out=$(first_connect 3 ferry case1) || { cap_stop case1; cat "$TMP/p3.add.err"; die_case "fy_first_connect failed"; }
  cap_stop case1
  note "client: $(jq -c 'del(.answer)' <<<"$out")"
  echo "$out" >"$TMP/add-ferry.json"
  assert "ADD with ferry-cni succeeded" jqt "$out" '.add_exit == 0'
  assert "the pod connected the moment ADD returned and got its answer" jqt "$out" '.connected and (.answer | test("hello from fy-n2-p1; you are 10.77.1.13"))'
  assert "n1's ferryd proxied that first connection (access line)" flog_wait n1 "$m1" 'direction=outbound src=10\.77\.1\.13:[0-9]+ dst=10\.77\.2\.11:8080 .*reason=ok'
  st=$(wire_stats case1)
  note "wire: $st"
  assert "the wire: TLS to 15008, no packet to or from port 8080" jqt "$st" '.to_15008 > 0 and .app_port == 0'
  assert "ferryd answered ADD enrolled" test "$(cni_metric ADD enrolled)" -ge 1
}

case_negative_control() {
  local out st
  start_httpd n2/p1 10.77.2.11
  add_workload 4
  cap_start case2
  out=$(first_connect 4 plain case2) || { cap_stop case2; cat "$TMP/p4.add.err"; die_case "fy_first_connect failed"; }
  cap_stop case2
  note "client: $(jq -c 'del(.answer)' <<<"$out")"
  echo "$out" >"$TMP/add-plain.json"
  assert "ADD without ferry-cni succeeded and the pod got its answer" jqt "$out" '.add_exit == 0 and .connected'
  st=$(wire_stats case2)
  note "wire: $st"
  assert "without ferry-cni the first connection crossed the wire in plaintext (port 8080)" jqt "$st" '.app_port > 0'
  chain 4 plain DEL >/dev/null
  rm -f "$TMP/p4.result.json"
  ip netns del fy-n1-p4
  remove_workload 4
}

case_del_then_add() {
  local out dev_before dev_after st m1
  dev_before=$(host_dev 3)
  chain 3 ferry DEL >/dev/null
  assert "DEL answered released" test "$(cni_metric DEL released)" -ge 1
  assert "n1 released $dev_before at once" wait_for 5 "release" grep -q "datapath: released $dev_before" "$(flog n1)"
  assert "no record of the deleted sandbox" bash -c "[ -z \"\$(ls $STATE/n1/cni-sandboxes)\" ]"
  m1=$(flog_mark n1)
  cap_start case3
  out=$(first_connect 3 ferry case3) || { cap_stop case3; cat "$TMP/p3.add.err"; die_case "fy_first_connect failed"; }
  cap_stop case3
  dev_after=$(host_dev 3)
  note "client: $(jq -c 'del(.answer)' <<<"$out"); device $dev_before -> $dev_after"
  assert "the new sandbox's first connection was answered" jqt "$out" '.add_exit == 0 and .connected and (.answer | test("you are 10.77.1.13"))'
  assert "and proxied by n1's ferryd" flog_wait n1 "$m1" 'direction=outbound src=10\.77\.1\.13:[0-9]+ dst=10\.77\.2\.11:8080 .*reason=ok'
  st=$(wire_stats case3)
  assert "the wire: nothing on port 8080" jqt "$st" '.to_15008 > 0 and .app_port == 0'
  assert "n1 enrolled the new device $dev_after" grep -q "cni: ADD default/n1-p3 (container fy-n1-p3-2): enrolled on $dev_after" "$(flog n1)"
}

case_ferryd_down() {
  local out rc
  "$LAB" stop n1 >/dev/null
  chain 3 ferry DEL >/dev/null 2>"$TMP/case4.del.err" || { cat "$TMP/case4.del.err"; die_case "DEL with ferryd down must succeed"; }
  ok "DEL with ferryd down succeeded"
  rm -f "$TMP/p3.result.json"
  new_sandbox 3
  rc=0
  chain 3 ferry ADD >"$TMP/case4.add.out" 2>"$TMP/case4.add.err" || rc=$?
  note "ADD with ferryd down: exit $rc: $(grep -o '"code":[0-9]*,"msg":"[^"]*"' "$TMP/case4.add.err" | head -1)"
  assert "ADD failed" test "$rc" -ne 0
  assert "with CNI error 11 (try again later), saying ferryd is not reachable" \
    grep -q '"code":11,"msg":"ferryd is not reachable to enrol default/n1-p3"' "$TMP/case4.add.err"
  assert "the failed ADD left no device in n1 (the runtime's DEL ran)" bash -c "! ip netns exec fy-n1-p3 ip -o link show eth0"
  # The chain entry removed (uninstalled), a pod starts with plain networking meanwhile.
  new_sandbox 4
  chain 4 plain ADD >/dev/null || die_case "the plain chain's ADD failed with ferryd down"
  out=$(in_pod 4 curl -sS --max-time 5 http://10.77.2.11:8080/case4-plain) || die_case "plain pod: curl failed"
  assert "without the entry, a pod outside the mesh works with ferryd down" grep -q "you are 10.77.1.14" <<<"$out"
  chain 4 plain DEL >/dev/null
  rm -f "$TMP/p4.result.json"
  ip netns del fy-n1-p4
  "$LAB" start n1 >/dev/null
  out=$(first_connect 3 ferry case4) || die_case "fy_first_connect failed"
  note "client after ferryd is up: $(jq -c 'del(.answer)' <<<"$out")"
  assert "the same ADD succeeds once ferryd is up, and the first connection is answered" \
    jqt "$out" '.add_exit == 0 and .connected and (.answer | test("you are 10.77.1.13"))'
}

# A TCP echo server in node 1's netns on the pods' gateway address (not a capture destination:
# pod_egress passes it) and a client in p3 that keeps one connection open across the restart.
ECHO_PY='
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 9099)); s.listen(1)
c, _ = s.accept()
while True:
    d = c.recv(100)
    if not d: break
    c.sendall(d)
'
CLIENT_PY='
import os, socket, sys, time
c = socket.create_connection((sys.argv[1], 9099), timeout=5)
c.sendall(b"before"); assert c.recv(100) == b"before"
print("connected", c.getsockname()[1], flush=True)
while not os.path.exists(sys.argv[2]): time.sleep(0.05)
c.sendall(b"after"); got = c.recv(100)
print("after:", got.decode(), flush=True)
'
case_restart() {
  local gw out dev4 m1 pins
  gw=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["plugins"][0]["ipam"]["ranges"][0][0]["gateway"])' "$STATE/cni/n1/conflist.json")
  bg n1 "$TMP/echo.log" python3 -c "$ECHO_PY" "$gw"
  wait_for 10 "echo server on $gw:9099" bash -c "ip netns exec fy-n1 ss -Hltn 'sport = :9099' | grep -q ."
  pod_bg 3 "$TMP/client.log" python3 -c "$CLIENT_PY" "$gw" "$TMP/go"
  wait_for 10 "p3's connection to $gw:9099" grep -q connected "$TMP/client.log" || { cat "$TMP/client.log"; exit 1; }
  # A second CNI pod whose sandbox vanishes while ferryd is down (no DEL).
  add_workload 4
  new_sandbox 4
  chain 4 ferry ADD >/dev/null || die_case "ADD of p4 failed"
  dev4=$(host_dev 4)
  "$LAB" stop n1 >/dev/null
  ip netns exec fy-n1 ip link del "$dev4" 2>/dev/null || true
  ip netns del fy-n1-p4
  rm -f "$TMP/p4.result.json"
  remove_workload 4
  pins=$(lab_env FERRY_LAB_BPFFS)/n1
  assert "n1's pins for $dev4 outlived ferryd (failing closed)" bash -c "ls '$pins' | grep -q 'link_${dev4}_'"
  m1=$(flog_mark n1)
  "$LAB" start n1 >/dev/null
  assert "the restarted ferryd enrolled the recorded sandbox again" wait_for 5 "restored" metric_is ferry_cni_restored_sandboxes_total 1
  assert "and dropped the one whose sandbox is gone" metric_is ferry_cni_dropped_records_total 1
  assert "the vanished pod's pinned links were released" \
    wait_for 5 "pins of $dev4 gone" bash -c "! ls '$pins' | grep -q 'link_${dev4}_'"
  touch "$TMP/go"
  wait_for 10 "the client's second exchange" grep -q "after:" "$TMP/client.log" || true
  note "client: $(tr '\n' ' ' <"$TMP/client.log")"
  assert "p3's established connection (not one ferryd holds) survived the restart" grep -q "after: after" "$TMP/client.log"
  out=$(in_pod 3 curl -sS --max-time 5 http://10.77.2.11:8080/case5) || die_case "curl from p3 after the restart failed"
  assert "p3 reaches n2/p1 after the restart" grep -q "you are 10.77.1.13" <<<"$out"
  assert "through n1's ferryd" flog_wait n1 "$m1" 'direction=outbound src=10\.77\.1\.13:[0-9]+ dst=10\.77\.2\.11:8080 .*reason=ok'
}

# ferry_cni P USER: ferry-cni's CHECK for pod P run directly as USER (the chain's other
# plugins would fail first as a non-root user), with the entry and result the chain used.
ferry_cni_as() {
  local p=$1 user=$2
  python3 - "$TMP/p$p.ferry.conflist" "$TMP/p$p.result.json" <<'PYEOF2' >"$TMP/check.json"
import json, sys
c = json.load(open(sys.argv[1]))
conf = dict(c["plugins"][-1], name=c["name"], cniVersion=c["cniVersion"], prevResult=json.load(open(sys.argv[2])))
json.dump(conf, sys.stdout)
PYEOF2
  ip netns exec fy-n1 setpriv --reuid="$user" --regid="$user" --clear-groups env CNI_COMMAND=CHECK \
    CNI_CONTAINERID="fy-n1-p$p-$(cat "$TMP/p$p.sandbox")" CNI_NETNS="/run/netns/fy-n1-p$p" CNI_IFNAME=eth0 \
    CNI_PATH="$BUILD/proxy/main" CNI_ARGS="K8S_POD_NAMESPACE=default;K8S_POD_NAME=n1-p$p" \
    "$BUILD/proxy/main/ferry-cni" <"$TMP/check.json"
}
case_root_only() {
  local sock=$STATE/n1/cni.sock rc before
  assert "the socket is mode 0600, root's" test "$(stat -c '%a %U' "$sock")" = "600 root"
  assert "root's CHECK through the same invocation succeeds" ferry_cni_as 3 0
  # Through the file mode: refused by the kernel.
  rc=0
  ferry_cni_as 3 65534 >"$TMP/case6a.out" 2>&1 || rc=$?
  note "non-root, mode 0600: exit $rc: $(head -c 240 "$TMP/case6a.out")"
  assert "a non-root plugin cannot connect" grep -q 'Permission denied' "$TMP/case6a.out"
  # Past the file mode: refused by ferryd (SO_PEERCRED).
  before=$(metric n1 ferry_cni_refused_peers_total)
  chmod 0666 "$sock"
  rc=0
  ferry_cni_as 3 65534 >"$TMP/case6b.out" 2>&1 || rc=$?
  chmod 0600 "$sock"
  note "non-root, mode 0666: exit $rc: $(head -c 240 "$TMP/case6b.out")"
  # ferryd closes at once: the plugin sees the close or a broken pipe, whichever comes first.
  assert "a non-root client that reaches the socket gets no answer" grep -qE 'without an answer|Broken pipe|Connection reset' "$TMP/case6b.out"
  assert "and is counted" test "$(metric n1 ferry_cni_refused_peers_total)" -gt "$before"
}

case_check() {
  chain 3 ferry CHECK >/dev/null 2>"$TMP/case7.err" || { cat "$TMP/case7.err"; die_case "CHECK of an enrolled pod failed"; }
  ok "CHECK of the enrolled pod succeeded"
  assert "ferryd answered it" test "$(cni_metric CHECK enrolled)" -ge 1
}

# ---------------------------------------------------------------------------------------
echo "== $ME on $FERRY_LAB_CNI"
e2e_lab_up

run_case 1 "first packet of a pod made through the chain is captured" case_first_packet
run_case 2 "negative control: without ferry-cni the first connection leaves in plaintext" case_negative_control
run_case 3 "DEL releases at once; ADD of the same pod in a new sandbox is captured" case_del_then_add
run_case 4 "ferryd down: ADD fails with code 11, succeeds once it is up; without the entry pods start" case_ferryd_down
run_case 5 "ferryd restart with pods in place: re-enrolled, established flow kept, stale released" case_restart
run_case 6 "the endpoint answers root only" case_root_only
run_case 7 "CHECK of an enrolled pod" case_check

if [ -f "$TMP/add-ferry.json" ] && [ -f "$TMP/add-plain.json" ]; then
  echo "ADD through the chain: $(jq .add_ms "$TMP/add-ferry.json") ms with ferry-cni, $(jq .add_ms "$TMP/add-plain.json") ms without (one sample each; docs/benchmarks/cni.md has the distribution)"
fi
echo
echo "$ME ($FERRY_LAB_CNI): $PASSED passed, $FAILED failed${FAILED_NAMES[*]:+ (${FAILED_NAMES[*]})}"
[ "$FAILED" -eq 0 ]
