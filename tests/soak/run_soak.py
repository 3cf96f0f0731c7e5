#!/usr/bin/env python3
"""ferry's soak (issue 12): many concurrent connections through two nodes of the lab for a
long time, then everything must come back.

In the two-node lab of scripts/ferry-lab: a client in pod fy-n1-p1 (this script, `client`
mode, asyncio) opens SOAK_CONNS connections to an echo server in pod fy-n2-p1
(ferry-bench-tool serve, 10.77.2.11:7000), every one captured and carried by n1's ferryd,
an HBONE tunnel and n2's ferryd. The mix:

  idle  most connections: one round trip when opened (both proxy legs exist), nothing for
        the whole soak, one more round trip at the end (still alive, still exact)
  rr    request/response: random sizes (64..4096 bytes), random pauses (mean RR_INTERVAL s),
        every answer compared byte for byte
  bulk  a few streams of random bytes at BULK_RATE bytes/s each, echoed back, the SHA-256
        of both directions compared at the end

for SOAK_SECONDS after all are open. Then all close, and the script polls (bounded) until
each ferryd's descriptors (/proc/PID/fd) and RSS (VmRSS) are back within 10 % of their
baseline. The baseline is taken after a warm-up (a few connections through the same path,
closed, their pooled tunnels released), so that what a first connection creates once and
keeps (TLS contexts of the identities, worker state) is in it. The lab's ferryd configs get
`pool.idle_release: 20s` (instead of 5 m), so that the tunnels of the closed connections go
within the bound.

Pass: every connection opened, zero errors (connect, reset, EOF, timeout, a byte that
differs), and both ferryds back to baseline. Figures (peak and settled RSS/descriptors per
ferryd, connections, bytes, errors, RLIMIT_NOFILE of each process) are printed and written
as JSON to --out. Exit 0 pass, 1 fail, 77 not root.

Takes /tmp/ferry-lab.lock (the lab is one per machine) unless an ancestor process already
holds it (`flock /tmp/ferry-lab.lock make soak`).
"""
import argparse
import asyncio
import hashlib
import json
import os
import random
import resource
import signal
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "bench"))
import lab_lock  # noqa: E402 -- the lab lock of the benchmarks and the e2e tests
LAB = os.path.join(ROOT, "scripts", "ferry-lab")
STATE = "/run/ferry-lab"
SERVER_IP, SERVER_PORT = "10.77.2.11", 7000
IDLE_RELEASE = "20s"
SETTLE_LIMIT = 20 + 100  # seconds: idle_release plus slack for what closes after it


def log(msg):
    print(f"soak: {msg}", flush=True)


# ---------------------------------------------------------------------------------------
# Client mode (runs in the client pod)
# ---------------------------------------------------------------------------------------
class Tally:
    def __init__(self):
        self.opened = 0
        self.errors = {}
        self.bytes_sent = 0
        self.bytes_received = 0
        self.transactions = 0
        self.bulk_verified = 0
        self.idle_verified = 0

    def error(self, kind, detail=""):
        self.errors[kind] = self.errors.get(kind, 0) + 1
        if sum(self.errors.values()) <= 20:
            print(f"client: error {kind} {detail}", file=sys.stderr, flush=True)


async def client_main(a):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    t = Tally()
    stop = asyncio.Event()
    connect_slots = asyncio.Semaphore(a.connect_concurrency)
    n_bulk = max(1, a.conns // 2500)
    n_rr = max(1, a.conns * 19 // 100)
    kinds = ["bulk"] * n_bulk + ["rr"] * n_rr + ["idle"] * (a.conns - n_bulk - n_rr)
    op_timeout = 60.0

    async def open_conn():
        async with connect_slots:
            r, w = await asyncio.wait_for(asyncio.open_connection(SERVER_IP, SERVER_PORT), op_timeout)
        t.opened += 1
        if t.opened % 1000 == 0:
            print(f"client: opened {t.opened}", file=sys.stderr, flush=True)
        return r, w

    async def roundtrip(r, w, size):
        msg = random.randbytes(size)
        w.write(msg)
        await w.drain()
        got = await asyncio.wait_for(r.readexactly(size), op_timeout)
        t.bytes_sent += size
        t.bytes_received += len(got)
        if got != msg:
            raise ValueError("echo differs")

    async def idle(r, w):
        await roundtrip(r, w, 32)
        await stop.wait()
        await roundtrip(r, w, 32)
        t.idle_verified += 1

    async def rr(r, w):
        await roundtrip(r, w, 32)
        while not stop.is_set():
            await roundtrip(r, w, random.randint(64, 4096))
            t.transactions += 1
            try:
                await asyncio.wait_for(stop.wait(), random.expovariate(1.0 / a.rr_interval))
            except asyncio.TimeoutError:
                pass

    async def bulk(r, w):
        sent, got = hashlib.sha256(), hashlib.sha256()
        counts = [0, 0]

        async def sender():
            t0 = time.monotonic()
            while not stop.is_set():
                chunk = random.randbytes(65536)
                sent.update(chunk)
                w.write(chunk)
                await w.drain()
                counts[0] += len(chunk)
                ahead = counts[0] / a.bulk_rate - (time.monotonic() - t0)
                if ahead > 0:
                    try:
                        await asyncio.wait_for(stop.wait(), ahead)  # pacing: the load shape
                    except asyncio.TimeoutError:
                        pass
            w.write_eof()

        send_task = asyncio.ensure_future(sender())
        while True:
            d = await asyncio.wait_for(r.read(262144), op_timeout)
            if not d:
                break
            got.update(d)
            counts[1] += len(d)
        await send_task
        t.bytes_sent += counts[0]
        t.bytes_received += counts[1]
        if counts[0] != counts[1] or sent.digest() != got.digest():
            raise ValueError(f"bulk stream differs: sent {counts[0]}, got {counts[1]}")
        t.bulk_verified += 1

    async def one(kind):
        w = None
        try:
            r, w = await open_conn()
        except Exception as e:  # noqa: BLE001 -- every failure is an error to count
            t.error("connect", repr(e))
            return
        try:
            await {"idle": idle, "rr": rr, "bulk": bulk}[kind](r, w)
        except ConnectionResetError as e:
            t.error(f"{kind}_reset", repr(e))
        except asyncio.IncompleteReadError as e:
            t.error(f"{kind}_eof", repr(e))
        except asyncio.TimeoutError:
            t.error(f"{kind}_timeout")
        except ValueError as e:
            t.error(f"{kind}_data", str(e))
        except Exception as e:  # noqa: BLE001
            t.error(f"{kind}_other", repr(e))
        finally:
            if w is not None:
                w.close()
                try:
                    await w.wait_closed()
                except Exception:  # noqa: BLE001 -- a close error after the verdict is no new error
                    pass

    random.shuffle(kinds)
    tasks = [asyncio.ensure_future(one(k)) for k in kinds]
    t_start = time.monotonic()
    # All open (or failed): the soak's clock starts.
    while t.opened + t.errors.get("connect", 0) < a.conns:
        await asyncio.sleep(0.2)
    ramp = time.monotonic() - t_start
    print(f"client: ready {t.opened} open in {ramp:.1f} s", file=sys.stderr, flush=True)
    await asyncio.sleep(a.seconds)
    print("client: stopping", file=sys.stderr, flush=True)
    stop.set()
    await asyncio.gather(*tasks)
    out = {
        "connections": a.conns, "opened": t.opened, "kinds": {"idle": kinds.count("idle"), "rr": n_rr, "bulk": n_bulk},
        "errors": t.errors, "error_total": sum(t.errors.values()), "bytes_sent": t.bytes_sent,
        "bytes_received": t.bytes_received, "transactions": t.transactions, "bulk_verified": t.bulk_verified,
        "idle_verified": t.idle_verified, "ramp_seconds": round(ramp, 1), "rlimit_nofile": [hard, hard],
        "rlimit_nofile_before": [soft, hard],
    }
    print(json.dumps(out), flush=True)


# ---------------------------------------------------------------------------------------
# Driver mode (root, the node side)
# ---------------------------------------------------------------------------------------
def take_lock():
    return lab_lock.take(log)


def lab(*args, check=True):
    return subprocess.run([LAB, *args], check=check, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def ferryd_pid(node):
    with open(f"{STATE}/{node}/ferryd.pid") as f:
        return int(f.read().strip())


def proc_figures(pid):
    rss = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
    return {"fds": len(os.listdir(f"/proc/{pid}/fd")), "rss_kib": rss}


def nofile_limit(pid):
    with open(f"/proc/{pid}/limits") as f:
        for line in f:
            if line.startswith("Max open files"):
                return int(line.split()[3])
    return 0


def metric(node, series):
    out = lab("exec", f"{node}/proxy", "--", "curl", "-sf", "--max-time", "2", "http://127.0.0.1:15020/metrics",
              check=False).stdout
    total = 0.0
    for line in out.splitlines():
        if line.startswith(series):
            total += float(line.split()[-1])
    return total


def quiet(node):
    """No proxied connection open, no pooled tunnel left."""
    active = metric(node, "ferry_connections_active")
    pooled = metric(node, "ferry_hbone_connections_opened_total") - metric(node, "ferry_hbone_connections_closed_total")
    return active == 0 and pooled == 0


def set_idle_release():
    for node in ("n1", "n2"):
        path = f"{STATE}/{node}/ferryd.yaml"
        with open(path) as f:
            text = f.read()
        if "\npool:" not in text:
            with open(path, "a") as f:
                f.write(f"pool:                        # the soak (tests/soak/run_soak.py): tunnels go within its bound\n"
                        f"  idle_release: {IDLE_RELEASE}\n")
        lab("stop", node)
        lab("start", node)


def wait_listening(netns, port, limit=10):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        out = subprocess.run(["ip", "netns", "exec", netns, "ss", "-Hltn", f"sport = :{port}"],
                             stdout=subprocess.PIPE, text=True).stdout
        if out.strip():
            return True
        time.sleep(0.1)
    return False


def run_client(conns, seconds, a, sample=None):
    cmd = [LAB, "exec", "n1/p1", "--", "python3", os.path.abspath(__file__), "client", "--conns", str(conns),
           "--seconds", str(seconds), "--rr-interval", str(a.rr_interval), "--bulk-rate", str(a.bulk_rate)]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    CHILDREN.append(p)
    os.set_blocking(p.stderr.fileno(), False)
    buf = ""
    while p.poll() is None:
        if sample:
            sample()
        try:
            chunk = p.stderr.read()
        except (BlockingIOError, TypeError):
            chunk = None
        if chunk:
            buf += chunk
            while "\n" in buf:
                line, buf = buf.split("\n", 1)
                log(line)
        time.sleep(1 if sample else 0.1)
    rest = p.stderr.read() or ""
    for line in (buf + rest).splitlines():
        log(line)
    out = p.stdout.read().strip().splitlines()
    try:
        return json.loads(out[-1]) if out else None
    except json.JSONDecodeError:
        return None


CHILDREN = []


def settle(pids, baseline, limit, peak=None):
    """Polls until every ferryd is quiet and within 10 % of its baseline (descriptors and RSS)."""
    deadline = time.monotonic() + limit
    t0 = time.monotonic()
    while True:
        now = {n: proc_figures(pid) for n, pid in pids.items()}
        for n in (peak or {}):
            peak[n]["fds"] = max(peak[n]["fds"], now[n]["fds"])
            peak[n]["rss_kib"] = max(peak[n]["rss_kib"], now[n]["rss_kib"])
        within = all(now[n]["fds"] <= baseline[n]["fds"] * 1.1 and now[n]["rss_kib"] <= baseline[n]["rss_kib"] * 1.1
                     for n in pids)
        if within and all(quiet(n) for n in pids):
            return now, round(time.monotonic() - t0, 1), True
        if time.monotonic() >= deadline:
            return now, round(time.monotonic() - t0, 1), False
        time.sleep(2)


def driver(a):
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            log("FAIL: must run as root in CI")
            return 1
        log("SKIP: needs root (the lab)")
        return 77
    tool = os.path.join(os.path.abspath(a.build), "tests", "bench", "ferry-bench-tool")
    if not os.access(tool, os.X_OK):
        log(f"FAIL: {tool} missing (make build)")
        return 1
    lock = take_lock()  # noqa: F841 -- held until exit
    server = None
    t0 = time.monotonic()
    try:
        env_build = {**os.environ, "FERRY_BUILD_DIR": os.path.abspath(a.build)}
        os.environ.update(env_build)
        log("ferry-lab up")
        r = lab("up", check=False)
        if r.returncode != 0:
            print(r.stdout)
            log("FAIL: ferry-lab up failed")
            return 1
        set_idle_release()
        server = subprocess.Popen([LAB, "exec", "n2/p1", "--", tool, "serve", "--bind", f"{SERVER_IP}:{SERVER_PORT}"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        CHILDREN.append(server)
        if not wait_listening("fy-n2-p1", SERVER_PORT):
            log("FAIL: the echo server does not listen")
            return 1
        pids = {"n1": ferryd_pid("n1"), "n2": ferryd_pid("n2")}
        limits = {n: nofile_limit(pid) for n, pid in pids.items()}
        log(f"ferryd RLIMIT_NOFILE: n1 {limits['n1']}, n2 {limits['n2']}; "
            f"echo server {nofile_limit(server.pid)} (raised to its hard limit by the tool)")

        log("warm-up: 20 connections for 3 s")
        warm = run_client(20, 3, a)
        if not warm or warm["error_total"]:
            log(f"FAIL: the warm-up failed: {warm}")
            return 1
        start = {n: proc_figures(pid) for n, pid in pids.items()}
        baseline, waited, ok = settle(pids, {n: {"fds": 1 << 30, "rss_kib": 1 << 40} for n in pids}, SETTLE_LIMIT)
        if not ok:
            log("FAIL: the lab did not go quiet after the warm-up")
            return 1
        log(f"baseline (after the warm-up's tunnels were released, {waited} s): "
            + ", ".join(f"{n} {b['fds']} fds {b['rss_kib'] // 1024} MiB" for n, b in baseline.items()))

        peak = {n: dict(baseline[n]) for n in pids}
        last_print = [time.monotonic()]

        def sample():
            for n, pid in pids.items():
                f = proc_figures(pid)
                peak[n]["fds"] = max(peak[n]["fds"], f["fds"])
                peak[n]["rss_kib"] = max(peak[n]["rss_kib"], f["rss_kib"])
            if time.monotonic() - last_print[0] >= 30:
                last_print[0] = time.monotonic()
                log("now: " + ", ".join(f"{n} {proc_figures(pid)['fds']} fds "
                                        f"{proc_figures(pid)['rss_kib'] // 1024} MiB" for n, pid in pids.items()))

        log(f"soak: {a.conns} connections for {a.seconds} s")
        res = run_client(a.conns, a.seconds, a, sample)
        if res is None:
            log("FAIL: the client gave no result")
            return 1
        settled, waited, ok = settle(pids, baseline, SETTLE_LIMIT, peak)
        figures = {
            "connections": a.conns, "seconds": a.seconds, "client": res, "ferryd_rlimit_nofile": limits,
            "warmup_start": start, "baseline": baseline, "peak": peak, "settled": settled,
            "settle_seconds": waited, "settled_within_10pct": ok, "wall_seconds": round(time.monotonic() - t0),
        }
        if a.out:
            os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
            with open(a.out, "w") as f:
                json.dump(figures, f, indent=2, sort_keys=True)
        print()
        print(f"soak: {a.conns} connections ({res['kinds']}) for {a.seconds} s, opened {res['opened']} "
              f"in {res['ramp_seconds']} s")
        print(f"soak: bytes sent {res['bytes_sent']}, received {res['bytes_received']}, request/response "
              f"transactions {res['transactions']}, bulk streams verified {res['bulk_verified']}, idle verified "
              f"{res['idle_verified']}")
        print(f"soak: errors {res['error_total']} {res['errors'] or ''}")
        for n in pids:
            b, p, s = baseline[n], peak[n], settled[n]
            print(f"soak: ferryd {n}: fds baseline {b['fds']} peak {p['fds']} settled {s['fds']}; "
                  f"RSS baseline {b['rss_kib'] / 1024:.1f} MiB peak {p['rss_kib'] / 1024:.1f} MiB "
                  f"settled {s['rss_kib'] / 1024:.1f} MiB (RLIMIT_NOFILE {limits[n]})")
        print(f"soak: settled within 10 % of baseline: {'yes' if ok else 'NO'} (after {waited} s)")
        fail = []
        if res["opened"] != a.conns:
            fail.append(f"{a.conns - res['opened']} connections not opened")
        if res["error_total"]:
            fail.append(f"{res['error_total']} errors")
        if res["idle_verified"] != res["kinds"]["idle"] or res["bulk_verified"] != res["kinds"]["bulk"]:
            fail.append("not every idle/bulk connection verified")
        if not ok:
            fail.append("ferryd descriptors/RSS not back within 10 % of baseline")
        print(f"soak: {'PASS' if not fail else 'FAIL: ' + '; '.join(fail)} ({round(time.monotonic() - t0)} s)")
        return 1 if fail else 0
    finally:
        for p in CHILDREN:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(5)
                except subprocess.TimeoutExpired:
                    p.kill()
        lab("down", check=False)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", nargs="?", default="driver", choices=["driver", "client"])
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "default"))
    ap.add_argument("--conns", type=int, default=int(os.environ.get("SOAK_CONNS", "10000")))
    ap.add_argument("--seconds", type=float, default=float(os.environ.get("SOAK_SECONDS", "600")))
    ap.add_argument("--rr-interval", type=float, default=2.0, help="mean pause between request/response rounds (s)")
    ap.add_argument("--bulk-rate", type=int, default=1 << 20, help="bytes/s of each bulk stream")
    ap.add_argument("--connect-concurrency", type=int, default=128)
    ap.add_argument("--out", default="", help="write the figures as JSON here")
    a = ap.parse_args()
    if a.mode == "client":
        asyncio.run(client_main(a))
        return 0
    # SIGHUP too: a session or terminal that ends sends it, and its default would skip the
    # `finally` that takes the lab down.
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda signum, _: sys.exit(128 + signum))
    return driver(a)


if __name__ == "__main__":
    sys.exit(main())
