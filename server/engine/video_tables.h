// The daemon's video indexes (server/dataset/video_table.h), one per indexed
// video dataset, shared by the sessions that read it. A table belongs to
// the Dataset object it was built over: when the registry indexes the
// dataset again (its files changed), the next Get builds a new table (which
// reuses the unchanged videos' entries through the cache file). Concurrent
// Gets for one key build once (a gate per key, as DatasetRegistry has).
// Thread-safe; Build runs outside the table's lock.

#ifndef STOKER_SERVER_ENGINE_VIDEO_TABLES_H_
#define STOKER_SERVER_ENGINE_VIDEO_TABLES_H_

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/dataset/dataset.h"
#include "server/dataset/video_table.h"

namespace stoker {

class VideoTables {
 public:
  using Builder = std::function<std::shared_ptr<const VideoTable>(const Dataset&)>;
  // The table of `dataset` kept under `key` (DatasetKey), built by `build`
  // when there is none for this very Dataset object.
  std::shared_ptr<const VideoTable> Get(const std::shared_ptr<const Dataset>& dataset,
                                        const std::string& key, const Builder& build)
      ABSL_LOCKS_EXCLUDED(mu_);
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Entry {
    std::weak_ptr<const Dataset> dataset;
    std::shared_ptr<const VideoTable> table;
    std::shared_ptr<absl::Mutex> gate = std::make_shared<absl::Mutex>();
  };
  mutable absl::Mutex mu_;
  std::map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace stoker

#endif  // STOKER_SERVER_ENGINE_VIDEO_TABLES_H_
