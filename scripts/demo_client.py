#!/usr/bin/env python3
"""Stands in for a captured application on loopback: connects from a pod address to
ferryd's outbound listener, names the original destination with a PROXY v2 header (what
the tc datapath does for real pods), then sends an HTTP request and prints the answer."""
import socket
import struct
import sys

src_ip, listener, dst_ip, dst_port = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
path = sys.argv[5] if len(sys.argv) > 5 else "/"
host, port = listener.rsplit(":", 1)
s = socket.socket()
s.bind((src_ip, 0))
s.connect((host, int(port)))
sport = s.getsockname()[1]
header = (b"\r\n\r\n\x00\r\nQUIT\n" + bytes([0x21, 0x11]) + struct.pack("!H", 12)
          + socket.inet_aton(src_ip) + socket.inet_aton(dst_ip) + struct.pack("!HH", sport, dst_port))
s.sendall(header)
s.sendall(f"GET {path} HTTP/1.0\r\nHost: {dst_ip}\r\n\r\n".encode())
s.shutdown(socket.SHUT_WR)
data = b""
while True:
    chunk = s.recv(65536)
    if not chunk:
        break
    data += chunk
sys.stdout.write(data.decode(errors="replace"))
