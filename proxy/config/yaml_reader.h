#pragma once
// Strict reading of the files an operator or a controller writes (the node config, the
// workloads file), in YAML (yaml-cpp) or JSON (Boost.JSON). Both become the same small tree
// (Value), read through one YamlReader. Every error reads
// "<source>:<line>: <dotted.key>: <what is wrong>" so an operator can go straight to the
// line. Unknown and duplicate keys are errors: a typo must never fall back to a default
// silently. yaml-cpp stays behind this header: other libraries get parsed structs.
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proxy/common/duration.h"

namespace ferry::config {

// One node of a parsed document. JSON scalars (strings, numbers, booleans) keep their text,
// as YAML scalars do: the reader decides what a key's text must be.
struct Value {
  enum class Kind { kNull, kScalar, kSequence, kMap };
  Kind kind = Kind::kNull;
  int line = 0;  // 1-based; 0 for an empty value (the key's line is shown instead)
  std::string scalar;
  std::vector<std::shared_ptr<const Value>> items;  // kSequence
  std::vector<std::pair<std::shared_ptr<const Value>, std::shared_ptr<const Value>>> entries;  // kMap: key, value
};
using ValuePtr = std::shared_ptr<const Value>;

// One value together with where it came from.
struct YamlField {
  std::string path;  // dotted key: "timeouts.connect", "workloads[2].ips[0]"; "" for the root
  ValuePtr node;
  int line = 1;  // 1-based
};

// A map whose keys were all checked against an allowed set (and for duplicates).
class YamlMap {
 public:
  const std::string& path() const { return path_; }
  int line() const { return line_; }
  std::optional<YamlField> find(std::string_view key) const;
  // Every entry, in the document's order.
  const std::vector<std::pair<std::string, YamlField>>& fields() const { return fields_; }

 private:
  friend class YamlReader;
  std::string path_;
  int line_ = 1;
  std::vector<std::pair<std::string, YamlField>> fields_;
};

class YamlReader {
 public:
  explicit YamlReader(std::string_view source_name) : source_name_(source_name) {}

  // With `stream_key`, the items of the root's `stream_key` list are handed to `on_item`
  // (path "<stream_key>[i]") as soon as each is complete and left out of the returned tree,
  // so that a file of 150,000 entries is never held as one tree; an error from on_item ends
  // the parse and is returned as it is.
  using OnItem = std::function<absl::Status(const YamlField&)>;
  // The single document in `text`. A syntax error, an empty document and more than one
  // document are errors. Aliases share the anchored value (nothing is expanded). Never throws.
  absl::StatusOr<YamlField> parseDocument(std::string_view text, std::string_view stream_key = "",
                                          const OnItem& on_item = nullptr) const;
  // Every non-empty document of a multi-document YAML stream (`---` separated), in order:
  // a file of Kubernetes objects. A syntax error anywhere refuses the whole stream.
  absl::StatusOr<std::vector<YamlField>> parseDocuments(std::string_view text) const;
  // The same for JSON (Boost.JSON); line numbers are exact (the text is fed line by line).
  absl::StatusOr<YamlField> parseJsonDocument(std::string_view text, std::string_view stream_key = "",
                                              const OnItem& on_item = nullptr) const;

  // `what` is an absl::string_view so that a Status message passes straight through:
  // Debian's abseil does not alias absl::string_view to std::string_view.
  absl::Status error(int line, std::string_view path, absl::string_view what) const;
  absl::Status error(const YamlField& field, absl::string_view what) const {
    return error(field.line, field.path, what);
  }

  absl::StatusOr<YamlMap> map(const YamlField& field,
                              std::initializer_list<std::string_view> allowed_keys) const;
  // A map whose keys are data, not a schema (label sets, port tables): any plain-string key,
  // each at most once.
  absl::StatusOr<YamlMap> anyMap(const YamlField& field) const;
  // "missing required key" at the map's line when absent.
  absl::StatusOr<YamlField> require(const YamlMap& map, std::string_view key) const;
  absl::StatusOr<std::vector<YamlField>> sequence(const YamlField& field) const;
  // A sequence of scalars, or one scalar standing for a one-element list.
  absl::StatusOr<std::vector<YamlField>> scalarOrSequence(const YamlField& field) const;

  absl::StatusOr<std::string> string(const YamlField& field) const;
  absl::StatusOr<int64_t> integer(const YamlField& field, int64_t min, int64_t max) const;
  absl::StatusOr<bool> boolean(const YamlField& field) const;
  absl::StatusOr<common::Millis> positiveDuration(const YamlField& field) const;

 private:
  absl::StatusOr<YamlMap> readMap(const YamlField& field,
                                  const std::initializer_list<std::string_view>* allowed) const;
  std::string source_name_;
};

}  // namespace ferry::config
