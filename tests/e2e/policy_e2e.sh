#!/usr/bin/env bash
# Authorization in the network-namespace lab (issue 15; docs/policy.md): Istio's
# AuthorizationPolicy from the lab's policy file, enforced by the destination's ferryd on
# inbound HBONE, with real applications in the lab's pods and ferryd on both nodes.
#
#   14 an ALLOW for one principal lets it in and shuts another out, cross-node and same-node;
#      a DENY wins over the ALLOW; each decision in the metrics and in n2's access log
#      (naming the policy)
#   15 a tightened policy closes an established connection it now denies, within a second
#      of being in force (ferryd's own log stamps), counted as policy_revoked
#
# Case numbers are those they had in datapath_e2e.sh. The policies come from the lab's policy
# file on both workload sources (FERRY_LAB_SOURCE=kubernetes: tests/k8s/lab_k8s_e2e.sh); with
# FERRY_LAB_CNI=ptp or bridge the pods are made by the reference CNI plugins (docs/lab.md).
# FY_E2E_CASES="15" runs only some cases.
#
# Exit 0 all passed, 1 any failed, 77 skip (not root; under CI=true not being root fails).
set -euo pipefail

# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ME=policy_e2e

e2e_require_root "network namespaces, BPF"
e2e_require_tools ip curl python3 jq ss flock
e2e_lock 600
e2e_tmpdir policy-e2e
on_exit e2e_lab_down

# allow_only NAME CALLER: an ALLOW policy NAME letting only pod CALLER ("n1-p1") call n2-p1.
allow_only() {
  cat <<EOF
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: $1, namespace: $(lab_env FERRY_LAB_NAMESPACE)}
spec:
  selector: $(lab_selector n2-p1)
  action: ALLOW
  rules:
  - from: [{source: {principals: [$(lab_principal "$2")]}}]
EOF
}

# Issue 15: authorization with Istio's AuthorizationPolicy, enforced by the destination's
# ferryd on inbound HBONE, cross-node and same-node; each decision counted and logged.
not_200() { ! grep -qE '^200 ' <<<"$1"; }
decisions() { metric n2 "ferry_policy_decisions_total{direction=\"inbound\",action=\"$1\",result=\"$2\"}"; }
decisions_above() { [ "$(decisions "$1" "$2")" -gt "$3" ]; }
case_authorization() {
  local out m2 allowed denied denied_by_deny ns
  ns=$(lab_env FERRY_LAB_NAMESPACE)
  start_httpd n2/p1 10.77.2.11
  allow_only n2-p1-from-n1-p1 n1-p1 | set_policies
  allowed=$(decisions ALLOW allow); denied=$(decisions none deny)
  m2=$(flog_mark n2)
  out=$(curl_get n1/p1 http://10.77.2.11:8080/case14-allowed)
  assert "n1/p1 (the allowed principal) gets in (200)" grep -qE '^200 ' <<<"$out"
  assert "... counted as ALLOW/allow" wait_for 5 "the count" decisions_above ALLOW allow "$allowed"
  assert "... and n2's access line names the policy" \
    flog_wait n2 "$m2" "direction=inbound src=10\.77\.1\.11:[0-9]+ dst=10\.77\.2\.11:8080 .*reason=ok .*policy=\"allowed by ALLOW policy $ns/n2-p1-from-n1-p1 rule 0\""
  m2=$(flog_mark n2)
  out=$(curl_get n1/p2 http://10.77.2.11:8080/case14-denied || true)
  note "n1/p2: $(tr '\n' ' ' <<<"$out")"
  assert "n1/p2 (another principal) is shut out" not_200 "$out"
  assert "... the server never saw it" bash -c "! grep -q case14-denied '$(httpd_log n2/p1)'"
  assert "... counted as none/deny (an ALLOW applies, none matched)" wait_for 5 "the count" decisions_above none deny "$denied"
  assert "... n2's access line: 401, policy_denied, with the reason" \
    flog_wait n2 "$m2" "direction=inbound src=10\.77\.1\.12:[0-9]+ dst=10\.77\.2\.11:8080 .*reason=policy_denied .*policy=\"denied: no rule of the 1 ALLOW policy.* detail=\"401\""
  out=$(curl_get n2/p2 http://10.77.2.11:8080/case14-same-node || true)
  assert "same node: n2/p2 is shut out by its own node's ferryd" not_200 "$out"
  assert "... on the inbound leg of n2 (policy_denied from 10.77.2.12)" \
    flog_wait n2 "$m2" "direction=inbound src=10\.77\.2\.12:[0-9]+ dst=10\.77\.2\.11:8080 .*reason=policy_denied"

  note "DENY wins over ALLOW: a DENY for n1-p1 on port 8080 next to the ALLOW"
  { allow_only n2-p1-from-n1-p1 n1-p1; cat <<EOF; } | set_policies
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: no-8080-for-n1-p1, namespace: $ns}
spec:
  selector: $(lab_selector n2-p1)
  action: DENY
  rules:
  - from: [{source: {principals: [$(lab_principal n1-p1)]}}]
    to: [{operation: {ports: ["8080"]}}]
EOF
  denied_by_deny=$(decisions DENY deny)
  m2=$(flog_mark n2)
  out=$(curl_get n1/p1 http://10.77.2.11:8080/case14-deny-wins || true)
  assert "n1/p1 is refused now" not_200 "$out"
  assert "... counted as DENY/deny" wait_for 5 "the count" decisions_above DENY deny "$denied_by_deny"
  assert "... the access line names the DENY policy" \
    flog_wait n2 "$m2" "reason=policy_denied .*policy=\"denied by DENY policy $ns/no-8080-for-n1-p1 rule 0\""
  set_policies </dev/null
  out=$(curl_get n1/p2 http://10.77.2.11:8080/case14-no-policy)
  assert "no policy left: n1/p2 gets in again (200)" grep -qE '^200 ' <<<"$out"
}

# Issue 15: a policy change is applied to the connections that are open: one it now denies
# is closed (reason policy_revoked), and the time from the change being in force to the close
# is reported.
case_policy_revokes() {
  local revoked m2 ms
  start_echo 9292
  bg n1/p1 "$TMP/case15.out" python3 -c '
import socket, time
s = socket.create_connection(("10.77.2.11", 9292))
s.sendall(b"hello\n")
print("first:", s.recv(4096).decode().strip(), flush=True)
s.settimeout(30)
try:
    got = s.recv(4096)
    print("ended: eof" if not got else "ended: data", time.time(), flush=True)
except OSError as e:
    print("ended: %s" % type(e).__name__, time.time(), flush=True)'
  assert "a connection n1/p1 -> n2/p1:9292 is established (echoed)" wait_for 10 "first echo" grep -q "first: hello" "$TMP/case15.out"
  revoked=$(metric n2 'ferry_connections_closed_total{direction="inbound",reason="policy_revoked"}')
  m2=$(flog_mark n2)
  allow_only n2-p1-only-n2-p2 n2-p2 | set_policies
  assert "the client's connection ended" wait_for 5 "the end" grep -q "^ended:" "$TMP/case15.out"
  assert "... n2's access line says policy_revoked" flog_wait n2 "$m2" "direction=inbound .*dst=10\.77\.2\.11:9292 .*reason=policy_revoked"
  # From ferryd's own log: the line saying the new policies are in force, and the close.
  ms=$(flog_since n2 "$m2" | python3 -c '
import sys, datetime
stamp = lambda line: datetime.datetime.strptime(line.split()[0], "%Y-%m-%dT%H:%M:%S.%fZ")
applied = closed = None
for line in sys.stdin:
    if applied is None and "policy: generation" in line: applied = stamp(line)
    if closed is None and "reason=policy_revoked" in line: closed = stamp(line)
print(round((closed - applied).total_seconds() * 1000, 1))')
  note "n2 closed the connection $ms ms after the new policy was in force (the file itself is polled every workloads_poll)"
  assert "... within a second of the policy being in force" python3 -c "import sys; sys.exit(0 if $ms < 1000 else 1)"
  assert "... counted by n2 as policy_revoked" \
    test "$(metric n2 'ferry_connections_closed_total{direction="inbound",reason="policy_revoked"}')" -gt "$revoked"
  set_policies </dev/null
}

e2e_lab_up
run_case 14 "authorization: an ALLOW for one principal, DENY over ALLOW, same node; decisions in metrics and the access log" case_authorization
run_case 15 "a tightened policy closes an established connection it now denies, within a second" case_policy_revokes

echo
e2e_summary
