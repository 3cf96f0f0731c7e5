#!/usr/bin/env python3
"""Tiny TCP echo server for the ferry interop tests (Python 3 stdlib only).

Usage: echo_server.py HOST PORT [--close-after BYTES]

Echoes every byte it receives; when the peer half-closes (FIN) it finishes
writing and half-closes its own side, so a client can check the echo byte-exact
and see a clean EOF. With --close-after N it also half-closes (and closes) by
itself once it has echoed N bytes: for paths whose middle does not forward a
client's half-close (nghttpx does not turn an HTTP/2 END_STREAM into a FIN
towards an HTTP/1.1 CONNECT backend), so the server side ends the exchange.
Prints "LISTENING HOST:PORT" (flushed) once the socket accepts connections,
and one line per finished connection.
"""
import socket
import sys
import threading


def serve_one(conn: socket.socket, peer, close_after: int) -> None:
    total = 0
    why = "peer EOF"
    try:
        while True:
            want = 256 * 1024
            if close_after > 0:
                want = min(want, close_after - total)
            data = conn.recv(want)
            if not data:
                break
            conn.sendall(data)
            total += len(data)
            if close_after > 0 and total >= close_after:
                why = f"--close-after {close_after}"
                break
        conn.shutdown(socket.SHUT_WR)
        print(f"echo: {peer[0]}:{peer[1]} done ({why}), {total} bytes", flush=True)
    except OSError as e:
        print(f"echo: {peer[0]}:{peer[1]} error after {total} bytes: {e}", flush=True)
    finally:
        conn.close()


def main() -> int:
    args = sys.argv[1:]
    close_after = 0
    if len(args) == 4 and args[2] == "--close-after":
        close_after = int(args[3])
        args = args[:2]
    if len(args) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    host, port = args[0], int(args[1])
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((host, port))
    srv.listen(64)
    print(f"LISTENING {host}:{srv.getsockname()[1]}", flush=True)
    while True:
        conn, peer = srv.accept()
        print(f"echo: accepted {peer[0]}:{peer[1]}", flush=True)
        threading.Thread(target=serve_one, args=(conn, peer, close_after), daemon=True).start()


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(0)
