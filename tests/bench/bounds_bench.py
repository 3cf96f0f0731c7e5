#!/usr/bin/env python3
"""What bounds ferry's latency and CPU-per-GB figures on this machine (issue 18).

`make bench` compares ferry with the TLS peers. This asks a different question: how much of
a proxied round trip, and of a proxied gigabyte, would be there whatever the proxy did?
Four configurations of the same two-node lab (scripts/ferry-lab, run_bench.py's pods and
addresses), each with every process pinned to one CPU and spread freely over all of them:

  direct   no proxy: the client pod connects to the server pod (plain routing)
  relay    a plaintext relay pair that does no TLS and no framing: HAProxy `mode tcp`,
           client side in fy-n1-proxy, server side in fy-n2-proxy (no splice: it copies
           through user space, as every TLS proxy must)
  haproxy  the HAProxy TLS 1.3 mTLS pair of `make bench`
  ferry    ferryd on both nodes, capturing the pod's own connection

"One CPU" pins this script to one CPU (the first it may run on: CPU 0) before it starts the
lab, so the servers, proxies and clients all inherit it: nothing waits for another CPU to
wake up, and a round trip takes exactly the CPU time of everything it passes through.
"Free" lets the scheduler place them on all the CPUs the script may use, as `make bench`
does.

Per configuration, placement and round: 100-byte request/response over one connection
(rate, p50, p99, and the proxies' CPU time per round trip sampled in the middle of the run)
and one iperf3 stream (Gbit/s, the proxies' CPU seconds per GB). Once per round: the AES-GCM
floor (run_bench.aes_gcm_floor). Writes bounds.md and bounds.json to --out (docs/benchmarks
by default). Exit 0 when every configuration carried traffic. It judges nothing; what the
numbers show is written up in docs/benchmarks/profile.md.

Takes /tmp/ferry-lab.lock like run_bench.py. Run as root on a quiet machine.
"""
import argparse
import atexit
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import run_bench as rb

CONFIGS = ["direct", "relay", "haproxy", "ferry"]
LABELS = {"direct": "direct (no proxy)", "relay": "plaintext relay pair (HAProxy `mode tcp`, no TLS)",
          "haproxy": "HAProxy TLS pair", "ferry": "ferry (HBONE, mTLS)"}
PLACEMENTS = {"one": "one CPU", "free": "free"}
RR_SECONDS = 3.5
IPERF_SECONDS = 4


def measure(args, target, pids):
    """One round of one configuration: rr (with the proxies' CPU per round trip) and one
    iperf3 stream (with their CPU per GB)."""
    out = {}
    argv = rb.tool_argv(args, "rr", target, rb.ECHO_PORT, "--size", str(rb.MSG), "--seconds",
                        str(RR_SECONDS), "--warmup", "0.5")
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)  # past the warm-up: sample the steady state only
    k0, w0 = rb.proc_cpu_ticks(pids), time.time()
    time.sleep(2.0)
    k1, w1 = rb.proc_cpu_ticks(pids), time.time()
    so, se = p.communicate(timeout=60)
    j = rb.tool_result("rr", target, rb.ECHO_PORT, p.returncode, so, se)
    out.update(rr_rate=j["rate"], rr_p50_us=j["p50_us"], rr_p99_us=j["p99_us"])
    if pids:
        out["proxy_us_per_rt"] = (k1 - k0) / rb.CLK_TCK / (j["rate"] * (w1 - w0)) * 1e6
    k0 = rb.proc_cpu_ticks(pids)
    gbps, nbytes = rb.iperf(target, rb.IPERF_PORT, 1, IPERF_SECONDS)
    k1 = rb.proc_cpu_ticks(pids)
    out["tput1_gbps"] = gbps
    if pids:
        out["cpu_s_per_gb"] = (k1 - k0) / rb.CLK_TCK / (nbytes / 1e9)
    return out


def run_placement(args, placement, pki, results):
    free = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(free)} if placement == "one" else free)  # what starts now inherits it
    try:
        want = args.only
        if any(c in want for c in ("direct", "relay", "haproxy")):
            rb.lab("up", "--no-ferryd")
            rb.tune_netns()
            rb.start_servers(args)
            for name in ("direct", "relay", "haproxy"):
                if name not in want:
                    continue
                procs = []
                try:
                    if name != "direct":
                        procs = rb.start_pair(name, pki, args)
                    record(args, name, placement, rb.SERVER_IP if name == "direct" else rb.PROXY1_IP,
                           [p.pid for p in procs], results)
                finally:
                    for p in procs:
                        rb.PROCS.stop(p)
            rb.PROCS.stop_all()
        if "ferry" in want:
            rb.lab("up")
            rb.tune_netns()
            rb.start_servers(args)
            record(args, "ferry", placement, rb.SERVER_IP, rb.ferryd_pids(), results)
            rb.PROCS.stop_all()
    finally:
        os.sched_setaffinity(0, free)


def record(args, name, placement, target, pids, results):
    r = results.setdefault(f"{name}/{placement}", {"runs": {}, "errors": []})
    try:
        m = measure(args, target, pids)
        for k, v in m.items():
            r["runs"].setdefault(k, []).append(v)
        rb.log(f"  {name}, {PLACEMENTS[placement]}: " + ", ".join(f"{k}={v:.4g}" for k, v in m.items()))
    except Exception as e:  # noqa: BLE001 - one failed configuration must not hide the others
        r["errors"].append(str(e))
        rb.log(f"  {name}, {PLACEMENTS[placement]}: FAILED: {e}")


def write_report(args, results, floors, seconds):
    floor = statistics.median(floors) if floors else None
    for r in results.values():
        r["summary"] = rb.summarize(r["runs"])
    lines = []
    w = lines.append
    w("# What bounds the latency and CPU-per-GB figures (issue 18)")
    w("")
    w(f"Generated by `make bench-bounds` (`tests/bench/bounds_bench.py`, {args.repeats} "
      f"round{'s' if args.repeats > 1 else ''}, "
      f"{seconds:.0f} s, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}); do not edit by hand. "
      "What it shows is written up in [profile.md](profile.md); raw numbers in [bounds.json](bounds.json).")
    w("")
    w("Medians over the rounds, min–max in brackets. *One CPU*: every process (client, server, "
      "proxies, the lab's ferryd) pinned to CPU 0, so a round trip takes exactly the CPU time of "
      "what it passes through. *Free*: the scheduler places them on all CPUs, as in `make bench`. "
      "*Added p50* is against `direct` with the same placement. *Proxies' CPU* is utime+stime of both "
      "proxies (which includes the kernel's TCP and softirq work done in their context).")
    w("")
    for pl, title in PLACEMENTS.items():
        w(f"## {title[0].upper() + title[1:]}")
        w("")
        w("| configuration | rr/s | p50 µs | added p50 µs | p99 µs | proxies' CPU µs per round trip "
          "| 1 stream Gbit/s | proxies' CPU s/GB | × AES-GCM floor |")
        w("|---|---|---|---|---|---|---|---|---|")
        base = rb.med(results, f"direct/{pl}", "rr_p50_us")
        for name in CONFIGS:
            key = f"{name}/{pl}"
            if key not in results:
                continue
            p50 = rb.med(results, key, "rr_p50_us")
            added = f"{p50 - base:.0f}" if (p50 is not None and base is not None and name != "direct") else "–"
            gb = rb.med(results, key, "cpu_s_per_gb")
            xf = f"{gb / floor:.1f}×" if (gb and floor) else "–"
            w(f"| {LABELS[name]} | {rb.spread(results, key, 'rr_rate', '{:.0f}')} | "
              f"{rb.spread(results, key, 'rr_p50_us', '{:.0f}')} | {added} | {rb.spread(results, key, 'rr_p99_us', '{:.0f}')} | "
              f"{rb.spread(results, key, 'proxy_us_per_rt', '{:.0f}')} | {rb.spread(results, key, 'tput1_gbps', '{:.2f}')} | "
              f"{rb.spread(results, key, 'cpu_s_per_gb', '{:.2f}')} | {xf} |")
        w("")
    w(f"AES-128-GCM floor (seal + open of the payload on one core, `openssl speed`, once per round): "
      f"{floor:.3f} s/GB" if floor else "AES-128-GCM floor: not measured")
    w("")
    rb.write_failures(w, {k: v["errors"] for k, v in results.items() if v["errors"]}, str)
    with open(os.path.join(args.out, "bounds.md"), "w") as f:
        f.write("\n".join(lines))
    with open(os.path.join(args.out, "bounds.json"), "w") as f:
        json.dump({"floor_s_per_gb": floors, "seconds": round(seconds, 1), "configurations": results},
                  f, indent=2, sort_keys=True)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(rb.ROOT, "docs", "benchmarks"))
    ap.add_argument("--build", default=os.environ.get("FERRY_BUILD_DIR", "build/default"))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--only", default=",".join(CONFIGS), help="comma-separated configurations")
    a = ap.parse_args()
    a.only = [c for c in a.only.split(",") if c]
    unknown = [c for c in a.only if c not in CONFIGS]
    if unknown:
        ap.error(f"unknown configuration(s) {unknown}; known: {CONFIGS}")
    if a.repeats < 1:
        ap.error("--repeats must be at least 1")
    a.build = a.build if os.path.isabs(a.build) else os.path.join(rb.ROOT, a.build)
    a.tool = os.path.join(a.build, "tests", "bench", "ferry-bench-tool")
    a.idle = 0  # run_bench.start_pair sizes HAProxy's maxconn from it
    if os.geteuid() != 0:
        sys.exit("bench-bounds: must run as root (network namespaces, BPF)")
    for c in ("ip", "iperf3", "haproxy", "openssl", "ss", "curl"):
        if not shutil.which(c):
            sys.exit(f"bench-bounds: '{c}' missing (make bootstrap)")
    if not os.access(a.tool, os.X_OK):
        sys.exit(f"bench-bounds: {a.tool} missing: make build")
    os.environ["FERRY_BUILD_DIR"] = a.build
    os.environ.setdefault("FERRY_LAB_LOG_LEVEL", "warn")

    lock = rb.take_lock()
    rb.TMP = tempfile.mkdtemp(prefix="fy-bounds.")
    atexit.register(rb.cleanup)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, rb.on_signal)
    t0 = time.time()
    os.makedirs(a.out, exist_ok=True)
    pki = rb.make_certs() if "haproxy" in a.only else None
    results, floors = {}, []
    for rnd in range(a.repeats):
        floors.append(rb.aes_gcm_floor(2)["s_per_gb"])
        # The placements take turns, so that a slow phase of the host falls on both.
        order = ("one", "free") if rnd % 2 == 0 else ("free", "one")
        for pl in order:
            rb.log(f"round {rnd + 1}/{a.repeats}, {PLACEMENTS[pl]}")
            run_placement(a, pl, pki, results)
    seconds = time.time() - t0
    write_report(a, results, floors, seconds)
    rb.log(f"done in {seconds:.0f} s; report in {os.path.join(a.out, 'bounds.md')}")
    if lock is not None:
        os.close(lock)
    failed = [k for k, v in results.items() if v["errors"]]
    missing = [f"{c}/{p}" for c in a.only for p in PLACEMENTS if f"{c}/{p}" not in results]
    if failed or missing:
        rb.log(f"FAILED: {', '.join(failed + missing)}")
        sys.exit(1)


if __name__ == "__main__":
    main()
