#!/usr/bin/env bash
# The kernel lab's suite (issue 4, docs/kernel-lab.md). Runs INSIDE the qemu guest that
# scripts/kernel-lab/kernel-lab.sh boots, as root, on a kernel with netkit: the two-node lab
# built with netkit pairs for the pods and the proxies (FERRY_LAB_LINK=netkit), ferryd on
# both nodes, real curl and python servers in the pods.
#
#   netkit_e2e.sh EXPECTED_INJECTION       peer-egress (patched kernel) | ingress-redirect
#
#   0  ferryd's probe: netkit=yes, the injection mode EXPECTED_INJECTION; pods adopted as
#      netkit (pod_egress_netkit as each pair's peer program)
#   1  cross-node curl n1/p1 -> n2/p1: 200, the server sees 10.77.1.11, through the mesh
#   2  same-node curl n2/p2 -> n2/p1: 200, the server sees 10.77.2.12
#   3  the wire carries TLS to :15008 and no plaintext of a 64 KiB marker payload
#   4  a "CNI policy" program on the client pod's netkit PEER hook (after ferry's), where a
#      netkit CNI enforces pod egress policy:
#        peer-egress:      it sees the tunnel's packets (podA -> podB:15008) and its drop
#                          rule on 10.77.2.11:15008 breaks exactly that destination
#        ingress-redirect: it sees none of them and cannot drop them: the documented
#                          limitation of the fallback on netkit
#   5  kTLS: /proc/net/tls_stat before and after ferry's traffic, and whether OpenSSL can
#      engage kTLS on this kernel at all (tests/kernel-lab/ktls_probe)
#
# Writes $FY_RESULTS/summary.txt (the facts the closing note quotes). Exit 0 all passed.
# shellcheck disable=SC2016  # exit steps are single-quoted: evaluated at exit
set -euo pipefail

# The prelude, the cleanup and the host suite's helpers.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../e2e/lib.sh"
CNI_PIN=$BPFFS/kl-cni
ME=netkit_e2e
BUILD=${FERRY_BUILD_DIR:-$ROOT/build/default}
EXPECTED=${1:?usage: netkit_e2e.sh peer-egress|ingress-redirect}
RESULTS=${FY_RESULTS:-/tmp}
CNI_OBJ=${FY_CNI_OBJ:?FY_CNI_OBJ: the compiled tests/e2e/cni_standin.bpf.c}
export FERRY_LAB_LINK=netkit
# TCG runs everything 10-50 times slower than the host: generous timeouts.
export FERRY_LAB_READY_TIMEOUT=${FERRY_LAB_READY_TIMEOUT:-120}
export CURL_TIMEOUT=${CURL_TIMEOUT:-30}
# ... for every readiness wait of tests/e2e/lib.sh too (a tcpdump, an HTTP server, a log
# line): 10 s on the host can be a minute here when the host is busy.
export FY_WAIT_SCALE=${FY_WAIT_SCALE:-6}

[ "$(id -u)" -eq 0 ] || { echo "$ME: must run as root (in the kernel lab's guest)" >&2; exit 1; }
case $EXPECTED in peer-egress|ingress-redirect) ;; *) echo "$ME: unknown mode $EXPECTED" >&2; exit 2 ;; esac

e2e_tmpdir netkit-e2e
SUMMARY=$RESULTS/summary.txt
: >"$SUMMARY"
fact() { echo "$*" | tee -a "$SUMMARY"; }
on_exit e2e_lab_down
# The guest's /run goes with it: keep ferryd's logs beside output.log when a case failed.
on_exit 'if [ "$FAILED" -gt 0 ]; then
  for n in n1 n2; do cp -- "$STATE/$n/ferryd.log" "$RESULTS/ferryd-$n.log" 2>/dev/null; done
fi'
on_exit 'rm -rf -- "$CNI_PIN"'

tls_stat() { cat /proc/net/tls_stat 2>/dev/null || echo "(no /proc/net/tls_stat: CONFIG_TLS off)"; }
tls_counter() { awk -v k="$1" '$1 == k {print $2}' /proc/net/tls_stat 2>/dev/null || echo 0; }

# ---------------------------------------------------------------------------------------
case_probe() {
  local log
  log=$(flog n1)
  local kernel_line injection_line
  kernel_line=$(grep -m1 'datapath: kernel ' "$log" | sed 's/.*datapath: kernel //')
  injection_line=$(grep -m1 'datapath: injection ' "$log" | sed 's/.*datapath: injection //')
  fact "guest kernel: $(uname -r)"
  fact "probe: $kernel_line"
  fact "injection: $injection_line"
  assert "the probe finds netkit" grep -q 'netkit=yes' <<<"$kernel_line"
  if [ "$EXPECTED" = peer-egress ]; then
    assert "the probe finds the egress flag" grep -q 'egress_flag=yes' <<<"$kernel_line"
  else
    assert "the probe finds no egress flag (unpatched kernel)" grep -q 'egress_flag=no' <<<"$kernel_line"
    assert "ferryd says that on netkit the fallback skips the peer's programs" \
      grep -q 'netkit devices this skips the peer' <<<"$injection_line"
  fi
  assert "ferryd chose $EXPECTED" grep -q "^$EXPECTED " <<<"$injection_line"
  assert "the /datapath admin page reports $EXPECTED" \
    bash -c "'$LAB' exec n1/proxy -- curl -sf --max-time 10 http://127.0.0.1:15000/datapath | grep -q '$EXPECTED'"
  assert "pods are adopted as netkit (pod_egress_netkit on the pair's peer hook)" \
    grep -q 'enrolled .*(netkit fy1-p1 ' "$log"
  fact "pods: $(grep -c 'enrolled .*(netkit ' "$log") netkit pods enrolled on n1, $(grep -c 'enrolled .*(netkit ' "$(flog n2)") on n2"
}

# The host suite's cases 1 and 2 (tests/e2e/lib.sh), unchanged on netkit pods.
case_netkit_cross_node() {
  case_cross_node_curl
  fact "cross-node curl n1/p1 -> n2/p1: 200, the server saw 10.77.1.11, both ferryd logged the legs"
}

case_netkit_same_node() {
  case_same_node_curl
  fact "same-node curl n2/p2 -> n2/p1: 200, the server saw 10.77.2.12"
}

case_wire() {
  local marker st
  marker=$(new_marker kl3)
  make_payload "$TMP/kl3.payload" "$marker" 65536
  start_httpd n2/p1 10.77.2.11
  cap_start kl3
  "$LAB" exec n1/p2 -- curl -sS --max-time "$CURL_TIMEOUT" --data-binary "@$TMP/kl3.payload" \
    -o "$TMP/kl3.echo" http://10.77.2.11:8080/kl3 || { cap_stop kl3; die_case "the POST through the mesh failed"; }
  cap_stop kl3
  assert "64 KiB sent and read back intact" cmp "$TMP/kl3.payload" "$TMP/kl3.echo"
  st=$(pcap_stats "$TMP/kl3.pcap" "$marker" 8080)
  note "wire: $st"
  assert "the wire carries a TLS handshake to :15008" jqt "$st" '.to_15008 > 0 and .tls_handshake > 0'
  assert "no packet to or from port 8080 on the wire" jqt "$st" '.app_port == 0'
  assert "the marker is nowhere in the capture (no plaintext)" jqt "$st" '.marker_in_file == false'
  fact "wire: $(jq -c '{to_15008, tls_handshake, tls_appdata, app_port, marker_in_file}' <<<"$st")"
}

cni_seen() { bpftool -j map dump pinned "$CNI_PIN/maps/cni_seen" | jq --argjson p "$1" '[.[] | select(.formatted.key == $p) | .formatted.value] | add // 0'; }
# reasons NODE: every non-zero ferry_datapath_reason_packets_total series, "REASON N" lines.
reasons() {
  "$LAB" exec "$1/proxy" -- curl -sf --max-time 5 http://127.0.0.1:15020/metrics \
    | sed -n 's/^ferry_datapath_reason_packets_total{reason="\([A-Z_0-9]*\)"} \([0-9]*\)$/\1 \2/p' || true
}
# reasons_delta BEFORE AFTER: the reasons whose counts grew, "REASON+N" words.
reasons_delta() {
  awk 'NR == FNR { b[$1] = $2; next } $2 > b[$1] + 0 { printf "%s+%d ", $1, $2 - b[$1] }' \
    <(echo "$1") <(echo "$2")
}
ss_tunnels() { "$LAB" exec "$1/proxy" -- ss -tnoH state all '( dport = :15008 or sport = :15008 )' 2>&1 || true; }
cni_dropped() { bpftool -j map dump pinned "$CNI_PIN/maps/cni_dropped" | jq '[.[].formatted.value] | add // 0'; }

case_cni_on_netkit_peer() {
  local seen app out inject dropped
  rm -rf -- "$CNI_PIN"
  mkdir -p "$CNI_PIN/maps"
  bpftool prog load "$CNI_OBJ" "$CNI_PIN/prog" type classifier pinmaps "$CNI_PIN/maps"
  # After ferry's pod_egress_netkit on the same hook: appended, as a CNI attaching later.
  assert "the policy program attaches to fy1-p1's netkit peer hook, after ferry's" \
    ip netns exec fy-n1 "$BUILD/tests/e2e/fy_attach" "$CNI_PIN/prog" fy1-p1 netkit-peer "$CNI_PIN/link"
  start_httpd n2/p1 10.77.2.11
  start_httpd n2/p2 10.77.2.12
  # A new source/destination pair (n1-p1 -> n2-p2 was not used yet), so a new tunnel: its
  # handshake passes the hook while the program is there.
  out=$(curl_get n1/p1 http://10.77.2.12:8080/kl4a)
  assert "n1/p1 -> n2/p2 answers with the policy program in place" grep -qE '^200 ' <<<"$out"
  seen=$(cni_seen 15008); app=$(cni_seen 8080)
  local reason=INJECT_PEER_EGRESS
  [ "$EXPECTED" = peer-egress ] || reason=INJECT_INGRESS_REDIRECT
  inject=$(metric n1 "ferry_datapath_reason_packets_total{reason=\"$reason\"}")
  note "policy program on fy1-p1 (netkit peer): saw $seen packets to :15008, $app to :8080; ferry's $reason packets on n1: $inject"
  fact "policy program on fy1-p1's netkit peer: packets to :15008 seen = $seen, to :8080 seen = $app"
  fact "ferry on n1: $reason packets = $inject"
  assert "the app's own packets to :8080 never reach it (ferry's program, first, took them)" test "$app" -eq 0
  if [ "$EXPECTED" = peer-egress ]; then
    assert "it sees the tunnel's packets: ferry's upstream leaves through the pod's own egress" test "$seen" -gt 0
    assert "ferry counted its peer-egress injections" test "${inject%.*}" -gt 0
    bpftool map update pinned "$CNI_PIN/maps/cni_deny" key 10 77 2 11 value 1 0 0 0
    note "policy: drop TCP to 10.77.2.11:15008"
    local before m1
    before=$(reasons n1); m1=$(flog_mark n1)
    if out=$(CURL_TIMEOUT=8 curl_get n1/p1 http://10.77.2.11:8080/kl4b 2>&1); then
      # Which path did the tunnel take? The policy's view, ferry's verdicts and legs.
      note "cni_seen :15008 = $(cni_seen 15008) (was $seen), cni_dropped = $(cni_dropped)"
      note "n1 datapath verdicts during the request: $(reasons_delta "$before" "$(reasons n1)")"
      flog_since n1 "$m1" | tail -n 20 | sed 's/^/    n1| /'
      ss_tunnels n1 | sed 's/^/    n1 ss| /'
      die_case "n1/p1 -> n2/p1 still answered: $out"
    fi
    ok "n1/p1 -> n2/p1 is cut off by the pod's policy (no answer)"
    out=$(curl_get n1/p1 http://10.77.2.12:8080/kl4c)
    assert "n1/p1 -> n2/p2 still works" grep -qE '^200 ' <<<"$out"
    dropped=$(cni_dropped)
    assert "the policy program dropped tunnel packets" test "$dropped" -gt 0
    fact "policy drop rule on 10.77.2.11:15008: n1/p1 -> n2/p1 blocked, n1/p1 -> n2/p2 200, packets dropped = $dropped"
  else
    assert "it sees none of the tunnel's packets: the fallback enters at the node side (documented limitation)" \
      test "$seen" -eq 0
    bpftool map update pinned "$CNI_PIN/maps/cni_deny" key 10 77 2 11 value 1 0 0 0
    out=$(curl_get n1/p1 http://10.77.2.11:8080/kl4b)
    assert "so its drop rule on 10.77.2.11:15008 cannot stop n1/p1 -> n2/p1" grep -qE '^200 ' <<<"$out"
    dropped=$(cni_dropped)
    assert "the policy program dropped nothing" test "$dropped" -eq 0
    fact "policy drop rule on 10.77.2.11:15008: not enforced on the tunnel (dropped = $dropped): the fallback's limitation"
  fi
  rm -rf -- "$CNI_PIN"
}

case_ktls() {
  local tx rx line
  fact "kTLS: /proc/net/tls_stat after ferry's traffic: $(tls_stat | tr -s ' \n' ' ')"
  tx=$(tls_counter TlsTxSw); rx=$(tls_counter TlsRxSw)
  fact "kTLS on ferry's connections: TlsTxSw=${tx:-0} TlsRxSw=${rx:-0} (0: ferry's TLS never reached the kernel)"
  assert "the kernel has the TLS ULP" grep -qw tls /proc/sys/net/ipv4/tcp_available_ulp
  line=$("$BUILD/tests/kernel-lab/ktls_probe") || die_case "ktls_probe failed: $line"
  while IFS= read -r l; do fact "$l"; done <<<"$line"
  fact "kTLS counters after ktls_probe: $(tls_stat | tr -s ' \n' ' ')"
  if grep -q 'tx=yes' <<<"$line"; then
    # The counters do count: what the probe moved into the kernel shows up, so ferry's 0
    # above means its connections never used kTLS.
    assert "tls_stat counted ktls_probe's kernel-TLS sockets" test "$(tls_counter TlsTxSw)" -gt "${tx:-0}"
  fi
}

reattached() { [ "$(metric n1 ferry_datapath_reattached_total)" -gt "$1" ]; }

# Run last: by now each ferryd has checked its links every second for the whole run.
case_netkit_links_kept() {
  local pin=$BPFFS/n1/link_fy1-p1_nkpeer id new r0 n m1 out
  # A netkit peer link reports the peer's ifindex (the pod's netns), never the primary's:
  # taking that for "detached", ferryd re-attached it every second, and in each gap the
  # pod's packets went out uncaptured (port 8080 on the wire, a CNI program skipped).
  for n in n1 n2; do
    assert "$n: ferryd left its intact links alone for the whole run (ferry_datapath_reattached_total = 0)" \
      test "$(metric "$n" ferry_datapath_reattached_total)" = 0
  done
  [ -e "$pin" ] || die_case "no pinned netkit link at $pin (needs failure_mode closed)"
  id=$(bpftool -j link show pinned "$pin" | jq -r '.id // empty')
  r0=$(metric n1 ferry_datapath_reattached_total)
  note "pod_egress_netkit on fy1-p1 is link $id; detaching it underneath ferryd"
  bpftool link detach id "$id"
  assert "ferryd re-attaches it (ferry_datapath_reattached_total > $r0)" wait_for 10 "re-attach" reattached "$r0"
  new=$(bpftool -j link show pinned "$pin" | jq -r '.id // empty')
  assert "a new link ($new, not $id) is pinned at $pin" bash -c "[ -n '$new' ] && [ '$new' != '$id' ]"
  start_httpd n2/p1 10.77.2.11
  m1=$(flog_mark n1)
  out=$(curl_get n1/p1 http://10.77.2.11:8080/kl6)
  assert "n1/p1 -> n2/p1 answers" grep -qE '^200 ' <<<"$out"
  assert "n1's ferryd carried it" flog_wait n1 "$m1" "direction=outbound src=10\.77\.1\.11:[0-9]+ dst=10\.77\.2\.11:8080 .*reason=ok"
  assert "and re-attached once, not again (ferry_datapath_reattached_total = $((r0 + 1)))" \
    test "$(metric n1 ferry_datapath_reattached_total)" = "$((r0 + 1))"
}

# ---------------------------------------------------------------------------------------
echo "$ME: kernel $(uname -r), $(nproc) CPUs, expecting $EXPECTED"
"$LAB" up
run_case 0 "probe: netkit, injection $EXPECTED, pods adopted as netkit" case_probe
run_case 1 "cross-node curl over netkit pods" case_netkit_cross_node
run_case 2 "same-node curl over netkit pods" case_netkit_same_node
run_case 3 "the wire carries only TLS" case_wire
run_case 4 "CNI policy program on the client pod's netkit peer" case_cni_on_netkit_peer
run_case 5 "kTLS report" case_ktls
run_case 6 "netkit links: intact ones left alone, a detached one put back" case_netkit_links_kept
echo
echo "$ME: $PASSED passed, $FAILED failed${FAILED_NAMES:+ (cases ${FAILED_NAMES[*]})}"
[ "$FAILED" -eq 0 ]
