#!/usr/bin/env bash
# Boots a kernel lab kernel under qemu (TCG: there is no KVM here) with the host's root
# filesystem shared read-only over virtio-9p, runs one command in the guest as root, and
# exits with that command's exit status.
#
#   run-guest.sh --kernel BZIMAGE --out DIR [--timeout SECONDS] -- CMD [ARGS...]
#
# DIR (created, must be on the host's root filesystem or below it) receives run.sh,
# output.log (the command's output), console.log (the guest's serial console) and
# exit-status. CMD runs in the current directory with the system directories and then the
# current PATH, and these
# variables passed through: CI, FERRY_BUILD_DIR and every FY_* variable.
set -euo pipefail

kernel= out= timeout=1500
while [ $# -gt 0 ]; do
  case $1 in
    --kernel) kernel=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --timeout) timeout=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "run-guest: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -n "$kernel" ] && [ -n "$out" ] && [ $# -gt 0 ] || { echo "usage: $0 --kernel BZIMAGE --out DIR -- CMD..." >&2; exit 2; }
[ -r "$kernel" ] || { echo "run-guest: no kernel at $kernel" >&2; exit 1; }
command -v qemu-system-x86_64 >/dev/null || { echo "run-guest: qemu-system-x86_64 missing (scripts/bootstrap.sh kernel-lab)" >&2; exit 1; }

here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
rm -f "$out/exit-status" "$out/output.log" "$out/console.log"
{
  echo "# written by scripts/kernel-lab/run-guest.sh"
  echo "set -e"
  # System directories first: the guest has the host's files but not its login environment.
  printf 'export PATH=%q\n' "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:$PATH"
  for v in CI FERRY_BUILD_DIR $(compgen -v FY_ || true); do
    [ -n "${!v+x}" ] && printf 'export %s=%q\n' "$v" "${!v}"
  done
  printf 'cd %q\n' "$PWD"
  printf 'exec'; printf ' %q' "$@"; echo
} >"$out/run.sh"
# The current directory is also shared on its own (read-only) and mounted at the same path:
# the guest puts a fresh tmpfs on /tmp, which would hide a checkout under /tmp (CI clones).
echo "$PWD" >"$out/cwd"

# -smp 2 with ACPI in the kernel: both CPUs show up. -no-reboot: the guest's power-off (or
# panic, with panic=-1) ends qemu. qemu exits 0 whatever the guest did: the verdict comes
# back through $out/exit-status.
start=$SECONDS
timeout --foreground -k 10 "$timeout" qemu-system-x86_64 \
  -machine pc,accel=tcg -cpu max -smp 2 -m 2048 \
  -display none -no-reboot -monitor none -serial "file:$out/console.log" \
  -kernel "$kernel" \
  -append "console=ttyS0 root=/dev/root rootfstype=9p rootflags=trans=virtio,version=9p2000.L,msize=512000,cache=loose ro init=$here/guest-init.sh panic=-1 quiet" \
  -fsdev local,id=fyroot,path=/,security_model=none,readonly=on,multidevs=remap \
  -device virtio-9p-pci,fsdev=fyroot,mount_tag=/dev/root \
  -fsdev "local,id=fycwd,path=$PWD,security_model=none,readonly=on,multidevs=remap" \
  -device virtio-9p-pci,fsdev=fycwd,mount_tag=fycwd \
  -fsdev "local,id=fyout,path=$out,security_model=none" \
  -device virtio-9p-pci,fsdev=fyout,mount_tag=fyout \
  </dev/null || { rc=$?; echo "run-guest: qemu failed or timed out after $((SECONDS - start)) s (exit $rc); console:" >&2; tail -n 40 "$out/console.log" >&2; exit 1; }
if [ ! -s "$out/exit-status" ]; then
  echo "run-guest: the guest wrote no exit status (it crashed or never ran the command); console:" >&2
  tail -n 40 "$out/console.log" >&2
  exit 1
fi
status=$(cat "$out/exit-status")
echo "run-guest: guest finished in $((SECONDS - start)) s, exit status $status" >&2
exit "$status"
