#pragma once
// Hand-made HTTP/2 bytes for the tests that play a misbehaving HBONE client (RFC 9113
// frames, RFC 7541 literals without Huffman): hbone_flood_test, admission_test.
#include <cstdint>
#include <string>

namespace ferry::testing {

// HTTP/2 frame types and flags (RFC 9113 §6).
inline constexpr uint8_t kData = 0x0, kHeaders = 0x1, kRstStream = 0x3, kSettings = 0x4, kPing = 0x6,
                                kGoaway = 0x7, kContinuation = 0x9;
inline constexpr uint8_t kEndStream = 0x1, kEndHeaders = 0x4;
// Error codes (RFC 9113 §7).
inline constexpr uint32_t kProtocolError = 0x1, kEnhanceYourCalm = 0xb;

inline std::string frame(uint8_t type, uint8_t flags, uint32_t stream, const std::string& payload) {
  std::string f;
  f.push_back(static_cast<char>(payload.size() >> 16));
  f.push_back(static_cast<char>(payload.size() >> 8));
  f.push_back(static_cast<char>(payload.size()));
  f.push_back(static_cast<char>(type));
  f.push_back(static_cast<char>(flags));
  for (int shift : {24, 16, 8, 0}) f.push_back(static_cast<char>((stream >> shift) & 0xff));
  return f + payload;
}

// HPACK "literal without indexing, indexed name" (RFC 7541 §6.2.2), no Huffman.
inline std::string literal(uint8_t name_index, const std::string& value) {
  std::string out;
  out.push_back(static_cast<char>(name_index));  // < 15
  out.push_back(static_cast<char>(value.size()));  // < 127
  return out + value;
}
// "literal without indexing, new name".
inline std::string literalNew(const std::string& name, const std::string& value) {
  return std::string(1, '\0') + static_cast<char>(name.size()) + name +
         static_cast<char>(value.size()) + value;
}
// A CONNECT request block: :method (static index 2) and :authority (index 1).
inline std::string connectBlock(const std::string& authority) {
  return literal(2, "CONNECT") + literal(1, authority);
}
inline std::string rstStream(uint32_t stream) { return frame(kRstStream, 0, stream, std::string("\0\0\0\x08", 4)); }

inline const std::string kPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

}  // namespace ferry::testing
