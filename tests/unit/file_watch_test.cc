// common::WatchedFile: the one change rule of every file ferryd watches (workloads, CA,
// trust bundle, certificates).
#include <filesystem>
#include <fstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "proxy/common/file.h"
#include "tests/support/watched_dir.h"

namespace ferry::common {
namespace {

using ::testing::HasSubstr;
using Result = WatchedFile::Result;

using WatchedFileTest = ferry::test_support::WatchedDirTest;

TEST_F(WatchedFileTest, FirstPollReadsTheFileThenNothingChanges) {
  write("one");
  WatchedFile file(path_);
  ASSERT_EQ(file.poll(), Result::kChanged);
  EXPECT_EQ(file.content(), "one");
  EXPECT_EQ(file.poll(), Result::kUnchanged);
  EXPECT_EQ(file.poll(), Result::kUnchanged);
}

TEST_F(WatchedFileTest, RewriteWithNewContentIsAChange) {
  write("one");
  WatchedFile file(path_);
  ASSERT_EQ(file.poll(), Result::kChanged);
  write("two");
  ASSERT_EQ(file.poll(), Result::kChanged);
  EXPECT_EQ(file.takeContent(), "two");
}

TEST_F(WatchedFileTest, RewriteWithTheSameContentIsNoChange) {
  write("same");
  WatchedFile file(path_);
  ASSERT_EQ(file.poll(), Result::kChanged);
  write("same");  // new mtime and ctime, same bytes: a controller rewriting its output
  EXPECT_EQ(file.poll(), Result::kUnchanged);
}

TEST_F(WatchedFileTest, SameSizeRewriteRightAfterAReadIsSeen) {
  // Both writes land within the same second: the young file is compared by content.
  write("aaaa", /*old=*/false);
  WatchedFile file(path_);
  ASSERT_EQ(file.poll(), Result::kChanged);
  write("bbbb", /*old=*/false);
  ASSERT_EQ(file.poll(), Result::kChanged);
  EXPECT_EQ(file.content(), "bbbb");
  // A young file is read again on the next poll (rule 2), but unchanged content is no change.
  EXPECT_EQ(file.poll(), Result::kUnchanged);
}

TEST_F(WatchedFileTest, FileReplacedByRenameIsAChange) {
  write("one");
  WatchedFile file(path_);
  ASSERT_EQ(file.poll(), Result::kChanged);
  std::string next = (dir_ / "next").string();
  std::ofstream(next) << "two";
  std::filesystem::rename(next, path_);
  EXPECT_EQ(file.poll(), Result::kChanged);
  EXPECT_EQ(file.content(), "two");
}

TEST_F(WatchedFileTest, MissingFileFailsOnceAndComingBackUnchangedIsNoChange) {
  write("one");
  WatchedFile file(path_);
  ASSERT_EQ(file.poll(), Result::kChanged);
  std::filesystem::remove(path_);
  ASSERT_EQ(file.poll(), Result::kFailed);
  EXPECT_EQ(file.error().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(file.error().message()), HasSubstr("cannot open " + path_));
  EXPECT_TRUE(file.failing());
  EXPECT_EQ(file.poll(), Result::kUnchanged) << "the same failure is reported once";
  EXPECT_TRUE(file.failing());
  write("one");
  EXPECT_EQ(file.poll(), Result::kUnchanged) << "back with the content last read";
  EXPECT_FALSE(file.failing());
  write("two");
  EXPECT_EQ(file.poll(), Result::kChanged);
}

TEST_F(WatchedFileTest, RefusesWhatIsNotARegularFileOrTooLarge) {
  std::filesystem::create_directories(path_);
  WatchedFile dir(path_);
  ASSERT_EQ(dir.poll(), Result::kFailed);
  EXPECT_THAT(std::string(dir.error().message()), HasSubstr("is not a regular file"));
  EXPECT_EQ(dir.poll(), Result::kUnchanged);
  std::filesystem::remove(path_);

  write("0123456789");
  WatchedFile small(path_, 4);
  ASSERT_EQ(small.poll(), Result::kFailed);
  EXPECT_THAT(std::string(small.error().message()), HasSubstr("is larger than 4 bytes"));
}

TEST_F(WatchedFileTest, ResetMakesTheNextPollReadTheFile) {
  write("one");
  WatchedFile file(path_);
  ASSERT_EQ(file.poll(), Result::kChanged);
  file.reset();
  EXPECT_EQ(file.poll(), Result::kChanged);
  EXPECT_EQ(file.content(), "one");
}

TEST(ReadFileTest, ReadsWholeFilesAndNamesThePathInErrors) {
  auto missing = readFile("/nonexistent/fy-file");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("cannot open /nonexistent/fy-file"));
  auto self = readFile("/proc/self/status");  // size 0 in stat, content all the same
  ASSERT_TRUE(self.ok()) << self.status();
  EXPECT_THAT(*self, HasSubstr("VmRSS"));
}

}  // namespace
}  // namespace ferry::common
