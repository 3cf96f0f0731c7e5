#pragma once
// Strict reading of small hand-written YAML files (the node config, the workloads file).
// Every error reads "<source>:<line>: <dotted.key>: <what is wrong>" so an operator can go
// straight to the line. Unknown and duplicate keys are errors: a typo must never fall back
// to a default silently.
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proxy/common/duration.h"

namespace ferry::config {

// One value together with where it came from.
struct YamlField {
  std::string path;  // dotted key: "timeouts.connect", "workloads[2].ips[0]"; "" for the root
  YAML::Node node;
  int line = 1;  // 1-based
};

// A map whose keys were all checked against an allowed set (and for duplicates).
class YamlMap {
 public:
  const std::string& path() const { return path_; }
  int line() const { return line_; }
  std::optional<YamlField> find(std::string_view key) const;

 private:
  friend class YamlReader;
  std::string path_;
  int line_ = 1;
  std::vector<std::pair<std::string, YamlField>> fields_;
};

class YamlReader {
 public:
  explicit YamlReader(std::string_view source_name) : source_name_(source_name) {}

  // The single document in `text`. A syntax error, an empty document and more than one
  // document are errors. Never throws.
  absl::StatusOr<YamlField> parseDocument(std::string_view text) const;

  // `what` is an absl::string_view so that a Status message passes straight through:
  // Debian's abseil does not alias absl::string_view to std::string_view.
  absl::Status error(int line, std::string_view path, absl::string_view what) const;
  absl::Status error(const YamlField& field, absl::string_view what) const {
    return error(field.line, field.path, what);
  }

  absl::StatusOr<YamlMap> map(const YamlField& field,
                              std::initializer_list<std::string_view> allowed_keys) const;
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
  std::string source_name_;
};

}  // namespace ferry::config
