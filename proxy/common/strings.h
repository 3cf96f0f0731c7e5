#pragma once
// Debian's abseil 20220623 is built with its own absl::string_view
// (ABSL_OPTION_USE_STD_STRING_VIEW 0), which does not convert from std::string_view:
// StrCat & co. need it bridged at the call site. And the one percent-encoding of URL query
// values (the API server's continue tokens, ferryctl's questions to ferryd) and its decoding.
#include <string>
#include <string_view>

#include "absl/strings/string_view.h"

namespace ferry::common {

inline absl::string_view toAbsl(std::string_view s) { return absl::string_view(s.data(), s.size()); }
inline std::string_view toStd(absl::string_view s) { return std::string_view(s.data(), s.size()); }

// RFC 3986: every byte but A-Z a-z 0-9 - . _ ~ becomes %XX.
inline std::string percentEncode(std::string_view in) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : in) {
    bool unreserved = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
                      c == '.' || c == '_' || c == '~';
    if (unreserved) {
      out.push_back(static_cast<char>(c));
    } else {
      out += {'%', kHex[c >> 4], kHex[c & 15]};
    }
  }
  return out;
}

// Its inverse, as query strings arrive (ferryd's admin endpoint): %XX decoded, '+' a space;
// a '%' not followed by two hex digits stays as it is.
inline std::string percentDecode(std::string_view in) {
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '+') {
      out.push_back(' ');
    } else if (in[i] == '%' && i + 2 < in.size() && hex(in[i + 1]) >= 0 && hex(in[i + 2]) >= 0) {
      out.push_back(static_cast<char>(hex(in[i + 1]) * 16 + hex(in[i + 2])));
      i += 2;
    } else {
      out.push_back(in[i]);
    }
  }
  return out;
}

}  // namespace ferry::common
