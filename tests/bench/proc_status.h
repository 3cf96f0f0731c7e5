#pragma once
// What the benchmark programs read about themselves from /proc/self/status.
#include <cstdlib>
#include <fstream>
#include <string>

namespace ferry::bench {

// A "Vm...:" line of /proc/self/status in KiB (0 when unreadable).
inline long statusKb(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field, 0) == 0) return std::strtol(line.c_str() + field.size(), nullptr, 10);
  }
  return 0;
}

// VmRSS in KiB (0 when unreadable).
inline long rssKb() { return statusKb("VmRSS:"); }
// The peak RSS of the process so far (VmHWM), in KiB.
inline long peakRssKb() { return statusKb("VmHWM:"); }

}  // namespace ferry::bench
