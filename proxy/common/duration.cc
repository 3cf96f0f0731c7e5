#include "proxy/common/duration.h"

#include <charconv>

#include "absl/strings/str_cat.h"
#include "proxy/common/strings.h"

namespace ferry::common {

absl::StatusOr<Millis> parseDuration(std::string_view text) {
  auto bad = [&] {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", toAbsl(text), "' is not a duration (use a whole number with ms, s, m or h, e.g. 10s)"));
  };
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  if (digits == 0 || digits > 9) return bad();
  long long value = 0;
  std::from_chars(text.data(), text.data() + digits, value);
  std::string_view unit = text.substr(digits);
  if (unit == "ms") return Millis(value);
  if (unit == "s") return Millis(value * 1000);
  if (unit == "m") return Millis(value * 60 * 1000);
  if (unit == "h") return Millis(value * 3600 * 1000);
  return bad();
}

std::string formatDuration(Millis d) {
  auto ms = d.count();
  if (ms % 3600000 == 0 && ms != 0) return absl::StrCat(ms / 3600000, "h");
  if (ms % 60000 == 0 && ms != 0) return absl::StrCat(ms / 60000, "m");
  if (ms % 1000 == 0) return absl::StrCat(ms / 1000, "s");
  return absl::StrCat(ms, "ms");
}

}  // namespace ferry::common
