#!/usr/bin/env bash
# Builds ferryd's container image from the project's own binaries, without a registry and
# without a base image: ferryd, ferryctl and the static ferry-cni under /usr/local/bin plus
# ferry-ca (the cluster CA's Deployment runs the same image: docs/ferry-ca.md) plus exactly the
# shared libraries ldd says they load (and the dynamic loader).
#   ferryd-image.sh BUILD_DIR [OUT.tar]
# Tag: ferry/ferryd:dev (docker.io/ferry/ferryd:dev in containerd). Writes BUILD_DIR/ferryd-image.tar
# by default and, when the lab cluster is up, imports it into the cluster's containerd.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
readonly IMAGE=docker.io/ferry/ferryd:dev

[[ $# -ge 1 ]] || { echo "usage: $0 BUILD_DIR [OUT.tar]" >&2; exit 2; }
build=$(cd "$1" && pwd)
out=${2:-$build/ferryd-image.tar}
bins=("$build/proxy/main/ferryd" "$build/proxy/ferryctl/ferryctl" "$build/proxy/main/ferry-ca")
for b in "${bins[@]}"; do
  [[ -x $b ]] || { echo "ferryd-image: $b missing: build ferry first (make build)" >&2; exit 1; }
done

root=$(mktemp -d "${TMPDIR:-/tmp}/fy-ferryd-image.XXXXXX")
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/usr/local/bin" "$root/tmp" "$root/etc"
chmod 1777 "$root/tmp"
for b in "${bins[@]}"; do install -m 755 "$b" "$root/usr/local/bin/"; done
# ferry-cni beside ferryd (cni.plugin_binary's default): static, ferryd copies it onto the node.
cni_plugin=$build/proxy/main/ferry-cni
[[ -x $cni_plugin ]] || { echo "ferryd-image: $cni_plugin missing: build ferry first (make build)" >&2; exit 1; }
install -m 755 "$cni_plugin" "$root/usr/local/bin/"

# ldd's "name => /path (addr)" lines and the loader's "/path (addr)" line; each library is
# placed at the path the loader will look for it.
libs=$(for b in "${bins[@]}"; do ldd "$b"; done |
       awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | sort -u)
[[ -n $libs ]] || { echo "ferryd-image: ldd found no libraries (static binaries?)" >&2; exit 1; }
for l in $libs; do
  mkdir -p "$root$(dirname "$l")"
  cp -L "$l" "$root$l"
done
echo "root:x:0:0:root:/:/usr/local/bin/ferryd" >"$root/etc/passwd"
echo "root:x:0:" >"$root/etc/group"

"$here/oci-image.sh" "$IMAGE" "$root" "$out" /usr/local/bin/ferryd
echo "ferryd-image: $out ($IMAGE, $(wc -l <<<"$libs") libraries)" >&2
if "$here/cluster.sh" status >/dev/null 2>&1; then
  "$here/cluster.sh" import "$out"
  echo "ferryd-image: imported into the lab cluster" >&2
fi
echo "$out"
