#!/usr/bin/env bash
# The chart offline (issue 13): charts/ferry checked without a cluster. ctest runs one case
# per call (tests/k8s/CMakeLists.txt, label `chart`):
#   chart_offline.sh lint                     helm lint --strict, with each value set
#   chart_offline.sh render SET [VERSION]     helm template --include-crds with
#                                             tests/k8s/values/SET.yaml (default: the
#                                             chart's own values) for Kubernetes VERSION
#                                             (default: the lab's), then
#                                             yamllint, the security promises
#                                             (chart_checks.py) and the Kubernetes schemas,
#                                             unknown fields included (chart_validate.mjs)
#   chart_offline.sh schema-negative NAME     values/bad/NAME.yaml must be refused with the
#                                             error its `# expect:` line names
#   chart_offline.sh validator-negative CASE  an object broken on purpose must be caught by
#   chart_offline.sh security-negative CASE   the schema check / the security check
#   chart_offline.sh broken-chart CASE        a copy of the chart broken on purpose must fail
#                                             lint or render
#   chart_offline.sh alerts                   the PrometheusRule of the production values:
#                                             promtool check rules, then promtool test rules
#                                             with alerts/ferry_alerts_test.yaml (each alert
#                                             fires on trouble, stays silent otherwise)
# Tools: scripts/k8s-tools/install.sh (run by scripts/bootstrap.sh); no network here.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
chart="${FERRY_CHART_DIR:-$root/charts/ferry}"  # broken-chart points it at a broken copy
tools="$("$root/scripts/k8s-tools/install.sh" --dir)"
helm="$tools/bin/helm"
# The Kubernetes the lab runs (docs/install.md): Capabilities.KubeVersion and kubeVersion.
kube_version=1.20.2

work="$(mktemp -d "${TMPDIR:-/tmp}/fy-chart-XXXXXX")"
trap 'rm -rf "$work"' EXIT
# Helm keeps its caches and repositories here, not in the user's home.
export HELM_CACHE_HOME="$work/helm/cache" HELM_CONFIG_HOME="$work/helm/config" HELM_DATA_HOME="$work/helm/data"
ln -s "$tools/node_modules" "$work/node_modules"
echo '{"private": true, "type": "module"}' >"$work/package.json"
cp "$here/chart_validate.mjs" "$work/"

# Every render and lint takes this first: image.repository has no default.
base_values="$here/values/registry.yaml"

values_file() {
  if [ "$1" = default ]; then echo ""; else echo "$here/values/$1.yaml"; fi
}

# render CHART SET [VERSION]: every check of a value set; prints why it failed.
render() {
  local chart="$1" set="$2" version="${3:-$kube_version}" vf
  vf="$(values_file "$set")"
  # crds/ too: Helm installs it, so it is checked like the rest.
  "$helm" template fy "$chart" --namespace ferry-system --kube-version "$version" --include-crds \
    --values "$base_values" ${vf:+--values "$vf"} >"$work/$set.yaml"
  yamllint --strict --config-file "$here/yamllint.yaml" "$work/$set.yaml"
  FERRY_KUBE_VERSION="$version" python3 "$here/chart_checks.py" check "$work/$set.yaml" "$chart" "$base_values" $vf --json "$work/$set.json"
  node "$work/chart_validate.mjs" "$work/$set.json" "$work"
}

lint() {
  local chart="$1" set vf
  for set in default minimal production cluster-ca cluster-ca-custom release; do
    vf="$(values_file "$set")"
    "$helm" lint --strict "$chart" --kube-version "$kube_version" --values "$base_values" ${vf:+--values "$vf"}
  done
}

# expect_failure WHAT EXPECTED CMD...: CMD must fail, and its output must say EXPECTED.
expect_failure() {
  local what="$1" expected="$2" out rc=0
  shift 2
  out="$("$@" 2>&1)" || rc=$?
  if [ "$rc" -eq 0 ]; then
    printf '%s\nFAIL: %s was accepted; expected an error saying: %s\n' "$out" "$what" "$expected"
    return 1
  fi
  if ! grep -qF -- "$expected" <<<"$out"; then
    printf '%s\nFAIL: %s failed, but not with: %s\n' "$out" "$what" "$expected"
    return 1
  fi
  printf 'ok: %s refused: %s\n' "$what" "$(grep -F -- "$expected" <<<"$out" | head -1)"
}

# Objects broken after rendering, and what must catch them (chart_checks.py mutate).
validator_expect() {
  case "$1" in
    unknown-field) echo "'\"securityContex\"' does not exist in type 'IContainer'" ;;
    unknown-nested-field) echo "'\"comand\"' does not exist in type 'IExecAction'" ;;
    unknown-field-configmap) echo "'\"datas\"' does not exist in type 'IConfigMap'" ;;
    wrong-type) echo "terminationGracePeriodSeconds must be integer" ;;
    missing-required) echo "must have required property name" ;;
    unknown-kind) echo "no schema for example.com/v1 Gadget" ;;
    *) return 1 ;;
  esac
}
security_expect() {
  case "$1" in
    privileged) echo "privileged must be false" ;;
    extra-capability) echo "capabilities.add must be exactly ['NET_ADMIN', 'SYS_ADMIN'], is ['NET_ADMIN', 'NET_RAW', 'SYS_ADMIN']" ;;
    no-drop-all) echo "capabilities.drop must be [ALL]" ;;
    host-pid) echo "hostPID must not be set" ;;
    host-root) echo "hostPath / is not one the chart needs" ;;
    shell-init) echo "container setup: command runs a shell" ;;
    rbac-write) echo "verbs ['get', 'list', 'patch', 'watch'] go beyond get/list/watch" ;;
    rbac-secrets) echo "grants core/secrets, which ferryd does not read" ;;
    rbac-any-daemonset) echo "apps/daemonsets only by ferry's own name, in a Role" ;;
    cni-rbac-list) echo "must be exactly get on core pods and namespaces" ;;
    token-any-serviceaccount) echo "serviceaccounts/token only create, only of fy-ferry-cni, in a Role, with cni.apiCredentials" ;;
    rbac-no-policies) echo "grants no get/list/watch on security.istio.io/authorizationpolicies, which ferryd reads" ;;
    crd-storage-v1beta1) echo "CustomResourceDefinition/authorizationpolicies.security.istio.io: v1 must be the storage version" ;;
    crd-pruning-spec) echo "v1 spec must keep unknown fields" ;;
    crd-short-name) echo "names.shortNames must be ['ap'] (Istio's), is ['authz']" ;;
    ca-secret-on-ferryd) echo "DaemonSet/fy-ferry: mounts Secret ferry-ca although identity.source is cluster-ca" ;;
    ca-rbac-extra) echo "ClusterRole/fy-ferry-ca: grants ['get'] on core/secrets; ferry-ca may only create tokenreviews and get/list/watch pods" ;;
    ca-rbac-write-pods) echo "ClusterRole/fy-ferry-ca: grants ['delete'] on core/pods" ;;
    ca-role-to-ferryd) echo "ClusterRoleBinding/fy-ferry-ca: binds ferry-ca's ClusterRole to ServiceAccount ferry-system/fy-ferry too" ;;
    ca-capability) echo "Deployment/fy-ferry-ca container ferry-ca: capabilities.add must be empty, is ['NET_BIND_SERVICE']" ;;
    ca-root) echo "Deployment/fy-ferry-ca: the pod must not run as root" ;;
    ca-privilege-escalation) echo "container ferry-ca: allowPrivilegeEscalation must be false" ;;
    ca-host-network) echo "Deployment/fy-ferry-ca: hostNetwork must not be set" ;;
    ca-key-world-readable) echo "the Secret's defaultMode 0444 lets others than its owner and group read the CA key" ;;
    ca-key-item) echo "the Secret's items must map certKey, keyKey, bundleKey to ca.pem, ca.key, bundle.pem" ;;
    ca-probe-port) echo "container ferry-ca: readinessProbe must use port 15014, uses 15012" ;;
    ca-on-workload-nodes) echo "Deployment/fy-ferry-ca: does not prefer control-plane nodes" ;;
    ca-bundle-role-any-configmap) echo "Role/fy-ferry-ca: grants ['get', 'update'] on every ConfigMap; only create" ;;
    image-not-pinned) echo "is not registry.example.com/ferry/ferryd:0.1.0@sha256:" ;;
    ca-token-audience) echo "the ca-token volume must project one service-account token with audience 'ferry-ca'" ;;
    ca-token-file-not-mounted) echo "ConfigMap: identity.cluster_ca.token_file is '/var/run/secrets/kubernetes.io/serviceaccount/token', must be '/var/run/secrets/ferry/ca-token/token'" ;;
    ca-other-deployment) echo "Deployment/helper: the chart runs ferryd as a DaemonSet only" ;;
    cni-socket-not-on-node) echo "cni.socket /run/ferry-private/cni.sock is not the same path on the node" ;;
    handover-socket-not-on-node) echo "ConfigMap: handover.socket /run/ferry-private/handover.sock is not the same path on the node" ;;
    host-port) echo "container ferryd: declares ports [15008]: with hostNetwork they are host ports" ;;
    probe-on-shared-port) echo "container ferryd: readinessProbe must be exec [/usr/local/bin/ferryctl, probe, --file, FILE]" ;;
    readiness-file-on-node) echo "the readiness file /run/ferry-probe/ready must be in an emptyDir of the pod's own" ;;
    grace-shorter-than-deadline) echo "terminationGracePeriodSeconds must be 14430 (handover.deadlineSeconds plus terminationGracePeriodSeconds)" ;;
    cni-conf-dir-not-mounted) echo "cni.conf_dir /host/cni/net.d is the node's None, not cni.confDir /etc/cni/net.d" ;;
    *) return 1 ;;
  esac
}

# A copy of the chart with one deliberate fault; prints what must be said about it.
break_chart() {
  local copy="$1" case="$2" ds="$1/templates/daemonset.yaml"
  case "$case" in
    unknown-field)  # a misspelt pod field: only the unknown-field check sees it
      sed -i 's/^      hostNetwork: true$/      hostNetwork: true\n      hostNetworking: true/' "$ds"
      echo "'\"hostNetworking\"' does not exist in type 'IPodSpec'" ;;
    unjustified-capability)
      sed -i 's/^                - SYS_ADMIN$/                - SYS_ADMIN\n                - NET_RAW/' "$ds"
      echo "capabilities.add must be exactly" ;;
    uncommented-capability)
      sed -i '/^                # SYS_ADMIN:$/d' "$ds"
      echo "capability SYS_ADMIN has no justification comment" ;;
    privileged)
      sed -i 's/^            privileged: false$/            privileged: true/' "$ds"
      echo "privileged must be false" ;;
    rbac-wildcard)
      sed -i '0,/verbs: \[get, list, watch\]/s//verbs: ["*"]/' "$copy/templates/clusterrole.yaml"
      echo "go beyond get/list/watch" ;;
    broken-indentation)
      sed -i 's/^      serviceAccountName:/    serviceAccountName:/' "$ds"
      echo "error converting YAML to JSON" ;;
    broken-notes)  # NOTES.txt is rendered only by install: lint must still see it
      echo '{{ .Values.notAValue.field }}' >>"$copy/templates/NOTES.txt"
      echo 'executing "ferry/templates/NOTES.txt"' ;;
    lint-no-version)
      sed -i '/^version:/d' "$copy/Chart.yaml"
      echo "version is required" ;;
    ca-secret-on-ferryd)  # ferryd's bundle from ferry-ca's Secret: every kubelet could read the key
      perl -0pi -e 's/configMap:\n(\s+)name: \{\{ \.Values\.identity\.clusterCa\.bundleConfigMap \}\}/secret:\n$1secretName: {{ .Values.identity.clusterCa.secretName }}/' "$ds"
      grep -q 'secretName: {{ .Values.identity.clusterCa.secretName }}' "$ds" || return 1
      echo "mounts Secret ferry-ca although identity.source is cluster-ca" ;;
    *) return 1 ;;
  esac
}

case "${1:-}" in
  lint)
    lint "$chart"
    ;;
  render)
    render "$chart" "${2:?value set}" "${3:-}"
    ;;
  schema-negative)
    f="$here/values/bad/${2:?case}.yaml"
    expected="$(sed -n '1s/^# expect: //p' "$f")"
    [ -n "$expected" ] || { echo "FAIL: $f has no '# expect:' first line"; exit 1; }
    expect_failure "values/bad/$2.yaml" "$expected" \
      "$helm" template fy "$chart" --kube-version "$kube_version" --values "$base_values" --values "$f"
    ;;
  validator-negative)
    expected="$(validator_expect "${2:?case}")" || { echo "unknown case $2"; exit 2; }
    render "$chart" default >/dev/null
    python3 "$here/chart_checks.py" mutate "$work/default.json" "$2" "$work/broken.json"
    expect_failure "an object with $2" "$expected" node "$work/chart_validate.mjs" "$work/broken.json" "$work"
    ;;
  security-negative)
    expected="$(security_expect "${2:?case}")" || { echo "unknown case $2"; exit 2; }
    # ca-*: ferry-ca's promises, on the chart rendered with identity.source cluster-ca.
    case "$2" in ca-*) set=cluster-ca ;; image-*) set=release ;; *) set=default ;; esac
    render "$chart" "$set" >/dev/null
    python3 "$here/chart_checks.py" mutate "$work/$set.json" "$2" "$work/broken.json"
    vf="$(values_file "$set")"
    expect_failure "an object with $2" "$expected" \
      python3 "$here/chart_checks.py" recheck "$work/broken.json" "$chart" "$base_values" "${vf:--}"
    ;;
  alerts)
    render "$chart" production >/dev/null
    python3 - "$work/production.json" "$work/rules.yaml" <<'PY'
import json, sys, yaml
rules = [d["object"]["spec"] for d in json.load(open(sys.argv[1])) if d["object"]["kind"] == "PrometheusRule"]
if len(rules) != 1:
    sys.exit(f"expected one PrometheusRule in the production render, found {len(rules)}")
yaml.safe_dump(rules[0], open(sys.argv[2], "w"), sort_keys=False)
PY
    cp "$here/alerts/ferry_alerts_test.yaml" "$work/"
    promtool check rules "$work/rules.yaml"
    (cd "$work" && promtool test rules ferry_alerts_test.yaml)
    ;;
  broken-chart)
    copy="$work/chart/ferry"
    mkdir -p "$work/chart"
    cp -r "$chart" "$copy"
    expected="$(break_chart "$copy" "${2:?case}")" || { echo "unknown case $2"; exit 2; }
    # The same script on the broken copy: lint, then every check of the default values and
    # of cluster-ca's.
    expect_failure "the chart with $2" "$expected" \
      env FERRY_CHART_DIR="$copy" bash -c 'bash "$0" lint && bash "$0" render default && bash "$0" render cluster-ca' "$0"
    ;;
  *)
    sed -n '2,20p' "$0" >&2
    exit 2
    ;;
esac
