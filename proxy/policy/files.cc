#include "proxy/policy/files.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "proxy/common/log.h"

namespace ferry::policy {

PolicyFiles::PolicyFiles(const std::vector<std::string>& paths) : files_(watch(paths)) {}

PolicyFiles::Files PolicyFiles::watch(const std::vector<std::string>& paths) {
  Files files;
  for (const auto& path : paths) files.push_back(std::make_unique<common::WatchedFile>(path, kMaxFileBytes));
  return files;
}

std::string PolicyFiles::origin(const std::string& path) { return absl::StrCat("file ", path); }

absl::Status PolicyFiles::start(Store& store) {
  poll(store);
  return last_error_;
}

absl::StatusOr<std::optional<std::vector<Decoded>>> PolicyFiles::read(common::WatchedFile& file) {
  auto result = file.poll();
  if (result == common::WatchedFile::Result::kFailed) return file.error();
  if (result != common::WatchedFile::Result::kChanged) return std::nullopt;
  auto decoded = decodeYamlFile(file.content(), file.path(), origin(file.path()));
  if (!decoded.ok()) return decoded.status();
  return std::optional(*std::move(decoded));
}

absl::Status PolicyFiles::load(const std::vector<std::string>& paths) {
  Files next = watch(paths);
  std::vector<std::pair<std::string, std::vector<Decoded>>> loaded;
  for (auto& file : next) {
    auto objects = read(*file);  // a new WatchedFile: changed or failed
    if (!objects.ok()) return objects.status();
    if (*objects) loaded.emplace_back(origin(file->path()), std::move(**objects));
  }
  next_files_ = std::move(next);
  loaded_ = std::move(loaded);
  return absl::OkStatus();
}

void PolicyFiles::apply(Store& store) {
  for (auto& [from, objects] : loaded_) replaceFrom(store, from, std::move(objects));
  loaded_.clear();
  // What files no longer listed applied goes, after the new ones are in.
  for (const auto& file : files_) {
    bool listed = std::any_of(next_files_.begin(), next_files_.end(),
                              [&](const auto& next) { return next->path() == file->path(); });
    if (!listed) store.replace(origin(file->path()), {});
  }
  files_ = std::move(next_files_);
  next_files_.clear();
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
    auto objects = read(*file);
    if (!objects.ok()) {
      ++failures_;
      if (file->failing()) {  // not read at all
        FERRY_LOG(kWarn, "policy: cannot read %s (what it applied before keeps applying): %s", file->path(),
                  objects.status().message());
      } else {
        FERRY_LOG(kWarn, "policy: refused %s as a whole (what it applied before keeps applying): %s", file->path(),
                  objects.status().message());
      }
      if (last_error_.ok()) last_error_ = objects.status();
      continue;
    }
    if (*objects) published = replaceFrom(store, origin(file->path()), std::move(**objects)) || published;
  }
  return published;
}

}  // namespace ferry::policy
