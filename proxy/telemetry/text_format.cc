#include "proxy/telemetry/text_format.h"

#include <charconv>
#include <limits>

namespace ferry::telemetry {
namespace {

bool needsEscape(char c) { return c == '\\' || c == '"' || c == '\n'; }

// A double holds every integer up to 2^53; TextSerializer writes 16 significant digits
// (std::numeric_limits<double>::max_digits10 - 1), so those print as the integer itself.
constexpr uint64_t kExactInDouble = uint64_t{1} << std::numeric_limits<double>::digits;
constexpr int kSignificantDigits = std::numeric_limits<double>::max_digits10 - 1;

// The characters of `value` as TextSerializer writes static_cast<double>(value).
std::string_view format(uint64_t value, char (&buf)[32]) {
  std::to_chars_result r;
  if (value <= kExactInDouble) {
    r = std::to_chars(buf, buf + sizeof(buf), value);
  } else {
    r = std::to_chars(buf, buf + sizeof(buf), static_cast<double>(value), std::chars_format::general,
                      kSignificantDigits);
  }
  return {buf, static_cast<size_t>(r.ptr - buf)};
}

}  // namespace

void TextWriter::escaped(std::string_view value) {
  size_t start = 0;
  for (size_t i = 0; i < value.size(); ++i) {
    if (!needsEscape(value[i])) continue;
    out_.append(value.substr(start, i - start));
    out_.push_back('\\');
    out_.push_back(value[i] == '\n' ? 'n' : value[i]);
    start = i + 1;
  }
  out_.append(value.substr(start));
}

void TextWriter::number(uint64_t value) {
  char buf[32];
  out_.append(format(value, buf));
}

void TextSize::escaped(std::string_view value) {
  bytes_ += value.size();
  for (char c : value) bytes_ += needsEscape(c) ? 1 : 0;
}

void TextSize::number(uint64_t value) {
  char buf[32];
  bytes_ += format(value, buf).size();
}

}  // namespace ferry::telemetry
