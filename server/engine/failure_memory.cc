#include "server/engine/failure_memory.h"

#include <algorithm>

namespace stoker {

void FailureMemory::Remember(const std::string& dataset, uint64_t index, const std::string& path,
                             const std::string& reason) {
  auto it = std::find_if(logs_.begin(), logs_.end(),
                         [&](const DatasetFailureLog& d) { return d.dataset == dataset; });
  if (it == logs_.end()) {
    if (logs_.size() >= kKeptFailureDatasets) logs_.pop_back();
    logs_.emplace_front();
    logs_.front().dataset = dataset;
  } else if (it != logs_.begin()) {
    logs_.splice(logs_.begin(), logs_, it);
  }
  DatasetFailureLog& d = logs_.front();
  ++d.samples_failed;
  auto e = d.by_path.find(path);
  if (e == d.by_path.end()) {
    const size_t bytes = path.size() + reason.size();
    if (d.by_path.size() >= kKeptFailuresPerDataset ||
        d.bytes + bytes > kKeptFailureBytesPerDataset) {
      ++d.failures_not_kept;
      return;
    }
    d.bytes += bytes;
    e = d.by_path.emplace(path, FailureEntry{index, reason, 0}).first;
  }
  ++e->second.count;
}

}  // namespace stoker
