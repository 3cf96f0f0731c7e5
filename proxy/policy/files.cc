#include "proxy/policy/files.h"

#include "absl/strings/str_cat.h"
#include "proxy/common/log.h"

namespace ferry::policy {

PolicyFiles::PolicyFiles(std::vector<std::string> paths) {
  for (auto& path : paths) files_.push_back(std::make_unique<common::WatchedFile>(std::move(path), kMaxFileBytes));
}

absl::Status PolicyFiles::start(Store& store) {
  poll(store);
  return last_error_;
}

bool PolicyFiles::poll(Store& store) {
  bool published = false;
  last_error_ = absl::OkStatus();
  for (auto& file : files_) {
    auto result = file->poll();
    std::string origin = absl::StrCat("file ", file->path());
    if (result == common::WatchedFile::Result::kFailed) {
      ++failures_;
      FERRY_LOG(kWarn, "policy: cannot read %s (what it applied before keeps applying): %s", file->path(),
                file->error().message());
      if (last_error_.ok()) last_error_ = file->error();
      continue;
    }
    if (result != common::WatchedFile::Result::kChanged) continue;
    auto decoded = decodeYamlFile(file->content(), file->path(), origin);
    if (!decoded.ok()) {
      ++failures_;
      FERRY_LOG(kWarn, "policy: refused %s as a whole (what it applied before keeps applying): %s", file->path(),
                decoded.status().message());
      if (last_error_.ok()) last_error_ = decoded.status();
      continue;
    }
    size_t count = decoded->size();
    auto applied = store.replace(origin, *std::move(decoded));
    FERRY_LOG(kInfo, "policy: %s: %u objects, %u changed, %u refused", file->path(), static_cast<unsigned>(count),
              static_cast<unsigned>(applied.changed), static_cast<unsigned>(applied.refused.size()));
    published = published || applied.changed > 0;
  }
  return published;
}

}  // namespace ferry::policy
