#include "proxy/policy/files.h"

#include "absl/strings/str_cat.h"
#include "proxy/common/log.h"

namespace ferry::policy {

PolicyFiles::PolicyFiles(std::vector<std::string> paths) : paths_(std::move(paths)) {
  for (const auto& path : paths_) files_.push_back(std::make_unique<common::WatchedFile>(path, kMaxFileBytes));
}

std::string PolicyFiles::origin(const std::string& path) { return absl::StrCat("file ", path); }

absl::Status PolicyFiles::start(Store& store) {
  poll(store);
  return last_error_;
}

absl::Status PolicyFiles::load() {
  loaded_.clear();
  for (auto& file : files_) {
    auto result = file->poll();
    if (result == common::WatchedFile::Result::kFailed) return file->error();
    if (result != common::WatchedFile::Result::kChanged) continue;
    auto decoded = decodeYamlFile(file->content(), file->path(), origin(file->path()));
    if (!decoded.ok()) return decoded.status();
    loaded_.emplace_back(origin(file->path()), *std::move(decoded));
  }
  return absl::OkStatus();
}

void PolicyFiles::apply(Store& store) {
  for (auto& [from, objects] : loaded_) replaceFrom(store, from, std::move(objects));
  loaded_.clear();
}

bool PolicyFiles::replaceFrom(Store& store, const std::string& from, std::vector<Decoded> objects) {
  size_t count = objects.size();
  auto applied = store.replace(from, std::move(objects));
  FERRY_LOG(kInfo, "policy: %s: %u objects, %u changed, %u refused", from, static_cast<unsigned>(count),
            static_cast<unsigned>(applied.changed), static_cast<unsigned>(applied.refused.size()));
  return applied.changed > 0;
}

bool PolicyFiles::poll(Store& store) {
  bool published = false;
  last_error_ = absl::OkStatus();
  for (auto& file : files_) {
    auto result = file->poll();
    if (result == common::WatchedFile::Result::kFailed) {
      ++failures_;
      FERRY_LOG(kWarn, "policy: cannot read %s (what it applied before keeps applying): %s", file->path(),
                file->error().message());
      if (last_error_.ok()) last_error_ = file->error();
      continue;
    }
    if (result != common::WatchedFile::Result::kChanged) continue;
    auto decoded = decodeYamlFile(file->content(), file->path(), origin(file->path()));
    if (!decoded.ok()) {
      ++failures_;
      FERRY_LOG(kWarn, "policy: refused %s as a whole (what it applied before keeps applying): %s", file->path(),
                decoded.status().message());
      if (last_error_.ok()) last_error_ = decoded.status();
      continue;
    }
    published = replaceFrom(store, origin(file->path()), *std::move(decoded)) || published;
  }
  return published;
}

}  // namespace ferry::policy
