#include "proxy/ferryctl/json_read.h"

#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>

#include "absl/strings/str_cat.h"

namespace ferry::ferryctl {

namespace json = boost::json;

absl::StatusOr<json::object> parseObject(absl::string_view text, absl::string_view what) {
  boost::system::error_code ec;
  json::value v = json::parse(json::string_view(text.data(), text.size()), ec);
  if (ec || !v.is_object()) {
    return absl::DataLossError(absl::StrCat("ferryd's answer to ", what, " is not a JSON object",
                                            ec ? absl::StrCat(" (", ec.message(), ")") : ""));
  }
  return std::move(v.as_object());
}

std::string text(const json::object& o, std::string_view key, absl::string_view fallback) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr || !v->is_string()) return std::string(fallback);
  return std::string(v->get_string());
}

bool flag(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  return v != nullptr && v->is_bool() && v->get_bool();
}

const json::object& member(const json::object& o, std::string_view key) {
  static const json::object kEmpty;
  const json::value* v = o.if_contains(key);
  return v != nullptr && v->is_object() ? v->get_object() : kEmpty;
}

const json::array& list(const json::object& o, std::string_view key) {
  static const json::array kEmpty;
  const json::value* v = o.if_contains(key);
  return v != nullptr && v->is_array() ? v->get_array() : kEmpty;
}

std::string number(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr) return "?";
  if (v->is_int64()) return absl::StrCat(v->get_int64());
  if (v->is_uint64()) return absl::StrCat(v->get_uint64());
  return "?";
}

int64_t integer(const json::object& o, std::string_view key, int64_t fallback) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr) return fallback;
  if (v->is_int64()) return v->get_int64();
  if (v->is_uint64()) return static_cast<int64_t>(v->get_uint64());
  return fallback;
}

std::string plural(size_t n, absl::string_view one, absl::string_view many) {
  return absl::StrCat(n, " ", n == 1 ? one : many);
}

}  // namespace ferry::ferryctl
