#pragma once
// Writing JSON text by hand where a document object would cost more than the line it makes
// (an access record per connection): strings quoted and escaped per RFC 8259, so that any
// bytes a peer sent (an :authority, an error text) still make valid JSON.
#include <string>
#include <string_view>

namespace ferry::common {

// Appends `text` as a JSON string, quotes included: `"` and `\` escaped, control
// characters as \n \r \t \b \f or \u00XX, U+2028 / U+2029 as \u2028 / \u2029 (JavaScript
// readers), valid UTF-8 kept as it is, every byte of an invalid sequence as U+FFFD.
void appendJsonString(std::string& out, std::string_view text);

}  // namespace ferry::common
