#!/usr/bin/env bash
# Builds the kernel lab's two kernels from Debian's linux-source-6.12 and caches them:
#   vanilla  tinyconfig + bpf/kernel/lab.config
#   patched  the same + bpf/kernel/0001-bpf-redirect-peer-egress.patch
# Each bzImage is cached under ~/.cache/ferry/kernel-lab/images/<key>/ where <key> hashes the
# source package version, lab.config, the patch (patched only) and RECIPE below; a cached
# image is never rebuilt. One source tree is kept beside the images so that a changed patch
# rebuilds only what it touches.
#
# Usage: build-kernel.sh [vanilla|patched|all]   (default all)
# Prints "<variant> <path to bzImage>" for each variant on stdout; progress goes to stderr.
set -euo pipefail

# Bump when the way the kernel is configured or built changes (invalidates every image).
readonly RECIPE=1

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache=${FERRY_KERNEL_LAB_CACHE:-$HOME/.cache/ferry/kernel-lab}
tarball=/usr/src/linux-source-6.12.tar.xz
fragment=$repo/bpf/kernel/lab.config
patch=$repo/bpf/kernel/0001-bpf-redirect-peer-egress.patch
tree=$cache/src
jobs=${JOBS:-$(nproc)}

log() { echo "kernel-lab: $*" >&2; }

want=${1:-all}
case "$want" in vanilla|patched|all) ;; *) echo "usage: $0 [vanilla|patched|all]" >&2; exit 2 ;; esac
[[ -r $tarball ]] || { log "$tarball missing: run scripts/bootstrap.sh kernel-lab"; exit 1; }
[[ -r $fragment && -r $patch ]] || { log "missing $fragment or $patch"; exit 1; }

srcver=$(dpkg-query -W -f='${Version}' linux-source-6.12)
key_of() {
  local variant=$1
  {
    echo "recipe $RECIPE"
    echo "source $srcver"
    echo "variant $variant"
    sha256sum <"$fragment"
    [[ $variant == patched ]] && sha256sum <"$patch"
    true
  } | sha256sum | cut -c1-16
}

# The tree records which patch text it has applied (tree/.ferry-applied.patch), so that a new
# patch first reverses the old one.
set_patch_state() {
  local variant=$1 applied=$tree/.ferry-applied.patch
  if [[ -f $applied ]]; then
    if [[ $variant == patched ]] && cmp -s "$applied" "$patch"; then return; fi
    log "reversing the previously applied patch"
    patch -d "$tree" -p1 -R --quiet <"$applied"
    rm -f "$applied"
  fi
  if [[ $variant == patched ]]; then
    log "applying $(basename "$patch")"
    patch -d "$tree" -p1 --quiet --no-backup-if-mismatch <"$patch"
    cp "$patch" "$applied"
  fi
}

configure() {
  if [[ -f $tree/.config && -f $tree/.ferry-config.sha ]] &&
     [[ $(cat "$tree/.ferry-config.sha") == "$RECIPE $(sha256sum <"$fragment")" ]]; then
    return
  fi
  log "configuring: tinyconfig + lab.config"
  make -C "$tree" -s ARCH=x86_64 tinyconfig >&2
  (cd "$tree" && ARCH=x86_64 scripts/kconfig/merge_config.sh -m .config "$fragment" >/dev/null)
  make -C "$tree" -s ARCH=x86_64 olddefconfig >&2
  # Every requested option must have survived: a silently dropped dependency would give a
  # kernel that boots but proves nothing.
  local missing=0 line
  while IFS= read -r line; do
    [[ $line =~ ^CONFIG_ ]] || continue
    if ! grep -qx -- "$line" "$tree/.config"; then log "option not set after olddefconfig: $line"; missing=1; fi
  done <"$fragment"
  ((missing == 0)) || exit 1
  echo "$RECIPE $(sha256sum <"$fragment")" >"$tree/.ferry-config.sha"
}

build_variant() {
  local variant=$1 key out
  key=$(key_of "$variant")
  out=$cache/images/$key
  if [[ -s $out/bzImage ]]; then
    log "$variant kernel cached ($out)"
    echo "$variant $out/bzImage"
    return
  fi
  if [[ ! -d $tree ]]; then
    log "unpacking $tarball"
    mkdir -p "$cache"
    rm -rf "$cache/unpack.tmp" && mkdir "$cache/unpack.tmp"
    tar -xf "$tarball" -C "$cache/unpack.tmp"
    mv "$cache/unpack.tmp/linux-source-6.12" "$tree" && rmdir "$cache/unpack.tmp"
  fi
  set_patch_state "$variant"
  configure
  log "building the $variant kernel with $jobs jobs (cold: about 11 minutes on 2 cores)"
  local start=$SECONDS
  # A fixed build identity keeps the image reproducible from its key.
  KBUILD_BUILD_TIMESTAMP="ferry kernel lab" KBUILD_BUILD_USER=ferry KBUILD_BUILD_HOST=lab \
    make -C "$tree" -s ARCH=x86_64 -j "$jobs" bzImage >&2
  mkdir -p "$out.tmp"
  cp "$tree/arch/x86/boot/bzImage" "$out.tmp/bzImage"
  cp "$tree/.config" "$out.tmp/config"
  [[ $variant == patched ]] && cp "$patch" "$out.tmp/"
  echo "linux-source-6.12 $srcver, $variant, built $(date -u +%FT%TZ) in $((SECONDS - start)) s" >"$out.tmp/BUILD"
  rm -rf "$out" && mv "$out.tmp" "$out"
  log "$variant kernel built in $((SECONDS - start)) s"
  echo "$variant $out/bzImage"
}

# Vanilla first: on a cold cache the patched build is then an incremental rebuild.
[[ $want == patched ]] || build_variant vanilla
[[ $want == vanilla ]] || build_variant patched
