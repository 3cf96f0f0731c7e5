# The lab's test scripts share this file: the prelude and the cleanup of every script that
# needs root, a tool set, the lab or a scratch directory (tests/e2e/*.sh, tests/k8s/*_e2e.sh,
# tests/kernel-lab/netkit_e2e.sh, tests/interop/run_interop.sh), then the helpers of the
# lab's e2e suites. A script sets ME (its name in messages), sources this file and calls what
# it needs of the prelude:
#
#   e2e_require_root WHY      not root: SKIP (exit 77) naming WHY; under CI=true a FAIL
#   e2e_skip_or_fail MSG      SKIP (77) with MSG; under CI=true a FAIL (exit 1)
#   e2e_require_tools CMD...  a missing command fails the test ("make bootstrap")
#   e2e_lock SECONDS          the lab lock (below), waited for at most SECONDS
#   e2e_tmpdir NAME           TMP=/tmp/fy-NAME.XXXXXX and PIDS, both removed at exit
#   on_exit CMD               a cleanup step: CMD is evaluated at exit
#   on_failure CMD            a step that runs only when the test failed (e2e_failed)
#
# Cleanup is one EXIT trap: it ends the running case (run_case) and every process that
# bg/track recorded (by PID and start time, never by name), then runs the on_exit steps, the
# last registered first, and exits with the test's exit code. A script registers a step
# when it creates what the step removes: `ferry-lab down` (e2e_lab_down) before the lab
# goes up, a pin or a netns right after it is made.
#
# The suites' helpers expect LAB, STATE and BPFFS (set here), TMP and PIDS (e2e_tmpdir), and
# keep the counters PASSED, FAILED, FAILED_NAMES that run_case updates.
# SC2016: single-quoted programs for python3 -c are meant literally; SC2034: the variables
# set here are for the scripts that source this file.
# shellcheck shell=bash disable=SC2016,SC2034

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
LAB=$ROOT/scripts/ferry-lab
STATE=/run/ferry-lab
BPFFS=/run/ferry/bpffs
LAB_WAIT=${FERRY_E2E_LAB_WAIT:-180}   # seconds to wait for a lab that someone started by hand
PASSED=0
FAILED=0
FAILED_NAMES=()
CASE_PID=

e2e_require_root() {
  if [ "$(id -u)" -ne 0 ]; then
    if [ "${CI:-}" = true ]; then echo "$ME: FAIL: must run as root in CI" >&2; exit 1; fi
    echo "$ME: SKIP: needs root ($1)"
    exit 77
  fi
}
e2e_skip_or_fail() {
  if [ "${CI:-}" = true ]; then echo "$ME: FAIL: $*" >&2; exit 1; fi
  echo "$ME: SKIP: $*"
  exit 77
}
e2e_require_tools() {
  local c
  for c in "$@"; do
    command -v "$c" >/dev/null || { echo "$ME: FAIL: '$c' missing (make bootstrap)" >&2; exit 1; }
  done
}

# The lab lock. The netns lab is one per machine: every test, benchmark and soak that brings
# it up holds LAB_LOCK for its whole run (here on fd 8, which no process of the lab inherits),
# unless a process it descends from holds it already: flock(1) around the command
# (`flock /tmp/ferry-lab.lock make test`: /proc/locks names that flock), or a test that runs
# another and exported FERRY_LAB_LOCK_HOLDER (its PID) when it took the lock. The Python
# programs (tests/bench/run_bench.py, bounds_bench.py, tests/soak/run_soak.py) take the same
# lock the same way (tests/bench/lab_lock.py). ferry-lab's own lock only serializes its single
# up/down calls.
LAB_LOCK=${FERRY_LAB_LOCK:-/tmp/ferry-lab.lock}
lab_lock_held_by_ancestor() {
  local ino pid=$$ ancestors=" " holder
  ino=$(stat -c %i "$LAB_LOCK")
  while [ "$pid" -gt 1 ]; do
    ancestors+="$pid "
    pid=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | awk '{print $2}')   # after "(comm)": state, ppid
    [ -n "$pid" ] || break
  done
  [[ -n ${FERRY_LAB_LOCK_HOLDER:-} && $ancestors == *" $FERRY_LAB_LOCK_HOLDER "* ]] && return 0
  # /proc/locks: "1: FLOCK ADVISORY WRITE <pid> <maj>:<min>:<inode> 0 EOF"
  while read -r holder; do
    [[ $ancestors == *" $holder "* ]] && return 0
  done < <(awk -v ino="$ino" '$2 == "FLOCK" { n = split($6, f, ":"); if (f[n] == ino) print $5 }' /proc/locks)
  return 1
}
e2e_lock() {
  local wait=$1
  exec 8>>"$LAB_LOCK"
  if ! flock -n 8; then
    if lab_lock_held_by_ancestor; then exec 8>&-; return 0; fi
    echo "$ME: waiting for $LAB_LOCK (another lab run)"
    flock -w "$wait" 8 || { echo "$ME: FAIL: another lab run held $LAB_LOCK for ${wait}s" >&2; exit 1; }
  fi
  export FERRY_LAB_LOCK_HOLDER=$$
}

# e2e_tmpdir NAME: the test's scratch directory (TMP) and its file of started processes (PIDS).
e2e_tmpdir() {
  TMP=$(mktemp -d "/tmp/fy-$1.XXXXXX")
  PIDS=$TMP/pids                  # every background process the test starts: "PID STARTTIME" lines
  : >"$PIDS"
  on_exit 'rm -rf -- "$TMP"'
  on_exit e2e_reap
}

E2E_ON_EXIT=()
on_exit() { E2E_ON_EXIT+=("$1"); }
# e2e_failed: in an exit step, whether the test failed (its exit code, or a counted failure).
e2e_failed() { [ "${E2E_RC:-0}" -ne 0 ] || [ "${FAILED:-0}" -ne 0 ] || [ "${failures:-0}" -ne 0 ]; }
on_failure() { on_exit "if e2e_failed; then $1; fi"; }
e2e_exit() {
  E2E_RC=$?
  local i pid st
  set +e
  if [ -n "${CASE_PID:-}" ]; then kill "$CASE_PID" 2>/dev/null; wait "$CASE_PID" 2>/dev/null; fi
  if [ -n "${PIDS:-}" ] && [ -f "$PIDS" ]; then
    while read -r pid st; do [ "$(starttime "$pid")" = "$st" ] && kill "$pid" 2>/dev/null; done <"$PIDS"
  fi
  for ((i = ${#E2E_ON_EXIT[@]} - 1; i >= 0; i--)); do eval "${E2E_ON_EXIT[i]}"; done
  exit "$E2E_RC"
}
trap e2e_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
# e2e_reap: waits for the recorded processes that are this shell's children (a killed one, or
# one that `ferry-lab down` stopped, is a zombie until then).
e2e_reap() {
  local pid
  [ -f "${PIDS:-}" ] || return 0
  while read -r pid _; do wait "$pid" 2>/dev/null || true; done <"$PIDS"
}
# e2e_lab_down: the lab goes (an exit step: `on_exit e2e_lab_down` before it comes up).
e2e_lab_down() { "$LAB" down >/dev/null 2>&1 || echo "$ME: 'ferry-lab down' failed in cleanup" >&2; }

note() { printf '    %s\n' "$*"; }
ok() { printf '    ok      %s\n' "$*"; }
die_case() { printf '    NOT OK  %s\n' "$*"; exit 1; }   # ends the case (cases run in subshells)

# assert DESCRIPTION CMD...: CMD must succeed; its output is shown when it does not.
assert() {
  local d=$1; shift
  if "$@" >"$TMP/assert.out" 2>&1; then
    ok "$d"
  else
    printf '    NOT OK  %s\n' "$d"
    sed 's/^/            /' "$TMP/assert.out" | tail -n 30
    exit 1
  fi
}

# wait_no_lab: the lab is one per machine; never tear down someone else's: wait (at most
# LAB_WAIT s) for it to go away. On timeout the caller's EXIT trap is dropped (its cleanup
# would run `ferry-lab down` on that lab) and the test fails. Needs ME, LAB_WAIT and TMP.
wait_no_lab() {
  local deadline=$((SECONDS + LAB_WAIT))
  while ip netns list | grep -E '^fy-n[12]( |$)' >/dev/null; do
    if [ $SECONDS -ge $deadline ]; then
      echo "$ME: FAIL: a ferry lab is still up after ${LAB_WAIT}s (fy-n1/fy-n2 exist);" \
        "if it is a leftover, run 'scripts/ferry-lab down'" >&2
      trap - EXIT; rm -rf -- "$TMP"; exit 1
    fi
    [ $((SECONDS % 15)) -eq 0 ] && echo "$ME: another lab is up; waiting (at most ${LAB_WAIT}s)"
    sleep 1   # no signal to wait on: another run's lab goes away when it is done
  done
}

# e2e_lab_up: once no other lab is up, the lab with ferryd on both nodes (its lines indented),
# or the test fails. Sets T0 (for the summary) and, from lab.env, LAB_SOURCE (the workload
# source), LAB_KUBECONFIG (for a leak check once lab.env is gone) and LAB_CNI (who made the
# pods). Register `on_exit e2e_lab_down` before.
e2e_lab_up() {
  T0=$SECONDS
  wait_no_lab
  echo "== ferry-lab up${FERRY_LAB_SOURCE:+ (FERRY_LAB_SOURCE=$FERRY_LAB_SOURCE)}${FERRY_LAB_CNI:+ (FERRY_LAB_CNI=$FERRY_LAB_CNI)}"
  if ! "$LAB" up 8<&- 2>&1 | sed 's/^/    /'; then echo "$ME: FAIL: ferry-lab up failed"; exit 1; fi
  LAB_SOURCE=$(lab_env FERRY_LAB_SOURCE)
  LAB_KUBECONFIG=$(lab_env FERRY_LAB_KUBECONFIG)
  LAB_CNI=$(lab_env FERRY_LAB_CNI)
}
# e2e_summary: the suite's last line, with where the lab's workloads and pods came from;
# fails when a case failed.
e2e_summary() {
  echo "$ME: $PASSED passed, $FAILED failed${SKIPPED_NAMES[*]:+, ${#SKIPPED_NAMES[@]} skipped} ($((SECONDS - T0)) s, workloads from $LAB_SOURCE, pods made by ${LAB_CNI:-?})${FAILED_NAMES[*]:+; failed: ${FAILED_NAMES[*]}}"
  [ "$FAILED" -eq 0 ]
}

# track PID: recorded with its start time, so that cleanup never signals a recycled PID.
starttime() { awk '{print $22}' "/proc/$1/stat" 2>/dev/null; }
track() { echo "$1 $(starttime "$1")" >>"$PIDS"; }
alive() {
  local st
  st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
  [ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ]
}

# wait_for SECONDS DESCRIPTION CMD...: poll CMD every 0.1 s until it succeeds. The limit is
# multiplied by FY_WAIT_SCALE (default 1): the kernel lab's emulated guest runs everything
# many times slower, and a limit is only ever reached when something is wrong.
wait_for() {
  local t=$(($1 * ${FY_WAIT_SCALE:-1})) d=$2 deadline
  shift 2
  deadline=$((SECONDS + t))
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ]; then echo "timed out after ${t}s waiting for: $d"; return 1; fi
    sleep 0.1
  done
}

# stop_pid PID: SIGTERM (or the given signal), then wait up to 5 s, then SIGKILL.
stop_pid() {
  local pid=$1 sig=${2:-TERM}
  kill "-$sig" "$pid" 2>/dev/null || return 0
  wait_for 5 "pid $pid to exit" bash -c "! { st=\$(awk '{print \$3}' /proc/$pid/stat 2>/dev/null) && [ \"\$st\" != Z ]; }" \
    || kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

# bg TARGET LOG CMD...: run CMD in a lab netns in the background, its PID recorded.
# `ferry-lab exec` ends in `exec ip netns exec`, which execs in place: $! is CMD's PID.
# fd 8 (this test's lock) is not inherited.
BG_PID=
bg() {
  local t=$1 log=$2
  shift 2
  "$LAB" exec "$t" -- "$@" >"$log" 2>&1 8<&- &
  BG_PID=$!
  track "$BG_PID"
}

pod_ns() { case $1 in */*) echo "fy-${1%%/*}-${1##*/}" ;; *) echo "fy-$1" ;; esac; }  # n1/p2 -> fy-n1-p2
listening() { [ -n "$(ip netns exec "$(pod_ns "$1")" ss -Hltn "sport = :$2")" ]; }  # TCP listener up?

# lab_id POD (n2-p1): the SPIFFE ID of the lab's pod, as the lab names it on its workload
# source (ns/default/sa/n2-p1 from the workloads file, ns/fy-lab/sa/fy-n2-p1 on Kubernetes;
# scripts/ferry-lab writes both into lab.env). lab_id_re: the same as an extended regex.
lab_env() { sed -n "s/^$1=//p" "$STATE/lab.env"; }
lab_id() { echo "spiffe://cluster.local/ns/$(lab_env FERRY_LAB_NAMESPACE)/sa/$(lab_env FERRY_LAB_NAME_PREFIX)$1"; }
lab_id_re() { lab_id "$1" | sed 's/\./\\./g'; }
# lab_host_if POD (n1/p1): the pod's host-side device in its node netns, as the lab made it
# (fy1-p1) or as the CNI plugin named it (FERRY_LAB_CNI): lab.env says which.
lab_host_if() { local t=${1/\//_}; lab_env "FERRY_LAB_HOST_IF_$t"; }
# lab_workload POD (n2-p1): the workload's name in ferryd's logs (namespace/name).
lab_workload() { echo "$(lab_env FERRY_LAB_NAMESPACE)/$(lab_env FERRY_LAB_NAME_PREFIX)$1"; }

# The HTTP server of the tests: GET answers "hello from NAME; you are CLIENT-IP", POST
# echoes the body. Each request is logged as "CLIENT-IP METHOD PATH". Process name fy-httpd.
HTTPD_PY='
import http.server, sys
try:
    open("/proc/self/comm", "w").write("fy-httpd")
except OSError:
    pass
ip, port, name = sys.argv[1], int(sys.argv[2]), sys.argv[3]
class H(http.server.BaseHTTPRequestHandler):
    def reply(self, body):
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        self.reply(("hello from %s; you are %s\n" % (name, self.client_address[0])).encode())
    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        self.reply(self.rfile.read(n))
    def log_message(self, fmt, *args):
        sys.stderr.write("%s:%d %s %s %s\n" % (self.client_address[0], self.client_address[1],
                         getattr(self, "command", "-"), getattr(self, "path", "-"),
                         args[1] if len(args) > 1 else "-"))
        sys.stderr.flush()
http.server.ThreadingHTTPServer.allow_reuse_address = True
http.server.ThreadingHTTPServer((ip, port), H).serve_forever()
'
HTTP_PORT=8080
# start_httpd TARGET IP: the server on IP:8080 in TARGET, unless it already answers; returns
# when it answers (asked from inside its own pod over lo: no tc hook, not the mesh).
start_httpd() {
  local t=$1 ip=$2 log
  log=$TMP/httpd-$(pod_ns "$t").log
  if "$LAB" exec "$t" -- curl -sf --max-time 1 -o /dev/null "http://$ip:$HTTP_PORT/ready"; then return 0; fi
  bg "$t" "$log" python3 -c "$HTTPD_PY" "$ip" "$HTTP_PORT" "$(pod_ns "$t")"
  wait_for 10 "HTTP server on $ip:$HTTP_PORT in $t" \
    "$LAB" exec "$t" -- curl -sf --max-time 1 -o /dev/null "http://$ip:$HTTP_PORT/ready" \
    || { cat "$log"; return 1; }
}
httpd_log() { echo "$TMP/httpd-$(pod_ns "$1").log"; }

# ferryd's access log lines, with the line count at a mark (to look only at new lines).
flog() { echo "$STATE/$1/ferryd.log"; }
flog_mark() { wc -l <"$(flog "$1")"; }
flog_since() { tail -n +"$(($2 + 1))" "$(flog "$1")"; }
# flog_wait NODE MARK PATTERN: ferryd writes an access line when a connection closes, which
# can be just after the client returns: poll for it (bounded).
flog_wait() {
  local n=$1 m=$2 pat=$3
  wait_for 5 "'$pat' in $(flog "$n")" bash -c 'tail -n +"$(($2 + 1))" "$1" | grep -qE -- "$3"' _ "$(flog "$n")" "$m" "$pat" \
    || { echo "no line matching '$pat' in $(flog "$n") since line $m; new lines:"; flog_since "$n" "$m" | tail -n 20; return 1; }
}

# metric NODE SERIES: the value of one metrics series of node N's ferryd (0 when absent).
metric() {
  local v
  v=$("$LAB" exec "$1/proxy" -- curl -sf --max-time 2 http://127.0.0.1:15020/metrics | awk -v s="$2" '$1 == s {print $2; exit}') || true
  echo "${v:-0}"
}

# start_echo PORT: an echo server on n2/p1 (10.77.2.11:PORT; tests/e2e/handover_load.py
# serve: one thread per connection, a half-close answered with a close), unless one already
# listens there.
start_echo() {
  listening n2/p1 "$1" && return 0
  bg n2/p1 "$TMP/echo$1.log" python3 "$ROOT/tests/e2e/handover_load.py" serve --bind 10.77.2.11 --port "$1"
  wait_for 10 "echo server on n2/p1:$1" listening n2/p1 "$1"
}

# set_policies < YAML: the lab's policy file (security.istio.io objects, docs/policy.md),
# atomically; returns once both ferryds have applied it (their policy generation moved).
policy_generation_above() { [ "$(metric "$1" ferry_policy_generation)" -gt "$2" ]; }
set_policies() {
  local g1 g2
  g1=$(metric n1 ferry_policy_generation); g2=$(metric n2 ferry_policy_generation)
  cat >"$STATE/policies.yaml.tmp"
  mv "$STATE/policies.yaml.tmp" "$STATE/policies.yaml"
  wait_for 10 "n1 to apply the policies" policy_generation_above n1 "$g1" &&
    wait_for 10 "n2 to apply the policies" policy_generation_above n2 "$g2"
}
# lab_selector POD (n2-p1): a selector of the lab's pod; lab_principal POD: its principal as
# policies write it (the SPIFFE ID without spiffe://).
lab_selector() { echo "{matchLabels: {app: $(lab_env FERRY_LAB_NAME_PREFIX)$1}}"; }
lab_principal() { lab_id "$1" | sed 's|^spiffe://||'; }

# Captures on node 1's end of the wire. cap_start NAME returns once tcpdump says it
# listens; cap_stop NAME ends it (SIGINT: it flushes) and leaves $TMP/NAME.pcap.
cap_start() {
  local name=$1
  # -B 16 MiB: on a busy machine the default 2 MiB buffer drops packets, and the cases
  # count bytes on the wire.
  bg n1 "$TMP/$name.tcpdump" tcpdump -i fy-wire1 -n -s 0 -B 16384 -U --immediate-mode -w "$TMP/$name.pcap"
  echo "$BG_PID" >"$TMP/$name.cappid"
  wait_for 10 "tcpdump on fy-wire1 listening" grep -q "listening on" "$TMP/$name.tcpdump" \
    || { cat "$TMP/$name.tcpdump"; return 1; }
}
cap_stop() {
  local name=$1
  stop_pid "$(cat "$TMP/$name.cappid")" INT
  grep -E 'captured|received|dropped' "$TMP/$name.tcpdump" | sed 's/^/      tcpdump: /' || true
}

# pcap_stats PCAP MARKER APP_PORT: one JSON object about an Ethernet/IPv4 pcap.
PCAP_PY='
import json, struct, sys
path, marker, app_port = sys.argv[1], sys.argv[2].encode(), int(sys.argv[3])
raw = open(path, "rb").read()
out = {"packets": 0, "tcp": 0, "udp": 0, "icmp": 0, "to_15008": 0, "from_15008": 0,
       "app_port": 0, "tls_handshake": 0, "tls_appdata": 0, "tls_appdata_to_15008": 0,
       "tcp_payload_bytes": 0,
       "marker_in_file": marker in raw, "marker_packets": 0, "ports": {}}
if len(raw) >= 24:
    magic = struct.unpack("<I", raw[:4])[0]
    end = "<" if magic in (0xa1b2c3d4, 0xa1b23c4d) else ">"
    linktype = struct.unpack(end + "I", raw[20:24])[0]
    assert linktype == 1, "link type %d, expected Ethernet" % linktype
    off = 24
    while off + 16 <= len(raw):
        _, _, caplen, _ = struct.unpack(end + "IIII", raw[off:off + 16])
        pkt = raw[off + 16:off + 16 + caplen]
        off += 16 + caplen
        out["packets"] += 1
        if len(pkt) < 34 or pkt[12:14] != b"\x08\x00":
            continue
        ihl = (pkt[14] & 15) * 4
        proto = pkt[23]
        l4 = pkt[14 + ihl:]
        if proto == 1:
            out["icmp"] += 1
        elif proto == 17:
            out["udp"] += 1
        if proto != 6 or len(l4) < 20:
            continue
        out["tcp"] += 1
        sport, dport = struct.unpack("!HH", l4[:4])
        payload = l4[(l4[12] >> 4) * 4:]
        key = "%d>%d" % (sport if sport < 32768 else 0, dport if dport < 32768 else 0)
        out["ports"][key] = out["ports"].get(key, 0) + 1
        out["to_15008"] += dport == 15008
        out["from_15008"] += sport == 15008
        out["app_port"] += app_port in (sport, dport)
        out["tcp_payload_bytes"] += len(payload)
        if len(payload) >= 5 and payload[1] == 3:
            out["tls_handshake"] += payload[0] == 0x16
            out["tls_appdata"] += payload[0] == 0x17
            out["tls_appdata_to_15008"] += payload[0] == 0x17 and dport == 15008
        out["marker_packets"] += marker in payload
print(json.dumps(out, sort_keys=True))
'
pcap_stats() { python3 -c "$PCAP_PY" "$@"; }
# jqt JSON EXPR: jq -e on a JSON string (for asserts).
jqt() { jq -e "$2" <<<"$1"; }

# A marker that cannot occur by chance, and a payload made of it.
new_marker() { echo "FERRY-E2E-PLAINTEXT-$1-$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n')"; }
make_payload() {  # make_payload FILE MARKER BYTES
  python3 -c 'import sys; m = (sys.argv[2] + "\n").encode(); n = int(sys.argv[3]); open(sys.argv[1], "wb").write((m * (n // len(m) + 1))[:n])' "$@"
}

# ICMP echo from a lab namespace (python raw socket: iputils ping is not installed in CI).
lab_ping() {  # lab_ping TARGET DST (iputils-ping is installed by scripts/bootstrap.sh)
  "$LAB" exec "$1" -- ping -c 1 -w 3 "$2"
}

# curl_get TARGET URL: prints "CODE LOCAL_PORT" and the body; fails on a transport error.
curl_get() { "$LAB" exec "$1" -- curl -sS --max-time "${CURL_TIMEOUT:-5}" -w '\n%{http_code} %{local_port}\n' "$2"; }

# skip_case ID DESCRIPTION REASON: a case that cannot run in this lab, said so (SKIPPED_NAMES).
SKIPPED_NAMES=()
skip_case() {
  if [ -n "${FY_E2E_CASES:-}" ] && [[ " $FY_E2E_CASES " != *" $1 "* ]]; then return 0; fi
  printf '\n== case %s: %s\nSKIP  case %s: %s\n' "$1" "$2" "$1" "$3"
  SKIPPED_NAMES+=("$1")
}

run_case() {  # run_case ID DESCRIPTION FUNCTION
  local id=$1 d=$2 fn=$3 rc t0=$SECONDS
  # FY_E2E_CASES="10 12": run only these (a developer's knob; CI runs every case).
  if [ -n "${FY_E2E_CASES:-}" ] && [[ " $FY_E2E_CASES " != *" $id "* ]]; then return 0; fi
  printf '\n== case %s: %s\n' "$id" "$d"
  # In the background and waited for: a SIGTERM/SIGINT to the test is handled at once
  # (bash defers traps while a foreground child runs); cleanup then ends the case.
  ( set -eE; trap 'echo "    error: line $LINENO: $BASH_COMMAND (exit $?)"' ERR; "$fn" ) &
  CASE_PID=$!
  rc=0
  wait "$CASE_PID" || rc=$?
  CASE_PID=
  if [ $rc -eq 0 ]; then
    echo "PASS  case $id: $d ($((SECONDS - t0)) s)"
    PASSED=$((PASSED + 1))
  else
    echo "FAIL  case $id: $d ($((SECONDS - t0)) s)"
    FAILED=$((FAILED + 1))
    FAILED_NAMES+=("$id")
  fi
}

# ---------------------------------------------------------------------------------------
# Cases both suites run (the host lab on veth, the kernel lab on netkit)
# ---------------------------------------------------------------------------------------
case_cross_node_curl() {
  local out m1 m2
  start_httpd n2/p1 10.77.2.11
  m1=$(flog_mark n1); m2=$(flog_mark n2)
  out=$(curl_get n1/p1 http://10.77.2.11:8080/case1)
  note "curl: $(tr '\n' ' ' <<<"$out")"
  assert "HTTP 200" grep -qE '^200 ' <<<"$out"
  assert "the answer names the client pod's IP (no NAT)" grep -qF "hello from fy-n2-p1; you are 10.77.1.11" <<<"$out"
  assert "the server's log shows 10.77.1.11" grep -qE '^10\.77\.1\.11:[0-9]+ GET /case1 200' "$(httpd_log n2/p1)"
  local port
  port=$(tail -n 1 <<<"$out" | awk '{print $2}')
  assert "n1 ferryd proxied it (outbound 10.77.1.11:$port -> 10.77.2.11:8080, reason=ok)" \
    flog_wait n1 "$m1" "direction=outbound src=10\.77\.1\.11:$port dst=10\.77\.2\.11:8080 peer=$(lab_id_re n2-p1) reason=ok"
  assert "n2 ferryd accepted it over HBONE from n1-p1's identity" \
    flog_wait n2 "$m2" "direction=inbound src=10\.77\.1\.11:[0-9]+ dst=10\.77\.2\.11:8080 peer=$(lab_id_re n1-p1) reason=ok"
}

case_same_node_curl() {
  local out m2
  start_httpd n2/p1 10.77.2.11
  m2=$(flog_mark n2)
  out=$(curl_get n2/p2 http://10.77.2.11:8080/case2)
  note "curl: $(tr '\n' ' ' <<<"$out")"
  assert "HTTP 200" grep -qE '^200 ' <<<"$out"
  assert "the answer names the client pod's IP" grep -qF "you are 10.77.2.12" <<<"$out"
  assert "the server's log shows 10.77.2.12" grep -qE '^10\.77\.2\.12:[0-9]+ GET /case2 200' "$(httpd_log n2/p1)"
  assert "n2 ferryd proxied it: outbound leg (as n2-p2, to n2-p1's identity)" \
    flog_wait n2 "$m2" "direction=outbound src=10\.77\.2\.12:[0-9]+ dst=10\.77\.2\.11:8080 peer=$(lab_id_re n2-p1) reason=ok"
  assert "... and inbound HBONE leg on the same node (peer n2-p2)" \
    flog_wait n2 "$m2" "direction=inbound src=10\.77\.2\.12:[0-9]+ dst=10\.77\.2\.11:8080 peer=$(lab_id_re n2-p2) reason=ok"
}
