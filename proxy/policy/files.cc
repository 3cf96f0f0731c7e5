#include "proxy/policy/files.h"

#include "absl/strings/str_cat.h"
#include "proxy/common/log.h"

namespace ferry::policy {

PolicyFiles::PolicyFiles(std::vector<std::string> paths) {
  for (auto& path : paths) files_.push_back(std::make_unique<common::WatchedFile>(std::move(path), kMaxFileBytes));
}

bool PolicyFiles::poll(Store& store) {
  bool published = false;
  for (auto& file : files_) {
    auto result = file->poll();
    std::string origin = absl::StrCat("file ", file->path());
    if (result == common::WatchedFile::Result::kFailed) {
      ++failures_;
      FERRY_LOG(kWarn, "policy: cannot read %s (what it applied before keeps applying): %s", file->path(),
                file->error().message());
      continue;
    }
    if (result != common::WatchedFile::Result::kChanged) continue;
    auto decoded = decodeYamlFile(file->content(), file->path(), origin);
    if (!decoded.ok()) {
      ++failures_;
      FERRY_LOG(kWarn, "policy: refused %s as a whole (what it applied before keeps applying): %s", file->path(),
                decoded.status().message());
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
