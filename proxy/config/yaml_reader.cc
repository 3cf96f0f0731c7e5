#include "proxy/config/yaml_reader.h"

#include <algorithm>
#include <charconv>
#include <exception>
#include <sstream>

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/parser.h>
#include <yaml-cpp/yaml.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proxy/common/strings.h"

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

// Aliases are expanded into copies, so a document of a few lines could otherwise grow into
// billions of values ("billion laughs"); and an anchor may refer to itself.
constexpr int kMaxDepth = 64;

class YamlConverter {
 public:
  explicit YamlConverter(size_t max_values) : budget_(max_values) {}
  // nullptr when the document nests too deeply or expands past the budget.
  ValuePtr convert(const YAML::Node& node, int depth = 0) {
    if (depth > kMaxDepth || budget_ == 0) return nullptr;
    --budget_;
    auto value = std::make_shared<Value>();
    YAML::Mark mark = node.Mark();
    value->line = mark.is_null() ? 0 : mark.line + 1;
    switch (node.Type()) {
      case YAML::NodeType::Scalar:
        value->kind = Value::Kind::kScalar;
        value->scalar = node.Scalar();
        break;
      case YAML::NodeType::Sequence:
        value->kind = Value::Kind::kSequence;
        value->items.reserve(node.size());
        for (auto it = node.begin(); it != node.end(); ++it) {
          auto item = convert(*it, depth + 1);
          if (!item) return nullptr;
          value->items.push_back(std::move(item));
        }
        break;
      case YAML::NodeType::Map:
        value->kind = Value::Kind::kMap;
        for (auto it = node.begin(); it != node.end(); ++it) {
          auto key = convert(it->first, depth + 1);
          auto item = key ? convert(it->second, depth + 1) : nullptr;
          if (!item) return nullptr;
          value->entries.emplace_back(std::move(key), std::move(item));
        }
        break;
      default:
        value->line = 0;  // null or undefined: the key's line is shown
        break;
    }
    return value;
  }

 private:
  size_t budget_;
};

// Walks the stream's documents without building them: how many there are (at most two are
// looked at) and where the second one's content starts. Needed because yaml-cpp 0.7
// (Debian 12) reports some malformed input (e.g. `, su"a l`) as an empty document over and
// over without consuming it: YAML::LoadAll then never returns and allocates a node per round
// until memory runs out (found by tests/fuzz/config_fuzzer). Every document starts after
// the one before it, so a second one at the first one's position is that loop.
class DocumentProbe : public YAML::EventHandler {
 public:
  static constexpr int kMaxDocuments = 2;
  int documents = 0;
  size_t values = 0;  // nodes and aliases as written
  YAML::Mark first_start;
  YAML::Mark second_start;
  YAML::Mark second_content = YAML::Mark::null_mark();  // until the second document's first node

  void OnDocumentStart(const YAML::Mark& mark) override {
    ++documents;
    (documents == 1 ? first_start : second_start) = mark;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t) override { content(mark); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override { content(mark); }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                const std::string&) override {
    content(mark);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    content(mark);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    content(mark);
  }
  void OnMapEnd() override {}

 private:
  void content(const YAML::Mark& mark) {
    ++values;
    if (documents == 2 && second_content.is_null()) second_content = mark;
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

absl::StatusOr<YamlField> YamlReader::parseDocument(std::string_view text) const {
  try {
    std::string copy(text);
    std::istringstream in(copy);
    YAML::Parser parser(in);
    DocumentProbe probe;
    while (probe.documents < DocumentProbe::kMaxDocuments && parser.HandleNextDocument(probe)) {
    }
    if (probe.documents == DocumentProbe::kMaxDocuments) {
      if (probe.second_start.pos <= probe.first_start.pos) {
        return error(probe.second_start.line + 1, "", "YAML syntax error: the parser cannot go past this point");
      }
      const YAML::Mark& at = probe.second_content.is_null() ? probe.second_start : probe.second_content;
      return error(at.line + 1, "", "only one YAML document is allowed per file");
    }
    YAML::Node doc = YAML::Load(copy);
    if (!doc.IsDefined() || doc.IsNull()) return error(1, "", "the document is empty");
    // Generous for anchors reused a few times, far below what expanding aliases can reach.
    YamlConverter converter(std::max<size_t>(probe.values * 8, 4096));
    ValuePtr root = converter.convert(doc);
    if (!root) {
      return error(1, "", absl::StrCat("the document nests deeper than ", kMaxDepth,
                                       " levels or its aliases expand too far"));
    }
    return YamlField{"", root, lineOf(*root, 1)};
  } catch (const YAML::Exception& e) {
    return error(e.mark.is_null() ? 1 : e.mark.line + 1, "",
                 absl::StrCat("YAML syntax error: ", e.msg));
  } catch (const std::exception& e) {
    // yaml-cpp may also throw plain std:: exceptions (e.g. bad_alloc on absurd input).
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
    if (std::find(allowed_keys.begin(), allowed_keys.end(), name) == allowed_keys.end()) {
      return error(key_line, path,
                   absl::StrCat("unknown key '", name, "' (expected one of: ",
                                absl::StrJoin(allowed_keys, ", ",
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
