#include "server/engine/video_tables.h"

namespace stoker {

std::shared_ptr<const VideoTable> VideoTables::Get(const std::shared_ptr<const Dataset>& dataset,
                                                   const std::string& key, const Builder& build) {
  std::shared_ptr<absl::Mutex> gate;
  {
    absl::MutexLock l(&mu_);
    Entry& e = entries_[key];
    if (e.table != nullptr && e.dataset.lock() == dataset) return e.table;
    gate = e.gate;
  }
  absl::MutexLock g(gate.get());
  {
    absl::MutexLock l(&mu_);
    Entry& e = entries_[key];
    if (e.table != nullptr && e.dataset.lock() == dataset) return e.table;  // built meanwhile
  }
  std::shared_ptr<const VideoTable> table = build(*dataset);
  absl::MutexLock l(&mu_);
  Entry& e = entries_[key];
  e.dataset = dataset;
  e.table = table;
  return table;
}

size_t VideoTables::size() const {
  absl::MutexLock l(&mu_);
  return entries_.size();
}

}  // namespace stoker
