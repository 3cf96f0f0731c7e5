#!/usr/bin/env bash
# Builds ferry's container image from image/Containerfile (make image; docs/install.md,
# "The release"): the binaries of BUILD_DIR and the static ferryctl of RELEASE_DIR on a root
# filesystem of the Debian packages named in image/packages.txt, with buildah, written as an
# OCI archive. Prints the manifest digest (sha256:...) on stdout, the rest on stderr.
#   image.sh BUILD_DIR RELEASE_DIR OUT_DIR
# Writes OUT_DIR/ferryd-<version>.oci.tar (an OCI layout, its one image tagged <version>) and
# OUT_DIR/ferryd-<version>.digest. The version is FERRY_VERSION or the project's
# (CMakeLists.txt); the source label FERRY_SOURCE_URL or the checkout's `origin` remote.
# Reproducible: file times, the image's creation time and the archive's own tar headers are
# all 0, so two builds of one commit give one digest while Debian's archive serves the same
# package versions (the lock file inside names them; a security update changes the digest).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
die() { echo "image: $*" >&2; exit 1; }

[[ $# -eq 3 ]] || { echo "usage: $0 BUILD_DIR RELEASE_DIR OUT_DIR" >&2; exit 2; }
build=$(cd "$1" && pwd) || die "no build folder $1"
release=$(cd "$2" && pwd) || die "no release build folder $2"
mkdir -p "$3"
out=$(cd "$3" && pwd)
command -v buildah >/dev/null || die "buildah missing (Debian package buildah; scripts/bootstrap.sh installs it)"

version=${FERRY_VERSION:-$(sed -n 's/^project(ferry VERSION \([0-9.]*\).*/\1/p' "$repo/CMakeLists.txt")}
[[ -n $version ]] || die "no version: FERRY_VERSION is empty and CMakeLists.txt names none"
revision=$(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)
[[ -z $(git -C "$repo" status --porcelain -- proxy bpf image CMakeLists.txt 2>/dev/null) ]] ||
  revision="$revision-dirty"
source_url=${FERRY_SOURCE_URL:-$(git -C "$repo" remote get-url origin 2>/dev/null || echo "local checkout (no remote)")}
ref=ferry/ferryd:$version

# Dynamic binaries whose libraries must come from the listed packages; static ones as they are.
dynamic=("$build/proxy/main/ferryd" "$build/proxy/main/ferry-ca")
static=("$build/proxy/main/ferry-cni" "$release/proxy/ferryctl/ferryctl")
for b in "${dynamic[@]}" "${static[@]}"; do
  [[ -x $b ]] || die "$b missing: build first (make build; make dist builds the release ferryctl)"
done
for b in "${static[@]}"; do
  ldd "$b" >/dev/null 2>&1 && die "$b is not static (ldd lists libraries)"
done

# image/packages.txt: one Debian package a line, '#' comments. Every library the dynamic
# binaries load must belong to one of them, and every one of them must be needed: the list is
# what an auditor reads, so it may neither fall short nor carry extras.
mapfile -t wanted < <(sed 's/#.*//; s/[[:space:]]//g; /^$/d' "$repo/image/packages.txt" | sort -u)
needed=$(for b in "${dynamic[@]}"; do ldd "$b"; done |
         awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | sort -u |
         while read -r lib; do
           owner=$(dpkg -S "$(readlink -f "$lib")" 2>/dev/null | head -n1 | cut -d: -f1) ||
             true
           [[ -n $owner ]] || owner=$(dpkg -S "$lib" 2>/dev/null | head -n1 | cut -d: -f1) || true
           [[ -n $owner ]] || { echo "?$lib"; continue; }
           echo "$owner"
         done | sort -u)
grep -q '^?' <<<"$needed" && die "libraries no Debian package owns: $(grep '^?' <<<"$needed" | tr '\n' ' ')"
missing=$(comm -23 <(echo "$needed") <(printf '%s\n' "${wanted[@]}"))
extra=$(comm -13 <(echo "$needed") <(printf '%s\n' "${wanted[@]}"))
[[ -z $missing ]] || die "the binaries load libraries of packages image/packages.txt does not list: $(echo $missing)"
[[ -z $extra ]] || die "image/packages.txt lists packages no binary needs: $(echo $extra)"

# The .deb of each package at the version Debian's archive serves now (apt's candidate: the
# current security-supported build of the same ABI the binaries were linked against), from
# apt's own cache where it holds it, else `apt-get download` into ferry's cache.
debs=${FERRY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ferry}/debs
mkdir -p "$debs"
ctx=$(mktemp -d "${TMPDIR:-/tmp}/fy-image.XXXXXX")
trap 'rm -rf "$ctx"; buildah --storage-driver vfs rmi -f "localhost/fy-image-$$" >/dev/null 2>&1 || true' EXIT
rootfs=$ctx/rootfs
mkdir -p "$rootfs/usr/local/bin" "$rootfs/usr/share/ferry" "$rootfs/etc" "$rootfs/tmp"
lock=$rootfs/usr/share/ferry/packages.lock
echo "# Debian packages of ferry's image $ref: name version architecture sha256-of-deb" >"$lock"
for p in "${wanted[@]}"; do
  ver=$(apt-cache policy "$p" 2>/dev/null | awk '$1 == "Candidate:" {print $2}')
  [[ -n $ver && $ver != "(none)" ]] || die "Debian's archive has no $p (apt-get update first?)"
  arch=$(apt-cache show "$p=$ver" 2>/dev/null | awk '$1 == "Architecture:" {print $2; exit}')
  file="${p}_${ver//:/%3a}_${arch}.deb"
  if [[ -f /var/cache/apt/archives/$file ]]; then
    deb=/var/cache/apt/archives/$file
  else
    deb=$debs/$file
    if [[ ! -f $deb ]]; then
      (cd "$debs" && apt-get download -q "$p=$ver" >/dev/null 2>&1) ||
        die "cannot fetch $p=$ver from Debian's archive"
    fi
  fi
  dpkg-deb -x "$deb" "$rootfs"
  echo "$p $ver $arch $(sha256sum "$deb" | cut -d' ' -f1)" >>"$lock"
done
# ferryd and ferry-ca without their debug sections (their symbols stay, for backtraces).
for b in "${dynamic[@]}" "${static[@]}"; do install -m 0755 "$b" "$rootfs/usr/local/bin/"; done
for b in "${dynamic[@]}"; do strip --strip-debug "$rootfs/usr/local/bin/$(basename "$b")"; done
printf 'root:x:0:0:root:/:/usr/local/bin/ferryd\nnonroot:x:65532:65532:ferry-ca:/:/usr/local/bin/ferry-ca\n' >"$rootfs/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$rootfs/etc/group"
chmod 1777 "$rootfs/tmp"
cp "$repo/image/Containerfile" "$ctx/Containerfile"

# vfs: works in any container or VM without overlay support; the layer is the same.
name=localhost/fy-image-$$
buildah --storage-driver vfs build --quiet --timestamp 0 --format oci --layers=false \
  --build-arg VERSION="$version" --build-arg REVISION="$revision" --build-arg SOURCE="$source_url" \
  -f "$ctx/Containerfile" -t "$name" "$ctx" >/dev/null
archive=$out/ferryd-$version.oci.tar
rm -rf "$ctx/oci"
# The layout's ref.name is the tag alone, as the OCI layout spec has it: `skopeo copy` takes
# the archive to any registry name, and `ctr images import --base-name REPO` names it REPO:tag.
buildah --storage-driver vfs push --quiet "$name" "oci:$ctx/oci:$version" >/dev/null
# Fixed tar headers for the archive itself, so that its SHA-256 (SHA256SUMS) repeats too.
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$ctx/oci" -cf "$archive.tmp" \
  oci-layout index.json blobs
mv "$archive.tmp" "$archive"
digest=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["manifests"][0]["digest"])' "$ctx/oci/index.json")
echo "$digest" >"$out/ferryd-$version.digest"
echo "image: $archive ($ref@$digest, $(du -h "$archive" | cut -f1), ${#wanted[@]} Debian packages)" >&2
echo "$digest"
