#pragma once
// Debian's abseil 20220623 is built with its own absl::string_view
// (ABSL_OPTION_USE_STD_STRING_VIEW 0), which does not convert from std::string_view:
// StrCat & co. need it bridged at the call site.
#include <string_view>

#include "absl/strings/string_view.h"

namespace ferry::common {

inline absl::string_view toAbsl(std::string_view s) { return absl::string_view(s.data(), s.size()); }
inline std::string_view toStd(absl::string_view s) { return std::string_view(s.data(), s.size()); }

}  // namespace ferry::common
