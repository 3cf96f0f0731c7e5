#pragma once
// A fresh folder per test with one file in it, written with an mtime of its own for every
// write: a change is then visible through the stamp alone, even when two writes land within
// the filesystem's timestamp granularity (for watcher tests). Header-only, linked by tests only.
#include <fcntl.h>
#include <sys/stat.h>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include <gtest/gtest.h>

namespace ferry::test_support {

class WatchedDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("watched_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / file_name_).string();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // `old`: an mtime far in the past, one second later than the previous write's.
  void write(std::string_view text, bool old = true) {
    { std::ofstream(path_, std::ios::trunc) << text; }
    if (!old) return;
    ++mtime_sec_;
    timespec times[2] = {{mtime_sec_, 0}, {mtime_sec_, 0}};
    ASSERT_EQ(::utimensat(AT_FDCWD, path_.c_str(), times, 0), 0);
  }

  std::string file_name_ = "watched";
  std::filesystem::path dir_;
  std::string path_;
  time_t mtime_sec_ = 1'700'000'000;
};

}  // namespace ferry::test_support
