// The daemon's memory of failed samples by dataset, beyond the sessions that
// hit them (StatusResponse.dataset_failures; the bounds are stated in
// stoker.proto's DatasetFailures): the dataset that failed most recently
// first, at most kKeptFailureDatasets datasets, and per dataset at most
// kKeptFailuresPerDataset distinct paths whose paths and reasons hold at most
// kKeptFailureBytesPerDataset bytes. Failures past a bound are counted, not
// kept.
//
// Not thread-safe: the engine's lock guards it.

#ifndef STOKER_SERVER_ENGINE_FAILURE_MEMORY_H_
#define STOKER_SERVER_ENGINE_FAILURE_MEMORY_H_

#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <string>

namespace stoker {

inline constexpr size_t kKeptFailureDatasets = 64;
inline constexpr size_t kKeptFailuresPerDataset = 1000;
inline constexpr size_t kKeptFailureBytesPerDataset = 256 << 10;  // paths + reasons

// One failing path of a dataset: its index, the first reason, how often.
struct FailureEntry {
  uint64_t index = 0;
  std::string reason;
  uint64_t count = 0;
};

// The failure memory of one dataset.
struct DatasetFailureLog {
  std::string dataset;
  uint64_t samples_failed = 0;     // every failure, kept or not
  uint64_t failures_not_kept = 0;  // new paths refused by the bounds
  std::map<std::string, FailureEntry> by_path;
  size_t bytes = 0;  // of the paths and reasons in by_path
};

class FailureMemory {
 public:
  // Counts a failure of entry `index` (`path`, as shown to a person) of
  // `dataset` (its name); moves the dataset to the front, dropping the
  // oldest when a new one would be one too many.
  void Remember(const std::string& dataset, uint64_t index, const std::string& path,
                const std::string& reason);
  // Most recent first.
  const std::list<DatasetFailureLog>& datasets() const { return logs_; }

 private:
  std::list<DatasetFailureLog> logs_;
};

}  // namespace stoker

#endif  // STOKER_SERVER_ENGINE_FAILURE_MEMORY_H_
