#!/usr/bin/env bash
# The install path, word for word (issue 32; docs/install.md "Install", README "Install on a
# cluster"), against the lab's real cluster:
#   1. `make dist`'s folder, made here (scripts/dist.sh), and its image built a second time:
#      one digest, one archive.
#   2. The `sh` blocks of README's "Install on a cluster" must be the start of those of
#      docs/install.md's "Install" (up to its first ### subsection); the latter run as written,
#      in the release folder, in one bash with -e. The one change: the `REGISTRY=` line names
#      the registry this test runs on the node (Distribution's, Debian's docker-registry, on
#      localhost: containerd pulls from localhost over HTTP; skopeo is told so by a drop-in,
#      /etc/containers/registries.conf.d/fy-install-e2e.conf, as an operator configures a
#      registry of theirs: machine configuration, not a change to the docs' commands).
#      The lab's containerd keeps its CNI folders elsewhere: they are bind-mounted on the
#      standard /opt/cni/bin and /etc/cni/net.d for the run, as a real node has them.
#   3. Then: ferry-ca published the bundle, ferryd runs the release's image by digest, two pods
#      of the enrolled ferry-demo namespace talk through the mesh (the wire carries only
#      :15008, the server sees the client's pod IP, both SPIFFE IDs logged), and the
#      release's ferryctl reports the identities ferryd holds.
#   4. An upgrade to a release built from a later commit (HEAD plus a version bump), with the
#      commands docs/operations.md gives for the lab's Kubernetes (1.20: "On Kubernetes 1.20 and
#      1.21"), as written but for the registry and the version, under load: 200 long-lived
#      connections through the node are not lost, new ones are served throughout.
# The commands and their output go to $FY_K8S_LOGS/install-transcript.log.
# Everything it creates is named fy-*/ferry-* and removed at the end, also on failure.
# shellcheck disable=SC2016  # exit steps (on_exit) are single-quoted: evaluated at exit
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
cluster=$repo/scripts/k8s-lab/cluster.sh
build=${FERRY_BUILD_DIR:-$repo/build/default}
release=${FERRY_RELEASE_DIR:-$repo/build/release}
readonly REL=ferry RNS=ferry-system DEMO=ferry-demo BRIDGE=fy-br0
readonly IMAGE=docker.io/ferry/busybox:dev
readonly REGISTRY_HOST=localhost:15500
readonly REGISTRY_CONF=/etc/containers/registries.conf.d/fy-install-e2e.conf
readonly CRDS="authorizationpolicies.security.istio.io peerauthentications.security.istio.io"

logs=${FY_K8S_LOGS:-$repo/build/k8s-lab}
mkdir -p "$logs"
transcript=$logs/install-transcript.log
# shellcheck source=tests/k8s/lib.sh
source "$here/lib.sh"
k8s_prelude install-e2e
# sh_blocks FILE HEADING N OUT: the sh blocks of FILE's section HEADING (a whole heading line,
# up to the next heading of its level or above, outside code blocks) joined into OUT; exits
# naming the section unless there are exactly N.
sh_blocks() {
  python3 - "$@" <<'PY'
import sys
path, heading, want, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
level = len(heading) - len(heading.lstrip("#"))
blocks, block, inside, fenced = [], None, False, False
for line in open(path).read().splitlines(keepends=True):
    if line.startswith("```"):
        fenced = not fenced
        if inside and line.startswith("```sh") and fenced:
            block = ""
        elif inside and block is not None and not fenced:
            blocks.append(block)
            block = None
        continue
    if not fenced and line.startswith("#"):
        hashes = len(line) - len(line.lstrip("#"))
        if line.rstrip("\n") == heading:
            inside = True
            continue
        if inside and hashes <= level:
            break
    if block is not None:
        block += line
if len(blocks) != want:
    sys.exit(f"{path}: '{heading.lstrip('# ')}' must hold {want} sh block(s), not {len(blocks)}")
open(out, "w").write("".join(blocks))
PY
}

# same_json A B: the two files hold the same JSON (ferry rewrites a conflist it un-chains).
same_json() {
  python3 -c 'import json, sys; sys.exit(0 if json.load(open(sys.argv[1])) == json.load(open(sys.argv[2])) else 1)' "$1" "$2"
}

mounted=() made_dirs=()
# The node's CNI configuration as it was, or the test fails.
conflist_restored() {
  if [ -f "$TMP/conflist.before" ] && ! same_json "$TMP/conflist.before" "$conflist"; then
    echo "FAIL: the node's CNI configuration is not as it was before the install"; E2E_RC=1
  fi
  ((failures == 0)) || E2E_RC=1
}
on_exit conflist_restored
# What the install's commands mounted and made, the last first.
unmount_all() {
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount "${mounted[i]}"; done
  for ((i = ${#made_dirs[@]} - 1; i >= 0; i--)); do rmdir "${made_dirs[i]}" 2>/dev/null; done
}
on_exit unmount_all
on_exit 'rm -f "$REGISTRY_CONF"'
stop_registry() { [ -n "${registry_pid:-}" ] && kill "$registry_pid" 2>/dev/null && wait "$registry_pid" 2>/dev/null; }
on_exit stop_registry
# The release's image, by the names the pull gave it (a next run pulls again).
remove_images() {
  ctr --address /run/fy-k8s/containerd/containerd.sock -n k8s.io images ls -q 2>/dev/null |
    grep -e "^$REGISTRY_HOST/" -e "^fy-noreg.invalid/" | xargs -r ctr --address /run/fy-k8s/containerd/containerd.sock -n k8s.io images rm >/dev/null 2>&1
}
on_exit remove_images
on_exit 'k8s_uninstall "$DEMO"'
on_exit 'kq -n "$RNS" delete pod -l app.kubernetes.io/name=ferry-surge --grace-period=1 --wait=false >/dev/null 2>&1'
on_exit 'for p in ${tcpdump_pid:-} ${upgrade_pid:-} ${long_pid:-} ${short_pid:-} ${echo_pid:-}; do kill "$p" 2>/dev/null; done'
dump() {
  echo "--- the transcript's last 40 lines"; tail -n 40 "$transcript" 2>/dev/null
  echo "--- ferryd's log (last 30 lines)"; flog 2>/dev/null | tail -n 30
  lab_diagnose
}
on_failure dump

echo "== the release (make dist) and its image built again"
"$repo/scripts/dist.sh" "$build" "$release" "$TMP/dist" >"$TMP/dist.path" 2>"$TMP/dist.log" ||
  { cat "$TMP/dist.log"; exit 1; }
dist=$(cat "$TMP/dist.path")
sed 's/^/  /' "$TMP/dist.log"
version=$(basename "$dist"); version=${version#ferry-}
digest=$(cat "$dist/ferryd-$version.digest")
again=$("$repo/scripts/image.sh" "$build" "$release" "$TMP/again" 2>/dev/null)
check "two builds of the image give one digest ($digest)" test "$again" = "$digest"
check "... and one archive, byte for byte" cmp -s "$dist/ferryd-$version.oci.tar" "$TMP/again/ferryd-$version.oci.tar"
check "SHA256SUMS checks the release folder" bash -c "cd '$dist' && sha256sum --quiet -c SHA256SUMS"
check "the release's ferryctl is static" bash -c "! ldd '$dist/ferryctl-$version-linux-amd64' >/dev/null 2>&1"

echo "== the documented commands"
# section FILE HEADING: the sh blocks of the ## section HEADING, up to its first ### or the next ##.
python3 - "$repo/README.md" "Install on a cluster" "$repo/docs/install.md" "Install" "$TMP" <<'EOF'
import re, sys
def blocks(path, heading):
    text = open(path).read()
    m = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^##[ #])", text, flags=re.S | re.M)
    if not m:
        sys.exit(f"{path}: no section '## {heading}'")
    return re.findall(r"^```sh\n(.*?)^```", m.group(1), flags=re.S | re.M)
def commands(chunks):
    out = []
    for chunk in chunks:
        joined = re.sub(r"\\\n\s*", " ", chunk)  # continuation lines
        for line in joined.splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip()
            if line and not line.startswith("#"):
                out.append(re.sub(r"\s+", " ", line))
    return out
readme, _, install, _, tmp = sys.argv[1:]
r, i = commands(blocks(readme, sys.argv[2])), commands(blocks(install, sys.argv[4]))
if not r or not i:
    sys.exit("no commands found")
if i[:len(r)] != r:
    for n, (a, b) in enumerate(zip(r, i)):
        if a != b:
            sys.exit(f"README's command {n + 1} differs from docs/install.md's:\n  README:  {a}\n  install: {b}")
    sys.exit("README has more commands than docs/install.md's Install section")
open(f"{tmp}/install.sh", "w").write("".join(blocks(install, sys.argv[4])))
print(f"  README's {len(r)} commands are the first of docs/install.md's {len(i)}")
EOF
check "exactly one REGISTRY= line to change" test "$(grep -c '^REGISTRY=' "$TMP/install.sh")" -eq 1
sed -i "s|^REGISTRY=.*|REGISTRY=$REGISTRY_HOST/ferry|" "$TMP/install.sh"

# The registry: Distribution's, on localhost, its storage in TMP.
cat >"$TMP/registry.yml" <<EOF
version: 0.1
log: {level: warn}
storage: {filesystem: {rootdirectory: $TMP/registry}, delete: {enabled: true}}
http: {addr: $REGISTRY_HOST}
EOF
docker-registry serve "$TMP/registry.yml" >"$TMP/registry.log" 2>&1 </dev/null &
registry_pid=$!
wait_for 20 "the registry" curl -sf "http://$REGISTRY_HOST/v2/"
mkdir -p "$(dirname "$REGISTRY_CONF")"
printf '[[registry]]\nlocation = "%s"\ninsecure = true\n' "$REGISTRY_HOST" >"$REGISTRY_CONF"

# The lab's CNI folders where a real node has them (the chart's defaults).
read -r cni_bin cni_conf < <("$cluster" cni-dirs)
conflist=$cni_conf/10-fy-pods.conflist
cp "$conflist" "$TMP/conflist.before"
for pair in "$cni_bin:/opt/cni/bin" "$cni_conf:/etc/cni/net.d"; do
  src=${pair%%:*} dst=${pair#*:}
  if [ ! -d "$dst" ]; then
    d=$dst; new=()
    while [ ! -d "$d" ]; do new=("$d" "${new[@]}"); d=$(dirname "$d"); done
    mkdir -p "$dst"; made_dirs+=("${new[@]}")
  fi
  mount --bind "$src" "$dst"; mounted+=("$dst")
done
k8s_new_crds
kq delete namespace "$DEMO" --ignore-not-found --wait=true --timeout=120s >/dev/null
wait_namespaces_gone "$RNS"

kubectl_dir=$(dirname "$(command -v kubectl)")
mkdir -p "$TMP/home"
start=$SECONDS
(
  cd "$dist"
  env -i HOME="$TMP/home" PATH="$(dirname "$HELM"):$kubectl_dir:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin" \
    KUBECONFIG="$KUBECONFIG" \
    bash -euxo pipefail "$TMP/install.sh"
) >"$transcript" 2>&1 || { echo "the documented commands failed (exit $?):"; tail -n 30 "$transcript"; exit 1; }
echo "  ran in $((SECONDS - start)) s; transcript: $transcript"
check "the PATH the docs set finds the release's ferryctl" test -x "$TMP/home/.local/bin/ferryctl"

echo "== what they installed"
check "ferry-ca published its Secret's root as the trust bundle ConfigMap" \
  bash -c "kubectl -n $RNS get configmap ferry-ca-bundle -o jsonpath='{.data.bundle\\.pem}' | cmp -s - '$dist/ca/ca.pem'"
ds_image=$(kq -n "$RNS" get daemonset "$REL" -o jsonpath='{.spec.template.spec.containers[0].image}')
check "ferryd's image is the release's, by digest ($ds_image)" test "$ds_image" = "$REGISTRY_HOST/ferry/ferryd:$version@$digest"
running=$(kq -n "$RNS" get pod "$(ferry_pod)" -o jsonpath='{.status.containerStatuses[0].imageID}')
check "... pulled from the registry and running ($running)" bash -c "[[ '$running' == *'$digest' ]]"
check "ferry-ca's replicas run the same image" \
  bash -c "[ \"\$(kubectl -n $RNS get deployment $REL-ca -o jsonpath='{.spec.template.spec.containers[0].image}')\" = '$ds_image' ]"
check "the documented check ran ferryctl status in ferryd's pod (ready)" grep -q "ferryd $version on node .*: ready" "$transcript"

echo "== two pods of the enrolled namespace"
{ pod_yaml fy-server "$DEMO" 'mkdir -p /www && hostname > /www/index.html && exec httpd -f -vv -p 8080 -h /www'
  echo ---; pod_yaml fy-client "$DEMO" 'exec sleep 3600'; } | kq apply -f - >/dev/null
kq -n "$DEMO" wait --for=condition=Ready pod --all --timeout=90s >/dev/null
server=$(kq -n "$DEMO" get pod fy-server -o jsonpath='{.status.podIP}')
client=$(kq -n "$DEMO" get pod fy-client -o jsonpath='{.status.podIP}')
check "ferryd enrolled both pods" \
  wait_for 15 "enrolment" bash -c "flog | grep -q 'enrolled $DEMO/fy-server' && flog | grep -q 'enrolled $DEMO/fy-client'"
bridge_cap_start wire
body=$(kq -n "$DEMO" exec fy-client -- sh -c "printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 5 $server 8080 | tail -n 1")
check "the client gets the server's answer through the mesh ($body)" test "$body" = fy-server
id="spiffe://cluster.local/ns/$DEMO/sa/default"
check "ferryd logged the outbound leg with the server's identity" \
  wait_for 10 "outbound access line" flog_has "direction=outbound src=$client:[0-9]+ dst=$server:8080 peer=$id reason=ok"
check "... and the inbound leg with the client's" \
  wait_for 10 "inbound access line" flog_has "direction=inbound src=$client:[0-9]+ dst=$server:8080 peer=$id reason=ok"
check "the server saw the client's pod IP" bash -c "kubectl -n $DEMO logs fy-server 2>/dev/null | grep -q '$client'"
bridge_cap_stop
to_app=$(tcpdump -r "$TMP/wire.pcap" -n 2>/dev/null | grep -c "$server\.8080[ :]" || true)
to_hbone=$(tcpdump -r "$TMP/wire.pcap" -n 2>/dev/null | grep -c "$server\.15008[ :]" || true)
echo "  bridge: $to_hbone packets to or from $server:15008, $to_app to or from :8080"
check "the wire carried the connection to :15008 only" test "$to_hbone" -gt 0 -a "$to_app" -eq 0
"$TMP/home/.local/bin/ferryctl" certs >"$TMP/certs.txt" 2>&1 || true
sed 's/^/  ferryctl certs| /' "$TMP/certs.txt"
check "the release's ferryctl reports the identity ferryd holds for the pods ($id)" grep -q "$id" "$TMP/certs.txt"

echo "== an upgrade to a release of a later commit, as docs/operations.md has it for 1.20"
# The later commit: a commit on this checkout's HEAD with the version bump a release makes
# (and, in a checkout with changes, those too), built as `make dist` builds it: both presets,
# in a clone, where ccache (keyed relative to the clone) rebuilds the few objects the version
# reaches.
next_src=$TMP/next
git clone -q --shared "$repo" "$next_src"
git -C "$repo" ls-files -z --cached --others --exclude-standard |
  tar -C "$repo" --null --ignore-failed-read -cf - -T - 2>/dev/null | tar -C "$next_src" -xf -
next=${version%.*}.$((${version##*.} + 1))
sed -i "s/^project(ferry VERSION $version /project(ferry VERSION $next /" "$next_src/CMakeLists.txt"
git -C "$next_src" add -A
git -C "$next_src" -c user.name=fy-install-e2e -c user.email=fy-install-e2e@invalid commit -qm "release $next"
start=$SECONDS
(
  cd "$next_src"
  export CCACHE_BASEDIR=$next_src CCACHE_NOHASHDIR=true
  unset FERRY_VERSION
  cmake --preset default && cmake --build build/default --target ferryd ferry-ca ferry-cni &&
    cmake --preset release && cmake --build --preset release &&
    HELM=$HELM scripts/dist.sh build/default build/release "$TMP/dist" >"$TMP/next.path"
) >"$TMP/next-build.log" 2>&1 || { tail -n 30 "$TMP/next-build.log"; exit 1; }
next_dist=$(cat "$TMP/next.path")
next_digest=$(cat "$next_dist/ferryd-$next.digest")
echo "  release $next ($(git -C "$next_src" rev-parse --short HEAD), image $next_digest) built in $((SECONDS - start)) s"
check "the later commit's image is another image" test "$next_digest" != "$digest"

# The section's sh blocks as written; the registry and the release's version are what a user
# changes (the docs name 0.1.1).
sh_blocks "$repo/docs/operations.md" "#### On Kubernetes 1.20 and 1.21" 2 "$TMP/upgrade.sh"
check "the upgrade names one REGISTRY= line and one version" \
  test "$(grep -c '^REGISTRY=' "$TMP/upgrade.sh")" -eq 1 -a "$(grep -oE '\b[0-9]+\.[0-9]+\.[0-9]+\b' "$TMP/upgrade.sh" | sort -u | wc -l)" -eq 1
sed -i -E "s|^REGISTRY=.*|REGISTRY=$REGISTRY_HOST/ferry|; s/\b[0-9]+\.[0-9]+\.[0-9]+\b/$next/g" "$TMP/upgrade.sh"

# Under load: 200 long-lived connections and 10 new ones a second from fy-client to fy-server
# (python in the pods' network namespaces: the pods' own traffic for the datapath), and 10
# more a second until the very end, after the last step.
LOAD=$repo/tests/e2e/handover_load.py
srv_ns=$(netns_of_ip "$server") || { echo "no netns holds $server"; exit 1; }
cli_ns=$(netns_of_ip "$client") || { echo "no netns holds $client"; exit 1; }
ip netns exec "$srv_ns" python3 "$LOAD" serve --bind 0.0.0.0 --port 9000 >"$TMP/echo.log" 2>&1 &
echo_pid=$!
wait_for 10 "the echo server" grep -q listening "$TMP/echo.log"
ip netns exec "$cli_ns" python3 "$LOAD" client --dst "$server" --port 9000 --stop "$TMP/long.stop" --long 200 --rate 10 \
  >"$TMP/long.log" 2>&1 &
long_pid=$!
ip netns exec "$cli_ns" python3 "$LOAD" client --dst "$server" --port 9000 --stop "$TMP/short.stop" --long 0 --rate 10 \
  >"$TMP/short.log" 2>&1 &
short_pid=$!
check "200 long-lived connections echo through the mesh" wait_for 60 "the long-lived connections" grep -q "^ready long=200 failed=0" "$TMP/long.log"
gen1=$(ferry_pod)
node=$(kq -n "$RNS" get pod "$gen1" -o jsonpath='{.spec.nodeName}')
start=$SECONDS
(
  cd "$next_dist"
  env -i HOME="$TMP/home" PATH="$(dirname "$HELM"):$kubectl_dir:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin" \
    KUBECONFIG="$KUBECONFIG" bash -euxo pipefail "$TMP/upgrade.sh"
) >>"$transcript" 2>&1 &
upgrade_pid=$!
check "the surge pod of the new release takes over beside the running ferryd and is ready" \
  wait_for 180 "ferry-surge-$node" bash -c "kubectl -n $RNS get pod $gen1 -o jsonpath='{.metadata.deletionTimestamp}' | grep -q . &&
    kubectl -n $RNS wait --for=condition=Ready pod/ferry-surge-$node --timeout=1s"
check "... having taken the running one's sockets" \
  bash -c "kubectl -n $RNS logs ferry-surge-$node | grep -qE 'handover: took [0-9]+ sockets from ferryd pid [0-9]+ \\(pod $gen1\\)'"
kq -n "$RNS" exec "ferry-surge-$node" -c ferryd -- ferryctl status >"$TMP/surge-status.txt" 2>&1 || true
sed 's/^/  ferryctl status| /' "$TMP/surge-status.txt"
check "... runs $next and names the old pod as the previous generation" \
  bash -c "grep -q 'ferryd $next on node' '$TMP/surge-status.txt' && grep -q 'previous generation:  pod $gen1' '$TMP/surge-status.txt'"
check "the old pod is Terminating, its ferryd still carrying the long-lived connections" \
  bash -c "kubectl -n $RNS get pod $gen1 -o name | grep -q . && grep -qE 'previous generation: .* [1-9][0-9]* connections' '$TMP/surge-status.txt'"
# New connections through the surge pod for a while, then the long-lived ones end: the old
# ferryd holds nothing more, exits, and the documented commands go on.
served=$(grep -c '^progress' "$TMP/short.log" || true)
wait_for 30 "ten seconds of new connections through the surge pod" \
  bash -c "[ \$(grep -c '^progress' '$TMP/short.log') -ge $((served + 10)) ]" || true
touch "$TMP/long.stop"
wait "$long_pid" || true
long_pid=
check "the documented upgrade ends: the DaemonSet's new pod took over and the surge pod went" \
  wait_for 300 "the documented upgrade" bash -c "! kill -0 $upgrade_pid"
wait "$upgrade_pid" || fail "the documented upgrade commands failed (exit $?; see the transcript)"
upgrade_pid=
echo "  the documented upgrade ran in $((SECONDS - start)) s"
check "the surge pod goes" kq -n "$RNS" wait --for=delete "pod/ferry-surge-$node" --timeout=60s
touch "$TMP/short.stop"
wait "$short_pid" || true
short_pid=
gen2=$(ferry_pod)
check "the DaemonSet's pod runs the new release's image by digest ($gen2)" bash -c \
  "[ \"\$(kubectl -n $RNS get pod $gen2 -o jsonpath='{.spec.containers[0].image}')\" = '$REGISTRY_HOST/ferry/ferryd:$next@$next_digest' ]"
if flog_has "handover: took [0-9]+ sockets from ferryd pid [0-9]+ \(pod ferry-surge-$node\)"; then
  pass "... took over from the surge pod"
else
  fail "... took over from the surge pod"
  echo "  $gen2: $(kq -n "$RNS" get pod "$gen2" -o jsonpath='{.status.containerStatuses[*].restartCount}') restarts; its handover lines:"
  { kq -n "$RNS" logs "$gen2" -c ferryd --previous 2>/dev/null; flog; } | grep -E 'handover|start' | head -n 20 | sed 's/^/  | /'
fi
long=$(tail -n 1 "$TMP/long.log") short=$(tail -n 1 "$TMP/short.log")
jq -r '"  long-lived: \(.long) connections, \(.long_errors) errors, \(.long_messages) messages echoed (slowest echo \(.long_max_rtt_ms) ms)"' <<<"$long"
jq -r '"  new connections (until the old ferryd held nothing): \(.short_attempted), \(.short_failed) failed, longest \(.short_max_ms) ms"' <<<"$long"
jq -r '"  new connections (throughout): \(.short_attempted), \(.short_failed) failed, longest \(.short_max_ms) ms, p99 \(.short_p99_ms) ms"' <<<"$short"
jqt() { jq -e "$1" <<<"$2" >/dev/null; }  # the report holds: FILTER JSON
check "the long-lived connections: 200, none with an error" jqt '.long == 200 and .long_errors == 0' "$long"
check "the new connections, during and after the upgrade: none failed" \
  jqt '.short_failed == 0 and .short_attempted > 100' "$short"
check "... nor those beside the long-lived ones" jqt '.short_failed == 0' "$long"
body=$(kq -n "$DEMO" exec fy-client -- sh -c "printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 5 $server 8080 | tail -n 1")
check "the mesh carries the client's requests through the new ferryd ($body)" test "$body" = fy-server
kill "$echo_pid" 2>/dev/null; wait "$echo_pid" 2>/dev/null || true
echo_pid=

echo "== without a registry (docs/install.md): containerd loads the archive itself"
# The section's one sh block as written, REGISTRY a name no registry answers for; ctr finds
# the lab's containerd through CONTAINERD_ADDRESS. A pod then runs the image by the chart's
# reference (tag and digest) without pulling: a pull would fail.
noreg=fy-noreg.invalid/ferry
sh_blocks "$repo/docs/install.md" "### Without a registry" 1 "$TMP/noreg.sh"
(
  cd "$dist"
  env -i PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin REGISTRY="$noreg" \
    CONTAINERD_ADDRESS=/run/fy-k8s/containerd/containerd.sock bash -euxo pipefail "$TMP/noreg.sh"
) >>"$transcript" 2>&1 || fail "the 'Without a registry' block failed (see the transcript)"
ctr --address /run/fy-k8s/containerd/containerd.sock -n k8s.io images ls -q >"$TMP/images.txt"
check "ctr named the image by tag and by digest ($noreg/ferryd:$version, @$digest)" \
  bash -c "grep -qx '$noreg/ferryd:$version' '$TMP/images.txt' && grep -qx '$noreg/ferryd@$digest' '$TMP/images.txt'"
kq apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: fy-noreg, namespace: $DEMO}
spec:
  restartPolicy: Never
  containers:
  - name: c
    image: $noreg/ferryd:$version@$digest
    imagePullPolicy: IfNotPresent
    command: [/usr/local/bin/ferryctl, ca, init, --dir, /tmp/fy-ca, --trust-domain, fy.test]
YAML
check "a pod runs the imported image by the chart's reference, with no registry" \
  wait_for 60 "fy-noreg to succeed" bash -c "[ \"\$(kubectl -n $DEMO get pod fy-noreg -o jsonpath='{.status.phase}')\" = Succeeded ]"

echo "== uninstall as documented"
kq delete namespace "$DEMO" --wait=true --timeout=60s >/dev/null
"$HELM" uninstall "$REL" -n "$RNS" --wait --timeout 60s >/dev/null
# The DaemonSet goes at once; its pod (and ferryd's un-chaining) a moment later.
check "ferryd's pod is gone" wait_for 90 "ferryd's pod to go" \
  bash -c "[ -z \"\$(kubectl -n $RNS get pods -l app.kubernetes.io/component=node-proxy -o name 2>/dev/null)\" ]"
check "the uninstall left the node's CNI configuration as it was" same_json "$TMP/conflist.before" "$conflist"
check "... and no ferry-cni plugin" test ! -e "$cni_bin/ferry-cni"

echo "install_e2e: $failures failed"
