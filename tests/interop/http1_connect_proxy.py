#!/usr/bin/env python3
"""Minimal HTTP/1.1 CONNECT proxy for the ferry interop tests (Python 3 stdlib).

Usage: http1_connect_proxy.py LISTEN_HOST LISTEN_PORT

Accepts "CONNECT host:port HTTP/1.1", connects to host:port, answers
"HTTP/1.1 200 Connection established" and relays bytes both ways, mapping a
half-close (EOF) on either side to shutdown(SHUT_WR) on the other. It is the
backend that `nghttpx --http2-proxy` forwards the HBONE CONNECT streams to.
Anything that is not a well-formed CONNECT gets a 400; an upstream connect
failure gets a 502. Prints "LISTENING host:port" once listening and one line
per request (with the request headers, so a test can check what the HBONE
client sent through nghttpx).
"""
import socket
import sys
import threading

MAX_HEAD = 64 * 1024


def relay(src: socket.socket, dst: socket.socket, counter: list, idx: int) -> None:
    try:
        while True:
            data = src.recv(256 * 1024)
            if not data:
                break
            dst.sendall(data)
            counter[idx] += len(data)
    except OSError:
        pass
    finally:
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def reply(conn: socket.socket, status: str) -> None:
    try:
        conn.sendall(f"HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".encode())
    except OSError:
        pass


def handle(conn: socket.socket, peer) -> None:
    who = f"{peer[0]}:{peer[1]}"
    upstream = None
    try:
        head = b""
        while b"\r\n\r\n" not in head:
            data = conn.recv(4096)
            if not data:
                print(f"proxy: {who} closed before a full request head", flush=True)
                return
            head += data
            if len(head) > MAX_HEAD:
                reply(conn, "431 Request Header Fields Too Large")
                return
        head, rest = head.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split()
        headers = [l for l in lines[1:] if l]
        print(f"proxy: {who} request: {lines[0]!r} headers: {headers!r}", flush=True)
        if len(parts) != 3 or parts[0] != "CONNECT" or not parts[2].startswith("HTTP/1."):
            reply(conn, "400 Bad Request")
            return
        host, sep, port = parts[1].rpartition(":")
        if not sep or not port.isdigit():
            reply(conn, "400 Bad Request")
            return
        host = host.strip("[]")
        try:
            upstream = socket.create_connection((host, int(port)), timeout=10)
            upstream.settimeout(None)
        except OSError as e:
            print(f"proxy: {who} connect {host}:{port} failed: {e}", flush=True)
            reply(conn, "502 Bad Gateway")
            return
        conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        if rest:
            upstream.sendall(rest)
        counter = [len(rest), 0]
        t = threading.Thread(target=relay, args=(conn, upstream, counter, 0), daemon=True)
        t.start()
        relay(upstream, conn, counter, 1)
        t.join()
        print(f"proxy: {who} -> {host}:{port} done, up {counter[0]} bytes, down {counter[1]} bytes", flush=True)
    except OSError as e:
        print(f"proxy: {who} error: {e}", flush=True)
    finally:
        if upstream is not None:
            upstream.close()
        conn.close()


def main() -> int:
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    host, port = sys.argv[1], int(sys.argv[2])
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((host, port))
    srv.listen(64)
    print(f"LISTENING {host}:{srv.getsockname()[1]}", flush=True)
    while True:
        conn, peer = srv.accept()
        threading.Thread(target=handle, args=(conn, peer), daemon=True).start()


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(0)
