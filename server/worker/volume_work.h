// What a worker does for a volume session's sample (a kTask with
// has_volume): the volume and its label through the session's
// deterministic prefix (server/volume/prefix.h), or their cache entry when
// one is there, then the sample's patches into the ring
// (server/volume/volume_task.h). Internal to the worker (worker.cc's Serve
// calls it); a library so that its unit test runs it in process.
//
// The volume cache (fd kPreparedCacheFd, when the daemon has one): an entry
// is named by the sample's paths and the recipe, keyed by them and by each
// file's identity (the transcode cache's IdentityOf): a changed file or
// recipe makes the old entry stale (it is rebuilt and replaced), never served. The worker
// that prepares a volume claims its entry first (volume_cache.h's
// ClaimEntry) and writes it; a worker given the same volume meanwhile waits
// for that entry instead of preparing the volume again (the next epoch is
// planned while this one's volumes are prepared). The worker keeps the last
// entry it mapped.
// A cache that cannot be written costs the next epoch a preparation, never
// the sample.
//
// Not thread-safe (one per worker).

#ifndef STOKER_SERVER_WORKER_VOLUME_WORK_H_
#define STOKER_SERVER_WORKER_VOLUME_WORK_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "server/volume/volume_cache.h"
#include "server/worker/worker_protocol.h"

namespace stoker::worker {

class VolumeWork {
 public:
  // Task `t`'s sample: the volume at `path` and the label volume at
  // `label_path` ("" for none) beneath `data_root`, its patches into `out`
  // (t.out_capacity bytes) and `label_out` (t.mask_out_capacity bytes;
  // nullptr when the session has no label field). Fills `r`: bytes and
  // mask_bytes written, read/decode (prepare)/augment times, or its code
  // and reason. `cache_dir` is the volume cache's fd, or -1.
  void Run(const TaskMsg& t, std::string_view path, std::string_view label_path, int data_root,
           int cache_dir, uint8_t* out, uint8_t* label_out, ResultMsg* r);

  // Entries prepared and written, and entries mapped (for tests).
  uint64_t prepared() const { return prepared_; }
  uint64_t mapped() const { return mapped_; }

 private:
  // How long a worker waits for another's claim on an entry (it is
  // preparing that volume) before it prepares the volume itself, unwritten;
  // how young an unlocked claim is still taken as held.
  static constexpr int64_t kWaitForWriterNs = int64_t{120} * 1'000'000'000;
  static constexpr int64_t kFreshClaimNs = int64_t{2} * 1'000'000'000;

  // Maps entry `name` (with `key`) as entry_: false when there is none (or
  // it is stale, torn).
  bool MapEntry(int cache_dir, const std::string& name, uint64_t key);

  std::string entry_name_;  // of `entry_`
  uint64_t entry_key_ = 0;
  std::unique_ptr<volume::MappedEntry> entry_;
  uint64_t prepared_ = 0, mapped_ = 0;
};

}  // namespace stoker::worker

#endif  // STOKER_SERVER_WORKER_VOLUME_WORK_H_
