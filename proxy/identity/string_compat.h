#pragma once
// The std/absl string_view bridge lives in proxy/common/strings.h; identity code uses it
// under its own namespace.
#include "proxy/common/strings.h"

namespace ferry::identity {
using common::toAbsl;
using common::toStd;
}  // namespace ferry::identity
