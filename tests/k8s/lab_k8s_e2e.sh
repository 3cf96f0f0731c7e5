#!/usr/bin/env bash
# Both nodes of the netns lab on the Kubernetes source (issue 13; docs/lab.md, "On the
# Kubernetes source"): the lab's four pods are Pod objects bound to two Node objects of the
# lab cluster (their IPs set through the status subresource), both ferryd follow the API
# server, and the lab's suites tests/e2e/datapath_e2e.sh, policy_e2e.sh and telemetry_e2e.sh
# run on that discovery instead of the workloads file, one after the other.
# Runs against the lab cluster that is already up (scripts/k8s-lab/cluster.sh up; make
# k8s-lab runs it as one of K8S_LAB_TESTS). Everything it makes is the lab's (fy-*), removed
# by `ferry-lab down`, also on failure.
#
# The netns lab is one per machine: this holds the lab lock (/tmp/ferry-lab.lock,
# FERRY_LAB_LOCK; e2e_lock in tests/e2e/lib.sh) for the whole run, unless a process it
# descends from holds it already (`flock /tmp/ferry-lab.lock make k8s-lab`); the suites it
# runs see that it holds it.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
cluster=$repo/scripts/k8s-lab/cluster.sh
# shellcheck source=tests/e2e/lib.sh
source "$repo/tests/e2e/lib.sh"
readonly ME=lab_k8s_e2e

[ "$(id -u)" -eq 0 ] || { echo "$ME: FAIL: must run as root (the lab, the cluster)" >&2; exit 1; }
"$cluster" status >/dev/null || { echo "$ME: FAIL: the lab cluster is not up (scripts/k8s-lab/cluster.sh up)" >&2; exit 1; }
e2e_lock 86400   # as long as the other lab run takes

export FERRY_LAB_SOURCE=kubernetes
FERRY_LAB_KUBECONFIG=$("$cluster" kubeconfig)
export FERRY_LAB_KUBECONFIG
export FERRY_BUILD_DIR=${FERRY_BUILD_DIR:-$repo/build/default}
rc=0
# The suites' own processes must not hold the lock (fd 8 is this shell's).
for suite in datapath_e2e policy_e2e telemetry_e2e; do
  bash "$repo/tests/e2e/$suite.sh" 8<&- || rc=1
done
exit "$rc"
