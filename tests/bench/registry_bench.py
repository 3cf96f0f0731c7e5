#!/usr/bin/env python3
"""Registry scale (issue 13): ferryd with a workloads file of a big cluster.

Generates a workloads file of --entries workloads spread over --nodes nodes and
--namespaces namespaces (one service account per namespace, one IPv4 each, all HBONE),
starts ferryd on it (no datapath, listeners on free loopback ports) and reports:

  ready_s        from exec to the first 200 on /healthz/ready (the file read, parsed and
                 loaded: ferryd answers readiness only once start() finished); ready_cpu_s
                 the CPU time ferryd used until then (not inflated by a busy machine)
  rss_mb         VmRSS once ready; hwm_mb the peak (VmHWM) up to then
  base_rss_mb    the same ferryd with a one-entry file: the part that is not the registry
  per_workload   (rss - base_rss) / entries, in bytes
  change_s       one entry edited (rename into place) until ferryd logs the reload
                 (includes up to one workloads_poll, 100 ms here); change_cpu_s its CPU
  rss_after_change_mb

Each --ferryd binary (label=path) is measured with each --format it supports (the one
before issue 13 reads YAML only). Writes results.json and prints a Markdown table for
docs/benchmarks/registry.md. Numbers only; nothing is judged. Timing on a shared 2-core
machine is noisy: run it on a quiet one for figures that matter.

  tests/bench/registry_bench.py --ferryd after=build/default/proxy/main/ferryd \\
      --ferryctl build/default/proxy/ferryctl/ferryctl --format yaml --format json
"""
import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time

from benchlib import Ferryd, cpu_seconds, make_cert_dir, status_kb


def generate(path, entries, nodes, namespaces, fmt, changed=None):
    """One line per workload, in the flow style of config/workloads.yaml (or JSON)."""
    with open(path + ".tmp", "w") as f:
        f.write("{\"workloads\": [\n" if fmt == "json" else "workloads:\n")
        for i in range(entries):
            ns = i % namespaces
            ip = "10.%d.%d.%d" % (64 + (i >> 16 & 255), i >> 8 & 255, i & 255)
            if changed == i:
                ip = "10.250.0.1"
            name = "web-%06d" % i
            if fmt == "json":
                f.write('  {"name": "%s", "namespace": "ns-%03d", "service_account": "sa-%03d", '
                        '"node": "node-%04d", "ips": ["%s"], "hbone": true}%s\n'
                        % (name, ns, ns, i % nodes, ip, "," if i + 1 < entries else ""))
            else:
                f.write("  - {name: %s, namespace: ns-%03d, service_account: sa-%03d, node: node-%04d, "
                        "ips: [%s], hbone: true}\n" % (name, ns, ns, i % nodes, ip))
        if fmt == "json":
            f.write("]}\n")
    os.rename(path + ".tmp", path)


def run_once(ferryd, workdir, workloads, change):
    ferry = Ferryd(ferryd, workdir, "node-0001", "workloads_file: %s\nworkloads_poll: 100ms\n" % workloads)
    with ferry:
        ready = ferry.wait_ready()
        pid = ferry.pid
        result = {"ready_s": round(ready, 2), "ready_cpu_s": round(cpu_seconds(pid), 2),
                  "rss_mb": round(status_kb(pid, "VmRSS") / 1024, 1),
                  "hwm_mb": round(status_kb(pid, "VmHWM") / 1024, 1)}
        if change is not None:
            before = ferry.log().count("workloads: loaded")
            cpu0 = cpu_seconds(pid)
            t0 = time.monotonic()
            change()
            while time.monotonic() - t0 < 120:
                if ferry.log().count("workloads: loaded") > before:
                    break
                time.sleep(0.01)
            result["change_s"] = round(time.monotonic() - t0, 2)
            result["change_cpu_s"] = round(cpu_seconds(pid) - cpu0, 2)
            time.sleep(0.5)
            result["rss_after_change_mb"] = round(status_kb(pid, "VmRSS") / 1024, 1)
            result["hwm_after_change_mb"] = round(status_kb(pid, "VmHWM") / 1024, 1)
            loaded = re.findall(r"workloads: loaded .*", ferry.log())
            result["reload_log"] = loaded[-1] if loaded else ""
        return result


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ferryd", action="append", required=True, help="label=path, repeatable")
    ap.add_argument("--ferryctl", required=True)
    ap.add_argument("--format", action="append", choices=["yaml", "json"])
    ap.add_argument("--entries", type=int, default=150001)
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--namespaces", type=int, default=500)
    ap.add_argument("--out", default="build/default/registry-bench")
    args = ap.parse_args()
    formats = args.format or ["yaml"]
    os.makedirs(args.out, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="fy-registry-bench-")
    results = []
    try:
        make_cert_dir(args.ferryctl, workdir)
        for spec in args.ferryd:
            label, _, path = spec.partition("=")
            for fmt in formats:
                if label == "before" and fmt == "json":
                    continue  # JSON workloads files came with issue 13
                workloads = os.path.join(workdir, "workloads." + fmt)
                generate(workloads, 1, 1, 1, fmt)
                base = run_once(path, workdir, workloads, None)
                generate(workloads, args.entries, args.nodes, args.namespaces, fmt)
                size_mb = os.path.getsize(workloads) / 1e6
                big = run_once(path, workdir, workloads,
                               lambda: generate(workloads, args.entries, args.nodes, args.namespaces, fmt,
                                                changed=args.entries // 2))
                row = {"ferryd": label, "format": fmt, "entries": args.entries, "file_mb": round(size_mb, 1),
                       "base_rss_mb": base["rss_mb"], **big}
                row["per_workload_bytes"] = int((big["rss_mb"] - base["rss_mb"]) * 1024 * 1024 / args.entries)
                results.append(row)
                print(json.dumps(row), flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=2)
    print("\n| ferryd | format | file | ready (CPU) | RSS ready | peak | base RSS | per workload "
          "| one change (CPU) | RSS after |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print("| %s | %s | %.1f MB | %.2f s (%.2f s) | %.0f MB | %.0f MB | %.0f MB | %d B | %.2f s (%.2f s) | %.0f MB |" % (
            r["ferryd"], r["format"], r["file_mb"], r["ready_s"], r["ready_cpu_s"], r["rss_mb"], r["hwm_mb"],
            r["base_rss_mb"], r["per_workload_bytes"], r["change_s"], r["change_cpu_s"], r["rss_after_change_mb"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
