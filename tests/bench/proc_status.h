#pragma once
// What the benchmark programs read about themselves from /proc/self/status.
#include <cstdlib>
#include <fstream>
#include <string>

namespace ferry::bench {

// VmRSS in KiB (0 when unreadable).
inline long rssKb() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::strtol(line.c_str() + 6, nullptr, 10);
  }
  return 0;
}

}  // namespace ferry::bench
