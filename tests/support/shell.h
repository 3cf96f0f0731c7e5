#pragma once
// Test helpers for tests that need root and run commands (ip, tc, mount) in a netns of
// their own: header-only, linked by tests only.
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

namespace ferry::test_support {

// True as root. Elsewhere false (the caller skips), and under CI=true a failure too: CI runs
// as root and a root-only test must not skip there.
inline bool mustRunAsRoot() {
  if (geteuid() == 0) return true;
  const char* ci = std::getenv("CI");
  if (ci != nullptr && std::string(ci) == "true") ADD_FAILURE() << "CI runs as root; this test must not skip";
  return false;
}

// `cmd` through sh on the calling thread's netns (children of a thread share its netns);
// its stdout and stderr together.
inline std::string runShell(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return out;
  std::array<char, 512> buf{};
  while (std::fgets(buf.data(), buf.size(), p) != nullptr) out += buf.data();
  ::pclose(p);
  return out;
}

}  // namespace ferry::test_support
