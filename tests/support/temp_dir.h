#pragma once
// A folder of a test's own under /tmp (fy-<what>-XXXXXX), removed with everything in it when
// the object goes: header-only, linked by tests only.
#include <stdlib.h>

#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>

namespace ferry::test_support {

class TempDir {
 public:
  explicit TempDir(std::string_view what = "test") {
    std::string tmpl = "/tmp/fy-" + std::string(what) + "-XXXXXX";
    if (::mkdtemp(tmpl.data()) != nullptr) path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  // Empty when mkdtemp failed (a test checks ok()).
  bool ok() const { return !path_.empty(); }
  const std::string& path() const { return path_; }
  // `name` inside it.
  std::string file(std::string_view name) const { return path_ + "/" + std::string(name); }

 private:
  std::string path_;
};

}  // namespace ferry::test_support
