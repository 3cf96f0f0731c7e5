#!/bin/bash
# PID 1 of the kernel lab's qemu guest (scripts/kernel-lab/run-guest.sh boots it with
# init=<this file>). The root filesystem is the host's, read-only over virtio-9p; the
# "fyout" share is the host's results directory, writable. Runs fyout/run.sh, writes its
# output to fyout/output.log (and the console) and its exit status to fyout/exit-status,
# then powers the guest off (qemu runs with -no-reboot, so that ends qemu).
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/tmp TERM=dumb LANG=C.UTF-8

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mountpoint -q /dev || mount -t devtmpfs devtmpfs /dev   # CONFIG_DEVTMPFS_MOUNT may have done it
mkdir -p /dev/shm /dev/pts
# What udev or systemd would create: bash's process substitution needs /dev/fd.
ln -sf /proc/self/fd /dev/fd
ln -sf /proc/self/fd/0 /dev/stdin
ln -sf /proc/self/fd/1 /dev/stdout
ln -sf /proc/self/fd/2 /dev/stderr
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
mount -t tmpfs -o mode=1777 tmpfs /tmp
mount -t tmpfs -o mode=755 tmpfs /run
mount -t bpf bpf /sys/fs/bpf
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 fyout /mnt
# The host's current directory at its own path (run-guest.sh shares it as "fycwd"): under
# /tmp it would be hidden by the tmpfs above.
if [ -s /mnt/cwd ]; then
  cwd=$(cat /mnt/cwd)
  mkdir -p "$cwd" 2>/dev/null || true
  mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000,cache=loose,ro fycwd "$cwd"
fi
# A unique, writable /etc/machine-id is not needed; hostname is, for logs.
hostname fy-kernel-lab
ip link set lo up

status=1
if [ -f /mnt/run.sh ]; then
  bash /mnt/run.sh 2>&1 | tee /mnt/output.log
  status=${PIPESTATUS[0]}
else
  echo "guest-init: /mnt/run.sh missing" | tee /mnt/output.log
fi
echo "$status" >/mnt/exit-status
sync
umount /mnt
echo o >/proc/sysrq-trigger
sleep 10
