#!/usr/bin/env bash
# Packs a root filesystem directory into an OCI image archive (one uncompressed layer) that
# `ctr images import` accepts, so that the lab's images are built here and never pulled.
#   oci-image.sh NAME:TAG ROOTFS OUT.tar ENTRYPOINT [ARG...]
# NAME is the full reference containerd stores (docker.io/ferry/busybox:1.35); the archive is
# reproducible: same rootfs, same digests.
set -euo pipefail

[[ $# -ge 4 ]] || { echo "usage: $0 NAME:TAG ROOTFS OUT.tar ENTRYPOINT [ARG...]" >&2; exit 2; }
ref=$1 rootfs=$2 out=$3
shift 3
[[ -d $rootfs ]] || { echo "oci-image: $rootfs is not a directory" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/fy-oci.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/blobs/sha256"

# blob FILE MEDIATYPE: stores FILE as a blob, prints its descriptor.
blob() {
  local sum size
  sum=$(sha256sum "$1" | cut -d' ' -f1)
  size=$(stat -c %s "$1")
  mv "$1" "$work/blobs/sha256/$sum"
  printf '{"mediaType":"%s","digest":"sha256:%s","size":%s' "$2" "$sum" "$size"
}
json_array() {
  local first=1 a
  printf '['
  for a in "$@"; do
    ((first)) || printf ','
    first=0
    a=${a//\\/\\\\}
    printf '"%s"' "${a//\"/\\\"}"
  done
  printf ']'
}

tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$rootfs" -cf "$work/layer" .
diff_id=$(sha256sum "$work/layer" | cut -d' ' -f1)
layer=$(blob "$work/layer" application/vnd.oci.image.layer.v1.tar)

printf '{"architecture":"amd64","os":"linux","config":{"Entrypoint":%s,"Env":["PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"],"WorkingDir":"/"},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
  "$(json_array "$@")" "$diff_id" >"$work/config"
config=$(blob "$work/config" application/vnd.oci.image.config.v1+json)

printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":%s},"layers":[%s}]}' \
  "$config" "$layer" >"$work/manifest"
manifest=$(blob "$work/manifest" application/vnd.oci.image.manifest.v1+json)

printf '{"schemaVersion":2,"manifests":[%s,"platform":{"architecture":"amd64","os":"linux"},"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' \
  "$manifest" "$ref" "${ref##*:}" >"$work/index.json"
echo '{"imageLayoutVersion":"1.0.0"}' >"$work/oci-layout"

mkdir -p "$(dirname "$out")"
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$work" \
  -cf "$out.tmp" oci-layout index.json blobs
mv "$out.tmp" "$out"
