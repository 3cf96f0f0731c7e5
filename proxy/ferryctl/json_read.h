#pragma once
// Reading ferryd's JSON answers in ferryctl: lenient getters (a missing or mistyped member
// reads as a fallback, so an older or newer ferryd still renders) and one parse that says
// which answer was not JSON.
#include <cstdint>
#include <string>
#include <string_view>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ferry::ferryctl {

absl::StatusOr<boost::json::object> parseObject(absl::string_view text, absl::string_view what);
// A string member; `fallback` when absent, null or not a string.
std::string text(const boost::json::object& o, std::string_view key, absl::string_view fallback = "");
bool flag(const boost::json::object& o, std::string_view key);
const boost::json::object& member(const boost::json::object& o, std::string_view key);
const boost::json::array& list(const boost::json::object& o, std::string_view key);
// An integer member as text; "?" when absent or not an integer.
std::string number(const boost::json::object& o, std::string_view key);
// An integer member; `fallback` when absent or not an integer.
int64_t integer(const boost::json::object& o, std::string_view key, int64_t fallback = 0);
std::string plural(size_t n, absl::string_view one, absl::string_view many);

}  // namespace ferry::ferryctl
