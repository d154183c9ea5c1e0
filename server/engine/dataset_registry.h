// The daemon's table of indexed datasets, shared by the sessions that read
// them, with its own lock (never held while indexing).
//
// An index is kept under its DatasetKey: the dataset's canonical name, the
// format the request asked for, and IndexOptions::flags() (an index made
// with allow_empty or skip_unsupported_formats is another one). Concurrent
// requests for one key (the ranks of a job starting together) index it once:
// each key has a gate that the first holds while it indexes and the others
// wait on, then share what it made. A gate leaves the table with its last
// user (keys are client text: a table that only grew would keep every
// pattern ever asked for). A kept index whose files changed since it was
// made (Dataset::Unchanged) is made again.
//
// How the registry reaches the file system is a DatasetIndexer: production
// uses DataRootIndexer; a test can count or hold its calls.

#ifndef STOKER_SERVER_ENGINE_DATASET_REGISTRY_H_
#define STOKER_SERVER_ENGINE_DATASET_REGISTRY_H_

#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/dataset/dataset.h"

namespace stoker {

// What the registry asks of the file system. Must be thread-safe: calls for
// different keys run at the same time.
class DatasetIndexer {
 public:
  virtual ~DatasetIndexer() = default;
  // What Dataset::CanonicalName says of `dataset` (the client's text).
  virtual absl::StatusOr<std::string> CanonicalName(const std::string& dataset) = 0;
  // Indexes it (blocking: seconds for a large tree); Dataset::Open's errors.
  virtual absl::StatusOr<std::shared_ptr<const Dataset>> Open(const std::string& dataset,
                                                              DatasetFormat format,
                                                              const IndexOptions& options) = 0;
  // Dataset::Unchanged: false, with `why`, when its files changed.
  virtual bool Unchanged(const Dataset& dataset, std::string* why) = 0;
};

// Datasets beneath a data root (borrowed; must outlive the indexer).
class DataRootIndexer : public DatasetIndexer {
 public:
  explicit DataRootIndexer(const DataRoot* root) : root_(root) {}
  absl::StatusOr<std::string> CanonicalName(const std::string& dataset) override;
  absl::StatusOr<std::shared_ptr<const Dataset>> Open(const std::string& dataset,
                                                      DatasetFormat format,
                                                      const IndexOptions& options) override;
  bool Unchanged(const Dataset& dataset, std::string* why) override;

 private:
  const DataRoot* const root_;
};

// The key an index is kept under (see above).
std::string DatasetKey(const std::string& canonical_name, int format, const IndexOptions& options);

// Thread-safe.
class DatasetRegistry {
 public:
  // `indexer` is borrowed and must outlive the registry.
  explicit DatasetRegistry(DatasetIndexer* indexer) : indexer_(indexer) {}
  DatasetRegistry(const DatasetRegistry&) = delete;
  DatasetRegistry& operator=(const DatasetRegistry&) = delete;

  // The index of `dataset` (the client's text) in `format` (a
  // v1::DatasetFormat value, checked by the caller), made with `options`
  // (their progress callback is the registry's: it logs): the kept one if
  // its files are unchanged, else made now, blocking while it is made (by
  // this call or by a concurrent one for the same key). Errors: the
  // indexer's CanonicalName and Open.
  absl::StatusOr<std::shared_ptr<const Dataset>> Get(const std::string& dataset, int format,
                                                     IndexOptions options)
      ABSL_LOCKS_EXCLUDED(mu_);

  // For tests and the status page: indexes kept, and gates in the table.
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);
  size_t gates() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  DatasetIndexer* const indexer_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<const Dataset>> datasets_ ABSL_GUARDED_BY(mu_);
  // One per key while anyone uses it; held while that key is indexed.
  std::map<std::string, std::shared_ptr<absl::Mutex>> gates_ ABSL_GUARDED_BY(mu_);
};

}  // namespace stoker

#endif  // STOKER_SERVER_ENGINE_DATASET_REGISTRY_H_
