#!/usr/bin/env python3
"""Load for the handover e2e test (tests/e2e/handover_e2e.sh): what applications see while
ferryd is upgraded underneath them. Python 3 standard library only.

  handover_load.py serve --bind IP --port PORT
      an echo server (one thread per connection): what a connection sends comes back.

  handover_load.py client --dst IP --port PORT --stop FILE [--long N] [--rate R] ...
      N long-lived connections, each sending its own byte pattern every --interval seconds
      and checking that exactly those bytes come back, in order; and R new short connections
      a second (connect, send --short-bytes, read the echo, close), each timed from connect
      to the last byte of its echo. Prints "ready long=N" once every long-lived connection
      has had its first echo, "progress ..." about once a second, and when FILE exists:
      stops opening short connections, waits for the ones under way and for every echo
      owed to the long-lived connections, closes them, and prints one JSON line (the last
      line of its output; keys below in `report`).
"""
import argparse
import heapq
import json
import os
import selectors
import socket
import sys
import threading
import time

# A long-lived connection whose echo is this late is counted as stalled: the handover must
# never hold bytes back that long (a stall is an error like a reset).
STALL_SECONDS = 10.0
# A short connection that has not completed by then failed.
SHORT_TIMEOUT = 10.0


def serve(args):
    srv = socket.create_server((args.bind, args.port), backlog=1024, reuse_port=False)

    def echo(c):
        try:
            while True:
                d = c.recv(65536)
                if not d:
                    break
                c.sendall(d)
        except OSError:
            pass
        c.close()

    print("listening %s:%d" % (args.bind, args.port), flush=True)
    while True:
        c, _ = srv.accept()
        threading.Thread(target=echo, args=(c,), daemon=True).start()


def stamp(t):
    """Wall-clock time as ferryd's log lines have it (UTC), to the millisecond."""
    return time.strftime("%H:%M:%S", time.gmtime(t)) + ".%03d" % (t % 1 * 1000)


def pattern(conn, seq, size):
    """The bytes connection `conn` sends as its message `seq`: its number, the sequence
    number and bytes that differ per connection and per message (every byte value occurs)."""
    head = b"L%03d:%08d:" % (conn, seq)
    body = bytes((conn * 31 + seq * 7 + k) % 256 for k in range(max(0, size - len(head))))
    return head + body


class Long:
    """One long-lived connection: what it sent and what it still expects back."""

    def __init__(self, index, sock):
        self.index = index
        self.sock = sock
        self.seq = 0
        self.owed = bytearray()      # sent, not yet echoed
        self.sent_at = []            # (end offset in the stream, time sent) of each message
        self.echoed = 0              # bytes echoed so far
        self.sent = 0                # bytes sent so far
        self.error = None
        self.max_rtt = 0.0


class Client:
    def __init__(self, args):
        self.args = args
        self.sel = selectors.DefaultSelector()
        self.longs = []
        self.lock = threading.Lock()
        self.short_attempted = 0
        self.short_failed = 0
        self.short_errors = {}        # reason -> count
        self.short_first_errors = []  # a few, with their time
        self.short_times = []
        self.short_threads = []
        self.t0 = time.monotonic()
        self.next_stall_check = 0.0

    # ---- long-lived connections
    def open_longs(self):
        a = self.args
        for i in range(a.long):
            s = socket.create_connection((a.dst, a.port), timeout=SHORT_TIMEOUT)
            s.setblocking(False)
            c = Long(i, s)
            self.longs.append(c)
            self.sel.register(s, selectors.EVENT_READ, c)
        # Each sends once and waits for its echo before the load is "ready".
        for c in self.longs:
            self.send(c)
        deadline = time.monotonic() + 30
        while any(c.echoed == 0 and not c.error for c in self.longs):
            if time.monotonic() > deadline:
                for c in self.longs:
                    if c.echoed == 0 and not c.error:
                        c.error = "no first echo in 30 s"
                break
            self.poll(0.1)

    def fail(self, c, why):
        if c.error is None:
            c.error = "%s (at %s, after %d bytes echoed)" % (why, stamp(time.time()), c.echoed)
            try:
                self.sel.unregister(c.sock)
            except (KeyError, ValueError):
                pass
            c.sock.close()

    def send(self, c):
        if c.error:
            return
        data = pattern(c.index, c.seq, self.args.size)
        c.seq += 1
        try:
            # Small messages into an empty socket buffer: one send takes them whole; a
            # partial send would mean the path is backed up, which is an error here.
            n = c.sock.send(data)
        except (BlockingIOError, InterruptedError):
            n = 0
        except OSError as e:
            self.fail(c, "send: %s" % e)
            return
        if n != len(data):
            self.fail(c, "send took %d of %d bytes (the path is backed up)" % (n, len(data)))
            return
        c.owed += data
        c.sent += n
        c.sent_at.append((c.sent, time.monotonic()))

    def receive(self, c):
        try:
            d = c.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self.fail(c, "recv: %s" % e)
            return
        if not d:
            self.fail(c, "EOF from the server side")
            return
        if len(d) > len(c.owed) or c.owed[: len(d)] != d:
            self.fail(c, "echo differs from what was sent (got %d bytes, %d owed)" % (len(d), len(c.owed)))
            return
        del c.owed[: len(d)]
        c.echoed += len(d)
        now = time.monotonic()
        while c.sent_at and c.sent_at[0][0] <= c.echoed:
            c.max_rtt = max(c.max_rtt, now - c.sent_at.pop(0)[1])

    def poll(self, timeout):
        for key, _ in self.sel.select(timeout):
            self.receive(key.data)
        now = time.monotonic()
        if now >= self.next_stall_check:
            self.next_stall_check = now + 0.5
            for c in self.longs:
                if not c.error and c.sent_at and now - c.sent_at[0][1] > STALL_SECONDS:
                    self.fail(c, "no echo for %.0f s" % STALL_SECONDS)

    # ---- short connections
    def short_one(self):
        a = self.args
        t = time.monotonic()
        payload = os.urandom(a.short_bytes)
        reason = None
        try:
            with socket.create_connection((a.dst, a.port), timeout=SHORT_TIMEOUT) as s:
                s.settimeout(max(0.1, SHORT_TIMEOUT - (time.monotonic() - t)))
                s.sendall(payload)
                got = bytearray()
                while len(got) < len(payload):
                    d = s.recv(65536)
                    if not d:
                        break
                    got += d
                if bytes(got) != payload:
                    reason = "eof" if len(got) < len(payload) else "mismatch"
        except socket.timeout:
            reason = "timeout"
        except ConnectionResetError:
            reason = "reset"
        except ConnectionRefusedError:
            reason = "refused"
        except OSError as e:
            reason = "error %s" % (e.errno,)
        took = time.monotonic() - t
        with self.lock:
            if reason is None:
                self.short_times.append(took)
            else:
                self.short_failed += 1
                self.short_errors[reason] = self.short_errors.get(reason, 0) + 1
                if len(self.short_first_errors) < 10:
                    self.short_first_errors.append({"reason": reason, "after_s": round(took, 3),
                                                    "at": stamp(time.time() - took)})

    def start_short(self):
        with self.lock:
            self.short_attempted += 1
        th = threading.Thread(target=self.short_one, daemon=True)
        th.start()
        self.short_threads.append(th)
        self.short_threads = [x for x in self.short_threads if x.is_alive()]

    # ---- the run
    def run(self):
        a = self.args
        self.open_longs()
        bad = [c for c in self.longs if c.error]
        print("ready long=%d failed=%d" % (len(self.longs) - len(bad), len(bad)), flush=True)
        start = time.monotonic()
        # Each long-lived connection sends on its own slot in the interval; the short ones
        # at their rate. Both are the load's shape (pacing), not waits for events.
        due = [(start + a.interval * c.index / max(1, a.long), c.index) for c in self.longs]
        heapq.heapify(due)
        next_short = start
        next_progress = start + 1
        while not os.path.exists(a.stop):
            now = time.monotonic()
            while due and due[0][0] <= now:
                t, i = heapq.heappop(due)
                c = self.longs[i]
                if not c.error:
                    self.send(c)
                    heapq.heappush(due, (t + a.interval, i))
            if a.rate > 0:
                while now >= next_short:
                    self.start_short()
                    next_short += 1.0 / a.rate
            if now >= next_progress:
                with self.lock:
                    print("progress short=%d short_ok=%d short_failed=%d long_errors=%d" % (
                        self.short_attempted, len(self.short_times), self.short_failed,
                        sum(1 for c in self.longs if c.error)), flush=True)
                next_progress += 1
            wake = min([next_progress] + ([due[0][0]] if due else []) + ([next_short] if a.rate > 0 else []))
            self.poll(max(0.0, min(0.05, wake - time.monotonic())))
        # Stop: the short connections under way finish (each is bounded by its timeout);
        # every echo owed to a long-lived connection arrives (or it stalls).
        for th in list(self.short_threads):
            th.join(SHORT_TIMEOUT + 5)
        while any(c.owed and not c.error for c in self.longs):
            self.poll(0.05)
        for c in self.longs:
            if not c.error:
                self.sel.unregister(c.sock)
                c.sock.close()
        return self.report()

    def report(self):
        times = sorted(self.short_times)

        def pct(p):
            return round(times[min(len(times) - 1, int(len(times) * p))] * 1000, 1) if times else None

        errors = [{"conn": c.index, "error": c.error} for c in self.longs if c.error]
        return {
            "long": len(self.longs),
            "long_errors": len(errors),
            "long_error_list": errors[:20],
            "long_bytes_echoed": sum(c.echoed for c in self.longs),
            "long_messages": sum(c.seq for c in self.longs),
            "long_max_rtt_ms": round(max([c.max_rtt for c in self.longs] or [0]) * 1000, 1),
            "short_attempted": self.short_attempted,
            "short_ok": len(times),
            "short_failed": self.short_failed,
            "short_errors": self.short_errors,
            "short_first_errors": self.short_first_errors,
            "short_max_ms": round(times[-1] * 1000, 1) if times else None,
            "short_p99_ms": pct(0.99),
            "short_p50_ms": pct(0.50),
            "seconds": round(time.monotonic() - self.t0, 1),
        }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--bind", required=True)
    s.add_argument("--port", type=int, required=True)
    c = sub.add_parser("client")
    c.add_argument("--dst", required=True)
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--stop", required=True, help="the run ends once this file exists")
    c.add_argument("--long", type=int, default=200, help="long-lived connections")
    c.add_argument("--interval", type=float, default=0.1, help="seconds between a long-lived connection's messages")
    c.add_argument("--size", type=int, default=64, help="bytes per long-lived message")
    c.add_argument("--rate", type=float, default=20, help="new short connections a second")
    c.add_argument("--short-bytes", type=int, default=100)
    args = ap.parse_args()
    if args.cmd == "serve":
        serve(args)
        return 0
    report = Client(args).run()
    print(json.dumps(report, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
