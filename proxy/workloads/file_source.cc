#include "proxy/workloads/file_source.h"

#include <malloc.h>

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proxy/common/log.h"
#include "proxy/config/workloads_file.h"

namespace ferry::workloads {

absl::StatusOr<std::vector<Workload>> parseWorkloadList(std::string_view text, std::string_view source_name,
                                                        config::FileFormat format) {
  std::vector<Workload> all;
  auto parsed = config::parseWorkloads(text, source_name, format, [&](config::WorkloadEntry&& entry) {
    all.push_back(Workload::fromEntry(std::move(entry)));
  });
  if (!parsed.ok()) return parsed;
  return all;
}

absl::StatusOr<std::shared_ptr<const Registry>> parseRegistry(std::string_view text, std::string_view source_name,
                                                              std::string_view local_node, config::FileFormat format) {
  auto all = parseWorkloadList(text, source_name, format);
  if (!all.ok()) return all.status();
  Store store(local_node);
  store.replaceAll(*std::move(all));
  return store.current();
}

FileSource::FileSource(std::string path) : file_(std::move(path)) {}

absl::Status FileSource::start(Store& store) {
  // Start-up must see the file's real state, whatever was seen before.
  file_.reset();
  return reload(store).status();
}

bool FileSource::poll(Store& store) {
  auto published = reload(store);
  if (published.ok()) return *published;
  failures_.fetch_add(1, std::memory_order_relaxed);
  FERRY_LOG(kWarn, "workloads: %s; keeping the previous %d workloads", published.status().message(),
            store.current()->size());
  return false;
}

absl::StatusOr<bool> FileSource::reload(Store& store) {
  switch (file_.poll()) {
    case common::WatchedFile::Result::kUnchanged:
      return false;
    case common::WatchedFile::Result::kFailed:
      return file_.error();
    case common::WatchedFile::Result::kChanged:
      break;
  }
  std::string text = file_.takeContent();
  auto all = parseWorkloadList(text, file_.path(), config::formatOf(file_.path()));
  if (!all.ok()) return all.status();
  text = std::string();
  size_t total = all->size();
  auto result = store.replaceAll(*std::move(all));
  // The file was checked for duplicate IPs, so nothing is refused here; say so if it is.
  if (!result.rejected.empty()) {
    FERRY_LOG(kWarn, "workloads: %s: refused %d entries: %s", file_.path(), result.rejected.size(),
              absl::StrJoin(result.rejected, "; "));
  }
  // Parsing a big file leaves its temporaries' pages in the heap (the text, the entries, the
  // parser's duplicate checks: ~100 MB for 150,000 entries); hand them back now rather than
  // keep them for life.
  malloc_trim(0);
  auto registry = store.current();
  FERRY_LOG(kInfo, "workloads: loaded %d workloads (%d local) from %s, %d changed, generation %d", total,
            registry->localCount(), file_.path(), result.changed, store.generation());
  return result.changed > 0;
}

}  // namespace ferry::workloads
