#!/usr/bin/env python3
"""What ferry-cni adds to a pod's ADD (issue 14; docs/benchmarks/cni.md).

Brings up the netns lab on the reference ptp plugin (FERRY_LAB_CNI=ptp scripts/ferry-lab up,
ferryd on both nodes with the enrolment endpoint), lists one more workload of node 1 in the
lab's workloads file (n1-p3, 10.77.1.13), and then, R rounds of N sandboxes each, does what a
runtime does for a new pod of that name:

  1. a new netns fy-n1-p3, ptp's ADD (static IPAM: 10.77.1.13)            timed: ptp
  2. ferry-cni's ADD with ptp's result as prevResult                        timed: ferry-cni
     (process start to exit: connect, ferryd's decision, the programs attached to the new
     veth, the answer)
  3. ferry-cni's and ptp's DEL, the netns deleted                           timed: DEL

The plugins run from a process inside node 1's netns (nsenter: the node's mount namespace,
as a runtime's; no `ip netns exec` per call). Prints
per round p50 / p90 / p99 / max of each, over all rounds the same, and ferryd's own
ferry_cni_add_seconds (connection to answer); writes them as JSON to --out. Numbers only:
nothing is judged. Root only. Everything it makes is the lab's (`ferry-lab down` at the end,
also on failure) and the netns fy-n1-p3.

  tests/bench/cni_add_bench.py --build build/default [--rounds 3] [--sandboxes 100]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAB = os.path.join(ROOT, "scripts", "ferry-lab")
STATE = "/run/ferry-lab"
POD, IP = "n1-p3", "10.77.1.13"
NETNS = "fy-n1-p3"


def pct(values, p):
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100.0 * (len(s) - 1))))]


def summary(values):
    return {"n": len(values), "p50_ms": round(pct(values, 50), 2), "p90_ms": round(pct(values, 90), 2),
            "p99_ms": round(pct(values, 99), 2), "max_ms": round(max(values), 2),
            "mean_ms": round(statistics.mean(values), 2)}


def run_plugin(exe, command, conf, container, netns, cni_path, args):
    env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"), "CNI_COMMAND": command,
           "CNI_CONTAINERID": container, "CNI_NETNS": netns, "CNI_IFNAME": "eth0", "CNI_ARGS": args,
           "CNI_PATH": cni_path}
    t0 = time.monotonic()
    r = subprocess.run([exe], input=json.dumps(conf).encode(), env=env, capture_output=True, timeout=30)
    took = (time.monotonic() - t0) * 1000.0
    if r.returncode != 0:
        raise RuntimeError("%s %s failed: %s %s" % (os.path.basename(exe), command, r.stdout.decode(), r.stderr.decode()))
    return took, (json.loads(r.stdout) if r.stdout.strip() else None)


def inner(opts):
    """Runs in node 1's netns: the sandboxes."""
    base = json.load(open(os.path.join(STATE, "cni/n1/conflist.json")))
    ptp = dict(base["plugins"][0])
    gateway = ptp["ipam"]["ranges"][0][0]["gateway"]
    ptp["ipam"] = {"type": "static", "addresses": [{"address": IP + "/29", "gateway": gateway}],
                   "routes": [{"dst": "0.0.0.0/0"}]}
    common = {"cniVersion": base["cniVersion"], "name": base["name"]}
    ptp_conf = dict(ptp, **common)
    ferry_conf = dict({"type": "ferry-cni", "socket": STATE + "/n1/cni.sock", "failurePolicy": "closed",
                       "timeoutMs": 5000}, **common)
    cni_path = opts.cni_path + ":" + os.path.join(opts.build, "proxy/main")
    ptp_exe = os.path.join(opts.cni_path, "ptp")
    ferry_exe = os.path.join(opts.build, "proxy/main/ferry-cni")
    args = "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=" + POD
    rounds = []
    for r in range(opts.rounds):
        ptp_ms, ferry_ms, del_ms = [], [], []
        for i in range(opts.sandboxes):
            container = "fy-bench-%d-%d" % (r, i)
            netns = "/run/netns/" + NETNS
            subprocess.run(["ip", "netns", "add", NETNS], check=True)
            try:
                t, result = run_plugin(ptp_exe, "ADD", ptp_conf, container, netns, cni_path, args)
                ptp_ms.append(t)
                t, _ = run_plugin(ferry_exe, "ADD", dict(ferry_conf, prevResult=result), container, netns, cni_path, args)
                ferry_ms.append(t)
                t0 = time.monotonic()
                run_plugin(ferry_exe, "DEL", dict(ferry_conf, prevResult=result), container, netns, cni_path, args)
                run_plugin(ptp_exe, "DEL", dict(ptp_conf, prevResult=result), container, netns, cni_path, args)
                del_ms.append((time.monotonic() - t0) * 1000.0)
            finally:
                subprocess.run(["ip", "netns", "del", NETNS], check=False)
        rounds.append({"ptp_add": summary(ptp_ms), "ferry_cni_add": summary(ferry_ms), "del": summary(del_ms),
                       "raw_ferry_cni_add_ms": [round(x, 3) for x in ferry_ms]})
        print("round %d: ferry-cni ADD %s | ptp ADD %s" % (r + 1, rounds[-1]["ferry_cni_add"], rounds[-1]["ptp_add"]),
              flush=True)
    json.dump(rounds, sys.stdout)


def metric_lines(name):
    out = subprocess.run([LAB, "exec", "n1/proxy", "--", "curl", "-sf", "http://127.0.0.1:15020/metrics"],
                         capture_output=True, text=True, check=True).stdout
    return [l for l in out.splitlines() if l.startswith(name)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build/default"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sandboxes", type=int, default=100)
    ap.add_argument("--cni-path", default="/usr/lib/cni")
    ap.add_argument("--out", default=None, help="JSON results (default BUILD/bench-cni/results.json)")
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    opts = ap.parse_args()
    opts.build = os.path.abspath(opts.build)
    if opts.inner:
        inner(opts)
        return
    if os.geteuid() != 0:
        sys.exit("cni_add_bench: needs root (network namespaces, BPF)")
    out = opts.out or os.path.join(opts.build, "bench-cni", "results.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    env = dict(os.environ, FERRY_LAB_CNI="ptp", FERRY_BUILD_DIR=opts.build)
    subprocess.run([LAB, "up"], env=env, check=True, stdout=subprocess.DEVNULL)
    try:
        with open(os.path.join(STATE, "workloads.yaml"), "a") as f:
            f.write("  - {name: %s, namespace: default, service_account: %s, node: n1, ips: [%s], hbone: true}\n"
                    % (POD, POD, IP))
        deadline = time.monotonic() + 10
        while not any(l.endswith(" 3") for l in metric_lines('ferry_workloads{scope="local"}')):
            if time.monotonic() > deadline:
                sys.exit("cni_add_bench: n1's ferryd did not load %s" % POD)
            time.sleep(0.1)
        # nsenter, not `ip netns exec`: only the network namespace changes, so the sandboxes'
        # netns files are mounted where ferryd sees them (a runtime and ferryd share the
        # node's mount namespace; `ip netns exec` would give the plugins a private one).
        r = subprocess.run(["nsenter", "--net=/run/netns/fy-n1", sys.executable, os.path.abspath(__file__), "--inner",
                            "--build", opts.build, "--rounds", str(opts.rounds), "--sandboxes", str(opts.sandboxes),
                            "--cni-path", opts.cni_path], stdout=subprocess.PIPE, text=True, check=True)
        rounds = json.loads(r.stdout.strip().splitlines()[-1])
        hist = metric_lines("ferry_cni_add_seconds")
    finally:
        subprocess.run([LAB, "down"], check=False, stdout=subprocess.DEVNULL)
    allv = [x for rd in rounds for x in rd["raw_ferry_cni_add_ms"]]
    result = {"rounds": rounds, "ferry_cni_add_all": summary(allv), "ferryd_histogram": hist,
              "kernel": os.uname().release}
    json.dump(result, open(out, "w"), indent=1)
    print("\n| round | ferry-cni ADD p50 | p90 | p99 | max | ptp ADD p50 | p99 |")
    print("|---|---|---|---|---|---|---|")
    for i, rd in enumerate(rounds):
        f, p = rd["ferry_cni_add"], rd["ptp_add"]
        print("| %d | %.2f ms | %.2f | %.2f | %.2f | %.2f ms | %.2f |" % (i + 1, f["p50_ms"], f["p90_ms"], f["p99_ms"],
                                                                     f["max_ms"], p["p50_ms"], p["p99_ms"]))
    a = result["ferry_cni_add_all"]
    print("| all %d | %.2f ms | %.2f | %.2f | %.2f | | |" % (a["n"], a["p50_ms"], a["p90_ms"], a["p99_ms"], a["max_ms"]))
    print("\nferryd's ferry_cni_add_seconds (connection to answer):")
    for l in hist:
        print("  " + l)
    print("\nresults: " + out)


if __name__ == "__main__":
    main()
