// The node configuration (proxy/config): YAML text in, a validated Config or an error that
// names the file, the line and the key. Nothing an operator writes may crash ferryd.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "proxy/config/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto config = ferry::config::parseConfig(text, "fuzz.yaml", "/etc/ferry");
  // Every refusal says where: the source name prefixes each error.
  if (!config.ok() && config.status().message().substr(0, 9) != "fuzz.yaml") std::abort();
  return 0;
}
