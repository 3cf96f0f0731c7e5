#pragma once
// HTTP/2 error codes by name (RFC 9113 §7), apart from h2_connection.h so that metrics code
// can label them without pulling in Asio's TLS headers.
#include <cstdint>

namespace ferry::hbone {

// "enhance_your_calm" for 0xb; "unknown" past the table.
const char* h2ErrorName(uint32_t code);

}  // namespace ferry::hbone
