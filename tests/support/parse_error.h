#pragma once
// The refusal of a parser of an operator's file (ferry.yaml, the workloads file): the rule
// that every error names the file and the line, checked one way for all of them. Header-only,
// linked by tests only.
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace ferry::test_support {

// `result` is InvalidArgument, its message starts with "<source>:<line>: <prefix>" and, when
// `detail` is given, contains it.
template <typename T>
void expectErrorAt(const absl::StatusOr<T>& result, const std::string& source, int line, const std::string& prefix,
                   const std::string& detail = "") {
  ASSERT_FALSE(result.ok()) << "expected an error at line " << line;
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  std::string message(result.status().message());
  EXPECT_THAT(message, ::testing::StartsWith(absl::StrCat(source, ":", line, ": ", prefix)));
  if (!detail.empty()) {
    EXPECT_THAT(message, ::testing::HasSubstr(detail));
  }
}

}  // namespace ferry::test_support
