// Internal to server/dataset: what the indexers (ImageFolder walk, manifest
// parser) produce before it becomes an immutable Dataset.

#ifndef STOKER_SERVER_DATASET_INDEX_BUILDER_H_
#define STOKER_SERVER_DATASET_INDEX_BUILDER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace stoker {

class DataRoot;

namespace dataset_internal {

// Entries in order; paths concatenated in one buffer, as Dataset keeps them.
struct DatasetIndex {
  std::string paths;
  std::vector<uint64_t> offsets{0};  // size() + 1 entries into `paths`
  std::vector<int64_t> labels;
  std::vector<std::string> class_names;

  uint64_t size() const { return labels.size(); }
  // Ends the entry whose path was appended to `paths` since the last one.
  void EndEntry(int64_t label) {
    offsets.push_back(paths.size());
    labels.push_back(label);
  }
  void Add(std::string_view path, int64_t label) {
    paths.append(path);
    EndEntry(label);
  }
};

// Indexes the ImageFolder tree at the canonical directory `dir` (relative to
// the root). See Dataset::Open.
absl::Status IndexImageFolder(const DataRoot& root, const std::string& dir, DatasetIndex* out);

// Parses the manifest at the canonical file path `file` (relative to the
// root). See Dataset::Open.
absl::Status IndexManifest(const DataRoot& root, const std::string& file, DatasetIndex* out);

}  // namespace dataset_internal
}  // namespace stoker

#endif  // STOKER_SERVER_DATASET_INDEX_BUILDER_H_
