// Status export: how GetStatus reports the pool, each session and the
// failure memory (v1::StatusResponse; stoker.proto documents every field).
// Reads only; called under the engine's lock. The ring's client-written
// fields (consumed batches, wait histograms) are figures to show and are
// trusted for nothing else.

#ifndef STOKER_SERVER_ENGINE_STATUS_EXPORT_H_
#define STOKER_SERVER_ENGINE_STATUS_EXPORT_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "server/engine/autotuner.h"
#include "stoker/v1/config.pb.h"
#include "server/engine/cpu_budget.h"
#include "server/engine/failure_memory.h"
#include "server/image/decode/decode_planner.h"
#include "server/engine/prefetch.h"
#include "server/engine/session.h"
#include "server/engine/prepared_cache_budget.h"
#include "server/engine/transcode_cache.h"
#include "server/engine/worker_pool.h"
#include "stoker/v1/stoker.pb.h"

namespace stoker {

// A session's failures listed at most (SessionStatus.failures).
inline constexpr size_t kMaxFailuresListed = 1000;

// Readahead's settings and counters (nothing when `prefetch` is null: off).
void ExportReadahead(const Prefetcher* prefetch, const v1::DaemonConfig& config,
                     v1::ReadaheadStatus* out);

// The transcode cache's settings and counters (`now_ns` on the engine's
// clock, for how long writes stay paused).
void ExportPreparedCache(const PreparedCacheBudget::Stats& stats, const v1::DaemonConfig& config,
                         v1::PreparedCacheStatus* out);
void ExportTranscodeCache(const TranscodeCache::Stats& stats, const v1::DaemonConfig& config,
                          int64_t now_ns, v1::TranscodeCacheStatus* out);

// The start-up calibration of the DCT scales: one DecodeScaleCost per scale
// measured, in its order, `disabled` from cal.disabled_dct_scales.
void ExportDecodeCalibration(const image::DecodeCalibration& cal, const std::string& source,
                             v1::DecodeCalibrationStatus* out);

// One WorkerStatus per slot, in slot order (a dead slot: pid 0, state
// "restarting", 0 CPU seconds; a retiring one "retiring"; a retired one is
// left out).
void ExportWorkers(const WorkerPool& pool, v1::StatusResponse* out);
// One slot of `pool` (the remote pool's too, remote_pool.h, which adds its
// node).
void ExportWorker(const WorkerPool& pool, uint32_t slot, v1::WorkerStatus* out);

// How the pool is sized (v1::AutotuneStatus). `tuner` null: --workers N.
// `active` workers now; `max_workers`, `reserved_cpus`, `trainers`: as the
// engine computes them now; decisions' times are from `start_ns`.
struct PoolSizing {
  const Autotuner* tuner = nullptr;
  CpuBudget budget;
  uint32_t active = 0;
  uint32_t max_workers = 0;
  double reserved_cpus = 0;
  uint32_t trainers = 0;
  uint32_t workers_cap = 0;  // --workers-max
  int64_t start_ns = 0;
};
void ExportAutotune(const PoolSizing& p, v1::AutotuneStatus* out);

// One session at `now_ns`: its client, progress, ring occupancy, latencies,
// rate, decode paths; with `include_failures`, its first kMaxFailuresListed failures by
// dataset index.
void ExportSession(const DaemonSession& s, int64_t now_ns, bool include_failures,
                   v1::SessionStatus* out);

// The failure memory, most recent dataset first, each one's failures by
// dataset index.
void ExportDatasetFailures(const FailureMemory& memory, v1::StatusResponse* out);

}  // namespace stoker

#endif  // STOKER_SERVER_ENGINE_STATUS_EXPORT_H_
