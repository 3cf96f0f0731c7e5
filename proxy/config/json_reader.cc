// JSON documents for YamlReader: Boost.JSON's SAX parser builds the same Value tree as the
// YAML path, roughly 20 times faster than yaml-cpp (docs/benchmarks/registry.md).
#include <boost/json/basic_parser_impl.hpp>

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "proxy/common/strings.h"
#include "proxy/config/value_builder.h"
#include "proxy/config/yaml_reader.h"

namespace ferry::config {
namespace {

namespace json = boost::json;
using boost::system::error_code;

bool isBlank(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; });
}

// Boost.JSON's SAX events into a ValueBuilder; `line` is set by the feeder before each line.
class JsonHandler {
 public:
  static constexpr std::size_t max_object_size = std::size_t(-1);
  static constexpr std::size_t max_array_size = std::size_t(-1);
  static constexpr std::size_t max_key_size = std::size_t(-1);
  static constexpr std::size_t max_string_size = std::size_t(-1);

  JsonHandler(std::string_view stream_key, const YamlReader::OnItem* on_item) : builder(stream_key, on_item) {}

  int line = 1;
  ValueBuilder builder;
  absl::Status error;  // from the builder; ends the parse

  bool on_document_begin(error_code&) { return true; }
  bool on_document_end(error_code&) { return true; }
  bool on_object_begin(error_code& ec) { return check(builder.open(Value::Kind::kMap, line), ec); }
  bool on_object_end(std::size_t, error_code& ec) { return check(builder.close(), ec); }
  bool on_array_begin(error_code& ec) { return check(builder.open(Value::Kind::kSequence, line), ec); }
  bool on_array_end(std::size_t, error_code& ec) { return check(builder.close(), ec); }
  bool on_key_part(json::string_view s, std::size_t, error_code&) { return part(s); }
  bool on_key(json::string_view s, std::size_t, error_code& ec) { return text(s, ec); }
  bool on_string_part(json::string_view s, std::size_t, error_code&) { return part(s); }
  bool on_string(json::string_view s, std::size_t, error_code& ec) { return text(s, ec); }
  bool on_number_part(json::string_view s, error_code&) { return part(s); }
  // Numbers and booleans keep their text, as YAML scalars do.
  bool on_int64(int64_t, json::string_view s, error_code& ec) { return text(s, ec); }
  bool on_uint64(uint64_t, json::string_view s, error_code& ec) { return text(s, ec); }
  bool on_double(double, json::string_view s, error_code& ec) { return text(s, ec); }
  bool on_bool(bool b, error_code& ec) { return text(b ? "true" : "false", ec); }
  bool on_null(error_code& ec) { return check(builder.scalar(Value::Kind::kNull, "", line), ec); }
  bool on_comment_part(json::string_view, error_code&) { return true; }
  bool on_comment(json::string_view, error_code&) { return true; }

 private:
  bool part(json::string_view s) {
    text_.append(s.data(), s.size());
    return true;
  }
  bool text(json::string_view s, error_code& ec) {
    text_.append(s.data(), s.size());
    std::string done = std::move(text_);
    text_.clear();
    return check(builder.scalar(Value::Kind::kScalar, std::move(done), line), ec);
  }
  bool check(absl::Status status, error_code& ec) {
    if (status.ok()) return true;
    error = std::move(status);
    ec = json::error::exception;
    return false;
  }
  std::string text_;
};

}  // namespace

absl::StatusOr<YamlField> YamlReader::parseJsonDocument(std::string_view text, std::string_view stream_key,
                                                        const OnItem& on_item) const {
  if (isBlank(text)) return error(1, "", "the document is empty");
  json::parse_options options;
  options.allow_comments = false;
  options.allow_trailing_commas = false;
  json::basic_parser<JsonHandler> parser(options, stream_key, &on_item);
  // Fed one line at a time so that every event knows its line: no JSON token spans lines.
  size_t pos = 0;
  int line = 1;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    end = end == std::string_view::npos ? text.size() : end + 1;
    parser.handler().line = line;
    error_code ec;
    size_t used = parser.write_some(end < text.size(), text.data() + pos, end - pos, ec);
    if (ec) {
      const JsonHandler& handler = parser.handler();
      if (!handler.error.ok()) {
        if (handler.builder.itemFailed()) return handler.error;
        return error(line, "", handler.error.message());
      }
      return error(line, "", absl::StrCat("JSON syntax error: ", ec.message()));
    }
    if (parser.done()) {
      if (!isBlank(text.substr(pos + used))) {
        size_t extra = text.find_first_not_of(" \t\r\n", pos + used);
        int extra_line = 1 + static_cast<int>(std::count(text.begin(), text.begin() + extra, '\n'));
        return error(extra_line, "", "only one JSON value is allowed per file");
      }
      break;
    }
    pos = end;
    ++line;
  }
  if (!parser.done()) {
    error_code ec;
    parser.write_some(false, nullptr, 0, ec);
    if (ec || !parser.done()) {
      return error(line, "", absl::StrCat("JSON syntax error: ", ec ? ec.message() : "incomplete document"));
    }
  }
  ValuePtr root = parser.handler().builder.root();
  if (!root || root->kind == Value::Kind::kNull) return error(1, "", "the document is empty");
  return YamlField{"", root, root->line == 0 ? 1 : root->line};
}

}  // namespace ferry::config
