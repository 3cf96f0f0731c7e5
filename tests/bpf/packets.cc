#include "tests/bpf/packets.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>

namespace ferry::bpftest {
namespace {

constexpr size_t kEthLen = 14;
constexpr size_t kIpLen = 20;
constexpr uint8_t kProtoIcmp = 1;
constexpr uint8_t kProtoTcp = 6;
constexpr uint8_t kProtoUdp = 17;

void put16(Bytes& b, size_t off, uint16_t host_value) {
  b[off] = static_cast<uint8_t>(host_value >> 8);
  b[off + 1] = static_cast<uint8_t>(host_value & 0xff);
}

void putAddr(Bytes& b, size_t off, uint32_t network_value) {
  std::memcpy(&b[off], &network_value, 4);
}

// RFC 1071 one's complement sum, continuing from `sum`.
uint32_t sum16(const uint8_t* p, size_t len, uint32_t sum = 0) {
  for (size_t i = 0; i + 1 < len; i += 2) sum += static_cast<uint32_t>(p[i] << 8 | p[i + 1]);
  if (len % 2) sum += static_cast<uint32_t>(p[len - 1] << 8);
  return sum;
}

uint16_t fold(uint32_t sum) {
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(~sum & 0xffff);
}

Bytes ethernet(const Path& path, uint16_t ethertype, size_t payload_len) {
  Bytes b(kEthLen + payload_len, 0);
  std::copy(path.dst_mac.begin(), path.dst_mac.end(), b.begin());
  std::copy(path.src_mac.begin(), path.src_mac.end(), b.begin() + 6);
  put16(b, 12, ethertype);
  return b;
}

// Ethernet + IPv4 header with room for l4_len bytes; the IP checksum is set.
Bytes ipv4Frame(const Path& path, uint8_t protocol, size_t l4_len) {
  Bytes b = ethernet(path, 0x0800, kIpLen + l4_len);
  uint8_t* ip = &b[kEthLen];
  ip[0] = 0x45;  // version 4, IHL 5
  put16(b, kEthLen + 2, static_cast<uint16_t>(kIpLen + l4_len));
  put16(b, kEthLen + 4, 0x1234);  // id
  put16(b, kEthLen + 6, 0x4000);  // DF, offset 0
  ip[8] = 64;                     // TTL
  ip[9] = protocol;
  putAddr(b, kEthLen + 12, path.saddr);
  putAddr(b, kEthLen + 16, path.daddr);
  put16(b, kEthLen + 10, fold(sum16(ip, kIpLen)));
  return b;
}

// Checksum over the IPv4 pseudo-header and the L4 segment at kEthLen + kIpLen.
uint16_t l4Checksum(const Bytes& b, uint8_t protocol) {
  const size_t l4 = kEthLen + kIpLen;
  const size_t len = b.size() - l4;
  uint32_t sum = sum16(&b[kEthLen + 12], 8);  // saddr, daddr
  sum += protocol;
  sum += static_cast<uint32_t>(len);
  return fold(sum16(&b[l4], len, sum));
}

}  // namespace

uint32_t ipv4(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
  return htonl(static_cast<uint32_t>(a) << 24 | static_cast<uint32_t>(b) << 16 |
               static_cast<uint32_t>(c) << 8 | d);
}

Bytes tcpFrame(const Path& path, uint16_t sport, uint16_t dport, uint8_t flags, size_t payload) {
  constexpr size_t kTcpLen = 20;
  Bytes b = ipv4Frame(path, kProtoTcp, kTcpLen + payload);
  const size_t tcp = kEthLen + kIpLen;
  put16(b, tcp, sport);
  put16(b, tcp + 2, dport);
  put16(b, tcp + 4, 0x0102);  // sequence number 0x01020304
  put16(b, tcp + 6, 0x0304);
  if (flags & kAck) put16(b, tcp + 10, 0x0506);  // acknowledgment number 0x00000506
  b[tcp + 12] = 5 << 4;                          // data offset: 5 words
  b[tcp + 13] = flags;
  put16(b, tcp + 14, 64240);  // window
  for (size_t i = 0; i < payload; ++i) b[tcp + kTcpLen + i] = static_cast<uint8_t>('a' + i % 26);
  put16(b, tcp + 16, l4Checksum(b, kProtoTcp));
  return b;
}

Bytes udpFrame(const Path& path, uint16_t sport, uint16_t dport, size_t payload) {
  constexpr size_t kUdpLen = 8;
  Bytes b = ipv4Frame(path, kProtoUdp, kUdpLen + payload);
  const size_t udp = kEthLen + kIpLen;
  put16(b, udp, sport);
  put16(b, udp + 2, dport);
  put16(b, udp + 4, static_cast<uint16_t>(kUdpLen + payload));
  put16(b, udp + 6, l4Checksum(b, kProtoUdp));
  return b;
}

Bytes icmpEchoFrame(const Path& path) {
  constexpr size_t kIcmpLen = 16;
  Bytes b = ipv4Frame(path, kProtoIcmp, kIcmpLen);
  const size_t icmp = kEthLen + kIpLen;
  b[icmp] = 8;  // echo request
  put16(b, icmp + 4, 0x77);  // identifier
  put16(b, icmp + 6, 1);     // sequence
  put16(b, icmp + 2, fold(sum16(&b[icmp], kIcmpLen)));
  return b;
}

Bytes arpFrame(const Path& path) {
  constexpr size_t kArpLen = 28;
  Bytes b = ethernet(path, 0x0806, kArpLen);
  const size_t arp = kEthLen;
  put16(b, arp, 1);          // hardware: Ethernet
  put16(b, arp + 2, 0x0800); // protocol: IPv4
  b[arp + 4] = 6;
  b[arp + 5] = 4;
  put16(b, arp + 6, 1);  // request
  std::copy(path.src_mac.begin(), path.src_mac.end(), b.begin() + arp + 8);
  putAddr(b, arp + 14, path.saddr);
  putAddr(b, arp + 24, path.daddr);
  return b;
}

Bytes tcpFragmentFrame(const Path& path, uint16_t offset_words, bool more) {
  Bytes b = offset_words == 0 ? tcpFrame(path, 40000, 80, kAck | kPsh, 64) : ipv4Frame(path, kProtoTcp, 64);
  put16(b, kEthLen + 6, static_cast<uint16_t>((more ? 0x2000 : 0) | offset_words));
  b[kEthLen + 10] = b[kEthLen + 11] = 0;
  put16(b, kEthLen + 10, fold(sum16(&b[kEthLen], kIpLen)));
  return b;
}

Bytes udpFragmentFrame(const Path& path) {
  Bytes b = udpFrame(path, 5353, 53, 64);
  put16(b, kEthLen + 6, 0x2000);
  b[kEthLen + 10] = b[kEthLen + 11] = 0;
  put16(b, kEthLen + 10, fold(sum16(&b[kEthLen], kIpLen)));
  return b;
}

Bytes ipv6Frame(const Path& path, const std::vector<uint8_t>& extensions, uint8_t transport) {
  constexpr size_t kIp6Len = 40;
  constexpr size_t kExtLen = 8;
  constexpr size_t kL4Len = 20;
  const size_t payload_len = extensions.size() * kExtLen + kL4Len;
  Bytes b = ethernet(path, 0x86dd, kIp6Len + payload_len);
  uint8_t* ip6 = &b[kEthLen];
  ip6[0] = 0x60;
  put16(b, kEthLen + 4, static_cast<uint16_t>(payload_len));
  ip6[6] = extensions.empty() ? transport : extensions[0];
  ip6[7] = 64;
  ip6[8] = 0xfd;  // fd00::a (source), fd00::b (destination)
  ip6[23] = 0x0a;
  ip6[24] = 0xfd;
  ip6[39] = 0x0b;
  for (size_t i = 0; i < extensions.size(); ++i) {
    uint8_t* ext = &b[kEthLen + kIp6Len + i * kExtLen];
    ext[0] = i + 1 < extensions.size() ? extensions[i + 1] : transport;
    ext[1] = 0;  // length in 8-byte units beyond the first (a fragment header has 0 there: reserved)
  }
  uint8_t* l4 = &b[kEthLen + kIp6Len + extensions.size() * kExtLen];
  put16(b, static_cast<size_t>(l4 - b.data()), 40000);
  put16(b, static_cast<size_t>(l4 - b.data()) + 2, 80);
  if (transport == kProtoTcp) {
    l4[12] = 5 << 4;
    l4[13] = kSyn;
  }
  return b;
}

Bytes truncatedTcpFrame(const Path& path, uint16_t sport, uint16_t dport) {
  Bytes b = tcpFrame(path, sport, dport, kSyn);
  b.resize(kEthLen + kIpLen + 10);  // ports, sequence number, half the rest
  return b;
}

TcpView readTcp(const Bytes& frame) {
  TcpView v{};
  if (frame.size() < kEthLen + kIpLen + 20) return v;
  const uint8_t* ip = &frame[kEthLen];
  const size_t ihl = (ip[0] & 0x0f) * 4u;
  const size_t ip_len = static_cast<size_t>(ip[2] << 8 | ip[3]);
  const uint8_t* tcp = ip + ihl;
  const size_t doff = (tcp[12] >> 4) * 4u;
  std::memcpy(&v.saddr, ip + 12, 4);
  std::memcpy(&v.daddr, ip + 16, 4);
  v.sport = static_cast<uint16_t>(tcp[0] << 8 | tcp[1]);
  v.dport = static_cast<uint16_t>(tcp[2] << 8 | tcp[3]);
  v.seq = static_cast<uint32_t>(tcp[4]) << 24 | tcp[5] << 16 | tcp[6] << 8 | tcp[7];
  v.ack_seq = static_cast<uint32_t>(tcp[8]) << 24 | tcp[9] << 16 | tcp[10] << 8 | tcp[11];
  v.flags = tcp[13];
  v.payload = ip_len - ihl - doff;
  v.ip_checksum_ok = fold(sum16(ip, ihl)) == 0;
  const size_t tcp_len = ip_len - ihl;
  uint32_t sum = sum16(ip + 12, 8);
  sum += kProtoTcp;
  sum += static_cast<uint32_t>(tcp_len);
  v.tcp_checksum_ok = kEthLen + ip_len <= frame.size() && fold(sum16(tcp, tcp_len, sum)) == 0;
  return v;
}

Mac frameDstMac(const Bytes& frame) {
  Mac mac{};
  std::copy(frame.begin(), frame.begin() + 6, mac.begin());
  return mac;
}

Mac frameSrcMac(const Bytes& frame) {
  Mac mac{};
  std::copy(frame.begin() + 6, frame.begin() + 12, mac.begin());
  return mac;
}

}  // namespace ferry::bpftest
