#!/usr/bin/env bash
# `make kernel-lab`: proves ferry's peer-egress path on a kernel the project builds itself
# (docs/kernel-lab.md).
#   1. the kernel lab's packages (scripts/bootstrap.sh kernel-lab) and ferry's build
#   2. two kernels from Debian's linux-source-6.12, cached by key under ~/.cache:
#      vanilla, and patched with bpf/kernel/0001-bpf-redirect-peer-egress.patch
#   3. the patched kernel under qemu: tests/kernel-lab/netkit_e2e.sh peer-egress
#   4. the vanilla kernel under qemu: tests/kernel-lab/netkit_e2e.sh ingress-redirect
# Results (each guest's output, console and summary) under build/kernel-lab/. Exit 0 when
# both guests passed.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
BUILD=${FERRY_BUILD_DIR:-build/default}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
OUT=$ROOT/build/kernel-lab
ME=kernel-lab

[ "$(id -u)" -eq 0 ] || { echo "$ME: must run as root (qemu's 9p export of / needs it)" >&2; exit 1; }
start=$SECONDS

scripts/bootstrap.sh kernel-lab
if [ -z "${FY_KERNEL_LAB_NO_BUILD:-}" ]; then
  make --no-print-directory build
fi
for bin in proxy/main/ferryd proxy/ferryctl/ferryctl tests/e2e/fy_attach tests/kernel-lab/ktls_probe; do
  [ -x "$BUILD/$bin" ] || { echo "$ME: $BUILD/$bin missing (make build)" >&2; exit 1; }
done

mkdir -p "$OUT"
kernels=$(scripts/kernel-lab/build-kernel.sh all)
patched=$(awk '$1 == "patched" {print $2}' <<<"$kernels")
vanilla=$(awk '$1 == "vanilla" {print $2}' <<<"$kernels")

# The CNI stand-in is compiled here: clang under TCG would take a while.
clang -O2 -g -target bpf -I"/usr/include/$(uname -m)-linux-gnu" -Wall -Werror -c tests/e2e/cni_standin.bpf.c -o "$OUT/cni_standin.o"
export FY_CNI_OBJ=$OUT/cni_standin.o
export FERRY_BUILD_DIR=$BUILD

# failed_cases LOG: every "== case N" block of netkit_e2e.sh's output that ended in FAIL
# (at most 80 lines each); the last 30 lines of the log when no case failed.
failed_cases() {
  [ -f "$1" ] || { echo "  (no output log)"; return; }
  awk '
    /^== case / { n = 0; delete block }
    { if (n < 80) block[n++] = $0 }
    /^FAIL  case / { for (i = 0; i < n; i++) print "  | " block[i]; found = 1; n = 0 }
    END { exit found ? 0 : 1 }' "$1" || { echo "  (no failed case; the log ends:)"; tail -n 30 "$1" | sed 's/^/  | /'; }
}

rc=0
for variant in patched vanilla; do
  if [ "$variant" = patched ]; then kernel=$patched mode=peer-egress; else kernel=$vanilla mode=ingress-redirect; fi
  echo
  echo "== $ME: $variant kernel ($kernel), expecting $mode"
  rm -rf "${OUT:?}/$variant"
  mkdir -p "$OUT/$variant"
  # In the guest the results directory is the writable share, mounted at /mnt.
  if FY_RESULTS=/mnt scripts/kernel-lab/run-guest.sh --kernel "$kernel" --out "$OUT/$variant" \
       -- bash tests/kernel-lab/netkit_e2e.sh "$mode"; then
    echo "PASS  $ME $variant"
  else
    echo "FAIL  $ME $variant (output: $OUT/$variant/output.log, console: $OUT/$variant/console.log)"
    # CI keeps only this script's output: show each failed case whole, and the guest's last
    # words when it ended outside a case.
    failed_cases "$OUT/$variant/output.log"
    for f in "$OUT/$variant"/ferryd-n*.log; do
      [ -f "$f" ] || continue
      echo "  ${f##*/}: its last warnings, errors and failed connections"
      grep -E ' (warn|error) |reason=' "$f" | grep -v 'reason=ok' | tail -n 20 | sed 's/^/  | /'
    done
    rc=1
  fi
done

echo
for variant in patched vanilla; do
  echo "== $variant kernel: summary ($OUT/$variant/summary.txt)"
  sed 's/^/  /' "$OUT/$variant/summary.txt" 2>/dev/null || echo "  (none)"
done
echo "$ME: $([ $rc -eq 0 ] && echo passed || echo FAILED) in $((SECONDS - start)) s"
exit $rc
