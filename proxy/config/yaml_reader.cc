#include "proxy/config/yaml_reader.h"

#include <algorithm>
#include <charconv>
#include <exception>
#include <sstream>

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/parser.h>
#include <yaml-cpp/exceptions.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proxy/common/strings.h"
#include "proxy/config/value_builder.h"

namespace ferry::config {
namespace {

const char* typeName(const Value& value) {
  switch (value.kind) {
    case Value::Kind::kNull:
      return "an empty value";
    case Value::Kind::kScalar:
      return "a scalar";
    case Value::Kind::kSequence:
      return "a list";
    case Value::Kind::kMap:
      return "a map";
  }
  return "nothing";
}

// An empty value has no line of its own (yaml-cpp gives it the position of the *next*
// token, often the next line), so for those the caller's line (the key's) is shown.
int lineOf(const Value& value, int fallback) {
  return value.kind == Value::Kind::kNull || value.line == 0 ? fallback : value.line;
}

// yaml-cpp's events into a ValueBuilder, without building yaml-cpp's own node tree (which
// took 7 KB per workload of a big workloads file). A builder error is thrown through the
// parser (yaml-cpp unwinds on exceptions) and caught in parseDocument.
class YamlHandler : public YAML::EventHandler {
 public:
  struct Stop {
    absl::Status status;
    int line;
    bool from_item;
  };

  YamlHandler(std::string_view stream_key, const YamlReader::OnItem* on_item) : builder(stream_key, on_item) {}

  ValueBuilder builder;
  YAML::Mark start;  // of the document
  int line = 1;      // of the last event

  void OnDocumentStart(const YAML::Mark& mark) override { start = mark; }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    check(builder.scalar(Value::Kind::kNull, "", at(mark), anchor));
  }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    at(mark);
    check(builder.alias(anchor));
  }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor, const std::string& value) override {
    check(builder.scalar(Value::Kind::kScalar, value, at(mark), anchor));
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    check(builder.open(Value::Kind::kSequence, at(mark), anchor));
  }
  void OnSequenceEnd() override { check(builder.close()); }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    check(builder.open(Value::Kind::kMap, at(mark), anchor));
  }
  void OnMapEnd() override { check(builder.close()); }

 private:
  int at(const YAML::Mark& mark) {
    if (!mark.is_null()) line = mark.line + 1;
    return line;
  }
  void check(absl::Status status) {
    if (!status.ok()) throw Stop{std::move(status), line, builder.itemFailed()};
  }
};

// Whether the stream holds another document after the first, and where. yaml-cpp 0.7
// (Debian 12) reports some malformed input (e.g. `, su"a l`) as an empty document over and
// over without consuming it: YAML::LoadAll then never returns and allocates a node per round
// until memory runs out (found by tests/fuzz/config_fuzzer). Every document starts after the
// one before it, so a second one at the first one's position is that loop.
class NextDocumentProbe : public YAML::EventHandler {
 public:
  YAML::Mark start;
  YAML::Mark content = YAML::Mark::null_mark();  // of its first node

  void OnDocumentStart(const YAML::Mark& mark) override { start = mark; }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t) override { seen(mark); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override { seen(mark); }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t, const std::string&) override {
    seen(mark);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    seen(mark);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    seen(mark);
  }
  void OnMapEnd() override {}

 private:
  void seen(const YAML::Mark& mark) {
    if (content.is_null()) content = mark;
  }
};

std::string joinPath(std::string_view parent, std::string_view key) {
  return parent.empty() ? std::string(key)
                        : absl::StrCat(common::toAbsl(parent), ".", common::toAbsl(key));
}

}  // namespace

std::optional<YamlField> YamlMap::find(std::string_view key) const {
  for (const auto& [name, field] : fields_) {
    if (name == key) return field;
  }
  return std::nullopt;
}

absl::StatusOr<YamlField> YamlReader::parseDocument(std::string_view text, std::string_view stream_key,
                                                    const OnItem& on_item) const {
  try {
    std::string copy(text);
    std::istringstream in(copy);
    YAML::Parser parser(in);
    YamlHandler handler(stream_key, &on_item);
    if (!parser.HandleNextDocument(handler)) return error(1, "", "the document is empty");
    NextDocumentProbe next;
    if (parser.HandleNextDocument(next)) {
      if (next.start.pos <= handler.start.pos) {
        return error(next.start.line + 1, "", "YAML syntax error: the parser cannot go past this point");
      }
      const YAML::Mark& at = next.content.is_null() ? next.start : next.content;
      return error(at.line + 1, "", "only one YAML document is allowed per file");
    }
    ValuePtr root = handler.builder.root();
    if (!root || root->kind == Value::Kind::kNull) return error(1, "", "the document is empty");
    return YamlField{"", root, lineOf(*root, 1)};
  } catch (const YamlHandler::Stop& stop) {
    if (stop.from_item) return stop.status;
    return error(stop.line, "", stop.status.message());
  } catch (const YAML::Exception& e) {
    return error(e.mark.is_null() ? 1 : e.mark.line + 1, "", absl::StrCat("YAML syntax error: ", e.msg));
  } catch (const std::exception& e) {
    // yaml-cpp may also throw plain std:: exceptions (e.g. bad_alloc on absurd input).
    return error(1, "", absl::StrCat("cannot parse YAML: ", e.what()));
  }
}

absl::StatusOr<std::vector<YamlField>> YamlReader::parseDocuments(std::string_view text) const {
  try {
    std::string copy(text);
    std::istringstream in(copy);
    YAML::Parser parser(in);
    std::vector<YamlField> out;
    int last_start = -1;
    for (;;) {
      YamlHandler handler("", nullptr);
      if (!parser.HandleNextDocument(handler)) break;
      // yaml-cpp can return a "document" without moving on after some syntax errors.
      if (handler.start.pos <= last_start) {
        return error(handler.start.line + 1, "", "YAML syntax error: the parser cannot go past this point");
      }
      last_start = handler.start.pos;
      ValuePtr root = handler.builder.root();
      if (root && root->kind != Value::Kind::kNull) out.push_back(YamlField{"", root, lineOf(*root, 1)});
    }
    return out;
  } catch (const YamlHandler::Stop& stop) {
    return error(stop.line, "", stop.status.message());
  } catch (const YAML::Exception& e) {
    return error(e.mark.is_null() ? 1 : e.mark.line + 1, "", absl::StrCat("YAML syntax error: ", e.msg));
  } catch (const std::exception& e) {
    return error(1, "", absl::StrCat("cannot parse YAML: ", e.what()));
  }
}

absl::Status YamlReader::error(int line, std::string_view path, absl::string_view what) const {
  if (path.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(source_name_, ":", line, ": ", what));
  }
  return absl::InvalidArgumentError(
      absl::StrCat(source_name_, ":", line, ": ", common::toAbsl(path), ": ", what));
}

absl::StatusOr<YamlMap> YamlReader::map(
    const YamlField& field, std::initializer_list<std::string_view> allowed_keys) const {
  return readMap(field, &allowed_keys);
}

absl::StatusOr<YamlMap> YamlReader::anyMap(const YamlField& field) const { return readMap(field, nullptr); }

absl::StatusOr<YamlMap> YamlReader::readMap(const YamlField& field,
                                            const std::initializer_list<std::string_view>* allowed) const {
  if (field.node->kind != Value::Kind::kMap) {
    return error(field, absl::StrCat("expected a map, got ", typeName(*field.node)));
  }
  YamlMap out;
  out.path_ = field.path;
  out.line_ = field.line;
  std::vector<int> key_lines;
  for (const auto& [key, value] : field.node->entries) {
    int key_line = lineOf(*key, field.line);
    if (key->kind != Value::Kind::kScalar) {
      return error(key_line, field.path,
                   absl::StrCat("keys must be plain strings, got ", typeName(*key)));
    }
    const std::string& name = key->scalar;
    std::string path = joinPath(field.path, name);
    if (allowed != nullptr && std::find(allowed->begin(), allowed->end(), name) == allowed->end()) {
      return error(key_line, path,
                   absl::StrCat("unknown key '", name, "' (expected one of: ",
                                absl::StrJoin(*allowed, ", ",
                                              [](std::string* out, std::string_view key) {
                                                out->append(key);
                                              }),
                                ")"));
    }
    // yaml-cpp keeps both entries of a repeated key; which one wins would be an accident.
    for (size_t i = 0; i < out.fields_.size(); ++i) {
      if (out.fields_[i].first == name) {
        return error(key_line, path,
                     absl::StrCat("duplicate key (first defined at line ", key_lines[i], ")"));
      }
    }
    key_lines.push_back(key_line);
    out.fields_.emplace_back(name, YamlField{std::move(path), value, lineOf(*value, key_line)});
  }
  return out;
}

absl::StatusOr<YamlField> YamlReader::require(const YamlMap& map, std::string_view key) const {
  if (auto field = map.find(key)) return *std::move(field);
  return error(map.line(), joinPath(map.path(), key), "required key is missing");
}

absl::StatusOr<std::vector<YamlField>> YamlReader::sequence(const YamlField& field) const {
  if (field.node->kind != Value::Kind::kSequence) {
    return error(field, absl::StrCat("expected a list, got ", typeName(*field.node)));
  }
  std::vector<YamlField> out;
  out.reserve(field.node->items.size());
  for (size_t index = 0; index < field.node->items.size(); ++index) {
    const ValuePtr& item = field.node->items[index];
    out.push_back(YamlField{absl::StrCat(field.path, "[", index, "]"), item, lineOf(*item, field.line)});
  }
  return out;
}

absl::StatusOr<std::vector<YamlField>> YamlReader::scalarOrSequence(const YamlField& field) const {
  if (field.node->kind == Value::Kind::kScalar) return std::vector<YamlField>{field};
  if (field.node->kind != Value::Kind::kSequence) {
    return error(
        field, absl::StrCat("expected a string or a list of strings, got ", typeName(*field.node)));
  }
  return sequence(field);
}

absl::StatusOr<std::string> YamlReader::string(const YamlField& field) const {
  if (field.node->kind != Value::Kind::kScalar) {
    return error(field, absl::StrCat("expected a string, got ", typeName(*field.node)));
  }
  return field.node->scalar;
}

absl::StatusOr<int64_t> YamlReader::integer(const YamlField& field, int64_t min,
                                            int64_t max) const {
  auto text = string(field);
  if (!text.ok()) return text.status();
  std::string_view digits = *text;
  bool negative = !digits.empty() && digits.front() == '-';
  if (negative) digits.remove_prefix(1);
  // 18 digits always fit in int64_t; every range we check is far smaller.
  if (digits.empty() || digits.size() > 18 ||
      digits.find_first_not_of("0123456789") != std::string_view::npos) {
    return error(field, absl::StrCat("'", *text, "' is not a whole number"));
  }
  int64_t value = 0;
  std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (negative) value = -value;
  if (value < min || value > max) {
    return error(field, absl::StrCat("must be between ", min, " and ", max, ", got ", value));
  }
  return value;
}

absl::StatusOr<bool> YamlReader::boolean(const YamlField& field) const {
  auto text = string(field);
  if (!text.ok()) return text.status();
  // YAML 1.2 core schema only: YAML 1.1's yes/no/on/off are too easy to misread.
  if (*text == "true" || *text == "True" || *text == "TRUE") return true;
  if (*text == "false" || *text == "False" || *text == "FALSE") return false;
  return error(field, absl::StrCat("'", *text, "' is not a boolean (use true or false)"));
}

absl::StatusOr<common::Millis> YamlReader::positiveDuration(const YamlField& field) const {
  auto text = string(field);
  if (!text.ok()) return text.status();
  auto duration = common::parseDuration(*text);
  if (!duration.ok()) return error(field, duration.status().message());
  if (duration->count() <= 0) {
    return error(field, absl::StrCat("'", *text, "' must be greater than zero"));
  }
  return *duration;
}

}  // namespace ferry::config
