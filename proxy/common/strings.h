#pragma once
// Debian's abseil 20220623 is built with its own absl::string_view
// (ABSL_OPTION_USE_STD_STRING_VIEW 0), which does not convert from std::string_view:
// StrCat & co. need it bridged at the call site. And the one percent-encoding of URL query
// values (the API server's continue tokens, ferryctl's questions to ferryd).
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

}  // namespace ferry::common
