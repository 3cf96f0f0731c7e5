#!/usr/bin/env bash
# The cluster CA on a real cluster (issue 17; docs/ferry-ca.md): the chart with
# identity.source: cluster-ca, ferry-ca's two replicas signing for ferryd, the node check
# against the API server's real Pod objects and TokenReview, refusals audited, and a rotation
# of ferry-ca's signing certificate under a live connection.
# Runs against the lab cluster (scripts/k8s-lab/cluster.sh up, ferryd-image.sh imported).
# Everything it creates is named fy-*/ferry-* and removed at the end, also on failure.
# shellcheck disable=SC2016  # exit steps (on_exit) are single-quoted: evaluated at exit
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
cluster=$repo/scripts/k8s-lab/cluster.sh
build=${FERRY_BUILD_DIR:-$repo/build/default}
readonly REL=ferry RNS=ferry-system MESH=fy-ca-mesh OTHER=fy-ca-other TD=cluster.local
readonly IMAGE=docker.io/ferry/busybox:dev
# A fixed ClusterIP for ferry-ca's Service: the lab has no cluster DNS, so ferryd dials the
# address and verifies the Service's DNS name (identity.clusterCa.serverName's default).
readonly CA_IP=10.96.77.12 CA_NAME=ferry-ca.ferry-system.svc
readonly CRDS="authorizationpolicies.security.istio.io peerauthentications.security.istio.io"

# shellcheck source=tests/k8s/lib.sh
source "$here/lib.sh"
k8s_prelude k8s-ca-e2e
C=$build/proxy/ferryctl/ferryctl
ca_pods() { kq -n "$RNS" get pods -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}' | grep "^$REL-ca-" || true; }
# Every replica's log (a request may land on either): the audit lines.
calog() { local p; for p in $(ca_pods); do kq -n "$RNS" logs "$p"; done; }
audit() { calog | grep '"audit":"ferry-ca"' || true; }
audit_has() { audit | grep -q -- "$1"; }

on_exit 'rm -rf -- /sys/fs/bpf/ferry'
on_exit 'k8s_uninstall "$MESH" "$OTHER"'
dump() {
  echo "--- ferryd's log (last 40 lines)"; flog 2>/dev/null | tail -n 40
  echo "--- ferry-ca's logs (last 20 lines each)"; for p in $(ca_pods); do kq -n "$RNS" logs "$p" 2>/dev/null | tail -n 20; done
  lab_diagnose
}
on_failure dump

serve='mkdir -p /www && hostname > /www/index.html && httpd -p 8080 -h /www && exec nc -ll -p 9000 -e cat'
get() { kq -n "$1" exec "$2" -- sh -c "printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 5 $3 8080 | tail -n 1"; }
admin() { curl -sf --max-time 5 "http://127.0.0.1:15000$1"; }
issuer_of() {  # IDENTITY: the serial of the intermediate that signed ferryd's certificate for it
  admin '/certs?format=json' | python3 -c '
import json, sys
for c in json.load(sys.stdin)["certificates"]:
    if c.get("identity") == sys.argv[1]:
        print(c.get("issuer_serial", ""))' "$1"
}
export -f kq ferry_pod ca_pods flog flog_has calog audit audit_has admin issuer_of
export RNS REL

# sign TOKEN SPIFFE_ID: a CSR for SPIFFE_ID (key made here, never sent) POSTed to ferry-ca
# as ferryd would; prints "<HTTP status> <error code>".
sign() {
  local token=$1 id=$2 n=$RANDOM
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$TMP/k$n.pem" \
    -subj "/O=fy" -addext "subjectAltName=URI:$id" -out "$TMP/r$n.pem" 2>/dev/null
  python3 -c 'import json, sys; print(json.dumps({"csr": open(sys.argv[1]).read(), "validity_seconds": 3600}))' \
    "$TMP/r$n.pem" >"$TMP/b$n.json"
  local code
  code=$(curl -s --max-time 10 --cacert "$TMP/root/ca.pem" --resolve "$CA_NAME:15012:$CA_IP" \
    -H "Authorization: Bearer $token" -H 'Content-Type: application/json' --data-binary "@$TMP/b$n.json" \
    -o "$TMP/a$n.json" -w '%{http_code}' "https://$CA_NAME:15012/v1/certificates") || code=000
  echo "$code $(python3 -c 'import json, sys; print(json.load(open(sys.argv[1])).get("error", "-"))' "$TMP/a$n.json" 2>/dev/null || echo '?')"
}

echo "== install with identity.source: cluster-ca"
kq delete namespace "$MESH" "$OTHER" --ignore-not-found --wait=true --timeout=120s >/dev/null
# The root stays here (as with ferryctl ca init on an operator's machine); ferry-ca signs
# with an intermediate of it; nodes get the root only, in a ConfigMap.
k8s_ca_secret "$TMP/root" "$TMP/signer" "$TD"
# No bundle ConfigMap by hand: ferry-ca publishes its Secret's bundle.pem (manageBundleConfigMap).
read -r cni_bin cni_conf < <("$cluster" cni-dirs)
k8s_new_crds
# The default address (ferry-ca's Service name): ferryd dials the ClusterIP the API server
# gives it, as there is no cluster DNS here. The fixed ClusterIP is for this test's own curl.
"$HELM" install "$REL" "$repo/charts/ferry" -n "$RNS" --set image.repository=docker.io/ferry/ferryd \
  --set image.tag=dev --set image.pullPolicy=Never \
  --set cni.binDir="$cni_bin" --set cni.confDir="$cni_conf" --set identity.source=cluster-ca \
  --set identity.clusterCa.clusterIP="$CA_IP" --wait --timeout 120s >/dev/null
check "ferry-ca published its Secret's bundle as the ConfigMap ferryd mounts" \
  bash -c "kubectl -n $RNS get configmap ferry-ca-bundle -o jsonpath='{.data.bundle\\.pem}' | cmp -s - '$TMP/root/ca.pem'"
check "ferry-ca's two replicas become ready (CA loaded, pod view synced)" \
  bash -c "[ \"\$(kubectl -n $RNS get deployment $REL-ca -o jsonpath='{.status.readyReplicas}' 2>/dev/null)\" = 2 ]"
# ferryd's pod may start before ferry-ca has published the bundle: the kubelet brings the
# ConfigMap to the node at its next sync of the pod, up to its sync period (1 min) plus its
# ConfigMap cache's TTL (1 min) later (78 s on a busy run here).
check "ferryd becomes ready (bundle loaded, ferry-ca answered)" \
  kq -n "$RNS" wait --for=condition=Ready pod -l app.kubernetes.io/component=node-proxy --timeout=150s
fpid=$(pgrep -f -- "ferryd --config /etc/ferry/config/ferry.yaml" | head -n 1)
check "no signing key on the node: ferryd's identity folder holds the roots only ($(ls "/proc/$fpid/root/etc/ferry/identity" | tr '\n' ' '))" \
  bash -c "[ \"\$(ls /proc/$fpid/root/etc/ferry/identity)\" = bundle.pem ]"
secrets=$(kq -n "$RNS" get pod "$(ferry_pod)" -o jsonpath='{.spec.volumes[*].secret.secretName}')
check "ferryd's pod mounts no Secret but its service-account token's ($secrets)" \
  bash -c "[ -z '$secrets' ] || [[ '$secrets' =~ ^$REL-token-[a-z0-9]+\$ ]]"

echo "== certificates for this node's pods"
kq create namespace "$MESH" >/dev/null
kq label namespace "$MESH" ferry.io/dataplane=enabled >/dev/null
kq create namespace "$OTHER" >/dev/null
for sa in fy-server fy-client fy-late; do kq -n "$MESH" create serviceaccount "$sa" >/dev/null; done
kq -n "$OTHER" create serviceaccount fy-ghost >/dev/null
pod_yaml fy-server "$MESH" "$serve" fy-server | kq apply -f - >/dev/null
kq -n "$MESH" wait --for=condition=Ready pod fy-server --timeout=60s >/dev/null
server=$(pod_ip "$MESH" fy-server)
# The long-lived connection of the rotation below: a counter every 0.2 s through the mesh to
# the server's echo port; "ended" is written only if that connection ever closes.
pod_yaml fy-client "$MESH" \
  "(i=0; while true; do i=\$((i+1)); echo \$i; sleep 0.2; done) | nc $server 9000 > /tmp/echo; echo ended > /tmp/ended; exec sleep 3600" fy-client \
  | kq apply -f - >/dev/null
kq -n "$MESH" wait --for=condition=Ready pod fy-client --timeout=60s >/dev/null
client=$(pod_ip "$MESH" fy-client)
body=$(get "$MESH" fy-client "$server")
check "the client reaches the server through the mesh ($body)" test "$body" = fy-server
check "... over mTLS with certificates from ferry-ca: ferryd logged the server's identity" \
  wait_for 5 "outbound access line" flog_has "direction=outbound src=$client:[0-9]+ dst=$server:8080 peer=spiffe://$TD/ns/$MESH/sa/fy-server reason=ok"
for sa in fy-server fy-client; do
  check "ferry-ca audited its signature for $MESH/$sa, caller ferryd's pod on fy-node" \
    wait_for 10 "the signed line" bash -c "audit | grep '\"decision\":\"signed\"' | grep '\"identity\":\"spiffe://$TD/ns/$MESH/sa/$sa\"' | grep -q '\"node\":\"fy-node\"'"
done
audit | grep '"decision":"signed"' | head -n 1 | sed 's/^/  audit| /'
old_issuer=$(openssl x509 -in "$TMP/signer/ca.pem" -noout -serial | cut -d= -f2)
for sa in fy-server fy-client; do
  got=$(issuer_of "spiffe://$TD/ns/$MESH/sa/$sa")
  check "ferryd's /certs holds $MESH/$sa, issued by ferry-ca's signing intermediate ($got)" test "$got" = "$old_issuer"
done
check "ferryd asked for no identity that has no pod on its node (no audit line for $OTHER)" bash -c "! audit_has 'ns/$OTHER/'"

echo "== refusals"
# The token ferryd itself presents, taken from its pod as an attacker on the node would:
# ferry-ca still signs only for pods on that node.
ftoken=$(cat "/proc/$fpid/root/var/run/secrets/ferry/ca-token/token")
# A pod of $OTHER/fy-ghost bound to another node (no kubelet runs it: it stays Pending,
# but it is scheduled there).
kq apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: fy-ghost, namespace: $OTHER}
spec:
  nodeName: fy-elsewhere
  serviceAccountName: fy-ghost
  containers: [{name: c, image: $IMAGE, imagePullPolicy: Never}]
EOF
read -r status code < <(sign "$ftoken" "spiffe://$TD/ns/$OTHER/sa/fy-ghost")
check "an identity whose only pod is on another node is refused (HTTP $status, $code)" test "$status $code" = "403 no_pod_on_node"
read -r status code < <(sign "$ftoken" "spiffe://$TD/ns/$OTHER/sa/fy-nobody")
check "an identity with no pod at all is refused (HTTP $status, $code)" test "$status $code" = "403 no_pod_on_node"
check "... each refusal audited with the identity, the caller's pod and its node" \
  wait_for 10 "the refused line" bash -c "audit | grep '\"decision\":\"refused\"' | grep '\"reason\":\"no_pod_on_node\"' | grep '\"identity\":\"spiffe://$TD/ns/$OTHER/sa/fy-ghost\"' | grep -q '\"caller_pod\":\"$RNS/'"
audit | grep '"reason":"no_pod_on_node"' | head -n 1 | sed 's/^/  audit| /'
read -r status code < <(sign "$ftoken" "spiffe://other.example/ns/$MESH/sa/fy-server")
check "an identity of another trust domain is refused (HTTP $status, $code)" test "$status $code" = "403 wrong_trust_domain"
# Another service account's token, minted for ferry-ca's audience by a projected volume.
kq apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: fy-thief, namespace: $MESH}
spec:
  serviceAccountName: fy-server
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: $IMAGE
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "exec sleep 3600"]
    volumeMounts: [{name: t, mountPath: /t}]
  volumes:
  - name: t
    projected: {sources: [{serviceAccountToken: {audience: ferry-ca, expirationSeconds: 3600, path: token}}]}
EOF
kq -n "$MESH" wait --for=condition=Ready pod fy-thief --timeout=60s >/dev/null
ttoken=$(kq -n "$MESH" exec fy-thief -- cat /t/token)
read -r status code < <(sign "$ttoken" "spiffe://$TD/ns/$MESH/sa/fy-server")
check "a token of another service account is refused, even for its own identity (HTTP $status, $code)" \
  test "$status $code" = "403 not_node_agent"
# ferryd's own service account, but a token minted for the API server's audience.
atoken=$(cat "/proc/$fpid/root/var/run/secrets/kubernetes.io/serviceaccount/token")
read -r status code < <(sign "$atoken" "spiffe://$TD/ns/$MESH/sa/fy-server")
check "ferryd's token for the API server's audience is refused (HTTP $status, $code)" \
  bash -c "[ '$status' = 401 ] && [[ '$code' =~ ^(unauthenticated|wrong_audience)$ ]]"
read -r status code < <(sign "not-a-token" "spiffe://$TD/ns/$MESH/sa/fy-server")
check "garbage as a token is refused (HTTP $status, $code)" test "$status $code" = "401 unauthenticated"
read -r status code < <(sign "$ftoken" "spiffe://$TD/ns/$MESH/sa/fy-server")
check "... while the same caller still gets what its node runs (HTTP $status)" test "$status" = 200
for p in $(ca_pods); do
  ip=$(pod_ip "$RNS" "$p")
  curl -sf --max-time 5 "http://$ip:15014/metrics" >>"$TMP/ca-metrics" || true
done
check "ferry-ca counted the refusals by reason (ferry_ca_requests_total)" \
  bash -c "grep -q 'ferry_ca_requests_total{.*reason=\"no_pod_on_node\"' '$TMP/ca-metrics' && grep -q 'ferry_ca_requests_total{.*reason=\"not_node_agent\"' '$TMP/ca-metrics'"

echo "== rotation of ferry-ca's signing certificate under a live connection"
lines() { kq -n "$MESH" exec fy-client -- sh -c 'wc -l < /tmp/echo'; }
grows() { local a b; a=$(lines); wait_for 5 "the echo to grow past $a" bash -c "[ \$(kubectl -n $MESH exec fy-client -- sh -c 'wc -l < /tmp/echo' 2>/dev/null) -gt $a ]"; }
check "the long-lived connection echoes ($(lines) lines so far)" grows
"$C" ca intermediate --ca "$TMP/root" --out "$TMP/signer2" --lifetime 720h >/dev/null
# The same update starts a root rotation's overlap: a second root beside the first in the
# Secret's bundle, which ferry-ca must carry into the ConfigMap (an update of it).
"$C" ca init --dir "$TMP/root2" --trust-domain "$TD" >/dev/null
cat "$TMP/root/ca.pem" "$TMP/root2/ca.pem" >"$TMP/bundle2.pem"
kq -n "$RNS" create secret generic ferry-ca --from-file=ca.pem="$TMP/signer2/ca.pem" \
  --from-file=ca.key="$TMP/signer2/ca.key" --from-file=bundle.pem="$TMP/bundle2.pem" \
  --dry-run=client -o yaml | kq apply -f - >/dev/null
# The kubelet rewrites the Secret's files at its next sync of each pod (up to a minute and a
# half on the lab's defaults); each replica then reloads: its generation metric says so.
for p in $(ca_pods); do
  check "ferry-ca $p took the new signing certificate" wait_for 180 "$p's reload" bash -c "[ \"\$(curl -sf --max-time 5 http://$(pod_ip "$RNS" "$p"):15014/metrics | awk '\$1 == \"ferry_ca_authority_generation\" {print \$2}')\" -ge 1 ]"
done
# The expiry the chart's FerryIssuingCaExpiresSoon alert reads: the new intermediate's.
signer2_end=$(date -d "$(openssl x509 -in "$TMP/signer2/ca.pem" -noout -enddate | cut -d= -f2)" +%s)
for p in $(ca_pods); do
  issuer_end=$(curl -sf --max-time 5 "http://$(pod_ip "$RNS" "$p"):15014/metrics" |
    awk '$1 == "ferry_certificate_expiry_timestamp_seconds{kind=\"issuer\"}" {printf "%d", $2}' || true)
  check "ferry-ca $p reports its signing certificate's expiry ($issuer_end, notAfter $signer2_end)" \
    test "$issuer_end" = "$signer2_end"
done
check "ferry-ca updated the bundle ConfigMap to the Secret's two roots" wait_for 30 "the ConfigMap's update" \
  bash -c "kubectl -n $RNS get configmap ferry-ca-bundle -o jsonpath='{.data.bundle\\.pem}' | cmp -s - '$TMP/bundle2.pem'"
new_issuer=$(openssl x509 -in "$TMP/signer2/ca.pem" -noout -serial | cut -d= -f2)
pod_yaml fy-late "$MESH" "$serve" fy-late | kq apply -f - >/dev/null
kq -n "$MESH" wait --for=condition=Ready pod fy-late --timeout=60s >/dev/null
late=$(pod_ip "$MESH" fy-late)
body=$(get "$MESH" fy-client "$late")
check "a pod created after the rotation is reachable through the mesh ($body)" test "$body" = fy-late
check "... with a certificate signed by the new intermediate (ferryd's /certs: issuer serial $new_issuer)" \
  wait_for 10 "the new chain" bash -c "[ \"\$(issuer_of spiffe://$TD/ns/$MESH/sa/fy-late)\" = '$new_issuer' ]"
check "the connection opened before the rotation still echoes" grows
check "... and never closed" bash -c "! kubectl -n $MESH exec fy-client -- test -e /tmp/ended"
read -r status code < <(sign "$ftoken" "spiffe://$TD/ns/$MESH/sa/fy-server")
check "ferry-ca still signs for ferryd after the rotation (HTTP $status)" test "$status" = 200

echo
if ((failures == 0)); then echo "cluster_ca_e2e: all checks passed"; else echo "cluster_ca_e2e: $failures check(s) failed"; exit 1; fi
