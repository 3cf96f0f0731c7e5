// The PROXY v2 header (proxy/session/proxy_protocol.cc) as readProxyV2 reads it off the
// socket: 16 fixed bytes, the length they announce, then the whole header. Checks beyond
// "does not crash": the announced length stays within kProxyV2MaxSize, and an accepted
// header re-encodes (encodeProxyV2) to one that parses to the same addresses.
#include <cstdint>
#include <cstdlib>
#include <span>

#include "proxy/session/proxy_protocol.h"

using namespace ferry::session;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> input(data, size);
  // Any prefix may be handed over: the reader never passes fewer than 16 bytes, but the
  // functions must not read past what they are given either.
  auto remaining = proxyV2Remaining(input.first(std::min(size, kProxyV2FixedSize)));
  if (!remaining.ok()) {
    // Whatever follows the fixed part, the whole header is refused as well.
    if (parseProxyV2(input).ok()) std::abort();
    return 0;
  }
  if (kProxyV2FixedSize + *remaining > kProxyV2MaxSize) std::abort();
  if (size < kProxyV2FixedSize + *remaining) return 0;  // the reader would still wait
  auto header = parseProxyV2(input.first(kProxyV2FixedSize + *remaining));
  if (!header.ok()) return 0;
  if (header->destination.port == 0) std::abort();
  if (header->source.ip.is_v4() != header->destination.ip.is_v4()) std::abort();
  auto encoded = encodeProxyV2(header->source, header->destination);
  auto again = parseProxyV2(encoded);
  if (!again.ok() || again->source.ip != header->source.ip ||
      again->source.port != header->source.port ||
      again->destination.ip != header->destination.ip ||
      again->destination.port != header->destination.port) {
    std::abort();
  }
  return 0;
}
