#include "proxy/config/value_builder.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "proxy/common/strings.h"

namespace ferry::config {

absl::Status ValueBuilder::open(Value::Kind kind, int line, size_t anchor) {
  if (stack_.size() >= kMaxDepth) {
    return absl::InvalidArgumentError(absl::StrCat("the document nests deeper than ", kMaxDepth, " levels"));
  }
  auto value = std::make_shared<Value>();
  value->kind = kind;
  value->line = line;
  stack_.push_back(Frame{std::move(value), nullptr, anchor});
  return absl::OkStatus();
}

absl::Status ValueBuilder::close() {
  Frame done = std::move(stack_.back());
  stack_.pop_back();
  return finish(std::move(done.value), done.anchor);
}

absl::Status ValueBuilder::scalar(Value::Kind kind, std::string text, int line, size_t anchor) {
  auto value = std::make_shared<Value>();
  value->kind = kind;
  value->line = kind == Value::Kind::kNull ? 0 : line;
  value->scalar = std::move(text);
  return finish(std::move(value), anchor);
}

absl::Status ValueBuilder::alias(size_t anchor) {
  auto it = anchors_.find(anchor);
  // An alias inside the value it names would make the tree a cycle.
  if (it == anchors_.end()) return absl::InvalidArgumentError("an alias refers to a value that is not complete");
  return finish(it->second, 0);
}

absl::Status ValueBuilder::finish(ValuePtr value, size_t anchor) {
  if (anchor != 0) anchors_[anchor] = value;
  if (stack_.empty()) {
    root_ = std::move(value);
    return absl::OkStatus();
  }
  Frame& top = stack_.back();
  if (top.value->kind == Value::Kind::kMap) {
    if (!top.key) {
      top.key = std::move(value);
    } else {
      top.value->entries.emplace_back(std::move(top.key), std::move(value));
      top.key = nullptr;
    }
    return absl::OkStatus();
  }
  // An item of the root's streamed list: handed over, not kept.
  if (on_item_ != nullptr && *on_item_ && stack_.size() == 2 && stack_[0].key &&
      stack_[0].key->kind == Value::Kind::kScalar && stack_[0].key->scalar == stream_key_) {
    int fallback = top.value->line;
    YamlField field{absl::StrCat(common::toAbsl(stream_key_), "[", streamed_++, "]"), value,
                    value->kind == Value::Kind::kNull || value->line == 0 ? fallback : value->line};
    absl::Status status = (*on_item_)(field);
    item_failed_ = !status.ok();
    return status;
  }
  top.value->items.push_back(std::move(value));
  return absl::OkStatus();
}

}  // namespace ferry::config
