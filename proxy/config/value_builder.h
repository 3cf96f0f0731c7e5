#pragma once
// Internal to proxy/config: builds Value trees from parser events (yaml-cpp's EventHandler,
// Boost.JSON's SAX handler), optionally streaming the items of one root list so that a
// file of 150,000 entries is never held as one tree.
#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "proxy/config/yaml_reader.h"

namespace ferry::config {

class ValueBuilder {
 public:
  // Deeper documents are refused: nothing ferryd reads nests beyond a few levels.
  static constexpr size_t kMaxDepth = 64;

  ValueBuilder(std::string_view stream_key, const YamlReader::OnItem* on_item)
      : stream_key_(stream_key), on_item_(on_item) {}

  // Each returns an error to end the parse (from on_item, or too deep, or a bad alias).
  // `anchor` 0: none (YAML anchors; aliases share the anchored value, never copy it).
  absl::Status open(Value::Kind kind, int line, size_t anchor = 0);
  absl::Status close();
  absl::Status scalar(Value::Kind kind, std::string text, int line, size_t anchor = 0);
  absl::Status alias(size_t anchor);

  ValuePtr root() const { return root_; }
  // The last error came from on_item (already names its line), not from the builder.
  bool itemFailed() const { return item_failed_; }

 private:
  struct Frame {
    std::shared_ptr<Value> value;
    ValuePtr key;  // maps: the key whose value comes next, once read
    size_t anchor = 0;
  };
  absl::Status finish(ValuePtr value, size_t anchor);

  std::string_view stream_key_;
  const YamlReader::OnItem* on_item_;
  std::vector<Frame> stack_;
  std::map<size_t, ValuePtr> anchors_;
  ValuePtr root_;
  size_t streamed_ = 0;
  bool item_failed_ = false;
};

}  // namespace ferry::config
