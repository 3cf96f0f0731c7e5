#!/usr/bin/env python3
"""Test "application" for ferryd's outbound listener in proxy_protocol mode.

Usage: proxy_protocol_client.py --listener 127.0.5.1:15001 --src 127.0.5.10
                                --dst 127.0.6.10:18080 [--bytes 4194304]
                                [--timeout 30]

Binds to --src, connects to ferryd's outbound listener, sends a PROXY protocol
v2 header (TCP4, src = our own address, dst = the "original destination"),
then N random bytes, half-closes, reads until EOF and checks that what came
back is byte-exact what was sent (the far end is an echo server). Exit 0 on
success, 1 with a "FAIL:" line otherwise.

With --expect-refused the tunnel must NOT be established: success means the
connection is closed or reset by ferryd without a single byte coming back.
"""
import argparse
import hashlib
import os
import socket
import struct
import sys
import threading

PP2_SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"


def hostport(s: str):
    host, _, port = s.rpartition(":")
    return host, int(port)


def pp2_header(src, dst) -> bytes:
    addrs = socket.inet_aton(src[0]) + socket.inet_aton(dst[0]) + struct.pack("!HH", src[1], dst[1])
    # 0x21 = version 2, PROXY command; 0x11 = AF_INET, STREAM.
    return PP2_SIGNATURE + bytes([0x21, 0x11]) + struct.pack("!H", len(addrs)) + addrs


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--listener", required=True)
    ap.add_argument("--src", required=True)
    ap.add_argument("--dst", required=True)
    ap.add_argument("--bytes", type=int, default=4 * 1024 * 1024)
    ap.add_argument("--timeout", type=float, default=30)
    ap.add_argument("--expect-refused", action="store_true")
    a = ap.parse_args()
    tag = "[pp2-client]"

    def fail(msg: str) -> int:
        print(f"{tag} FAIL: {msg}", file=sys.stderr, flush=True)
        return 1

    payload = os.urandom(a.bytes)
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(a.timeout)
    s.bind((a.src, 0))
    try:
        s.connect(hostport(a.listener))
    except OSError as e:
        return fail(f"connect to {a.listener} from {a.src}: {e}")
    me = s.getsockname()
    dst = hostport(a.dst)
    print(f"{tag} {me[0]}:{me[1]} -> {a.listener}, PROXY v2 dst {a.dst}, {a.bytes} bytes", flush=True)

    send_err = []

    def sender():
        try:
            s.sendall(pp2_header(me, dst))
            view = memoryview(payload)
            for off in range(0, len(payload), 256 * 1024):
                s.sendall(view[off:off + 256 * 1024])
            s.shutdown(socket.SHUT_WR)
        except OSError as e:
            send_err.append(e)

    t = threading.Thread(target=sender, daemon=True)
    t.start()
    got = bytearray()
    try:
        while True:
            data = s.recv(256 * 1024)
            if not data:
                break
            got += data
    except socket.timeout:
        return fail(f"timed out after {a.timeout}s with {len(got)}/{a.bytes} bytes echoed")
    except OSError as e:
        if a.expect_refused and not got:
            print(f"{tag} refused as expected: {e}, no data came back", flush=True)
            print(f"{tag} PASS", flush=True)
            return 0
        return fail(f"receive error after {len(got)}/{a.bytes} bytes: {e}")
    if a.expect_refused:
        if got:
            return fail(f"expected the tunnel to be refused, but {len(got)} bytes came back")
        print(f"{tag} refused as expected: closed (EOF) without data", flush=True)
        print(f"{tag} PASS", flush=True)
        return 0
    t.join(a.timeout)
    s.close()
    if send_err:
        return fail(f"send error: {send_err[0]} (received {len(got)} bytes)")
    if len(got) != len(payload):
        return fail(f"echo length {len(got)}, want {len(payload)}")
    if bytes(got) != payload:
        i = next(i for i in range(len(payload)) if got[i] != payload[i])
        return fail(f"echo differs from what was sent at byte {i}")
    print(f"{tag} echo ok: {len(got)} bytes byte-exact (sha256 {hashlib.sha256(got).hexdigest()[:16]}…), clean EOF",
          flush=True)
    print(f"{tag} PASS", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
