// The prepared cache's budget: the daemon's side of the entries workers
// write into --prepared-cache, one file a sample after its deterministic
// transforms (a volume: server/volume/volume_cache.h, "<16 hex>.stkv"; an
// evaluation pipeline's image: server/worker/image_entry.h, "<16 hex>.stki"),
// each write reported to the daemon. This room counts them and removes the oldest (by when they were written:
// entries are never rewritten in place, so the order is the cache's
// insertion order, FIFO) until they fit --prepared-cache-mb. A removed entry a
// worker still maps stays readable to it (the mapping holds the inode).
// Load() also removes temporaries (".tmp-NAME") older than kStaleTempNs: a
// write that died with its worker, or whose unlink the sandbox did not
// reach; younger ones may be another daemon's write in progress.
//
// The folder comes through CacheDir (transcode_cache.h), so the unit test
// needs no real files. Thread-safe (an internal mutex).

#ifndef STOKER_SERVER_ENGINE_VOLUME_CACHE_BUDGET_H_
#define STOKER_SERVER_ENGINE_VOLUME_CACHE_BUDGET_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/posix.h"
#include "server/engine/transcode_cache.h"
#include "server/worker/worker_protocol.h"
#include "server/volume/volume_cache.h"  // VolumeEntryName

namespace stoker {

class PreparedCacheBudget {
 public:
  static constexpr int64_t kStaleTempNs = int64_t{600} * 1'000'000'000;

  struct Stats {
    uint64_t budget_bytes = 0;
    uint64_t entries = 0;
    uint64_t bytes = 0;
    uint64_t written = 0;       // entries reported since start
    uint64_t evicted = 0;       // entries removed to keep the budget
    uint64_t temps_removed = 0; // stale temporaries removed by Load
    uint64_t volume_hits = 0, image_hits = 0;
    uint64_t volume_writes = 0, image_writes = 0;
  };

  // `dir` is borrowed (outlives this).
  PreparedCacheBudget(CacheDir* dir, uint64_t budget_bytes);

  // Lists the folder (now_ns: the wall clock, for the temporaries' age),
  // then evicts down to the budget (the budget may have shrunk).
  absl::Status Load(int64_t now_ns);
  // A worker wrote entry `name`, `bytes` long: counted, then the oldest
  // entries are removed until the total fits (the new one last of all).
  void Added(const std::string& name, uint64_t bytes);
  // A worker served a sample from an entry (volume: a .stkv, else a .stki).
  void Hit(bool volume);
  // What a worker's answer says of the cache: Hit for an entry served,
  // Added for one written.
  void Report(const worker::ResultMsg& r);
  Stats stats() const;

 private:
  void EvictLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  CacheDir* const dir_;
  mutable absl::Mutex mu_;
  struct Entry {
    std::string name;
    uint64_t bytes = 0;
  };
  std::deque<Entry> entries_ ABSL_GUARDED_BY(mu_);  // oldest first
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

// --prepared-cache as a daemon or a decode node opens it: the folder
// (created 0700 with its parents), a budget of `mb` MiB (0: 65536, at most a
// quarter of its file system's free space), loaded (`wall_now_ns`: the
// temporaries' age). Errors: the folder cannot be made or opened; a folder
// that cannot be listed is a warning in the log, not an error.
struct PreparedCache {
  UniqueFd fd;  // O_DIRECTORY: the workers' worker::kPreparedCacheFd
  std::unique_ptr<CacheDir> dir;
  std::unique_ptr<PreparedCacheBudget> budget;
  double mb = 0;  // the budget in effect
};
absl::StatusOr<PreparedCache> OpenPreparedCache(const std::string& path, double mb,
                                                int64_t wall_now_ns);

}  // namespace stoker

#endif  // STOKER_SERVER_ENGINE_VOLUME_CACHE_BUDGET_H_
