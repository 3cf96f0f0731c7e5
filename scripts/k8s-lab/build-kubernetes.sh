#!/usr/bin/env bash
# Builds the Kubernetes lab's binaries from Debian's `kubernetes` source package (1.20.2) and
# caches them, as the kernel lab caches kernels:
#   kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy  (Go, static)
#   pause                                  (C, static, from build/pause/linux/pause.c)
# The binaries go to ~/.cache/ferry/k8s/<key>/ where <key> hashes the source package version,
# RECIPE, the Go toolchain and the two Debian Go libraries swapped into vendor/; a cached set
# is never rebuilt. The unpacked source, the private apt state and Go's build cache live
# beside them (~/.cache/ferry/k8s/{src,apt,gopath,go-build}).
#
# Usage: build-kubernetes.sh [build|fetch|key]   (default build)
#   build  prints the directory holding the binaries on stdout; progress goes to stderr
#   fetch  only downloads and unpacks the source (no compiler runs)
#   key    prints the cache key
# The compile takes about 15-20 minutes on 2 cores cold; run it under whatever build lock
# the machine uses (the script takes none, so that a caller holding one cannot deadlock).
set -euo pipefail

# Bump when the way Kubernetes is patched or built changes (invalidates every binary set).
readonly RECIPE=1
readonly SRC_PKG=kubernetes
readonly K8S_VERSION=v1.20.2
readonly BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy)

cache=${FERRY_K8S_CACHE:-$HOME/.cache/ferry/k8s}
apt_dir=$cache/apt
src_root=$cache/src
gopath=$cache/gopath
export GOCACHE=$cache/go-build

log() { echo "k8s-lab: $*" >&2; }
die() { log "$*"; exit 1; }

mode=${1:-build}
case "$mode" in build|fetch|key) ;; *) echo "usage: $0 [build|fetch|key]" >&2; exit 2 ;; esac

for tool in go dpkg-source apt-get gcc; do
  command -v "$tool" >/dev/null || die "$tool missing: run scripts/bootstrap.sh k8s-lab"
done
readonly GOLIBS=(/usr/share/gocode/src/github.com/modern-go/reflect2
                 /usr/share/gocode/src/github.com/json-iterator/go)
for d in "${GOLIBS[@]}"; do
  [[ -d $d ]] || die "$d missing: run scripts/bootstrap.sh k8s-lab"
done

pkgver() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null || echo none; }

# apt with a private deb-src list derived from this machine's own sources (deb822 *.sources and
# one-line sources.list): the system's apt configuration and lists stay untouched.
apt_private() {
  local tool=$1; shift
  # The private lists live in the caller's home, which apt's sandbox user may not reach.
  "$tool" -o APT::Sandbox::User="$(id -un)" -o Dir::Etc::SourceList="$apt_dir/sources.list" \
          -o Dir::Etc::SourceParts="$apt_dir/sources.list.d" \
          -o Dir::State::Lists="$apt_dir/lists" \
          -o Dir::Cache="$apt_dir/cache" "$@"
}

prepare_apt() {
  mkdir -p "$apt_dir/sources.list.d" "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
  : >"$apt_dir/sources.list"
  local f n=0
  if [[ -r /etc/apt/sources.list ]]; then
    sed -n 's/^[[:space:]]*deb[[:space:]]/deb-src /p' /etc/apt/sources.list >"$apt_dir/sources.list"
    n=$(wc -l <"$apt_dir/sources.list")
  fi
  rm -f "$apt_dir/sources.list.d/"*.sources
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -r $f ]] || continue
    sed -E 's/^Types:.*/Types: deb-src/' "$f" >"$apt_dir/sources.list.d/$(basename "$f")"
    n=$((n + 1))
  done
  for f in /etc/apt/sources.list.d/*.list; do
    [[ -r $f ]] || continue
    sed -n 's/^[[:space:]]*deb[[:space:]]/deb-src /p' "$f" >>"$apt_dir/sources.list"
    n=$((n + 1))
  done
  ((n > 0)) || die "no apt sources found under /etc/apt to derive a deb-src list from"
}

# The source tree, unpacked once per source package version: $src_root/<version>/tree.
# Debian's patches are applied (dpkg-source -x): they are part of the package's version.
fetch_source() {
  local ver dir
  ver=$(cat "$src_root/VERSION" 2>/dev/null || true)
  if [[ -n $ver && -d $src_root/$ver/tree ]]; then
    echo "$ver"
    return
  fi
  prepare_apt
  log "updating the private deb-src lists"
  apt_private apt-get update -qq >&2
  ver=$(apt_private apt-cache showsrc --only-source "$SRC_PKG" 2>/dev/null |
        sed -n 's/^Version: //p' | sort -V | tail -1)
  [[ -n $ver ]] || die "apt knows no source package '$SRC_PKG'"
  dir=$src_root/$ver
  if [[ ! -d $dir/tree ]]; then
    log "downloading source package $SRC_PKG $ver"
    rm -rf "$dir.tmp" && mkdir -p "$dir.tmp"
    (cd "$dir.tmp" && apt_private apt-get source --download-only -qq "$SRC_PKG=$ver" >&2)
    log "unpacking"
    (cd "$dir.tmp" && dpkg-source -x *.dsc tree >&2)
    rm -rf "$dir" && mv "$dir.tmp" "$dir"
  fi
  echo "$ver" >"$src_root/VERSION"
  echo "$ver"
}

srcver() {
  # The version is known without the network once the source is unpacked.
  local ver
  ver=$(cat "$src_root/VERSION" 2>/dev/null || true)
  [[ -n $ver ]] || ver=$(fetch_source)
  echo "$ver"
}

key_of() {
  {
    echo "recipe $RECIPE"
    echo "source $SRC_PKG $1"
    echo "binaries ${BINARIES[*]} pause"
    go version
    echo "reflect2 $(pkgver golang-github-modern-go-reflect2-dev)"
    echo "json-iterator $(pkgver golang-github-json-iterator-go-dev)"
    echo "gcc $(gcc -dumpfullversion) libc $(pkgver libc6-dev)"
  } | sha256sum | cut -c1-16
}

# The vendored modern-go/reflect2 1.0.1 faults under Go >= 1.18 (the apiserver dies within a
# minute in reflect2.(*UnsafeMapType).UnsafeIterate); Debian's reflect2 1.0.2 and the
# json-iterator 1.1.12 written against it replace the vendored copies.
swap_vendored() {
  local tree=$1 lib rel
  for lib in "${GOLIBS[@]}"; do
    rel=${lib#/usr/share/gocode/src/}
    if [[ -f $tree/vendor/$rel/.ferry-swapped ]]; then continue; fi
    log "replacing vendor/$rel with Debian's $(basename "$lib") ($lib)"
    rm -rf "${tree:?}/vendor/$rel"
    mkdir -p "$tree/vendor/$rel"
    cp -rL "$lib/." "$tree/vendor/$rel/"
    rm -rf "$tree/vendor/$rel/.git" "$tree/vendor/$rel/go.mod" "$tree/vendor/$rel/go.sum"
    echo "$lib" >"$tree/vendor/$rel/.ferry-swapped"
  done
}

build() {
  local ver key out tree start ld pkgs=() b
  ver=$(srcver)
  key=$(key_of "$ver")
  out=$cache/$key
  if [[ -s $out/BUILD ]]; then
    log "binaries cached ($out)"
    echo "$out"
    return
  fi
  tree=$src_root/$ver/tree
  [[ -d $tree ]] || { rm -f "$src_root/VERSION"; ver=$(fetch_source); tree=$src_root/$ver/tree; }
  swap_vendored "$tree"

  # GOPATH mode, as 1.20 builds itself: the tree at $GOPATH/src/k8s.io/kubernetes.
  mkdir -p "$gopath/src/k8s.io" "$GOCACHE"
  ln -sfn "$tree" "$gopath/src/k8s.io/kubernetes"
  export GOPATH=$gopath GO111MODULE=off CGO_ENABLED=0 GOFLAGS=
  start=$SECONDS
  if [[ ! -f $tree/.ferry-generated ]]; then
    # Without the generated files: undefined: openapi.GetOpenAPIDefinitions.
    log "make generated_files (about 2-5 minutes cold)"
    # An interrupted or failed earlier attempt can leave its generators in _output as files
    # that make takes for up to date (an empty, non-executable prerelease-lifecycle-gen when
    # rsync was missing): they are rebuilt from scratch.
    rm -rf "${tree:?}/_output"
    make -C "$gopath/src/k8s.io/kubernetes" generated_files >&2
    touch "$tree/.ferry-generated"
  fi

  local v=k8s.io/kubernetes/vendor/k8s.io
  ld="-s -w"
  for p in "$v/component-base/version" "$v/client-go/pkg/version"; do
    ld+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=20"
    ld+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  for b in "${BINARIES[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
  log "building ${BINARIES[*]} (cold: about 15-20 minutes on 2 cores)"
  rm -rf "$out.tmp" && mkdir -p "$out.tmp"
  (cd "$gopath/src/k8s.io/kubernetes" && go build -ldflags "$ld" -o "$out.tmp/" "${pkgs[@]}") >&2

  # The pod sandbox's pause, static so that its image needs nothing else.
  gcc -Os -Wall -Werror -static -DVERSION="$K8S_VERSION-ferry" \
    -o "$out.tmp/pause" "$tree/build/pause/linux/pause.c" >&2
  strip "$out.tmp/pause"
  for b in "${BINARIES[@]}" pause; do [[ -x $out.tmp/$b ]] || die "$b was not built"; done
  {
    echo "$SRC_PKG $ver ($K8S_VERSION), recipe $RECIPE, key $key"
    go version
    echo "reflect2 $(pkgver golang-github-modern-go-reflect2-dev), json-iterator $(pkgver golang-github-json-iterator-go-dev)"
    echo "built $(date -u +%FT%TZ) in $((SECONDS - start)) s"
  } >"$out.tmp/BUILD"
  rm -rf "$out" && mv "$out.tmp" "$out"
  log "built in $((SECONDS - start)) s; Go build cache $(du -sh "$GOCACHE" | cut -f1)"
  echo "$out"
}

case "$mode" in
  fetch) fetch_source >/dev/null; log "source in $src_root/$(cat "$src_root/VERSION")/tree" ;;
  key) key_of "$(srcver)" ;;
  build) build ;;
esac
