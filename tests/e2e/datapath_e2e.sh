#!/usr/bin/env bash
# End-to-end tests of ferry's tc datapath in the network-namespace lab (issue 3, "Tests
# that must exist and pass"; docs/datapath.md): real applications (curl, python servers,
# iperf3) in lab pods, ferryd on both nodes, captures on the wire between the nodes.
#
#   1  cross-node curl n1/p1 -> n2/p1: 200, the server sees 10.77.1.11, through the mesh
#   2  same-node curl n2/p2 -> n2/p1: 200, the server sees 10.77.2.12, through the mesh
#   3  the wire carries TLS to port 15008 (handshake included) and no plaintext of a
#      64 KiB marker payload (n1/p2 -> n2/p1)
#   4  iperf3 across nodes through the mesh (and, at the end, without ferryd: 4b)
#   5  a CNI policy stand-in (cni_standin.bpf.c) after ferry on n1/p1's host-side tc ingress sees
#      the tunnel's packets (ferry's injection) and its drop policy on <dst>:15008 breaks
#      exactly that destination
#   6  capture cannot be dodged: source port 15008 is still captured; a direct connection
#      to <pod>:15008 is refused; neither puts plaintext on the wire
#   7  UDP and ICMP pass untouched (reason NOT_TCP counted)
#   7b a pod leaves and rejoins through the workloads file: while out it works directly
#      (unenrolled), the other pod and a connection open across the change are untouched
#   8  ferryd stopped with failure_mode closed: mesh TCP is cut off, nothing leaks, ICMP
#      works; restarted ferryd adopts its pins; failure_mode open: direct plaintext
#   10 TCP fragments and IPv6 TCP crafted in a pod (CAP_NET_RAW) are refused, nothing crosses
#   11 STRICT switched at run time (a PeerAuthentication) reaches the datapath (and back);
#      fragments from the node cannot reach a STRICT pod; an unenrolled pod's plaintext is
#      refused while STRICT, served while PERMISSIVE
#   12 stale flows: a connection that predates enrolment, and one whose client-node ferryd
#      was SIGKILLed and restarted, get a reset and never continue in plaintext
#   13 the server-node ferryd died (SIGKILL): the client's connection fails at once (a reset
#      for the tunnel SYN, not the connect timeout) and n1's log names the peer's HBONE
#      address; stopped for a restart (SIGTERM): a connection opened in the gap waits for it
#   9  after `ferry-lab down`: no namespace, link, pin or process left
#
# The lab's workload source is the environment's: the workloads file by default, or with
# FERRY_LAB_SOURCE=kubernetes FERRY_LAB_KUBECONFIG=... the API server (docs/lab.md; CI runs
# that through tests/k8s/lab_k8s_e2e.sh). There 7b moves a pod out and in with its
# ferry.io/dataplane label, 12 by deleting it and creating it again. The PeerAuthentication of
# 11 comes from the lab's policy file on both sources. Authorization policies are in
# policy_e2e.sh, Istio's metrics in a real Prometheus in telemetry_e2e.sh.
#
# With FERRY_LAB_CNI=ptp or bridge the pods are made by the reference CNI plugins (docs/lab.md,
# "On real CNI plugins"; ctests e2e_datapath_e2e_ptp, e2e_datapath_e2e_bridge): every case runs
# unchanged, the host-side device names taken from lab.env.
#
# Exit 0 all passed, 1 any failed, 77 skip (not root; under CI=true not being root fails).
# shellcheck disable=SC2016  # single-quoted programs for python3 -c are meant literally
set -euo pipefail

# The prelude and cleanup, and the helpers shared with the other suites: note, assert,
# wait_for, bg, start_httpd, flog_*, metric, cap_start/cap_stop, pcap_stats, curl_get, run_case, ...
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
HERE=$ROOT/tests/e2e
CNI_PIN=$BPFFS/e2e-cni          # the CNI stand-in's program and maps (case 5)
ME=datapath_e2e

e2e_require_root "network namespaces, BPF"
e2e_require_tools ip tc curl python3 tcpdump iperf3 clang bpftool jq ss flock mountpoint
e2e_lock 600
e2e_tmpdir datapath-e2e
H11=                            # n1/p1's host-side device, from the lab once it is up (lab.env)
on_exit e2e_lab_down
# The CNI stand-in (case 5), if a case left it attached.
on_exit 'if [ -e "$CNI_PIN" ] && [ -n "$H11" ]; then
  ip netns exec fy-n1 tc filter del dev "$H11" ingress pref 100 2>/dev/null
  rm -rf -- "$CNI_PIN"
fi'

# ---------------------------------------------------------------------------------------
# Cases (1 and 2, shared with the kernel lab's suite, are in lib.sh)
# ---------------------------------------------------------------------------------------
case_wire_capture() {
  local marker st
  marker=$(new_marker case3)
  make_payload "$TMP/case3.payload" "$marker" 65536
  start_httpd n2/p1 10.77.2.11
  cap_start case3
  # POST 64 KiB of marker lines; the server echoes them back. The client is n1/p2, which no
  # other case uses towards n2/p1: ferryd pools one HBONE connection per (source, destination)
  # workload, so this pair's TLS handshake happens while the capture runs.
  "$LAB" exec n1/p2 -- curl -sS --max-time 10 --data-binary "@$TMP/case3.payload" \
    -H 'Content-Type: application/octet-stream' -o "$TMP/case3.echo" http://10.77.2.11:8080/case3 \
    || { cap_stop case3; die_case "the POST through the mesh failed"; }
  cap_stop case3
  assert "64 KiB sent and read back intact" cmp "$TMP/case3.payload" "$TMP/case3.echo"
  assert "the server saw 10.77.1.12" grep -qE '^10\.77\.1\.12:[0-9]+ POST /case3 200' "$(httpd_log n2/p1)"
  st=$(pcap_stats "$TMP/case3.pcap" "$marker" 8080)
  note "wire: $st"
  assert "the wire carries TCP to port 15008" jqt "$st" '.to_15008 > 0'
  assert "the wire carries a TLS handshake (record 0x16 0x03 at a payload start)" jqt "$st" '.tls_handshake > 0'
  assert "the wire carries TLS application data, at least the payload's size in TCP bytes" \
    jqt "$st" '.tls_appdata > 0 and .tcp_payload_bytes >= 2 * 65536'
  assert "no packet to or from port 8080 on the wire" jqt "$st" '.app_port == 0'
  assert "the marker is nowhere in the capture (no plaintext)" jqt "$st" '.marker_in_file == false'
}

case_iperf3() {
  local m1 bytes bps
  m1=$(flog_mark n1)
  bg n2/p1 "$TMP/iperf3-server.log" iperf3 -s -1 -B 10.77.2.11 -p 5201
  local spid=$BG_PID
  # Readiness without connecting (a connection would use up the one-off server).
  wait_for 10 "iperf3 -s listening in n2/p1" listening n2/p1 5201 || { cat "$TMP/iperf3-server.log"; exit 1; }
  "$LAB" exec n1/p1 -- timeout 30 iperf3 -c 10.77.2.11 -p 5201 -t 3 -J >"$TMP/iperf3-mesh.json" \
    || { cat "$TMP/iperf3-mesh.json"; die_case "iperf3 client failed"; }
  bytes=$(jq '.end.sum_received.bytes' "$TMP/iperf3-mesh.json")
  bps=$(jq '.end.sum_received.bits_per_second' "$TMP/iperf3-mesh.json")
  echo "$bps" >"$TMP/iperf3-mesh.bps"
  note "iperf3 through the mesh: $bytes bytes in 3 s, $(awk -v b="$bps" 'BEGIN{printf "%.2f", b/1e9}') Gbit/s"
  assert "iperf3 moved bytes" test "${bytes%.*}" -gt 0
  assert "n1 ferryd carried it (outbound ... dst=10.77.2.11:5201)" \
    flog_wait n1 "$m1" "direction=outbound src=10\.77\.1\.11:[0-9]+ dst=10\.77\.2\.11:5201 peer=$(lab_id_re n2-p1)"
  # -1: the server exits after its one client.
  wait_for 10 "iperf3 -s -1 to exit" bash -c "! kill -0 $spid 2>/dev/null || [ \"\$(awk '{print \$3}' /proc/$spid/stat)\" = Z ]" \
    || stop_pid "$spid"
}

# The stand-in on n1/p1's host-side device ($H11) tc ingress, behind ferry's TCX program (cls_bpf runs after TCX).
CNI_QDISC_ADDED=$TMP/cni-qdisc-added
cni_attach() {
  local inc
  inc=/usr/include/$(uname -m)-linux-gnu
  clang -O2 -g -target bpf -I"$inc" -Wall -Werror -c "$HERE/cni_standin.bpf.c" -o "$TMP/cni_standin.o"
  rm -rf -- "$CNI_PIN"
  mkdir -p "$CNI_PIN/maps"
  bpftool prog load "$TMP/cni_standin.o" "$CNI_PIN/prog" type classifier pinmaps "$CNI_PIN/maps"
  if ! ip netns exec fy-n1 tc qdisc show dev "$H11" | grep clsact >/dev/null; then
    ip netns exec fy-n1 tc qdisc add dev "$H11" clsact
    touch "$CNI_QDISC_ADDED"
  fi
  ip netns exec fy-n1 tc filter add dev "$H11" ingress pref 100 bpf da object-pinned "$CNI_PIN/prog"
}
cni_detach() {
  ip netns exec fy-n1 tc filter del dev "$H11" ingress pref 100 2>/dev/null || true
  if [ -f "$CNI_QDISC_ADDED" ]; then
    ip netns exec fy-n1 tc qdisc del dev "$H11" clsact 2>/dev/null || true
    rm -f "$CNI_QDISC_ADDED"
  fi
  rm -rf -- "$CNI_PIN"
}
cni_seen() {  # cni_seen PORT: TCP packets to PORT seen by the stand-in
  bpftool -j map dump pinned "$CNI_PIN/maps/cni_seen" | jq --argjson p "$1" '[.[] | select(.formatted.key == $p) | .formatted.value] | add // 0'
}
cni_dropped() { bpftool -j map dump pinned "$CNI_PIN/maps/cni_dropped" | jq '[.[].formatted.value] | add // 0'; }

case_cni_standin() {
  local out seen app dropped rc
  start_httpd n2/p1 10.77.2.11
  start_httpd n2/p2 10.77.2.12
  cni_attach
  # Detach even when an assertion ends the case early.
  trap 'cni_detach' EXIT
  assert "stand-in attached after ferry (cls_bpf pref 100 on $H11 ingress)" \
    bash -c "ip netns exec fy-n1 tc filter show dev $H11 ingress | grep -q 'cni_standin'"
  out=$(curl_get n1/p1 http://10.77.2.11:8080/case5-before)
  assert "curl n1/p1 -> n2/p1 with the stand-in in place: 200" grep -qE '^200 ' <<<"$out"
  seen=$(cni_seen 15008); app=$(cni_seen 8080)
  note "stand-in on $H11 saw $seen packets to port 15008 and $app to port 8080"
  echo "$seen" >"$TMP/cni-seen-15008"
  assert "tunnel packets (-> :15008) re-entered n1-p1's egress path (count > 0)" test "$seen" -gt 0
  assert "no packet to the app port reached the CNI (ferry redirected them first)" test "$app" -eq 0

  bpftool map update pinned "$CNI_PIN/maps/cni_deny" key 10 77 2 11 value 1 0 0 0
  note "policy: drop TCP to 10.77.2.11:15008"
  rc=0
  CURL_TIMEOUT=4 curl_get n1/p1 http://10.77.2.11:8080/case5-denied >"$TMP/case5-denied.out" 2>&1 || rc=$?
  note "curl n1/p1 -> n2/p1: exit $rc ($(tr '\n' ' ' <"$TMP/case5-denied.out"))"
  assert "curl n1/p1 -> n2/p1 fails within 4 s" test "$rc" -ne 0
  assert "the server never saw it" bash -c "! grep -q 'case5-denied' '$(httpd_log n2/p1)'"
  out=$(curl_get n1/p1 http://10.77.2.12:8080/case5-other)
  assert "curl n1/p1 -> n2/p2 (10.77.2.12) still works: 200, server sees 10.77.1.11" \
    grep -qF "you are 10.77.1.11" <<<"$out"
  dropped=$(cni_dropped)
  note "stand-in dropped $dropped packets to 10.77.2.11:15008; saw $(cni_seen 15008) to :15008 in all"
  echo "$dropped" >"$TMP/cni-dropped"
  assert "the stand-in's drop counter moved" test "$dropped" -gt 0

  bpftool map delete pinned "$CNI_PIN/maps/cni_deny" key 10 77 2 11
  cni_detach
  trap - EXIT
  assert "stand-in removed (no cls_bpf filter on $H11, no pins)" \
    bash -c "! ip netns exec fy-n1 tc filter show dev $H11 ingress | grep -q . && [ ! -e '$CNI_PIN' ]"
  # The pooled HBONE connection to n2-p1 lost packets while the policy dropped them; TCP
  # retransmission (or ferryd's 20 s dead-peer detection) recovers it: poll.
  assert "n1/p1 -> n2/p1 works again once the policy is gone (within 25 s)" \
    wait_for 25 "curl n1/p1 -> n2/p1" "$LAB" exec n1/p1 -- curl -sf --max-time 3 -o /dev/null http://10.77.2.11:8080/case5-after
}

# A pod listener on 10.77.2.11:15008 that records what reaches it (case 6b): if ferry let
# a direct connection through in plaintext, the bytes would land here.
SINK_PY='
import socket, sys, threading
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(16)
def serve(c, a):
    with c:
        while True:
            d = c.recv(65536)
            if not d: break
            sys.stdout.buffer.write(b"%s:%d %d bytes: %s\n" % (a[0].encode(), a[1], len(d), d[:64])); sys.stdout.flush()
            c.sendall(d)
while True:
    c, a = s.accept()
    threading.Thread(target=serve, args=(c, a), daemon=True).start()
'
# Connects to DST:PORT (optionally from SRC_PORT), sends the payload file, half-closes and
# reads; prints what happened. Exit 0 when the echo/answer came back, 3 when refused/reset
# or closed without an answer.
CLIENT_PY='
import socket, sys
dst, port, payload = sys.argv[1], int(sys.argv[2]), open(sys.argv[3], "rb").read()
s = socket.socket(); s.settimeout(5)
try:
    s.connect((dst, port))
    s.sendall(payload); s.shutdown(socket.SHUT_WR)
    got = b""
    while True:
        d = s.recv(65536)
        if not d: break
        got += d
except (ConnectionError, socket.timeout, OSError) as e:
    print("refused/reset/failed: %r" % e); sys.exit(3)
print("received %d bytes" % len(got)); sys.exit(0 if got else 3)
'

case_no_dodging() {
  local marker_a marker_b st out rc m1
  start_httpd n2/p1 10.77.2.11
  marker_a=$(new_marker case6a); marker_b=$(new_marker case6b)
  make_payload "$TMP/case6a.payload" "$marker_a" 16384
  make_payload "$TMP/case6b.payload" "$marker_b" 16384
  bg n2/p1 "$TMP/sink15008.log" python3 -c "$SINK_PY" 10.77.2.11 15008
  wait_for 10 "plain listener on 10.77.2.11:15008 in n2/p1" listening n2/p1 15008

  note "(a) the app binds source port 15008 and POSTs to 10.77.2.11:8080"
  m1=$(flog_mark n1)
  cap_start case6a
  rc=0
  "$LAB" exec n1/p1 -- curl -sS --max-time 10 --local-port 15008 --data-binary "@$TMP/case6a.payload" \
    -o "$TMP/case6a.echo" -w '%{http_code} %{local_port}\n' http://10.77.2.11:8080/case6a >"$TMP/case6a.out" 2>&1 || rc=$?
  cap_stop case6a
  note "curl --local-port 15008: exit $rc, $(cat "$TMP/case6a.out")"
  assert "the request was answered: 200 from local port 15008, echo intact" \
    bash -c "grep -qx '200 15008' '$TMP/case6a.out' && cmp '$TMP/case6a.payload' '$TMP/case6a.echo'"
  assert "the server logged it from 10.77.1.11" grep -qE '^10\.77\.1\.11:[0-9]+ POST /case6a 200' "$(httpd_log n2/p1)"
  assert "it was captured: n1 ferryd proxied 10.77.1.11:15008 -> 10.77.2.11:8080" \
    flog_wait n1 "$m1" "direction=outbound src=10\.77\.1\.11:15008 dst=10\.77\.2\.11:8080 .*reason=ok"
  st=$(pcap_stats "$TMP/case6a.pcap" "$marker_a" 8080)
  note "wire: $st"
  assert "wire: TLS to 15008, nothing on port 8080, no marker" \
    jqt "$st" '.to_15008 > 0 and .tls_appdata > 0 and .app_port == 0 and .marker_in_file == false'

  note "(b) the app connects straight to 10.77.2.11:15008 (plain TCP) and sends a marker"
  m1=$(flog_mark n1)
  cap_start case6b
  rc=0
  "$LAB" exec n1/p1 -- python3 -c "$CLIENT_PY" 10.77.2.11 15008 "$TMP/case6b.payload" >"$TMP/case6b.out" 2>&1 || rc=$?
  cap_stop case6b
  note "client: exit $rc, $(cat "$TMP/case6b.out")"
  assert "refused: reset or closed without an answer" test "$rc" -eq 3
  assert "the pod's own :15008 listener received nothing" bash -c "! grep -q bytes '$TMP/sink15008.log'"
  assert "ferryd refused it (n1: tunnel_refused / n2: targets a ferry port)" \
    flog_wait n1 "$m1" "direction=outbound src=10\.77\.1\.11:[0-9]+ dst=10\.77\.2\.11:15008 .*reason=(tunnel_refused|bad_request|denied)"
  st=$(pcap_stats "$TMP/case6b.pcap" "$marker_b" 15008)
  note "wire: $st"
  assert "wire: the marker never appears in plaintext" jqt "$st" '.marker_in_file == false'
  assert "wire: what went to 15008 was TLS" jqt "$st" '.to_15008 == 0 or .tls_handshake + .tls_appdata > 0'
}

UDP_ECHO_PY='
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], int(sys.argv[2])))
while True:
    d, a = s.recvfrom(65536)
    sys.stdout.write("%s:%d %d bytes\n" % (a[0], a[1], len(d))); sys.stdout.flush()
    s.sendto(d, a)
'
# Sends a datagram every 0.3 s until the echo comes back (readiness and test in one), 10 s max.
UDP_CLIENT_PY='
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(0.3)
msg = sys.argv[3].encode()
end = time.time() + 10
while time.time() < end:
    s.sendto(msg, (sys.argv[1], int(sys.argv[2])))
    try:
        d, a = s.recvfrom(65536)
    except socket.timeout:
        continue
    if d == msg:
        print("echo from %s:%d" % a); sys.exit(0)
print("no UDP echo"); sys.exit(1)
'

case_udp_icmp() {
  local n1_before n2_before n1_after n2_after m
  n1_before=$(metric n1 'ferry_datapath_reason_packets_total{reason="NOT_TCP"}')
  n2_before=$(metric n2 'ferry_datapath_reason_packets_total{reason="NOT_TCP"}')
  assert "ICMP echo n1/p1 -> n2/p1" lab_ping n1/p1 10.77.2.11
  assert "ICMP echo n2/p2 -> n2/p1 (same node)" lab_ping n2/p2 10.77.2.11
  bg n2/p1 "$TMP/udp-echo.log" python3 -u -c "$UDP_ECHO_PY" 10.77.2.11 9999
  local upid=$BG_PID
  wait_for 10 "UDP echo server bound to 10.77.2.11:9999 in n2/p1" \
    bash -c '[ -n "$(ip netns exec fy-n2-p1 ss -Hlun "sport = :9999")" ]' \
    || { cat "$TMP/udp-echo.log"; die_case "the UDP echo server did not start"; }
  m=$(new_marker udp)
  if ! "$LAB" exec n1/p1 -- python3 -c "$UDP_CLIENT_PY" 10.77.2.11 9999 "$m" >"$TMP/udp-client.out" 2>&1; then
    note "UDP client: $(cat "$TMP/udp-client.out")"
    note "UDP server (pid $upid, $(alive "$upid" && echo alive || echo gone)) log:"; sed 's/^/      /' "$TMP/udp-echo.log"
    ip netns exec fy-n2-p1 ss -Huan | sed 's/^/      n2-p1 ss: /'
    die_case "UDP echo n1/p1 -> n2/p1:9999"
  fi
  ok "UDP echo n1/p1 -> n2/p1:9999 ($(cat "$TMP/udp-client.out"))"
  assert "the UDP server saw 10.77.1.11 (no NAT)" grep -qE '^10\.77\.1\.11:[0-9]+ ' "$TMP/udp-echo.log"
  n1_after=$(metric n1 'ferry_datapath_reason_packets_total{reason="NOT_TCP"}')
  n2_after=$(metric n2 'ferry_datapath_reason_packets_total{reason="NOT_TCP"}')
  note "reason NOT_TCP: n1 $n1_before -> $n1_after, n2 $n2_before -> $n2_after"
  assert "n1 counted the packets as NOT_TCP (passed untouched)" test "$n1_after" -gt "$n1_before"
  assert "n2 counted the packets as NOT_TCP (passed untouched)" test "$n2_after" -gt "$n2_before"
}

case_failure_modes() {
  local pid marker st out rc
  start_httpd n2/p1 10.77.2.11
  assert "n1/p1 -> n2/p1 works before" "$LAB" exec n1/p1 -- curl -sf --max-time 5 -o /dev/null http://10.77.2.11:8080/case8-before

  note "failure_mode closed (lab default): SIGTERM n1's ferryd"
  grep -qE '^  failure_mode: closed' "$STATE/n1/ferryd.yaml" || die_case "n1's config is not failure_mode: closed"
  pid=$(cat "$STATE/n1/ferryd.pid")
  kill -TERM "$pid"
  assert "ferryd n1 (pid $pid) exits on SIGTERM within 10 s" \
    wait_for 10 "ferryd to exit" bash -c "! { st=\$(awk '{print \$3}' /proc/$pid/stat 2>/dev/null) && [ \"\$st\" != Z ]; }"
  assert "its links stay pinned (closed: pods stay steered into the empty proxy)" \
    test -e "$BPFFS/n1/link_${H11}_in"
  marker=$(new_marker case8)
  make_payload "$TMP/case8.payload" "$marker" 16384
  cap_start case8
  rc=0
  "$LAB" exec n1/p1 -- curl -sS --max-time 3 --data-binary "@$TMP/case8.payload" -o /dev/null \
    http://10.77.2.11:8080/case8-closed >"$TMP/case8.out" 2>&1 || rc=$?
  cap_stop case8
  note "curl n1/p1 -> n2/p1 with ferryd down: exit $rc ($(tr '\n' ' ' <"$TMP/case8.out"))"
  assert "curl fails (cut off)" test "$rc" -ne 0
  assert "the server never saw it" bash -c "! grep -q case8-closed '$(httpd_log n2/p1)'"
  st=$(pcap_stats "$TMP/case8.pcap" "$marker" 8080)
  note "wire: $st"
  assert "wire: no packet to port 8080 and no marker (nothing leaked)" jqt "$st" '.app_port == 0 and .marker_in_file == false'
  assert "ICMP n1/p1 -> n2/p1 still works" lab_ping n1/p1 10.77.2.11

  note "restart ferryd n1 (ferry-lab start n1), closed mode"
  local m1
  m1=$(flog_mark n1)
  "$LAB" start n1 8<&- | sed 's/^/      /'
  assert "the restarted ferryd adopted its pinned links" \
    bash -c "tail -n +$((m1 + 1)) '$(flog n1)' | grep -q 'adopted pinned link /run/ferry/bpffs/n1/link_${H11}_in'"
  assert "curl n1/p1 -> n2/p1 works again (within 10 s)" \
    wait_for 10 "curl n1/p1 -> n2/p1" "$LAB" exec n1/p1 -- curl -sf --max-time 3 -o /dev/null http://10.77.2.11:8080/case8-restarted

  note "failure_mode open: stop n1's ferryd, set failure_mode: open, start it"
  "$LAB" stop n1 8<&- | sed 's/^/      /'
  sed -i -E 's/^(  failure_mode:) closed( *)/\1 open  \2/' "$STATE/n1/ferryd.yaml"
  assert "n1's config now says failure_mode: open" grep -qE '^  failure_mode: open' "$STATE/n1/ferryd.yaml"
  "$LAB" start n1 8<&- | sed 's/^/      /'
  m1=$(flog_mark n1)
  assert "open mode, ferryd up: n1/p1 -> n2/p1 through the mesh" \
    "$LAB" exec n1/p1 -- curl -sf --max-time 5 -o /dev/null http://10.77.2.11:8080/case8-open-up
  assert "... n1 ferryd carried it" flog_wait n1 "$m1" "direction=outbound src=10\.77\.1\.11:[0-9]+ dst=10\.77\.2\.11:8080 .*reason=ok"
  "$LAB" stop n1 8<&- | sed 's/^/      /'
  # An open-mode ferryd neither adopts nor removes the links that the closed-mode ferryd
  # before it pinned: they stay attached and keep the pods steered into an empty proxy.
  # An open-mode ferryd removes the links a closed-mode one pinned (else they would keep
  # steering pods into the empty proxy after it stops).
  assert "no ferry link pinned on n1 after the open-mode ferryd stopped" bash -c "[ -z \"\$(find $BPFFS/n1 -maxdepth 1 -name 'link_*')\" ]"
  marker=$(new_marker case8open)
  make_payload "$TMP/case8open.payload" "$marker" 16384
  local m2
  m2=$(flog_mark n2)
  cap_start case8open
  rc=0
  "$LAB" exec n1/p1 -- curl -sS --max-time 5 --data-binary "@$TMP/case8open.payload" -o "$TMP/case8open.echo" \
    http://10.77.2.11:8080/case8-open-down >"$TMP/case8open.out" 2>&1 || rc=$?
  cap_stop case8open
  assert "open mode, ferryd down: curl n1/p1 -> n2/p1 works (direct routing)" \
    bash -c "[ $rc -eq 0 ] && cmp '$TMP/case8open.payload' '$TMP/case8open.echo'"
  assert "the server saw 10.77.1.11" grep -qE '^10\.77\.1\.11:[0-9]+ POST /case8-open-down 200' "$(httpd_log n2/p1)"
  st=$(pcap_stats "$TMP/case8open.pcap" "$marker" 8080)
  note "wire: $st"
  # The earlier tunnels' teardown may still cross: FIN/RST to or from :15008, and n2's
  # keepalive PING (a TLS record from :15008) to a client that is gone. Nothing may go into
  # a tunnel: no TLS data towards :15008.
  assert "wire: port 8080 in plaintext, not the tunnel (by design of failure_mode open)" \
    jqt "$st" '.app_port > 0 and .tls_appdata_to_15008 == 0 and .marker_in_file == true'
  assert "n2 ferryd was not involved (no inbound access line)" \
    bash -c "! tail -n +$((m2 + 1)) '$(flog n2)' | grep -q 'direction=inbound.*dst=10.77.2.11:8080'"
}

# 4b: the same iperf3 in a lab without ferryd (plain routing), for comparison.
case_iperf3_plaintext() {
  local bytes bps mesh
  "$LAB" up --no-ferryd 8<&- >"$TMP/up-plain.log" 2>&1 || { cat "$TMP/up-plain.log"; die_case "ferry-lab up --no-ferryd failed"; }
  bg n2/p1 "$TMP/iperf3-server-plain.log" iperf3 -s -1 -B 10.77.2.11 -p 5201
  wait_for 10 "iperf3 -s listening in n2/p1" listening n2/p1 5201
  "$LAB" exec n1/p1 -- timeout 30 iperf3 -c 10.77.2.11 -p 5201 -t 3 -J >"$TMP/iperf3-plain.json" \
    || { cat "$TMP/iperf3-plain.json"; die_case "iperf3 client failed"; }
  bytes=$(jq '.end.sum_received.bytes' "$TMP/iperf3-plain.json")
  bps=$(jq '.end.sum_received.bits_per_second' "$TMP/iperf3-plain.json")
  mesh=$(cat "$TMP/iperf3-mesh.bps" 2>/dev/null || echo 0)
  echo "$bps" >"$TMP/iperf3-plain.bps"
  note "iperf3 plaintext (no ferryd): $bytes bytes, $(awk -v b="$bps" 'BEGIN{printf "%.2f", b/1e9}') Gbit/s;" \
    "mesh: $(awk -v b="$mesh" 'BEGIN{printf "%.2f", b/1e9}') Gbit/s"
  assert "iperf3 moved bytes without ferryd" test "${bytes%.*}" -gt 0
}

case_leaks() {
  "$LAB" down 8<&- >"$TMP/down.log" 2>&1 || { cat "$TMP/down.log"; die_case "ferry-lab down failed"; }
  assert "no lab network namespace" bash -c '! ip netns list | grep -E "^fy-n[0-9]"'
  # The lab's own link names (fyN-pM, fyN-px, fy-wireN), not every fy- object on the host.
  assert "no lab link in the root netns" bash -c "! ip -o link show | awk -F': ' '{print \$2}' | grep -E '^(fy[0-9]+-|fy-wire[0-9]|fy-api[0-9])'"
  assert "no lab pins ($BPFFS/n1, $BPFFS/n2, $CNI_PIN)" bash -c "[ ! -e $BPFFS/n1 ] && [ ! -e $BPFFS/n2 ] && [ ! -e $CNI_PIN ]"
  assert "no state directory $STATE" test ! -e "$STATE"
  if [ "$LAB_CNI" != none ]; then
    assert "no CNI state outside the lab's directory (/var/lib/cni/networks/fy-lab-*)" \
      bash -c '! compgen -G "/var/lib/cni/networks/fy-lab-*" >/dev/null'
  fi
  assert "no ferryd of the lab running" bash -c '! pgrep -af -- "--config /run/ferry-la[b]/"'
  if [ -n "$LAB_KUBECONFIG" ]; then
    assert "no cluster object of the lab: namespace fy-lab, nodes fy-lab-n1, fy-lab-n2" bash -c '
      for o in namespace/fy-lab node/fy-lab-n1 node/fy-lab-n2; do
        out=$(kubectl --kubeconfig "$1" --request-timeout=20s get "$o" 2>&1) && { echo "$o still exists"; exit 1; }
        grep -q NotFound <<<"$out" || { echo "$o: $out"; exit 1; }
      done' _ "$LAB_KUBECONFIG"
  fi
  # Everything this test started (servers, iperf3, tcpdump) is gone (or a zombie that is
  # only waiting for this shell to reap it).
  assert "no process started by the test ($(wc -l <"$PIDS") recorded) is alive" bash -c '
    bad=0
    while read -r p _; do
      st=$(awk "{print \$3}" /proc/$p/stat 2>/dev/null || true)
      if [ -n "$st" ] && [ "$st" != Z ]; then echo "pid $p alive: $(tr "\0" " " </proc/$p/cmdline)"; bad=1; fi
    done <"$1"
    exit $bad' _ "$PIDS"
}

# ---------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------
e2e_lab_up
# The host-side devices are the lab's (fyN-pM) or, with FERRY_LAB_CNI, the plugin's: never assumed.
H11=$(lab_host_if n1/p1)
[ -n "$H11" ] || { echo "$ME: FAIL: lab.env names no host-side device of n1/p1"; exit 1; }
note "pods made by: $LAB_CNI; n1/p1's host side is $H11"
note "$("$LAB" exec n1/proxy -- curl -s --max-time 2 http://127.0.0.1:15000/datapath | tr '\n' ';')"

# The lab's workload source (read from lab.env once it is up) and its API server.
on_kubernetes() { [ "$(lab_env FERRY_LAB_SOURCE)" = kubernetes ]; }
kc() { kubectl --kubeconfig "$(lab_env FERRY_LAB_KUBECONFIG)" -n "$(lab_env FERRY_LAB_NAMESPACE)" --request-timeout=20s "$@"; }

# pod_leave POD [label|delete] / pod_join POD [label|delete]: POD (n1-p2) leaves the mesh and
# joins it again through the lab's workload source. Workloads file: its entry goes and comes
# back (atomic renames). Kubernetes: `label` sets ferry.io/dataplane=disabled on the pod and
# removes it again; `delete` deletes the pod (gracefully: it is terminating, and no kubelet
# ever confirms) and `ferry-lab recreate` makes it again with the same IP.
pod_leave() {
  local pod=$1 how=${2:-label}
  if ! on_kubernetes; then
    cp "$STATE/workloads.yaml" "$TMP/workloads.before-$pod"
    remove_workload "$pod"
  elif [ "$how" = label ]; then
    kc label pod "$(lab_env FERRY_LAB_NAME_PREFIX)$pod" ferry.io/dataplane=disabled --overwrite >/dev/null
  else
    kc delete pod "$(lab_env FERRY_LAB_NAME_PREFIX)$pod" --wait=false >/dev/null
  fi
}
pod_join() {
  local pod=$1 how=${2:-label}
  if ! on_kubernetes; then
    cp "$TMP/workloads.before-$pod" "$STATE/workloads.yaml.tmp" && mv "$STATE/workloads.yaml.tmp" "$STATE/workloads.yaml"
  elif [ "$how" = label ]; then
    kc label pod "$(lab_env FERRY_LAB_NAME_PREFIX)$pod" ferry.io/dataplane- >/dev/null
  else
    "$LAB" recreate "${pod/-//}" 8<&- | sed 's/^/      /'   # n1-p2 -> n1/p2
  fi
}

# remove_workload POD: POD's entry leaves the workloads file (atomic rename).
remove_workload() {
  python3 - "$STATE/workloads.yaml" "$1" <<'PYEOF'
import sys
path, pod = sys.argv[1:]
out, skip = [], False
for line in open(path).read().splitlines(keepends=True):
    if line.lstrip().startswith("- "):
        skip = ("name: %s," % pod) in line
    if not skip:
        out.append(line)
open(path + ".tmp", "w").write("".join(out))
PYEOF
  mv "$STATE/workloads.yaml.tmp" "$STATE/workloads.yaml"
}

# Pods leave and join at run time through the workload source (the workloads file, or the
# pod's label on Kubernetes). A pod that left is an unenrolled pod: it keeps working
# (directly, in plaintext, as before ferry), and the other pods' connections, including one
# open across the change, are not touched.
case_join_leave() {
  local out m1 go="$TMP/longlived.go"
  enrolled_is() { [ "$(metric "$1" ferry_datapath_enrolled_pods)" = "$2" ]; }
  workloads_known() { [ "$(metric "$1" 'ferry_workloads{scope="all"}')" = "$2" ]; }
  no_line_since() { ! flog_since "$1" "$2" | grep -q -- "$3"; }
  count_at_least() { [ "$(grep -c -- "$2" "$1" 2>/dev/null || true)" -ge "$3" ]; }
  start_httpd n2/p1 10.77.2.11
  assert "two pods enrolled on n1 before" wait_for 10 "2 enrolled" enrolled_is n1 2
  # A connection of n1/p1 held open across the change, to an echo server on n2/p1:9090;
  # it speaks again once $go exists.
  rm -f "$go"
  assert "echo server on n2/p1:9090 listening" start_echo 9090
  bg n1/p1 "$TMP/longlived.out" python3 -c '
import os, socket, sys, time
go = sys.argv[1]
s = socket.create_connection(("10.77.2.11", 9090))
s.sendall(b"echo-before\n")
print(s.recv(4096).decode().strip(), flush=True)
deadline = time.time() + 60
while not os.path.exists(go) and time.time() < deadline:
    time.sleep(0.05)  # the test creates the file; no other signal crosses the netns
s.sendall(b"echo-after\n")
print(s.recv(4096).decode().strip(), flush=True)' "$go"
  assert "long-lived connection echoed before the change" wait_for 10 "first echo" count_at_least "$TMP/longlived.out" "echo-before" 1
  # n1/p2 has a pooled tunnel to n2/p1 (its curl through the mesh) when it leaves: the tunnel
  # is drained with it. Kept, a keepalive PING while the pod is out (its packets no longer
  # steered) kills the tunnel's far end, and the rejoined pod's first stream on it is reset.
  out=$(curl_get n1/p2 http://10.77.2.11:8080/before-leaving)
  assert "n1/p2 reaches n2/p1 through the mesh before it leaves (200)" grep -qE '^200 ' <<<"$out"
  drained=$(metric n1 ferry_hbone_connections_drained_source_left_total)
  # n1-p2 leaves the mesh: its entry leaves the workloads file, or it is labelled disabled.
  pod_leave n1-p2 label
  assert "n1 released n1-p2 (one pod enrolled)" wait_for 10 "1 enrolled" enrolled_is n1 1
  drained_above() { [ "$(metric n1 ferry_hbone_connections_drained_source_left_total)" -gt "$1" ]; }
  assert "... and drained its pooled tunnel" wait_for 5 "the drain" drained_above "$drained"
  m1=$(flog_mark n1)
  out=$(curl_get n1/p2 http://10.77.2.11:8080/unenrolled)
  assert "the unenrolled pod n1/p2 still reaches n2/p1 (200)" grep -qE '^200 ' <<<"$out"
  assert "... directly: n1's ferryd has no access line for 10.77.1.12" no_line_since n1 "$m1" "src=10.77.1.12"
  out=$(curl_get n1/p1 http://10.77.2.11:8080/still-enrolled)
  assert "the enrolled pod n1/p1 still works (200)" grep -qE '^200 ' <<<"$out"
  touch "$go"
  assert "the connection held open across the change still works" wait_for 10 "second echo" count_at_least "$TMP/longlived.out" "echo-after" 1
  # n1-p2 joins again.
  pod_join n1-p2 label
  assert "n1 enrolled n1-p2 again" wait_for 10 "2 enrolled" enrolled_is n1 2
  m1=$(flog_mark n1)
  # n2 learns it on its own (file poll, or watch event): until it knows n1-p2 again, it answers that identity's
  # tunnel 401 (unknown source), as it must.
  assert "n2 knows all four workloads again" wait_for 10 "n2 to reload" workloads_known n2 4
  out=$(curl_get n1/p2 http://10.77.2.11:8080/rejoined)
  assert "the rejoined pod reaches n2/p1 (200)" grep -qE '^200 ' <<<"$out"
  assert "... through the mesh again" flog_wait n1 "$m1" "direction=outbound src=10\.77\.1\.12:[0-9]+ dst=10\.77\.2\.11:8080 .*reason=ok"
}
# ---------------------------------------------------------------------------------------
# Hardening (issue 12): no plaintext escape, run-time mode changes reach the datapath.
# ---------------------------------------------------------------------------------------
RAW=$HERE/fy_raw_send.py
reason_count() { metric "$1" "ferry_datapath_reason_packets_total{reason=\"$2\"}"; }
reason_reached() { [ "$(reason_count "$1" "$2")" -ge "$3" ]; }
drops() { metric "$1" "ferry_datapath_packets_total{program=\"$2\",verdict=\"drop\"}"; }
# peer_auth MODE: the lab's only policy is a PeerAuthentication putting n2-p1 in MODE.
peer_auth() {
  set_policies <<EOF
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: n2-p1-mtls, namespace: $(lab_env FERRY_LAB_NAMESPACE)}
spec:
  selector: $(lab_selector n2-p1)
  mtls: {mode: $1}
EOF
}

# Finding 1: TCP fragments and IPv6 TCP from a pod with CAP_NET_RAW are refused at its
# device (counted), and nothing of them crosses the wire.
case_no_plaintext_escape() {
  local marker st before mac dropped
  start_httpd n2/p1 10.77.2.11
  marker=$(new_marker case10)
  before=$(reason_count n1 FRAGMENT)
  dropped=$(drops n1 pod_egress)
  cap_start case10
  "$LAB" exec n1/p1 -- python3 "$RAW" frag4 10.77.1.11 10.77.2.11 8080 "$marker" | sed 's/^/      /'
  # A dropped packet sends no signal: n1's counter is the readiness signal.
  assert "n1 refused both fragments at $H11 (reason FRAGMENT, +2)" \
    wait_for 5 "FRAGMENT >= $((before + 2))" reason_reached n1 FRAGMENT $((before + 2))
  assert "... as drops of pod_egress" test "$(drops n1 pod_egress)" -ge $((dropped + 2))
  "$LAB" exec n1/p1 -- curl -sf --max-time 5 -o /dev/null http://10.77.2.11:8080/case10-after-fragments \
    || true  # a mesh request behind the fragments: when it is answered, they had their chance to cross
  cap_stop case10
  st=$(pcap_stats "$TMP/case10.pcap" "$marker" 8080)
  note "wire: $st"
  assert "wire: no fragment of the marker crossed" jqt "$st" '.marker_in_file == false'
  assert "the server never saw the marker" bash -c "! grep -q '$marker' '$(httpd_log n2/p1)'"

  mac=$(ip -n fy-n1 -j link show "$H11" | jq -r '.[0].address')
  before=$(reason_count n1 IPV6_TCP)
  "$LAB" exec n1/p1 -- python3 "$RAW" tcp6 eth0 "$mac" "$marker" | sed 's/^/      /'
  assert "n1 refused the IPv6 TCP SYN at $H11 (reason IPV6_TCP, +1)" \
    wait_for 5 "IPV6_TCP >= $((before + 1))" reason_reached n1 IPV6_TCP $((before + 1))
}

# Finding 3: STRICT set at run time (a PeerAuthentication) reaches the pod's datapath (and
# back), and TCP fragments from the node cannot reach the STRICT pod either. Plaintext from
# an unenrolled pod and from another node is refused while STRICT and served while
# PERMISSIVE; the pod's own node passes (datapath.exempt_node: the kubelet's probes).
case_strict_at_runtime() {
  local m2 rc marker src before
  start_httpd n2/p1 10.77.2.11
  assert "PERMISSIVE: plaintext from node n2 to n2/p1 is served" \
    "$LAB" exec n2 -- curl -sf --max-time 3 -o /dev/null http://10.77.2.11:8080/case11-permissive
  # A plaintext connection opened now from another node, while n2/p1 is PERMISSIVE, speaks
  # again once it is STRICT.
  local held_marker held_go=$TMP/case11b.go
  held_marker=$(new_marker case11b)
  start_echo 9191
  bg n1 "$TMP/case11b.out" python3 -c "$STALE_CLIENT_PY" "$held_go" "$held_marker"
  assert "a plaintext connection from node n1 to n2/p1:9191 echoes while PERMISSIVE" \
    wait_for 10 "first echo" grep -q "first: hello" "$TMP/case11b.out"
  m2=$(flog_mark n2)
  peer_auth STRICT
  assert "n2 steers new plaintext to $(lab_workload n2-p1) through ferryd (STRICT)" \
    flog_wait n2 "$m2" "$(lab_workload n2-p1): new plaintext connections now go through ferryd"
  rc=0
  local refused
  refused=$(strict_refused)
  "$LAB" exec n1 -- curl -sS --max-time 3 -o /dev/null http://10.77.2.11:8080/case11-strict >"$TMP/case11.out" 2>&1 || rc=$?
  note "plaintext from node n1 to STRICT n2/p1: curl exit $rc ($(tr '\n' ' ' <"$TMP/case11.out"))"
  assert "STRICT: plaintext from another node (n1) is refused" test "$rc" -ne 0
  assert "... by n2's ferryd (strict_plaintext)" wait_for 5 "the count" strict_refused_above "$refused"
  assert "... and the server never saw it" bash -c "! grep -q case11-strict '$(httpd_log n2/p1)'"
  before=$(reason_count n2 NODE_SYN)
  assert "STRICT: plaintext from the pod's own node (n2: the kubelet's probes) is served" \
    "$LAB" exec n2 -- curl -sf --max-time 3 -o /dev/null http://10.77.2.11:8080/case11-strict-node
  assert "... passed by the datapath as the node's (reason NODE_SYN)" \
    wait_for 5 "NODE_SYN > $before" reason_reached n2 NODE_SYN $((before + 1))
  assert "mesh traffic to the STRICT pod still works" \
    "$LAB" exec n1/p1 -- curl -sf --max-time 5 -o /dev/null http://10.77.2.11:8080/case11-mesh

  marker=$(new_marker case11)
  src=$(ip -n fy-n2 -j route get 10.77.2.11 | jq -r '.[0].prefsrc')
  before=$(reason_count n2 FRAGMENT)
  bg n2/p1 "$TMP/case11.tcpdump" tcpdump -i eth0 -n -s 0 -U --immediate-mode -w "$TMP/case11.pcap"
  local cap=$BG_PID
  wait_for 10 "tcpdump in n2/p1" grep -q "listening on" "$TMP/case11.tcpdump"
  "$LAB" exec n2 -- python3 "$RAW" frag4 "$src" 10.77.2.11 8080 "$marker" | sed 's/^/      /'
  assert "n2 refused both fragments to the STRICT pod (reason FRAGMENT, +2)" \
    wait_for 5 "FRAGMENT >= $((before + 2))" reason_reached n2 FRAGMENT $((before + 2))
  stop_pid "$cap" INT
  assert "nothing of the fragments reached n2/p1's eth0" bash -c "! grep -q '$marker' '$TMP/case11.pcap'"

  note "the plaintext connection opened while PERMISSIVE writes again, the pod now STRICT"
  before=$(reason_count n2 STRICT_STALE)
  bg n2/p1 "$TMP/case11b.tcpdump" tcpdump -i eth0 -n -s 0 -U --immediate-mode -w "$TMP/case11b.pcap" tcp port 9191
  cap=$BG_PID
  wait_for 10 "tcpdump in n2/p1" grep -q "listening on" "$TMP/case11b.tcpdump"
  touch "$held_go"
  assert "n2 reset the pod's side instead of delivering (reason STRICT_STALE)" \
    wait_for 10 "STRICT_STALE > $before" reason_reached n2 STRICT_STALE $((before + 1))
  assert "n2/p1 holds no connection from node n1 on :9191 any more" \
    wait_for 10 "the pod's socket to go" bash -c "[ -z \"\$(ip netns exec fy-n2-p1 ss -Htn state established 'sport = :9191')\" ]"
  stop_pid "$cap" INT
  assert "nothing of the plaintext reached n2/p1's eth0" bash -c "! grep -q '$held_marker' '$TMP/case11b.pcap'"
  assert "the client got no echo" bash -c "! grep -q 'outcome: echo' '$TMP/case11b.out'"

  note "an unenrolled pod (n1/p2 leaves the mesh) in plaintext to the STRICT pod"
  pod_leave n1-p2 label
  assert "n1 released n1-p2" wait_for 10 "1 enrolled" enrolled_pods_are n1 1
  refused=$(strict_refused)
  rc=0
  "$LAB" exec n1/p2 -- curl -sS --max-time 3 -o /dev/null http://10.77.2.11:8080/case11-unenrolled-strict >"$TMP/case11c.out" 2>&1 || rc=$?
  assert "STRICT: the unenrolled pod's plaintext is refused (curl exit $rc)" test "$rc" -ne 0
  assert "... counted by n2 as strict_plaintext" wait_for 5 "the count" strict_refused_above "$refused"
  assert "... and the server never saw it" bash -c "! grep -q case11-unenrolled-strict '$(httpd_log n2/p1)'"

  m2=$(flog_mark n2)
  peer_auth PERMISSIVE
  assert "n2 lets plaintext reach $(lab_workload n2-p1) directly again (PERMISSIVE, no policy)" \
    flog_wait n2 "$m2" "$(lab_workload n2-p1): new plaintext connections now pass straight to the pod"
  assert "PERMISSIVE: plaintext from node n2 is served" \
    wait_for 5 "curl from n2" "$LAB" exec n2 -- curl -sf --max-time 3 -o /dev/null http://10.77.2.11:8080/case11-permissive-again
  assert "PERMISSIVE: the unenrolled pod's plaintext is served" \
    "$LAB" exec n1/p2 -- curl -sf --max-time 3 -o /dev/null http://10.77.2.11:8080/case11-unenrolled-permissive
  pod_join n1-p2 label
  assert "n1 enrolled n1-p2 again" wait_for 10 "2 enrolled" enrolled_pods_are n1 2
  set_policies </dev/null
}
enrolled_pods_are() { [ "$(metric "$1" ferry_datapath_enrolled_pods)" = "$2" ]; }
strict_refused() { metric n2 'ferry_connections_closed_total{direction="inbound_plaintext",reason="strict_plaintext"}'; }
strict_refused_above() { [ "$(strict_refused)" -gt "$1" ]; }

# A client of the echo server on n2/p1:9191 (start_echo) that echoes once, waits for the
# file $2, then sends a marker payload and reports what the socket said: "echo" (it came
# back), "reset" (ECONNRESET/EPIPE at any step) or "eof".
STALE_CLIENT_PY='
import os, socket, sys, time
go, marker = sys.argv[1], sys.argv[2]
s = socket.create_connection(("10.77.2.11", 9191))
s.sendall(b"hello\n")
print("first:", s.recv(4096).decode().strip(), flush=True)
deadline = time.time() + 60
while not os.path.exists(go) and time.time() < deadline:
    time.sleep(0.05)  # the test creates the file; no other signal crosses the netns
s.settimeout(10)
outcome = "eof"
try:
    s.sendall((marker + "\n").encode() * 64)
    got = s.recv(4096)
    if got:
        outcome = "echo"
    else:
        time.sleep(0.2)  # a half-closed socket: the next write meets the reset
        s.sendall((marker + "\n").encode())
        s.recv(4096)
except (ConnectionResetError, BrokenPipeError):
    outcome = "reset"
except socket.timeout:
    outcome = "timeout"
print("outcome:", outcome, flush=True)'
# stale_write_is_reset NAME MARKER: lets the client started with $TMP/NAME.go write its
# marker, then asserts the application got a reset and the wire never saw the marker.
stale_write_is_reset() {
  local name=$1 marker=$2 st
  cap_start "$name"
  touch "$TMP/$name.go"
  assert "the client reports" wait_for 15 "outcome" grep -q "outcome:" "$TMP/$name.out"
  cap_stop "$name"
  note "client: $(tr '\n' ' ' <"$TMP/$name.out")"
  assert "the application got a reset" grep -q "outcome: reset" "$TMP/$name.out"
  st=$(pcap_stats "$TMP/$name.pcap" "$marker" 9191)
  note "wire: $st"
  assert "wire: the marker never crossed in plaintext" jqt "$st" '.marker_in_file == false'
}
enrolled_n1() { [ "$(metric n1 ferry_datapath_enrolled_pods)" = "$1" ]; }

# Finding 2: a flow no ferryd socket holds never continues in plaintext to a mesh pod.
case_stale_flows() {
  local marker go pid
  start_httpd n2/p1 10.77.2.11
  start_echo 9191

  note "a connection that predates enrolment (n1/p2 unenrolled while it opens; on Kubernetes: deleted, then created again)"
  pod_leave n1-p2 delete
  assert "n1 released n1-p2" wait_for 10 "1 enrolled" enrolled_n1 1
  marker=$(new_marker case12a)
  go=$TMP/case12a.go
  bg n1/p2 "$TMP/case12a.out" python3 -c "$STALE_CLIENT_PY" "$go" "$marker"
  assert "the unenrolled pod's connection echoed (direct)" wait_for 10 "first echo" grep -q "first: hello" "$TMP/case12a.out"
  pod_join n1-p2 delete
  assert "n1 enrolled n1-p2 again" wait_for 10 "2 enrolled" enrolled_n1 2
  stale_write_is_reset case12a "$marker"
  assert "n1 counted the reset (reason STALE_FLOW)" reason_reached n1 STALE_FLOW 1

  note "a mesh connection whose client-node ferryd is killed (SIGKILL) and restarted"
  marker=$(new_marker case12b)
  go=$TMP/case12b.go
  bg n1/p1 "$TMP/case12b.out" python3 -c "$STALE_CLIENT_PY" "$go" "$marker"
  assert "the mesh connection echoed" wait_for 10 "first echo" grep -q "first: hello" "$TMP/case12b.out"
  # The orphaned sockets of the killed ferryd would keep the flow "held" for
  # tcp_fin_timeout (60 s); the lab's proxy netns is ours, so shorten it for this case.
  ip netns exec fy-n1-proxy sysctl -qw net.ipv4.tcp_fin_timeout=1
  pid=$(cat "$STATE/n1/ferryd.pid")
  kill -KILL "$pid"
  assert "ferryd n1 is gone" wait_for 10 "ferryd to exit" bash -c "! kill -0 $pid 2>/dev/null"
  assert "no socket of the killed ferryd holds the flow any more" \
    wait_for 15 "orphans to expire" bash -c "[ -z \"\$(ip netns exec fy-n1-proxy ss -Htan 'sport = :9191')\" ]"
  ip netns exec fy-n1-proxy sysctl -qw net.ipv4.tcp_fin_timeout=60
  "$LAB" start n1 8<&- | sed 's/^/      /'
  stale_write_is_reset case12b "$marker"
  assert "a new connection after the restart works" \
    wait_for 10 "curl n1/p1 -> n2/p1" "$LAB" exec n1/p1 -- curl -sf --max-time 3 -o /dev/null http://10.77.2.11:8080/case12-after
}

# Finding 4 (datapath side): the server-node ferryd is down. Its pinned programs still
# steer the tunnel SYN into the empty proxy, where to_proxy answers it with a reset in the
# HBONE port's name, so the client node fails the connection at once and names the peer.
case_peer_ferryd_down() {
  local pid m1 rc
  start_httpd n2/p1 10.77.2.11
  assert "n1/p1 -> n2/p1 works before" "$LAB" exec n1/p1 -- curl -sf --max-time 5 -o /dev/null http://10.77.2.11:8080/case13-before
  pid=$(cat "$STATE/n2/ferryd.pid")
  kill -KILL "$pid"
  assert "ferryd n2 is gone (SIGKILL: it died, it did not drain)" wait_for 10 "ferryd n2 to exit" bash -c "! kill -0 $pid 2>/dev/null"
  m1=$(flog_mark n1)
  rc=0
  "$LAB" exec n1/p1 -- curl -sS --max-time 8 -o /dev/null http://10.77.2.11:8080/case13-down >"$TMP/case13.out" 2>&1 || rc=$?
  note "curl n1/p1 -> n2/p1 with n2's ferryd down: exit $rc ($(tr '\n' ' ' <"$TMP/case13.out"))"
  assert "the application's connection fails (not a timeout: curl exit is not 28)" \
    bash -c "[ $rc -ne 0 ] && [ $rc -ne 28 ]"
  assert "n1's ferryd says the peer's HBONE port refused" \
    flog_wait n1 "$m1" "10\.77\.2\.11:15008.*[Rr]efused"
  "$LAB" start n2 8<&- | sed 's/^/      /'
  assert "n2 counted the reset it sent (reason NO_HBONE_LISTENER)" reason_reached n2 NO_HBONE_LISTENER 1
  assert "after n2's restart the connection works again" \
    wait_for 10 "curl n1/p1 -> n2/p1" "$LAB" exec n1/p1 -- curl -sf --max-time 3 -o /dev/null http://10.77.2.11:8080/case13-after

  note "a planned stop (SIGTERM) pauses HBONE: a connection opened in the gap waits for the next ferryd"
  "$LAB" stop n2 8<&- | sed 's/^/      /'
  bg n1/p1 "$TMP/case13-gap.out" curl -sS --max-time 20 -o /dev/null -w '%{http_code}\n' http://10.77.2.11:8080/case13-gap
  local gap=$BG_PID
  assert "the tunnel SYN meets the paused node (reason NO_LISTENER, dropped, not reset)" \
    wait_for 10 "a dropped SYN" bash -c "ip netns exec fy-n1-proxy ss -Htn state syn-sent 'dport = :15008' | grep -q ."
  "$LAB" start n2 8<&- | sed 's/^/      /'
  assert "the connection opened while n2 was stopped succeeds once n2 is back" \
    wait_for 20 "curl to finish" bash -c "grep -q '^200' '$TMP/case13-gap.out'"
  stop_pid "$gap"
}

run_case 1 "cross-node curl n1/p1 -> n2/p1, server sees 10.77.1.11" case_cross_node_curl
run_case 2 "same-node curl n2/p2 -> n2/p1, server sees 10.77.2.12" case_same_node_curl
run_case 3 "the wire (n1/p2 -> n2/p1): TLS to :15008, no plaintext of a 64 KiB marker, nothing on :8080" case_wire_capture
run_case 4 "iperf3 across nodes through the mesh" case_iperf3
run_case 5 "CNI stand-in after ferry on n1/p1's host-side ingress: counts the tunnel, its drop policy bites" case_cni_standin
run_case 6 "capture cannot be dodged (source port 15008; direct :15008)" case_no_dodging
run_case 7 "UDP and ICMP untouched (reason NOT_TCP)" case_udp_icmp
run_case 7b "pods leave and join at run time; an unenrolled pod keeps working; others untouched" case_join_leave
run_case 10 "no plaintext escape: TCP fragments and IPv6 TCP from a pod are refused" case_no_plaintext_escape
run_case 11 "STRICT (PeerAuthentication) at run time reaches the datapath; fragments and an unenrolled pod's plaintext cannot reach a STRICT pod" case_strict_at_runtime
run_case 12 "stale flows (pre-enrolment, client ferryd killed) get a reset, never plaintext" case_stale_flows
run_case 13 "server-node ferryd died: the client fails fast and names the peer; a planned restart holds new tunnels" case_peer_ferryd_down
run_case 8 "ferryd stopped: closed cuts off without leaking, restart adopts, open routes directly" case_failure_modes
run_case 4b "iperf3 across nodes without ferryd (plaintext baseline)" case_iperf3_plaintext
run_case 9 "leak check after ferry-lab down" case_leaks

echo
mesh=$(cat "$TMP/iperf3-mesh.bps" 2>/dev/null || echo 0)
plain=$(cat "$TMP/iperf3-plain.bps" 2>/dev/null || echo 0)
awk -v m="$mesh" -v p="$plain" 'BEGIN{printf "iperf3 n1/p1 -> n2/p1: mesh %.2f Gbit/s, plaintext %.2f Gbit/s\n", m/1e9, p/1e9}'
echo "CNI stand-in on $H11: $(cat "$TMP/cni-seen-15008" 2>/dev/null || echo ?) tunnel packets seen for one curl," \
  "$(cat "$TMP/cni-dropped" 2>/dev/null || echo ?) dropped by its policy"
e2e_summary
