#!/usr/bin/env bash
# Both nodes of the netns lab on the Kubernetes source (issue 13; docs/lab.md, "On the
# Kubernetes source"): the lab's four pods are Pod objects bound to two Node objects of the
# lab cluster (their IPs set through the status subresource), both ferryd follow the API
# server, and tests/e2e/datapath_e2e.sh runs on that discovery instead of the workloads file.
# Runs against the lab cluster that is already up (scripts/k8s-lab/cluster.sh up; make
# k8s-lab runs it as one of K8S_LAB_TESTS). Everything it makes is the lab's (fy-*), removed
# by `ferry-lab down`, also on failure.
#
# The netns lab is one per machine: this holds /tmp/ferry-lab.lock (FERRY_LAB_LOCK) for the
# whole run, unless a process it descends from holds it already (`flock /tmp/ferry-lab.lock
# make k8s-lab`), as tests/soak/run_soak.py does.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
cluster=$repo/scripts/k8s-lab/cluster.sh
readonly ME=lab_k8s_e2e LOCK=${FERRY_LAB_LOCK:-/tmp/ferry-lab.lock}

[ "$(id -u)" -eq 0 ] || { echo "$ME: FAIL: must run as root (the lab, the cluster)" >&2; exit 1; }
"$cluster" status >/dev/null || { echo "$ME: FAIL: the lab cluster is not up (scripts/k8s-lab/cluster.sh up)" >&2; exit 1; }

# held_by_ancestor FILE: a process this one descends from holds an flock on FILE.
held_by_ancestor() {
  local ino pid=$$ ancestors=" " holder
  ino=$(stat -c %i "$1")
  while [ "$pid" -gt 1 ]; do
    ancestors+="$pid "
    pid=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | awk '{print $2}')   # after "(comm)": state, ppid
    [ -n "$pid" ] || break
  done
  # /proc/locks: "1: FLOCK ADVISORY WRITE <pid> <maj>:<min>:<inode> 0 EOF"
  while read -r holder; do
    [[ $ancestors == *" $holder "* ]] && return 0
  done < <(awk -v ino="$ino" '$2 == "FLOCK" { n = split($6, f, ":"); if (f[n] == ino) print $5 }' /proc/locks)
  return 1
}
exec 7>>"$LOCK"
if ! flock -n 7; then
  if held_by_ancestor "$LOCK"; then
    exec 7>&-
  else
    echo "$ME: waiting for $LOCK (another lab run)"
    flock 7
  fi
fi

export FERRY_LAB_SOURCE=kubernetes
FERRY_LAB_KUBECONFIG=$("$cluster" kubeconfig)
export FERRY_LAB_KUBECONFIG
export FERRY_BUILD_DIR=${FERRY_BUILD_DIR:-$repo/build/default}
# The suite's own processes must not hold the lock (fd 7 is this shell's).
bash "$repo/tests/e2e/datapath_e2e.sh" 7>&-
