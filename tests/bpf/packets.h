// Frames for BPF_PROG_TEST_RUN: Ethernet + IPv4 + TCP/UDP/ICMP, or ARP, built
// byte by byte with valid checksums.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace ferry::bpftest {

using Mac = std::array<uint8_t, 6>;
using Bytes = std::vector<uint8_t>;

// An IPv4 address in network byte order, as the datapath's maps and the
// packet carry it.
uint32_t ipv4(uint8_t a, uint8_t b, uint8_t c, uint8_t d);

// TCP flag bits.
inline constexpr uint8_t kFin = 0x01;
inline constexpr uint8_t kSyn = 0x02;
inline constexpr uint8_t kRst = 0x04;
inline constexpr uint8_t kPsh = 0x08;
inline constexpr uint8_t kAck = 0x10;

// Ethernet and IPv4 header fields of a frame. Ports are in host byte order.
struct Path {
  Mac src_mac;
  Mac dst_mac;
  uint32_t saddr;  // network order
  uint32_t daddr;  // network order
};

Bytes tcpFrame(const Path& path, uint16_t sport, uint16_t dport, uint8_t flags, size_t payload = 0);
Bytes udpFrame(const Path& path, uint16_t sport, uint16_t dport, size_t payload = 8);
Bytes icmpEchoFrame(const Path& path);
// An ARP request (EtherType 0x0806) from path.saddr for path.daddr.
Bytes arpFrame(const Path& path);
// An IPv4 TCP fragment: `offset_words` in 8-byte units, `more` sets MF. The
// first fragment (offset 0) carries a TCP header; later ones carry payload only.
Bytes tcpFragmentFrame(const Path& path, uint16_t offset_words, bool more);
// An IPv4 UDP first fragment (MF set).
Bytes udpFragmentFrame(const Path& path);
// An IPv6 frame (EtherType 0x86DD; addresses are fixed ULAs, the MACs come from
// path) whose header chain is `extensions` (each an 8-byte extension header of
// that type: 0 hop-by-hop, 43 routing, 44 fragment, 60 destination options)
// followed by `transport` (6 TCP, 17 UDP, 58 ICMPv6) with a 20-byte header.
Bytes ipv6Frame(const Path& path, const std::vector<uint8_t>& extensions, uint8_t transport);
// A frame that claims IPv4 but ends inside the TCP header.
Bytes truncatedTcpFrame(const Path& path, uint16_t sport, uint16_t dport);

// Readers for asserting on a program's data_out. Offsets assume Ethernet +
// IPv4 without options + TCP.
struct TcpView {
  uint32_t saddr, daddr;  // network order
  uint16_t sport, dport;  // host order
  uint32_t seq, ack_seq;  // host order
  uint8_t flags;
  size_t payload;
  bool ip_checksum_ok;
  bool tcp_checksum_ok;
};
TcpView readTcp(const Bytes& frame);
Mac frameDstMac(const Bytes& frame);
Mac frameSrcMac(const Bytes& frame);

}  // namespace ferry::bpftest
