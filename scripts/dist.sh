#!/usr/bin/env bash
# The release artefacts of one version in one folder (make dist; docs/install.md, "The
# release"):
#   ferryd-<v>.oci.tar             the image (scripts/image.sh), an OCI archive tagged <v>
#   ferryd-<v>.digest              its manifest digest
#   ferry-<v>.tgz                  the chart (helm package), its image pinned to that digest
#   ferryctl-<v>-linux-amd64       ferryctl, static: any x86-64 Linux
#   ferry-crds-<v>.yaml            the CustomResourceDefinitions the chart installs
#   SHA256SUMS                     of all of the above
#   dist.sh BUILD_DIR RELEASE_DIR OUT_ROOT      writes OUT_ROOT/ferry-<v>/, prints its path
# The version is FERRY_VERSION or the project's (CMakeLists.txt).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
die() { echo "dist: $*" >&2; exit 1; }

[[ $# -eq 3 ]] || { echo "usage: $0 BUILD_DIR RELEASE_DIR OUT_ROOT" >&2; exit 2; }
build=$1 release=$2
version=${FERRY_VERSION:-$(sed -n 's/^project(ferry VERSION \([0-9.]*\).*/\1/p' "$repo/CMakeLists.txt")}
[[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+([-+][0-9A-Za-z.-]+)?$ ]] || die "version '$version' is not SemVer (Helm needs it)"
export FERRY_VERSION=$version
helm=${HELM:-$("$repo/scripts/k8s-tools/install.sh" --dir)/bin/helm}
mkdir -p "$3"
out=$(cd "$3" && pwd)/ferry-$version
rm -rf "$out"
mkdir -p "$out"

digest=$("$here/image.sh" "$build" "$release" "$out")
[[ $digest =~ ^sha256:[0-9a-f]{64}$ ]] || die "image.sh printed no digest"

# The chart as released: version and appVersion are the release's, the image its tag and
# digest. Only those lines change; the rest is charts/ferry as it is.
work=$(mktemp -d "${TMPDIR:-/tmp}/fy-dist.XXXXXX")
trap 'rm -rf "$work"' EXIT
cp -r "$repo/charts/ferry" "$work/ferry"
python3 - "$work/ferry" "$version" "$digest" <<'EOF'
import re, sys
chart, version, digest = sys.argv[1:]
def sub(path, pattern, repl):
    text = open(path).read()
    new, n = re.subn(pattern, repl, text, count=1, flags=re.M)
    if n != 1:
        sys.exit(f"dist: {path}: no line matches {pattern}")
    open(path, "w").write(new)
sub(f"{chart}/Chart.yaml", r'^version: .*$', f"version: {version}")
sub(f"{chart}/Chart.yaml", r'^appVersion: .*$', f'appVersion: "{version}"')
# Within the top-level image: block only.
sub(f"{chart}/values.yaml", r'^(image:\n(?:  .*\n|\s*\n)*?)  tag: ""$', rf'\1  tag: "{version}"')
sub(f"{chart}/values.yaml", r'^(image:\n(?:  .*\n|\s*\n)*?)  digest: ""$', rf'\1  digest: "{digest}"')
EOF
HELM_CACHE_HOME=$work/helm HELM_CONFIG_HOME=$work/helm HELM_DATA_HOME=$work/helm \
  "$helm" package "$work/ferry" --destination "$out" >/dev/null
[[ -f $out/ferry-$version.tgz ]] || die "helm package wrote no ferry-$version.tgz"

install -m 0755 "$release/proxy/ferryctl/ferryctl" "$out/ferryctl-$version-linux-amd64"
cat "$repo"/charts/ferry/crds/*.yaml >"$out/ferry-crds-$version.yaml"
(cd "$out" && sha256sum -- * >SHA256SUMS.tmp && mv SHA256SUMS.tmp SHA256SUMS)
{
  echo "dist: ferry $version in $out"
  (cd "$out" && ls -l --time-style=+ -- * | awk '{printf "  %-34s %10s bytes\n", $NF, $5}')
  echo "  image ferryd:$version@$digest"
} >&2
echo "$out"
