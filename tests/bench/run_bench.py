#!/usr/bin/env python3
"""ferry's benchmark suite (issue 6): ferry against the peers, in one run, in the lab.

Configurations, taking turns in rounds in the same invocation, all in the two-node lab of
scripts/ferry-lab (client pod fy-n1-p1 10.77.1.11, server pod fy-n2-p1 10.77.2.11):

  plain        no proxy: plain routing between the pods (the lab's physical limit)
  dp-redirect  datapath alone: pod-bound packets from the wire delivered by bpf_redirect
  dp-peer      datapath alone: ... by bpf_redirect_peer (tests/bench/fy_deliver.bpf.c)
  stunnel      stunnel4 pair: client side in fy-n1-proxy, server side in fy-n2-proxy
  haproxy      HAProxy pair, same shape
  ferry        ferryd on both nodes, the injection mode the kernel probe selects, the
               default number of workers (one per core)
  ferry-1w     the same with one worker per ferryd (`workers: 1`): the scaling row
  ferry-none   ferryd with datapath.injection: none

The peers are TLS 1.3 only, ECDSA P-256 certificates, mutual authentication, the same
cipher suites as ferry; the client pod connects to them explicitly (10.77.1.2), nothing
is captured. ferry's configurations capture the pod's own connection to 10.77.2.11.

Metrics (each repeated, median and min..max): iperf3 1 and 4 streams; 100-byte
request/response over one connection (rate, p50/p90/p99); new connections per second
(connect, 100-byte request, answer, close; 32 at a time); CPU seconds of every proxy
process per GB moved (utime+stime from /proc/<pid>/stat around the 1-stream iperf3);
RSS of the proxies per idle proxied connection; base RSS.

Measured in the same run, once per round, without the lab's traffic: the AES-GCM floor
(CPU seconds per GB that AES-128-GCM seal + open of the payload costs on one core, from
`openssl speed`), which the proxies' CPU s/GB is set against, and TLS handshakes per
core-second (tests/bench/handshake_bench.cc, whose last round also writes handshakes.md).

Writes results.json, README.md and PNG charts (gnuplot) to --out (docs/benchmarks by
default, a scratch directory with --quick). Exit 0 when every configuration carried
traffic and the floor and handshakes were measured, 1 otherwise. Benchmarks never judge
the numbers (the report's target tables say which are met; the exit status does not).

Takes /tmp/ferry-lab.lock (the lab is one per machine) unless an ancestor process
already holds it (`flock /tmp/ferry-lab.lock make bench`).
"""
import argparse
import atexit
import json
import os
import platform
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import lab_lock

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
HERE = os.path.join(ROOT, "tests", "bench")
LAB = os.path.join(ROOT, "scripts", "ferry-lab")
LAB_STATE = "/run/ferry-lab"

CLIENT = "fy-n1-p1"
SERVER = "fy-n2-p1"
SERVER_IP = "10.77.2.11"
PROXY1 = "fy-n1-proxy"      # the peers' client side: 10.77.1.2
PROXY2 = "fy-n2-proxy"      # the peers' server side: 10.77.2.2
PROXY1_IP = "10.77.1.2"
PROXY2_IP = "10.77.2.2"
IPERF_PORT = 5201
ECHO_PORT = 7000
# ferry's own cipher suites (proxy/identity/tls_context.cc), given to the peers too.
CIPHERSUITES = "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384"
MSG = 100                   # request/response size, bytes
CONCURRENCY = 32            # short connections in flight
CLK_TCK = os.sysconf("SC_CLK_TCK")

LABELS = {
    "plain": "plaintext (no proxy)",
    "dp-redirect": "datapath: bpf_redirect",
    "dp-peer": "datapath: bpf_redirect_peer",
    "stunnel": "stunnel4 pair",
    "haproxy": "HAProxy pair",
    "ferry": "ferry",
    "ferry-1w": "ferry (1 worker)",
    "ferry-none": "ferry (injection none)",
}
ORDER = ["plain", "dp-redirect", "dp-peer", "stunnel", "haproxy", "ferry", "ferry-1w", "ferry-none"]
PROXIES = ["ferry", "ferry-1w", "ferry-none", "stunnel", "haproxy"]
FERRYS = ["ferry", "ferry-1w", "ferry-none"]
# ferryd's configuration per ferry configuration: what run_bench changes in the lab's
# ferryd.yaml (scripts/ferry-lab writes `injection: auto` and no `workers`, i.e. one per core).
FERRY_CONFIG = {"ferry": {"injection": "auto", "workers": None},
                "ferry-1w": {"injection": "auto", "workers": 1},
                "ferry-none": {"injection": "none", "workers": None}}
# TLS's largest record payload: a bulk stream is sealed and opened in records of this size,
# so the floor is measured on buffers of it.
TLS_RECORD = 16384


def log(msg):
    print(f"bench: {msg}", flush=True)


# ---------------------------------------------------------------------------------------
# Processes and cleanup: everything we start is tracked by PID and stopped by PID.
# ---------------------------------------------------------------------------------------
class Procs:
    def __init__(self):
        self.items = []

    def start(self, argv, log_path, **kw):
        f = open(log_path, "ab")
        p = subprocess.Popen(argv, stdout=kw.pop("stdout", f), stderr=f,
                             stdin=kw.pop("stdin", subprocess.DEVNULL), start_new_session=True, **kw)
        self.items.append(p)
        return p

    def stop(self, p, timeout=5):
        if p.poll() is None:
            try:
                p.terminate()
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            except ProcessLookupError:
                pass
        if p in self.items:
            self.items.remove(p)

    def stop_all(self):
        for p in list(reversed(self.items)):
            self.stop(p)


PROCS = Procs()
TMP = None
LAB_USED = False


def cleanup():
    PROCS.stop_all()
    if LAB_USED:
        subprocess.run([LAB, "down"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if TMP and os.path.isdir(TMP):
        shutil.rmtree(TMP, ignore_errors=True)


def on_signal(sig, _frame):
    raise SystemExit(128 + sig)


def run(argv, check=True, timeout=120, **kw):
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=timeout, **kw)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({r.returncode}): {r.stderr.strip()[-800:]}")
    return r


def ns(netns, *argv):
    return ["ip", "netns", "exec", netns, *argv]


# ---------------------------------------------------------------------------------------
# The lab lock (lab_lock.py): taken here unless an ancestor (flock(1) around make) holds it.
# ---------------------------------------------------------------------------------------
def take_lock():
    return lab_lock.take(log)


# ---------------------------------------------------------------------------------------
# Measurements
# ---------------------------------------------------------------------------------------
def proc_cpu_ticks(pids):
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (all threads)
    return total


def proc_kib(path, key):
    """The `key:` line of a /proc file that counts in kB, 0 if absent."""
    with open(path) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def proc_private_kib(pid):
    """Private_Dirty: what the process itself wrote (heap, stacks), without shared library text."""
    return proc_kib(f"/proc/{pid}/smaps_rollup", "Private_Dirty")


def proc_rss_kib(pid):
    return proc_kib(f"/proc/{pid}/status", "VmRSS")


def iperf(target, port, streams, seconds):
    r = run(ns(CLIENT, "iperf3", "-c", target, "-p", str(port), "-t", str(seconds), "-P",
               str(streams), "-J"), check=False, timeout=seconds + 60)
    try:
        j = json.loads(r.stdout)
    except json.JSONDecodeError:
        raise RuntimeError(f"iperf3 to {target}:{port}: {r.stderr.strip() or r.stdout[-300:]}")
    if "error" in j:
        raise RuntimeError(f"iperf3 to {target}:{port}: {j['error']}")
    s = j["end"]["sum_received"]
    if s["bytes"] <= 0:
        raise RuntimeError(f"iperf3 to {target}:{port} moved no bytes")
    return s["bits_per_second"] / 1e9, s["bytes"]


def tool_argv(args, mode, target, port, *extra):
    return ns(CLIENT, args.tool, mode, "--connect", f"{target}:{port}", *extra)


def tool_result(mode, target, port, returncode, stdout, stderr):
    """ferry-bench-tool's JSON, or why there is none."""
    try:
        j = json.loads(stdout)
    except json.JSONDecodeError:
        raise RuntimeError(f"ferry-bench-tool {mode}: {stderr.strip() or stdout}")
    if returncode != 0:
        raise RuntimeError(f"ferry-bench-tool {mode} to {target}:{port} carried no traffic: {j}")
    return j


def tool(args, mode, target, port, *extra, timeout=120):
    r = run(tool_argv(args, mode, target, port, *extra), check=False, timeout=timeout)
    return tool_result(mode, target, port, r.returncode, r.stdout, r.stderr)


def idle_rss(args, target, pids, count):
    """RSS of each proxy before and with `count` idle proxied connections, in KiB."""
    before = [proc_rss_kib(p) for p in pids]
    p = PROCS.start(ns(CLIENT, args.tool, "idle", "--connect", f"{target}:{ECHO_PORT}",
                       "--count", str(count)), os.path.join(TMP, "idle.log"),
                    stdout=subprocess.PIPE, stdin=subprocess.PIPE)
    line = p.stdout.readline().decode()
    try:
        j = json.loads(line)
    except json.JSONDecodeError:
        PROCS.stop(p)
        raise RuntimeError(f"idle connections: no report ({line!r})")
    time.sleep(1.0)  # let the proxies settle (lazy frees, pool handshakes done)
    during = [proc_rss_kib(q) for q in pids]
    p.stdin.close()
    p.wait(60)
    PROCS.stop(p)
    if j["open"] <= 0:
        raise RuntimeError(f"idle connections: none opened ({j})")
    return j, before, during


def openssl_speed_rate(seconds, decrypt):
    """Bytes per CPU-second of AES-128-GCM over TLS_RECORD-byte buffers on one core, from
    `openssl speed -mr` ("+F:<n>:AES-128-GCM:<bytes/s>"; its divisor is the process's user
    CPU time, so a busy neighbour core does not count)."""
    argv = ["openssl", "speed", "-mr", "-seconds", str(seconds), "-bytes", str(TLS_RECORD),
            *(["-decrypt"] if decrypt else []), "-evp", "aes-128-gcm"]
    r = run(argv, check=False, timeout=seconds + 60)
    for line in r.stdout.splitlines():
        parts = line.split(":")
        if len(parts) >= 4 and parts[0] == "+F":
            return float(parts[-1])
    raise RuntimeError(f"{' '.join(argv)}: no '+F' rate ({(r.stderr or r.stdout).strip()[-300:]})")


def aes_gcm_floor(seconds):
    """The AES-GCM floor: CPU seconds per GB (1e9 bytes, as cpu_s_per_gb) that AES-128-GCM
    seal (node 1) plus open (node 2) of the payload costs on one core. `openssl speed -evp`
    times EVP_{En,De}cryptUpdate over the buffer (CTR and GHASH, the per-byte work); the
    per-record IV, tag and header are left out, which is why it is a floor."""
    seal = openssl_speed_rate(seconds, decrypt=False)
    try:
        open_rate, note = openssl_speed_rate(seconds, decrypt=True), None
    except RuntimeError as e:
        # An openssl whose `speed` cannot time decryption: GCM's open costs what its seal
        # does (the same CTR and GHASH over the same bytes).
        open_rate, note = seal, f"open taken as seal's cost: {e}"
    floor = {"seal_bytes_per_s": seal, "open_bytes_per_s": open_rate,
             "s_per_gb": 1e9 / seal + 1e9 / open_rate}
    if note:
        floor["note"] = note
    return floor


def handshake_rates(args, seconds, out_md=None):
    """tests/bench/handshake_bench.cc: full mTLS handshakes per CPU-second of one core with
    ferry's TLS contexts and identity checks, both ends and each side alone."""
    argv = [args.handshake_bench, "--seconds", str(seconds), *(["--out", out_md] if out_md else [])]
    r = run(argv, timeout=30 * seconds + 60)
    # "full mTLS handshakes (both ends, one core): 467 per CPU-second (...)"
    # "one side per core: client 934/s, server 974/s"
    got = {}
    for line in r.stdout.splitlines():
        if line.startswith("full mTLS handshakes"):
            got["both_ends_per_cpu_s"] = float(line.split(":", 1)[1].split()[0])
        elif line.startswith("one side per core:"):
            for part in line.split(":", 1)[1].split(","):
                side, rate = part.split()
                got[f"{side}_per_cpu_s"] = float(rate.rstrip("/s"))
    if set(got) != {"both_ends_per_cpu_s", "client_per_cpu_s", "server_per_cpu_s"}:
        raise RuntimeError(f"handshake_bench: unexpected output {r.stdout.strip()[-300:]!r}")
    return got


def measure(args, name, target, pids, res, rnd):
    """Round `rnd` of every metric of one configuration, added to `res`
    ({"runs": {metric: [values per round]}, "errors": [...]})."""
    runs = res["runs"]

    def add(k, v):
        runs.setdefault(k, []).append(v)

    dp_only = name.startswith("dp-")
    # Idle connections first, on fresh processes, in the first round only: after the bulk
    # runs, heap the proxies kept from them would absorb the new connections and hide their
    # cost.
    if pids and rnd == 0:
        try:
            j, before, during = idle_rss(args, target, pids, args.idle)
            res["idle"] = {"open": j["open"], "failed": j["failed"], "rss_before_kib": before,
                           "rss_during_kib": during}
            add("idle_bytes_per_conn", sum(d - b for b, d in zip(before, during)) * 1024 / j["open"])
            log(f"  {name}: {j['open']} idle connections: RSS {before} -> {during} KiB")
            if j["failed"]:
                # ferryd must carry every one (a lost connection there once meant its
                # transparent source ports ran out, docs/datapath.md); a peer's own limits
                # are only reported.
                msg = f"{name}: {j['failed']} of {args.idle} idle connections failed"
                if name.startswith("ferry"):
                    res["errors"].append(msg)
                log(f"  {msg}")
        except Exception as e:  # noqa: BLE001
            res["errors"].append(str(e))
            log(f"  {name}: idle connections FAILED: {e}")
    for rep in (rnd,):
        try:
            ticks0 = proc_cpu_ticks(pids) if pids else 0
            gbps, nbytes = iperf(target, IPERF_PORT, 1, args.iperf_seconds)
            ticks1 = proc_cpu_ticks(pids) if pids else 0
            add("tput1_gbps", gbps)
            if pids:
                add("cpu_s_per_gb", (ticks1 - ticks0) / CLK_TCK / (nbytes / 1e9))
            gbps4, _ = iperf(target, IPERF_PORT, 4, args.iperf_seconds)
            add("tput4_gbps", gbps4)
            j = tool(args, "rr", target, ECHO_PORT, "--size", str(MSG), "--seconds",
                     str(args.rr_seconds), "--warmup", str(args.warmup))
            for k in ("rate", "p50_us", "p90_us", "p99_us"):
                add("rr_" + k, j[k])
            if not dp_only:
                j = tool(args, "conns", target, ECHO_PORT, "--size", str(MSG), "--seconds",
                         str(args.conn_seconds), "--concurrency", str(CONCURRENCY))
                add("conn_rate", j["rate"])
                add("conn_errors", j["errors"])
            log(f"  {name} #{rep + 1}: " + ", ".join(f"{k}={v[-1]:.4g}" for k, v in runs.items()
                                                     if len(v) == rep + 1))  # this round's
        except Exception as e:  # noqa: BLE001 - one failed metric must not hide the others
            res["errors"].append(str(e))
            log(f"  {name} #{rep + 1}: FAILED: {e}")



# ---------------------------------------------------------------------------------------
# Configurations
# ---------------------------------------------------------------------------------------
def lab(*argv):
    global LAB_USED
    LAB_USED = True
    r = run([LAB, *argv], check=False, timeout=180)
    if r.returncode != 0:
        raise RuntimeError(f"ferry-lab {' '.join(argv)}: {r.stderr.strip()[-1500:]}")


def tune_netns():
    # Short connections by the thousand: a wide port range and TIME_WAIT reuse for the
    # namespaces that open connections (client pod, both proxies).
    for n in (CLIENT, PROXY1, PROXY2):
        run(ns(n, "sysctl", "-qw", "net.ipv4.ip_local_port_range=1024 65000", "net.ipv4.tcp_tw_reuse=1"))


def start_servers(args):
    PROCS.start(ns(SERVER, "iperf3", "-s", "-B", SERVER_IP, "-p", str(IPERF_PORT)),
                os.path.join(TMP, "iperf3-server.log"))
    PROCS.start(ns(SERVER, args.tool, "serve", "--bind", f"{SERVER_IP}:{ECHO_PORT}"),
                os.path.join(TMP, "echo-server.log"))
    wait_listen(SERVER, IPERF_PORT)
    wait_listen(SERVER, ECHO_PORT)


def wait_listen(netns, port, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        r = run(ns(netns, "ss", "-Hltn", f"sport = :{port}"), check=False)
        if r.stdout.strip():
            return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on port {port} in {netns}")


def make_certs():
    d = os.path.join(TMP, "pki")
    os.makedirs(d)

    def ossl(*a):
        run(["openssl", *a], cwd=d)

    ossl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "ca.key")
    ossl("req", "-x509", "-new", "-key", "ca.key", "-subj", "/CN=fy-bench-ca", "-days", "2", "-out", "ca.pem")
    for who in ("server", "client"):
        ossl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", f"{who}.key")
        ossl("req", "-new", "-key", f"{who}.key", "-subj", f"/CN=fy-bench-{who}", "-out", f"{who}.csr")
        with open(os.path.join(d, f"{who}.ext"), "w") as f:
            f.write(f"subjectAltName=DNS:fy-bench-{who}\nextendedKeyUsage={'serverAuth' if who == 'server' else 'clientAuth'}\n")
        ossl("x509", "-req", "-in", f"{who}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-days", "2", "-extfile", f"{who}.ext", "-out", f"{who}.pem")
        with open(os.path.join(d, f"{who}-full.pem"), "w") as f:  # HAProxy: cert + key
            f.write(open(os.path.join(d, f"{who}.pem")).read() + open(os.path.join(d, f"{who}.key")).read())
    return d


def stunnel_conf(pki, side):
    client = side == "client"
    lines = ["foreground = yes", "pid =", "syslog = no", "debug = 3",
             "socket = l:TCP_NODELAY=1", "socket = r:TCP_NODELAY=1"]
    for port in (IPERF_PORT, ECHO_PORT):
        lines += [f"[fy-{port}]",
                  f"client = {'yes' if client else 'no'}",
                  f"accept = {PROXY1_IP if client else PROXY2_IP}:{port}",
                  f"connect = {PROXY2_IP if client else SERVER_IP}:{port}",
                  f"cert = {pki}/{side}.pem", f"key = {pki}/{side}.key", f"CAfile = {pki}/ca.pem",
                  "verifyChain = yes", "requireCert = yes", "sslVersionMin = TLSv1.3",
                  f"ciphersuites = {CIPHERSUITES}"]
        if client:
            lines.append("checkHost = fy-bench-server")
    return "\n".join(lines) + "\n"


def haproxy_conf(pki, side, maxconn):
    """One side of the HAProxy pair: TLS 1.3 mTLS between the sides; with `pki` None the same
    pair without TLS (a plaintext relay, bounds_bench.py)."""
    client = side == "client"
    lines = ["global", f"  maxconn {maxconn}", "  nbthread 2"]
    if pki:
        lines += [f"  ssl-default-bind-ciphersuites {CIPHERSUITES}",
                  f"  ssl-default-server-ciphersuites {CIPHERSUITES}"]
    lines += ["defaults", "  mode tcp", "  timeout connect 5s", "  timeout client 1h", "  timeout server 1h"]
    for port in (IPERF_PORT, ECHO_PORT):
        if client:
            tls = (f" ssl crt {pki}/client-full.pem ca-file {pki}/ca.pem "
                   "verify required verifyhost fy-bench-server ssl-min-ver TLSv1.3") if pki else ""
            lines += [f"frontend fy-{port}", f"  bind {PROXY1_IP}:{port}", f"  default_backend fy-{port}",
                      f"backend fy-{port}", f"  server s {PROXY2_IP}:{port}{tls}"]
        else:
            tls = (f" ssl crt {pki}/server-full.pem ca-file {pki}/ca.pem "
                   "verify required ssl-min-ver TLSv1.3") if pki else ""
            lines += [f"frontend fy-{port}", f"  bind {PROXY2_IP}:{port}{tls}",
                      f"  default_backend fy-{port}", f"backend fy-{port}", f"  server s {SERVER_IP}:{port}"]
    return "\n".join(lines) + "\n"


def start_pair(kind, pki, args):
    """The peers' pair: "stunnel", "haproxy", or "relay" (HAProxy without TLS; `pki` unused)."""
    procs = []
    for side, netns in (("server", PROXY2), ("client", PROXY1)):
        conf = os.path.join(TMP, f"{kind}-{side}.conf")
        with open(conf, "w") as f:
            f.write(stunnel_conf(pki, side) if kind == "stunnel" else
                    haproxy_conf(pki if kind == "haproxy" else None, side, args.idle + 400))
        argv = ["stunnel4", conf] if kind == "stunnel" else ["haproxy", "-db", "-f", conf]
        procs.append(PROCS.start(ns(netns, *argv), os.path.join(TMP, f"{kind}-{side}.log")))
    for port in (IPERF_PORT, ECHO_PORT):
        wait_listen(PROXY2, port)
        wait_listen(PROXY1, port)
    for p in procs:
        if p.poll() is not None:
            raise RuntimeError(f"{kind} exited: see its log")
    return procs


def ferryd_pids():
    pids = []
    for n in (1, 2):
        with open(f"{LAB_STATE}/n{n}/ferryd.pid") as f:
            pids.append(int(f.read().strip()))
    return pids


def ferry_status():
    """The injection mode ferryd on node 1 runs in, and each node's worker count (/status)."""
    mode, workers = "unknown", []
    for n, netns in ((1, PROXY1), (2, PROXY2)):
        r = run(ns(netns, "curl", "-sf", "--max-time", "2", "http://127.0.0.1:15000/status"), check=False)
        try:
            st = json.loads(r.stdout)
        except json.JSONDecodeError:
            raise RuntimeError(f"ferryd n{n} /status: {r.stderr.strip() or r.stdout[-300:]!r}")
        workers.append(st.get("workers"))
        if n == 1:
            mode = st.get("datapath", "unknown")
    return mode, workers


def restart_ferryd(lab_yaml, config):
    """Both ferryds again with the lab's ferryd.yaml changed to `config` (FERRY_CONFIG)."""
    for n in (1, 2):
        lab("stop", f"n{n}")
        text = lab_yaml[n].replace("injection: auto", f"injection: {config['injection']}")
        if config["workers"] is not None:
            text += f"workers: {config['workers']}\n"
        with open(f"{LAB_STATE}/n{n}/ferryd.yaml", "w") as f:
            f.write(text)
    for n in (1, 2):
        lab("start", f"n{n}")


def attach_deliver(mode):
    obj = os.path.join(TMP, f"fy_deliver{mode}.o")
    if not os.path.exists(obj):
        inc = f"/usr/include/{platform.machine()}-linux-gnu"
        run(["clang", "-O2", "-g", "-target", "bpf", f"-I{inc}", "-Wall", "-Werror",
             f"-DFY_DELIVER_MODE={mode}", "-c", os.path.join(HERE, "fy_deliver.bpf.c"), "-o", obj])
    for n in (1, 2):
        node = f"fy-n{n}"
        run(ns(node, "tc", "qdisc", "replace", "dev", f"fy-wire{n}", "clsact"))
        run(ns(node, "tc", "filter", "replace", "dev", f"fy-wire{n}", "ingress", "pref", "1", "handle", "1",
               "bpf", "da", "obj", obj, "sec", "tc"))


def detach_deliver():
    for n in (1, 2):
        run(ns(f"fy-n{n}", "tc", "qdisc", "del", "dev", f"fy-wire{n}", "clsact"), check=False)


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def summarize(runs):
    """{metric: [value per round]} -> {metric: {median, min, max, n}}."""
    return {k: {"median": statistics.median(v), "min": min(v), "max": max(v), "n": len(v)}
            for k, v in runs.items()}


def run_all(args):
    """Every configuration once per round, `args.repeats` rounds: this VM's speed drifts by
    a third over minutes (plaintext 22..33 Gbit/s within an hour), so the configurations
    take turns rather than each having its runs in one stretch of time, in an order that
    alternates between rounds."""
    results = {}
    want = [c for c in ORDER if c in args.only]

    def record(name, target, pids, rnd, extra=None):
        t0 = time.time()
        load0 = loadavg()
        log(f"{LABELS[name]}, round {rnd + 1}/{args.repeats} (load {load0:.2f})")
        r = results.setdefault(name, {"runs": {}, "errors": [], "notes": [], "rounds": []})
        if rnd == 0:
            base = {str(p): proc_rss_kib(p) for p in pids}
            r.update({"label": LABELS[name], "target": target, "base_rss_kib": list(base.values()),
                      "base_private_kib": [proc_private_kib(p) for p in pids]})
        measure(args, name, target, pids, r, rnd)
        r["rounds"].append({"load_before": load0, "load_after": loadavg(),
                            "seconds": round(time.time() - t0, 1)})
        r["label"] = LABELS[name]
        if extra:
            r.update(extra)

    pki = None

    def peers_phase(rnd):
        nonlocal pki
        log("lab up without ferryd")
        lab("up", "--no-ferryd")
        tune_netns()
        start_servers(args)
        if "plain" in want:
            record("plain", SERVER_IP, [], rnd)
        for name, mode in (("dp-redirect", 1), ("dp-peer", 2)):
            if name in want:
                attach_deliver(mode)
                try:
                    record(name, SERVER_IP, [], rnd, {"deliver_mode": mode})
                finally:
                    detach_deliver()
        if pki is None and any(c in want for c in ("stunnel", "haproxy")):
            pki = make_certs()
        kinds = ("stunnel", "haproxy") if rnd % 2 == 0 else ("haproxy", "stunnel")
        for kind in kinds:
            if kind in want:
                procs = start_pair(kind, pki, args)
                time.sleep(0.5)
                try:
                    record(kind, PROXY1_IP, [p.pid for p in procs], rnd)
                finally:
                    for p in procs:
                        PROCS.stop(p)
        PROCS.stop_all()

    def ferry_phase(rnd):
        log("lab up with ferryd")
        lab("up")
        tune_netns()
        start_servers(args)
        # The lab's own ferryd.yaml, from which each configuration's is derived.
        lab_yaml = {}
        for n in (1, 2):
            with open(f"{LAB_STATE}/n{n}/ferryd.yaml") as f:
                lab_yaml[n] = f.read()
        running = FERRY_CONFIG["ferry"]
        names = [c for c in FERRYS if c in want]
        # The order reverses between rounds, as the peers' does: ferry-1w and ferry-none
        # follow ferry in one round and precede it in the next.
        if rnd % 2 == 1:
            names.reverse()
        for name in names:
            if FERRY_CONFIG[name] != running:
                restart_ferryd(lab_yaml, FERRY_CONFIG[name])
                running = FERRY_CONFIG[name]
            mode, workers = ferry_status()
            want_workers = FERRY_CONFIG[name]["workers"]
            if want_workers is not None and workers != [want_workers] * 2:
                raise RuntimeError(f"{name}: ferryd runs {workers} workers, not {want_workers}")
            if name == "ferry":
                LABELS[name] = f"ferry ({mode})"
            elif name == "ferry-1w":
                LABELS[name] = f"ferry ({mode}, 1 worker)"
            time.sleep(0.5)
            record(name, SERVER_IP, ferryd_pids(), rnd, {"injection": mode, "workers": workers})
        PROCS.stop_all()

    # The CPU-only measurements: the AES-GCM floor and the handshakes per core-second.
    cpu = {"floor": {"runs": {}, "notes": []}, "handshakes": {"runs": {}}, "errors": []}

    def add(part, values):
        for k, v in values.items():
            cpu[part]["runs"].setdefault(k, []).append(v)

    def cpu_round(rnd):
        try:
            f = aes_gcm_floor(args.floor_seconds)
            if "note" in f:
                cpu["floor"]["notes"].append(f.pop("note"))
            add("floor", f)
            log(f"AES-128-GCM floor, round {rnd + 1}: {f['s_per_gb']:.3f} s/GB (seal "
                f"{f['seal_bytes_per_s'] / 1e9:.2f} GB/s, open {f['open_bytes_per_s'] / 1e9:.2f} GB/s)")
        except Exception as e:  # noqa: BLE001 - the traffic configurations still run
            cpu["errors"].append(f"AES-GCM floor: {e}")
            log(f"AES-128-GCM floor FAILED: {e}")
        if any(c in want for c in FERRYS):
            # The last round's run also writes handshakes.md beside the report.
            md = os.path.join(args.out, "handshakes.md") if rnd == args.repeats - 1 else None
            try:
                h = handshake_rates(args, args.handshake_seconds, md)
                add("handshakes", h)
                log(f"handshakes, round {rnd + 1}: server {h['server_per_cpu_s']:.0f}/s, client "
                    f"{h['client_per_cpu_s']:.0f}/s per core")
            except Exception as e:  # noqa: BLE001
                cpu["errors"].append(f"handshake_bench: {e}")
                log(f"handshake_bench FAILED: {e}")

    has_peers = any(c in want for c in ("plain", "dp-redirect", "dp-peer", "stunnel", "haproxy"))
    has_ferry = any(c in want for c in FERRYS)
    for rnd in range(args.repeats):
        if any(c in want for c in PROXIES):
            cpu_round(rnd)
        # The order alternates between rounds (peers then ferry, ferry then peers; stunnel and
        # HAProxy swap), so that no configuration always runs right after the same one: the
        # first round's idle step (stunnel4 starts two threads per idle connection) leaves
        # the machine busy for whatever comes next.
        phases = [(has_peers, peers_phase), (has_ferry, ferry_phase)]
        if rnd % 2 == 1:
            phases.reverse()
        for wanted, phase in phases:
            if wanted:
                phase(rnd)
    lab("down")
    for r in results.values():
        r["summary"] = summarize(r["runs"])
        r["load_before"] = r["rounds"][0]["load_before"]
        r["load_after"] = r["rounds"][-1]["load_after"]
        r["seconds"] = round(sum(x["seconds"] for x in r["rounds"]), 1)
    for part in ("floor", "handshakes"):
        cpu[part]["summary"] = summarize(cpu[part]["runs"])
    floor = cpu["floor"]["summary"].get("s_per_gb", {}).get("median")
    for r in results.values():
        c = r["summary"].get("cpu_s_per_gb")
        if c and floor:
            # Both proxies seal and open each byte once between them: the floor's unit.
            r["cpu_x_floor"] = c["median"] / floor
    return results, cpu


# ---------------------------------------------------------------------------------------
# Report: results.json, charts (gnuplot), README.md
# ---------------------------------------------------------------------------------------
def first_line(argv):
    try:
        r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=10)
        return r.stdout.strip().splitlines()[0] if r.stdout.strip() else ""
    except (OSError, subprocess.TimeoutExpired):
        return ""


def machine_info(args):
    cpu = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        mem_kib = int(f.readline().split()[1])
    return {
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
        "cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(mem_kib / 2**20, 1),
        "kernel": platform.release(), "os": first_line(["sh", "-c", ". /etc/os-release; echo $PRETTY_NAME"]),
        "ferry": first_line(["git", "-C", ROOT, "describe", "--always", "--dirty"]),
        "stunnel": first_line(["sh", "-c", "stunnel4 -version 2>&1 | grep '^stunnel'"]),
        "haproxy": first_line(["haproxy", "-v"]).split(" - ")[0],
        "openssl": first_line(["openssl", "version"]),
        "iperf3": first_line(["iperf3", "--version"]),
        "mode": "quick" if args.quick else "full",
        "repeats": args.repeats, "iperf_seconds": args.iperf_seconds, "rr_seconds": args.rr_seconds,
        "conn_seconds": args.conn_seconds, "idle_connections": args.idle,
        "floor_seconds": args.floor_seconds, "handshake_seconds": args.handshake_seconds,
        "fd_limit": resource.getrlimit(resource.RLIMIT_NOFILE)[1],
    }


def med(results, name, metric):
    try:
        return results[name]["summary"][metric]["median"]
    except KeyError:
        return None


def spread_of(summary, metric, fmt, scale=1):
    s = summary.get(metric)
    if not s:
        return "–"
    if s["n"] == 1:
        return fmt.format(s["median"] * scale)
    return f"{fmt.format(s['median'] * scale)} ({fmt.format(s['min'] * scale)}–{fmt.format(s['max'] * scale)})"


def spread(results, name, metric, fmt):
    return spread_of(results.get(name, {}).get("summary", {}), metric, fmt)


def write_charts(results, out):
    if not shutil.which("gnuplot"):
        log("gnuplot not found: no charts")
        return []
    names = [n for n in ORDER if n in results and results[n].get("summary")]
    dat = os.path.join(TMP, "chart.dat")

    def table(metrics, only):
        with open(dat, "w") as f:
            for n in only:
                row = [f'"{results[n]["label"]}"']
                for m in metrics:
                    s = results[n]["summary"].get(m, {"median": 0, "min": 0, "max": 0})
                    row += [str(s["median"]), str(s["min"]), str(s["max"])]
                f.write(" ".join(row) + "\n")

    common = ("set terminal pngcairo size 1000,520 font 'sans,10'\n"
              "set style data histogram\nset style histogram errorbars gap 2 lw 1\n"
              "set style fill solid 0.8 border -1\nset boxwidth 0.9\nset grid ytics\n"
              "set xtics rotate by -20 left noenhanced\nset key top right noenhanced\nset yrange [0:*]\n")
    charts = []

    def plot(fname, title, ylabel, metrics, titles, only, extra=""):
        if not only:
            return
        table(metrics, only)
        cols = ", ".join(f"'{dat}' using {2 + 3 * i}:{3 + 3 * i}:{4 + 3 * i}:xtic(1) title '{t}'"
                         if i == 0 else f"'' using {2 + 3 * i}:{3 + 3 * i}:{4 + 3 * i} title '{t}'"
                         for i, t in enumerate(titles))
        script = common + f"set output '{os.path.join(out, fname)}'\nset title '{title}' noenhanced\nset ylabel '{ylabel}'\n{extra}plot {cols}\n"
        r = subprocess.run(["gnuplot"], input=script, text=True, stderr=subprocess.PIPE)
        if r.returncode != 0:
            log(f"gnuplot {fname}: {r.stderr.strip()}")
        else:
            charts.append(fname)

    peers = [n for n in names if not n.startswith("dp-")]
    plot("throughput.png", "iperf3 throughput, client pod n1-p1 -> server pod n2-p1 (median, min-max)",
         "Gbit/s", ["tput1_gbps", "tput4_gbps"], ["1 stream", "4 streams"], peers)
    plot("latency.png", f"{MSG}-byte request/response round trip (median of runs)", "microseconds",
         ["rr_p50_us", "rr_p90_us", "rr_p99_us"], ["p50", "p90", "p99"], peers,
         "set logscale y\nset yrange [1:*]\nset ylabel 'microseconds (log scale)'\n")
    plot("connections.png", f"new connections per second ({CONCURRENCY} in flight, {MSG}-byte request and answer)",
         "connections/s", ["conn_rate"], ["connections/s"], peers)
    dp = [n for n in ("plain", "dp-redirect", "dp-peer") if n in names]
    plot("datapath_rr.png", "datapath alone: request/response rate by delivery", "transactions/s",
         ["rr_rate"], ["100-byte request/response"], dp)
    plot("datapath_throughput.png", "datapath alone: iperf3 throughput by delivery", "Gbit/s",
         ["tput1_gbps", "tput4_gbps"], ["1 stream", "4 streams"], dp)
    return charts


def rel(a, b):
    return f"{a / b:.2f}×" if a and b else "–"


def num(v, f):
    return f.format(v) if v is not None else "–"


def both(a, b):
    return a is not None and b is not None


def idle_per_node_kib(results, name):
    """KiB per idle connection on each node (the Results column adds the nodes together)."""
    idle = results.get(name, {}).get("idle")
    if not idle or idle["open"] <= 0:
        return []
    return [(d - b) / idle["open"] for b, d in zip(idle["rss_before_kib"], idle["rss_during_kib"])]


def cpu_med(cpu, part, metric):
    try:
        return cpu[part]["summary"][metric]["median"]
    except KeyError:
        return None


def issue18_targets(results, cpu):
    """The performance targets of issue 18, from this run: one row each with the measured
    value, the target and whether it is met (None: not measured)."""
    rows = []

    def row(target, value, text, goal, ok):
        rows.append({"target": target, "value": value, "measured": text, "goal": goal,
                     "met": ok if value is not None else None})

    floor = cpu_med(cpu, "floor", "s_per_gb")
    fcpu = med(results, "ferry", "cpu_s_per_gb")
    ratio = fcpu / floor if both(fcpu, floor) else None
    row("CPU per GB, both proxies", ratio,
        f"{num(fcpu, '{:.2f}')} s/GB = {num(ratio, '{:.2f}')}× the floor ({num(floor, '{:.3f}')} s/GB)",
        "≤ 2× the AES-GCM floor", ratio is not None and ratio <= 2)
    f1, h1 = med(results, "ferry", "tput1_gbps"), med(results, "haproxy", "tput1_gbps")
    x = f1 / h1 if both(f1, h1) else None
    row("single stream vs HAProxy", x, f"{num(x, '{:.2f}')}× ({num(f1, '{:.2f}')} vs {num(h1, '{:.2f}')} Gbit/s)",
        "≥ 1.5×", x is not None and x >= 1.5)
    fp50, pp50 = med(results, "ferry", "rr_p50_us"), med(results, "plain", "rr_p50_us")
    added = fp50 - pp50 if both(fp50, pp50) else None
    row("added p50 round trip", added,
        f"{num(added, '{:.0f}')} µs ({num(fp50, '{:.0f}')} vs plaintext {num(pp50, '{:.0f}')} µs)",
        "≤ 50 µs", added is not None and added <= 50)
    frr = med(results, "ferry", "rr_rate")
    row("request/response rate", frr, f"{num(frr, '{:.0f}')}/s", "≥ 13,000/s", frr is not None and frr >= 13000)
    fp99 = med(results, "ferry", "rr_p99_us")
    peers = [(med(results, n, "rr_p99_us"), LABELS[n]) for n in ("stunnel", "haproxy")
             if med(results, n, "rr_p99_us") is not None]
    best = min(peers) if peers else None
    row("p99, median over the rounds", fp99 if best else None,
        f"{num(fp99, '{:.0f}')} µs vs {best[1]} {best[0]:.0f} µs" if both(fp99, best) else "–",
        "not worse than the best peer's (in two full runs)", both(fp99, best) and fp99 <= best[0])
    per_node = idle_per_node_kib(results, "ferry")
    mean = sum(per_node) / len(per_node) if per_node else None
    row("idle memory per connection per node", mean,
        f"{num(mean, '{:.1f}')} KiB (" + " / ".join(f"node {i + 1}: {k:.1f}" for i, k in enumerate(per_node)) + ")"
        if per_node else "–", "≤ 4 KiB", bool(per_node) and max(per_node) <= 4)
    hs = cpu_med(cpu, "handshakes", "server_per_cpu_s")
    row("full mTLS handshakes per server core-second", hs,
        f"{num(hs, '{:.0f}')} (`handshake_bench`, server side)", "≥ 1,500, every identity check kept",
        hs is not None and hs >= 1500)
    base = results.get("ferry", {}).get("base_rss_kib", [])
    row("base RSS", max(base) / 1024 if base else None, " + ".join(f"{k / 1024:.1f} MiB" for k in base) or "–",
        "≤ 10 MiB", bool(base) and max(base) <= 10 * 1024)
    return rows


def write_scaling(results, w):
    """The scaling table: ferry with one worker per ferryd against the default (one per core)."""
    if "ferry" not in results or "ferry-1w" not in results:
        return
    nw = results["ferry"].get("workers") or ["?"]
    many = f"{nw[0]} workers" if len(set(nw)) == 1 else f"{' + '.join(map(str, nw))} workers"
    w(f"## Scaling: 1 worker against {many}")
    w("")
    w(f"ferry ({results['ferry'].get('injection', '?')}) with `workers: 1` in both ferryd.yaml against the "
      f"default (one per core: {many} here), in the same rounds. Both nodes, the client, the server and "
      "the kernel share this machine's cores, so a second worker helps only where one ferryd thread was the "
      "bottleneck.")
    w("")
    w(f"| metric | 1 worker | {many} | {many} against 1 |")
    w("|---|---|---|---|")
    for metric, label, fmt in (("tput1_gbps", "1 stream Gbit/s", "{:.2f}"), ("tput4_gbps", "4 streams Gbit/s", "{:.2f}"),
                               ("rr_rate", "request/response /s", "{:.0f}"), ("rr_p50_us", "p50 µs", "{:.0f}"),
                               ("rr_p99_us", "p99 µs", "{:.0f}"), ("conn_rate", "new connections/s", "{:.0f}"),
                               ("cpu_s_per_gb", "CPU s/GB", "{:.2f}")):
        w(f"| {label} | {spread(results, 'ferry-1w', metric, fmt)} | {spread(results, 'ferry', metric, fmt)} | "
          f"{rel(med(results, 'ferry', metric), med(results, 'ferry-1w', metric))} |")
    one, two = (med(results, n, "idle_bytes_per_conn") for n in ("ferry-1w", "ferry"))
    w(f"| idle KiB/conn (both nodes) | {num(one and one / 1024, '{:.1f}')} | {num(two and two / 1024, '{:.1f}')} | "
      f"{rel(two, one)} |")
    one, two = (results[n].get("base_rss_kib", []) for n in ("ferry-1w", "ferry"))
    w(f"| base RSS MiB (both nodes) | {' + '.join(f'{k / 1024:.1f}' for k in one) or '–'} | "
      f"{' + '.join(f'{k / 1024:.1f}' for k in two) or '–'} | {rel(sum(two), sum(one))} |")
    w("")


def write_failures(w, errs, label):
    """A report's "Failures in this run" section: every error of every configuration
    ({name: [message]}), nothing when there are none."""
    if not errs:
        return
    w("## Failures in this run")
    w("")
    for n, es in errs.items():
        for e in es:
            w(f"- {label(n)}: {e}")
    w("")


def write_readme(results, cpu, targets, meta, charts, out):
    L = []
    w = L.append
    w("# Benchmarks: ferry against the peers, in one run")
    w("")
    w("Generated by `make bench` (`tests/bench/run_bench.py`); do not edit by hand. Raw numbers: "
      "[results.json](results.json). Where ferryd spends its time: [profile.md](profile.md). TLS "
      "handshake cost on its own: [handshakes.md](handshakes.md) (when present). The registry at "
      "cluster scale (a workloads file, a real API server with 150,000 pods): [registry.md](registry.md). "
      "What ferry-cni adds to a pod's ADD: [cni.md](cni.md). Authorization per connection and per "
      "policy change, up to 10,000 AuthorizationPolicies: [policy.md](policy.md). What a proxied "
      "round trip and gigabyte cost whatever the proxy does (`make bench-bounds`): [bounds.md](bounds.md).")
    w("")
    w("## Machine")
    w("")
    w(f"- {meta['date']}, {meta['mode']} run: {meta['repeats']} rounds (every configuration once per round, "
      f"so that the machine's drift falls on all of them alike; the order alternates between rounds, so that "
      f"none always follows the same one), iperf3 {meta['iperf_seconds']} s, "
      f"request/response {meta['rr_seconds']} s, connections {meta['conn_seconds']} s, "
      f"{meta['idle_connections']} idle connections")
    w(f"- CPU: {meta['cpu']}, {meta['cores']} cores, {meta['memory_gib']} GiB; {meta['os']}, kernel {meta['kernel']}")
    w(f"- ferry {meta['ferry']}; {meta['stunnel']}; {meta['haproxy']}; {meta['openssl']}; {meta['iperf3']}")
    loads = ", ".join(f"{n} {results[n]['load_before']:.2f}" for n in ORDER if n in results)
    w(f"- load average (1 min) when each configuration started its first round: {loads}. It includes the suite's own "
      "processes: stunnel4 runs one thread per connection, and its idle step (two threads per connection) "
      "lifts the 1-minute average for the configurations after it.")
    w("")
    w("## Method")
    w("")
    w("Everything runs in the network-namespace lab of `scripts/ferry-lab` ([docs/lab.md](../lab.md)) on one "
      "machine: the client is pod `fy-n1-p1` (10.77.1.11) on node 1, the server pod `fy-n2-p1` "
      "(10.77.2.11) on node 2, joined by a veth \"wire\". Clients, servers, proxies and the kernel's packet "
      "processing all share the same cores, so every number includes the cost of the others.")
    w("")
    w("| configuration | what carries the bytes |")
    w("|---|---|")
    w("| plaintext (no proxy) | plain routing pod → node 1 → wire → node 2 → pod; the lab's limit |")
    w("| ferry (mode) | the pod connects to 10.77.2.11 and is captured: tc datapath → ferryd node 1 → HBONE (TLS 1.3 mTLS, HTTP/2 CONNECT) over the wire → ferryd node 2 → pod, injection chosen by the kernel probe |")
    w("| ferry (mode, 1 worker) | the same with `workers: 1` in both ferryd.yaml (the default is one worker per core): the scaling row |")
    w("| ferry (injection none) | the same with `datapath.injection: none`: tunnel packets are routed instead of re-entering the pod's egress path |")
    w("| stunnel4 pair | the pod connects to 10.77.1.2 (stunnel client side in node 1's proxy netns), TLS to stunnel server side in node 2's proxy netns (10.77.2.2), plain TCP to the pod; no capture |")
    w("| HAProxy pair | the same shape with HAProxy (`mode tcp`, `nbthread 2`) |")
    w("| datapath: bpf_redirect / bpf_redirect_peer | no proxy; a tc program on each node's wire ingress (`tests/bench/fy_deliver.bpf.c`) delivers pod-bound packets with `bpf_redirect(host veth, 0)` or `bpf_redirect_peer(host veth, 0)` instead of routing |")
    w("")
    w("The peers use TLS 1.3 only, ECDSA P-256 certificates, mutual authentication with chain and name checks, "
      f"and ferry's cipher suites (`{CIPHERSUITES}`). ferry's HBONE is the same plus HTTP/2 framing and "
      "SPIFFE identity checks.")
    w("")
    w("- **Throughput**: `iperf3 -c` from the client pod, 1 and 4 parallel streams, received bits/s.")
    w(f"- **Request/response**: `ferry-bench-tool rr`: one connection, {MSG}-byte request, {MSG}-byte echo, "
      "back to back; rate and round-trip percentiles (after a warm-up).")
    w(f"- **New connections/s**: `ferry-bench-tool conns`: {CONCURRENCY} at a time, each connects, sends {MSG} "
      "bytes, reads the echo and closes.")
    w("- **CPU s/GB**: utime+stime of every proxy process (both nodes; all threads, from `/proc/<pid>/stat`) "
      "during the 1-stream iperf3 run, per GB received. Kernel work done in softirq on behalf of a proxy is "
      "counted only when it ran in the proxy's context.")
    w(f"- **Idle connection memory**: VmRSS of the proxies (both nodes together) with {meta['idle_connections']} idle "
      "proxied connections, each having done one 1-byte round trip, minus VmRSS before; per connection. "
      f"The hard descriptor limit here is {meta['fd_limit']} and a peer proxy holds two descriptors per "
      "connection, so the issue's 10,000 is not reachable for stunnel and HAProxy on this machine.")
    w("- **Base RSS**: each proxy's VmRSS when its configuration starts (after start-up, before traffic); "
      "in parentheses its Private_Dirty (heap, stacks, data written), i.e. without the shared library "
      "pages that RSS also counts.")
    w(f"- **AES-GCM floor**: `openssl speed -mr -evp aes-128-gcm -bytes {TLS_RECORD} -seconds "
      f"{meta['floor_seconds']}` and the same with `-decrypt`, once per round with no traffic: bytes per CPU "
      "second of one core that AES-128-GCM seals and opens (the per-byte work, CTR and GHASH, over "
      "record-sized buffers). Node 1 seals each payload byte once and node 2 opens it once, so the floor, "
      "1/seal rate + 1/open rate per GB, is the least CPU s/GB the proxies together can spend; **CPU × floor** "
      "is CPU s/GB over it (medians). Records' nonces, tags and headers, TCP and copies are what a proxy adds.")
    w(f"- **Handshakes**: `tests/bench/handshake_bench` (`--seconds {meta['handshake_seconds']}`), once per "
      "round: full TLS 1.3 mTLS handshakes with ferry's TLS contexts and identity checks, both ends in one "
      "thread on CPU 0 over a memory BIO pair, per CPU-second of each side; the last round's run also "
      "writes [handshakes.md](handshakes.md).")
    w("")
    w("Cells are the median of the runs with (min–max) when there were several. Speed is never asserted: "
      "the suite fails only when a configuration does not carry traffic, ferry loses one of the idle connections, "
      "or the floor or handshakes could not be measured.")
    w("")
    w("## Results")
    w("")
    w("| configuration | 1 stream Gbit/s | 4 streams Gbit/s | rr rate /s | p50 µs | p90 µs | p99 µs | new conn/s | CPU s/GB | CPU × floor | idle KiB/conn (both nodes) | base RSS MiB (private) |")
    w("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for n in ORDER:
        r = results.get(n)
        if not r or n.startswith("dp-"):
            continue
        base = " + ".join(f"{k / 1024:.1f} ({p / 1024:.1f})" for k, p in
                          zip(r.get("base_rss_kib", []), r.get("base_private_kib", []))) or "–"
        idle = med(results, n, "idle_bytes_per_conn")
        w(f"| {r['label']} | {spread(results, n, 'tput1_gbps', '{:.2f}')} | {spread(results, n, 'tput4_gbps', '{:.2f}')} | "
          f"{spread(results, n, 'rr_rate', '{:.0f}')} | {spread(results, n, 'rr_p50_us', '{:.0f}')} | "
          f"{spread(results, n, 'rr_p90_us', '{:.0f}')} | {spread(results, n, 'rr_p99_us', '{:.0f}')} | "
          f"{spread(results, n, 'conn_rate', '{:.0f}')} | {spread(results, n, 'cpu_s_per_gb', '{:.2f}')} | "
          f"{num(r.get('cpu_x_floor'), '{:.2f}×')} | {num(idle / 1024 if idle is not None else None, '{:.1f}')} | {base} |")
    w("")
    fl = cpu.get("floor", {}).get("summary", {})
    if fl:
        w(f"AES-128-GCM floor in this run: **{spread_of(fl, 's_per_gb', '{:.3f}')} CPU s/GB** (seal "
          f"{spread_of(fl, 'seal_bytes_per_s', '{:.2f}', 1e-9)} GB/s, open {spread_of(fl, 'open_bytes_per_s', '{:.2f}', 1e-9)} "
          "GB/s per core)." + "".join(f" {x}." for x in sorted(set(cpu['floor'].get('notes', [])))))
    hs = cpu.get("handshakes", {}).get("summary", {})
    if hs:
        w(f"Full mTLS handshakes per CPU-second of one core: server side {spread_of(hs, 'server_per_cpu_s', '{:.0f}')}, "
          f"client side {spread_of(hs, 'client_per_cpu_s', '{:.0f}')}, both ends {spread_of(hs, 'both_ends_per_cpu_s', '{:.0f}')}.")
    w("")
    for c in charts:
        if not c.startswith("datapath"):
            w(f"![{c[:-4]}]({c})")
    w("")
    w("## The datapath alone")
    w("")
    w("The project rests on kernel results that the seeds report for `bpf_redirect_peer`: request/response "
      "rate from 32.7k to 90.0k transactions/s and +18 % throughput against the stack's own forwarding. "
      "Here the same comparison, in this lab, without any proxy:")
    w("")
    w("| delivery into the server pod | rr rate /s | vs routing | p50 µs | 1 stream Gbit/s | vs routing | 4 streams Gbit/s |")
    w("|---|---|---|---|---|---|---|")
    base_rr, base_t = med(results, "plain", "rr_rate"), med(results, "plain", "tput1_gbps")
    for n, label in (("plain", "routing (ip_forward)"), ("dp-redirect", "`bpf_redirect(veth, 0)`"),
                     ("dp-peer", "`bpf_redirect_peer(veth, 0)`")):
        if n not in results:
            continue
        w(f"| {label} | {spread(results, n, 'rr_rate', '{:.0f}')} | {rel(med(results, n, 'rr_rate'), base_rr)} | "
          f"{spread(results, n, 'rr_p50_us', '{:.0f}')} | {spread(results, n, 'tput1_gbps', '{:.2f}')} | "
          f"{rel(med(results, n, 'tput1_gbps'), base_t)} | {spread(results, n, 'tput4_gbps', '{:.2f}')} |")
    w("")
    w("The lab's node has no netfilter rules and no bridge, so routing is already short here; the seeds' "
      "baseline went through a fuller host stack. Only the delivery into the pod changes between these rows.")
    w("")
    for c in charts:
        if c.startswith("datapath"):
            w(f"![{c[:-4]}]({c})")
    w("")
    w("## Against the targets of issue 6")
    w("")
    f1, h1, s1, p1 = (med(results, n, "tput1_gbps") for n in ("ferry", "haproxy", "stunnel", "plain"))
    fp50, pp50 = med(results, "ferry", "rr_p50_us"), med(results, "plain", "rr_p50_us")
    fp99, pp99 = med(results, "ferry", "rr_p99_us"), med(results, "plain", "rr_p99_us")
    fc, sc = med(results, "ferry", "conn_rate"), med(results, "stunnel", "conn_rate")
    fcpu, hcpu = med(results, "ferry", "cpu_s_per_gb"), med(results, "haproxy", "cpu_s_per_gb")
    base = results.get("ferry", {}).get("base_rss_kib", [])

    w("| target | measured | met |")
    w("|---|---|---|")

    def row(t, m, ok):
        w(f"| {t} | {m} | {'yes' if ok else 'no' if ok is not None else '–'} |")

    row("single stream ≥ 1.5× HAProxy", f"{rel(f1, h1)} ({num(f1, '{:.2f}')} vs {num(h1, '{:.2f}')} Gbit/s)",
        f1 / h1 >= 1.5 if both(f1, h1) else None)
    row("single stream ≥ 45 % of plaintext", f"{100 * f1 / p1:.0f} %" if both(f1, p1) else "–",
        f1 / p1 >= 0.45 if both(f1, p1) else None)
    row("added p50 ≤ 50 µs", f"{fp50 - pp50:.0f} µs" if both(fp50, pp50) else "–",
        fp50 - pp50 <= 50 if both(fp50, pp50) else None)
    row("added p99 ≤ 100 µs", f"{fp99 - pp99:.0f} µs" if both(fp99, pp99) else "–",
        fp99 - pp99 <= 100 if both(fp99, pp99) else None)
    frr = med(results, "ferry", "rr_rate")
    row("request/response ≥ 13k/s", num(frr, "{:.0f}/s"), frr >= 13000 if frr is not None else None)
    row("new connections/s ≥ 10× stunnel", rel(fc, sc), fc / sc >= 10 if both(fc, sc) else None)
    per_node = idle_per_node_kib(results, "ferry")
    row("≤ 4 KiB ferryd memory per idle connection per node",
        " / ".join(f"node {i + 1}: {k:.1f} KiB" for i, k in enumerate(per_node)) or "–",
        all(k <= 4 for k in per_node) if per_node else None)
    row("≤ 10 MB base RSS", " + ".join(f"{k / 1024:.1f} MiB" for k in base) or "–",
        all(k * 1024 <= 10e6 for k in base) if base else None)
    row("CPU per GB ≤ HAProxy's", f"{num(fcpu, '{:.2f}')} vs {num(hcpu, '{:.2f}')} s/GB",
        fcpu <= hcpu if both(fcpu, hcpu) else None)
    w("")
    w("Ahead of both peers in this run, metric by metric:")
    w("")
    w("| metric | ferry | stunnel4 | HAProxy | ferry ahead of both |")
    w("|---|---|---|---|---|")
    for metric, label, fmt, higher in (("tput1_gbps", "1 stream Gbit/s", "{:.2f}", True),
                                       ("tput4_gbps", "4 streams Gbit/s", "{:.2f}", True),
                                       ("rr_rate", "request/response /s", "{:.0f}", True),
                                       ("rr_p50_us", "p50 µs", "{:.0f}", False),
                                       ("rr_p99_us", "p99 µs", "{:.0f}", False),
                                       ("conn_rate", "new connections/s", "{:.0f}", True),
                                       ("cpu_s_per_gb", "CPU s/GB", "{:.2f}", False),
                                       ("idle_bytes_per_conn", "idle bytes/connection", "{:.0f}", False)):
        f, st, hp = (med(results, n, metric) for n in ("ferry", "stunnel", "haproxy"))
        ahead = None
        if f is not None and st is not None and hp is not None:
            ahead = f > max(st, hp) if higher else f < min(st, hp)
        w(f"| {label} | {num(f, fmt)} | {num(st, fmt)} | {num(hp, fmt)} | "
          f"{'yes' if ahead else 'no' if ahead is not None else '–'} |")
    w("")
    w("## Against the targets of issue 18")
    w("")
    w("| | measured | target | met |")
    w("|---|---|---|---|")
    for t in targets:
        w(f"| {t['target']} | {t['measured']} | {t['goal']} | "
          f"{'yes' if t['met'] else 'no' if t['met'] is not None else '–'} |")
    w("")
    w("The idle memory is the Results column's figure per node; the handshakes come from "
      "`handshake_bench` (ferry's TLS contexts and checks in one thread, not ferryd's sockets); the p99 "
      "target asks for two full runs, this row is one.")
    w("")
    write_scaling(results, w)
    errs = {n: r["errors"] for n, r in results.items() if r.get("errors")}
    if cpu["errors"]:
        errs["CPU-only measurements"] = cpu["errors"]
    write_failures(w, errs, lambda n: LABELS.get(n, n))
    w("## Running it")
    w("")
    w("```sh")
    w("make bench          # full run (about 16 minutes): this page, results.json and the charts in docs/benchmarks/")
    w("make bench-quick    # under 2 minutes, into build/default/bench-quick/; CI runs it so the suite cannot rot")
    w("tests/bench/run_bench.py --only ferry,haproxy --quick   # a subset")
    w("```")
    w("")
    w("Needs root, the lab's packages, stunnel4, haproxy and gnuplot (`make bootstrap`). Run it on a quiet "
      "machine: the load averages under Machine say how quiet it was.")
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write("\n".join(L) + "\n")


# ---------------------------------------------------------------------------------------
def main():
    global TMP
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="short runs, one repeat, few idle connections (< 2 min)")
    ap.add_argument("--out", help="output directory (default docs/benchmarks; with --quick BUILD/bench-quick)")
    ap.add_argument("--build", default=os.environ.get("FERRY_BUILD_DIR", "build/default"))
    ap.add_argument("--only", default=",".join(ORDER), help="comma-separated configurations")
    ap.add_argument("--repeats", type=int)
    ap.add_argument("--idle", type=int, help="idle connections of the idle step (default 9,000; 200 with --quick)")
    a = ap.parse_args()
    a.only = [c for c in a.only.split(",") if c]
    unknown = [c for c in a.only if c not in ORDER]
    if unknown:
        ap.error(f"unknown configuration(s) {unknown}; known: {ORDER}")
    a.build = a.build if os.path.isabs(a.build) else os.path.join(ROOT, a.build)
    a.tool = os.path.join(a.build, "tests", "bench", "ferry-bench-tool")
    a.handshake_bench = os.path.join(a.build, "tests", "bench", "handshake_bench")
    if a.quick:
        a.repeats = a.repeats or 1
        a.iperf_seconds, a.rr_seconds, a.conn_seconds, a.warmup = 1, 1, 1, 0.2
        a.idle = a.idle or 200
        a.floor_seconds, a.handshake_seconds = 1, 1
        a.out = a.out or os.path.join(a.build, "bench-quick")
    else:
        # Five rounds: on this VM one round's p99 swings by a quarter, and a median of three
        # was decided by a single unlucky round more than once.
        a.repeats = a.repeats or 5
        a.iperf_seconds, a.rr_seconds, a.conn_seconds, a.warmup = 5, 5, 5, 0.5
        a.idle = a.idle or 9000
        # CPU time, so a busy neighbour does not shorten them; per round, so the median
        # spans the same drift as the traffic's.
        a.floor_seconds, a.handshake_seconds = 2, 3
        a.out = a.out or os.path.join(ROOT, "docs", "benchmarks")
    if os.geteuid() != 0:
        sys.exit("bench: must run as root (network namespaces, BPF)")
    for c in ("ip", "tc", "iperf3", "stunnel4", "haproxy", "openssl", "clang", "ss", "curl"):
        if not shutil.which(c):
            sys.exit(f"bench: '{c}' missing (make bootstrap)")
    for prog in (a.tool, a.handshake_bench):
        if not os.access(prog, os.X_OK):
            sys.exit(f"bench: {prog} missing: make build")
    # The proxies and servers inherit this: thousands of idle connections need descriptors.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    os.environ["FERRY_BUILD_DIR"] = a.build
    os.environ.setdefault("FERRY_LAB_LOG_LEVEL", "warn")  # access logs would cost ferry CPU

    lock = take_lock()
    TMP = tempfile.mkdtemp(prefix="fy-bench.")
    atexit.register(cleanup)
    # SIGHUP too: a session or terminal that ends sends it, and its default would skip the
    # atexit cleanup that takes the lab down.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    t0 = time.time()
    meta = machine_info(a)
    os.makedirs(a.out, exist_ok=True)  # handshake_bench writes handshakes.md there
    results, cpu = run_all(a)
    meta["seconds"] = round(time.time() - t0, 1)
    targets = issue18_targets(results, cpu)
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump({"meta": meta, "configurations": results, "cpu": cpu, "issue18_targets": targets},
                  f, indent=2, sort_keys=True)
        f.write("\n")
    charts = write_charts(results, a.out)
    write_readme(results, cpu, targets, meta, charts, a.out)
    failed = [n for n in a.only if n not in results or results[n].get("errors")] + cpu["errors"]
    log(f"done in {meta['seconds']} s; report in {os.path.join(a.out, 'README.md')}")
    if lock is not None:
        os.close(lock)
    if failed:
        log(f"FAILED: {', '.join(failed)} (see above)")
        sys.exit(1)


if __name__ == "__main__":
    main()
