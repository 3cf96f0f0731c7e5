// JSON documents for YamlReader: Boost.JSON's SAX parser builds the same Value tree as the
// YAML path, roughly 20 times faster than yaml-cpp (docs/benchmarks/registry.md).
#include <boost/json/basic_parser_impl.hpp>

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "proxy/common/strings.h"
#include "proxy/config/yaml_reader.h"

namespace ferry::config {
namespace {

namespace json = boost::json;
using boost::system::error_code;

bool isBlank(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; });
}

// Builds Values as the parser reports them; `line` is set by the feeder before each line.
class TreeBuilder {
 public:
  static constexpr std::size_t max_object_size = std::size_t(-1);
  static constexpr std::size_t max_array_size = std::size_t(-1);
  static constexpr std::size_t max_key_size = std::size_t(-1);
  static constexpr std::size_t max_string_size = std::size_t(-1);

  TreeBuilder(std::string_view stream_key, const YamlReader::OnItem* on_item)
      : stream_key_(stream_key), on_item_(on_item) {}

  int line = 1;
  ValuePtr root;
  absl::Status item_error;  // from on_item; ends the parse

  bool on_document_begin(error_code&) { return true; }
  bool on_document_end(error_code&) { return true; }
  bool on_object_begin(error_code&) { return open(Value::Kind::kMap); }
  bool on_object_end(std::size_t, error_code& ec) { return close(ec); }
  bool on_array_begin(error_code&) { return open(Value::Kind::kSequence); }
  bool on_array_end(std::size_t, error_code& ec) { return close(ec); }
  bool on_key_part(json::string_view s, std::size_t, error_code&) {
    text_.append(s.data(), s.size());
    return true;
  }
  bool on_key(json::string_view s, std::size_t, error_code&) {
    text_.append(s.data(), s.size());
    stack_.back().key = scalar(Value::Kind::kScalar);
    return true;
  }
  bool on_string_part(json::string_view s, std::size_t, error_code&) {
    text_.append(s.data(), s.size());
    return true;
  }
  bool on_string(json::string_view s, std::size_t, error_code& ec) { return number(s, ec); }
  bool on_number_part(json::string_view s, error_code&) {
    text_.append(s.data(), s.size());
    return true;
  }
  bool on_int64(int64_t, json::string_view s, error_code& ec) { return number(s, ec); }
  bool on_uint64(uint64_t, json::string_view s, error_code& ec) { return number(s, ec); }
  bool on_double(double, json::string_view s, error_code& ec) { return number(s, ec); }
  bool on_bool(bool b, error_code& ec) { return number(b ? "true" : "false", ec); }
  bool on_null(error_code& ec) { return finish(scalar(Value::Kind::kNull), ec); }
  bool on_comment_part(json::string_view, error_code&) { return true; }
  bool on_comment(json::string_view, error_code&) { return true; }

 private:
  struct Frame {
    std::shared_ptr<Value> value;
    ValuePtr key;  // maps: the key whose value comes next
  };

  ValuePtr scalar(Value::Kind kind) {
    auto value = std::make_shared<Value>();
    value->kind = kind;
    value->line = kind == Value::Kind::kNull ? 0 : line;
    value->scalar = std::move(text_);
    text_.clear();
    return value;
  }
  // Strings, numbers and booleans are all scalars holding their text.
  bool number(json::string_view s, error_code& ec) {
    text_.append(s.data(), s.size());
    return finish(scalar(Value::Kind::kScalar), ec);
  }
  bool open(Value::Kind kind) {
    auto value = std::make_shared<Value>();
    value->kind = kind;
    value->line = line;
    stack_.push_back(Frame{std::move(value), nullptr});
    return true;
  }
  bool close(error_code& ec) {
    ValuePtr done = std::move(stack_.back().value);
    stack_.pop_back();
    return finish(std::move(done), ec);
  }
  bool finish(ValuePtr value, error_code& ec) {
    if (stack_.empty()) {
      root = std::move(value);
      return true;
    }
    Frame& top = stack_.back();
    if (top.value->kind == Value::Kind::kMap) {
      top.value->entries.emplace_back(std::move(top.key), std::move(value));
      return true;
    }
    // An item of the root's streamed list: handed over, not kept.
    if (on_item_ != nullptr && *on_item_ && stack_.size() == 2 && stack_[0].key &&
        stack_[0].key->scalar == stream_key_) {
      int fallback = top.value->line;
      YamlField field{absl::StrCat(common::toAbsl(stream_key_), "[", streamed_++, "]"), value,
                      value->kind == Value::Kind::kNull || value->line == 0 ? fallback : value->line};
      item_error = (*on_item_)(field);
      if (!item_error.ok()) {
        ec = json::error::exception;
        return false;
      }
      return true;
    }
    top.value->items.push_back(std::move(value));
    return true;
  }

  std::string_view stream_key_;
  const YamlReader::OnItem* on_item_;
  std::vector<Frame> stack_;
  std::string text_;
  size_t streamed_ = 0;
};

}  // namespace

absl::StatusOr<YamlField> YamlReader::parseJsonDocument(std::string_view text, std::string_view stream_key,
                                                        const OnItem& on_item) const {
  if (isBlank(text)) return error(1, "", "the document is empty");
  json::parse_options options;
  options.allow_comments = false;
  options.allow_trailing_commas = false;
  json::basic_parser<TreeBuilder> parser(options, stream_key, &on_item);
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
      if (!parser.handler().item_error.ok()) return parser.handler().item_error;
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
  ValuePtr root = parser.handler().root;
  if (!root || root->kind == Value::Kind::kNull) return error(1, "", "the document is empty");
  return YamlField{"", root, root->line == 0 ? 1 : root->line};
}

}  // namespace ferry::config
