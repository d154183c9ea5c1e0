#include "server/engine/status_export.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/display_name.h"
#include "server/engine/latency.h"

namespace stoker {

void ExportReadahead(const Prefetcher* prefetch, const v1::DaemonConfig& config,
                     v1::ReadaheadStatus* ra) {
  if (prefetch == nullptr) return;
  const Prefetcher::Stats st = prefetch->stats();
  ra->set_threads(config.io_threads());
  ra->set_budget_bytes(config.readahead_mb() << 20);
  ra->set_files_read(st.files_read);
  ra->set_bytes_read(st.bytes_read);
  ra->set_cold_files(st.cold_files);
  ra->set_files_cached(st.files_cached);
  ra->set_late(st.late);
  ra->set_window_bytes(st.window_bytes);
  ra->set_window_bytes_max(st.window_bytes_max);
}

namespace {

// A file-system name in a status: its display form, and its bytes when the
// two differ (common/display_name.h).
void SetName(const std::string& name, std::string* display, std::string* bytes) {
  *display = DisplayName(name);
  if (*display != name) *bytes = name;
}

}  // namespace

void ExportPreparedCache(const PreparedCacheBudget::Stats& st, const v1::DaemonConfig& config,
                         v1::PreparedCacheStatus* pc) {
  pc->set_dir(config.prepared_cache());
  pc->set_budget_bytes(st.budget_bytes);
  pc->set_bytes(st.bytes);
  pc->set_entries(st.entries);
  pc->set_volume_hits(st.volume_hits);
  pc->set_image_hits(st.image_hits);
  pc->set_volume_writes(st.volume_writes);
  pc->set_image_writes(st.image_writes);
  pc->set_evictions(st.evicted);
  pc->set_temps_removed(st.temps_removed);
}

void ExportTranscodeCache(const TranscodeCache::Stats& st, const v1::DaemonConfig& config,
                          int64_t now_ns, v1::TranscodeCacheStatus* tc) {
  tc->set_dir(config.transcode_cache());
  tc->set_budget_bytes(st.budget_bytes);
  tc->set_bytes(st.bytes);
  tc->set_entries(st.entries);
  tc->set_hits(st.hits);
  tc->set_misses(st.misses);
  const uint64_t reads = st.hits + st.misses;
  tc->set_hit_rate(reads == 0 ? 0.0 : static_cast<double>(st.hits) / static_cast<double>(reads));
  tc->set_writes(st.writes);
  tc->set_bytes_written(st.bytes_written);
  tc->set_write_failures(st.write_failures);
  tc->set_writes_refused(st.writes_refused);
  tc->set_bad_entries(st.bad_entries);
  tc->set_evictions(st.evictions);
  tc->set_loaded_entries(st.loaded_entries);
  tc->set_transcode_seconds(st.transcode_ns / 1e9);
  tc->set_write_pauses(st.write_pauses);
  tc->set_writes_paused_reason(st.writes_paused_reason);
  if (st.writes_paused_until_ns > now_ns) {
    tc->set_writes_resume_in_seconds((st.writes_paused_until_ns - now_ns) / 1e9);
  }
}

void ExportDecodeCalibration(const image::DecodeCalibration& cal, const std::string& source,
                             v1::DecodeCalibrationStatus* out) {
  out->set_source(source);
  for (const image::ScaleCost& c : cal.costs) {
    v1::DecodeScaleCost* s = out->add_scales();
    s->set_scale(static_cast<uint32_t>(c.scale));
    s->set_baseline_ms(c.baseline_ms);
    s->set_progressive_ms(c.progressive_ms);
    s->set_disabled((cal.disabled_dct_scales & image::DctScaleBit(c.scale)) != 0);
  }
  out->set_seconds(cal.seconds);
}

void ExportWorker(const WorkerPool& pool, uint32_t i, v1::WorkerStatus* ws) {
  const WorkerSlot& w = pool.worker(i);
  ws->set_id(w.id);
  ws->set_pid(w.dead ? 0 : w.pid);
  ws->set_state(w.dead ? "restarting" : w.retiring ? "retiring" : w.state);
  ws->set_restarts(w.restarts);
  ws->set_crashes(w.crashes);
  ws->set_samples_done(w.samples_done);
  ws->set_samples_failed(w.samples_failed);
  ws->set_in_flight(static_cast<uint32_t>(w.in_flight.size()));
  ws->set_cpu_seconds(pool.CpuSeconds(i));
}

void ExportWorkers(const WorkerPool& pool, v1::StatusResponse* r) {
  for (uint32_t i = 0; i < pool.size(); ++i) {
    if (pool.worker(i).retired) continue;  // shrunk away (--workers auto)
    ExportWorker(pool, i, r->add_workers());
  }
}

void ExportAutotune(const PoolSizing& p, v1::AutotuneStatus* out) {
  out->set_mode(p.tuner != nullptr ? "auto" : "fixed");
  out->set_workers(p.active);
  out->set_cpu_budget(p.budget.cpus);
  out->set_cpu_budget_source(p.budget.source);
  out->set_trainers(p.trainers);
  out->set_workers_cap(p.workers_cap);
  if (p.tuner == nullptr) {
    out->set_max_workers(p.active);
    out->set_phase(absl::StrCat("fixed at ", p.active, " (--workers)"));
    return;
  }
  const Autotuner& t = *p.tuner;
  out->set_max_workers(p.max_workers);
  out->set_reserved_cpus(p.reserved_cpus);
  out->set_phase(t.phase());
  out->set_window_wait_share(t.window_wait_share());
  out->set_window_samples_per_second(t.window_rate());
  out->set_window_busy_workers(t.window_busy());
  out->set_window_seconds(t.window_seconds());
  for (const AutotuneDecision& d : t.decisions()) {
    auto* o = out->add_decisions();
    o->set_at_seconds((d.at_ns - p.start_ns) / 1e9);
    o->set_from_workers(d.from);
    o->set_to_workers(d.to);
    o->set_reason(d.reason);
  }
}

void ExportSession(const DaemonSession& s, int64_t now, bool include_failures,
                   v1::SessionStatus* ss) {
  ss->set_session_id(s.id);
  ss->set_client_name(s.req.client_name());
  ss->set_client_pid(s.req.client_pid());
  ss->set_rank(s.plan.sampler.rank);
  ss->set_world_size(s.plan.sampler.world_size);
  SetName(s.dataset->name(), ss->mutable_dataset(), ss->mutable_dataset_bytes());
  *ss->mutable_pipeline() = s.plan.request.pipeline.effective;
  if (s.plan.request.volume.has_value()) *ss->mutable_volumes() = s.plan.request.volume->effective;
  *ss->mutable_requested_pipeline() = s.req.pipeline();
  ss->set_batch_size(s.plan.sampler.batch_size);
  ss->set_batches_produced(s.batches_produced);
  uint64_t consumed = s.ring->header()->batches_consumed.load(std::memory_order_relaxed);
  ss->set_batches_consumed(std::min(consumed, s.batches_produced));
  ss->set_samples_produced(s.samples_produced);
  ss->set_samples_failed(s.samples_failed);
  ss->set_replacement_failures(s.replacement_failures);
  ss->set_samples_replaced(s.samples_replaced);
  ss->set_current_epoch(s.current_epoch);
  ss->set_ring_slots(s.plan.slots());
  uint32_t by_state[4] = {0, 0, 0, 0};
  for (uint32_t slot = 0; slot < s.plan.slots(); ++slot) {
    uint32_t st = s.ring->descriptor(slot)->state.load();
    if (st < 4) ++by_state[st];
  }
  ss->set_ring_ready(by_state[ring::kReady]);
  ss->set_ring_filling(by_state[ring::kFilling]);
  ss->set_ring_leased(by_state[ring::kLeased]);
  const ring::RingHeader* h = s.ring->header();
  uint64_t waits[ring::kWaitBuckets];
  for (uint32_t b = 0; b < ring::kWaitBuckets; ++b) {
    waits[b] = h->client_wait_hist[b].load(std::memory_order_relaxed);
  }
  const uint64_t wait_ns = h->client_wait_ns.load(std::memory_order_relaxed);
  ss->set_client_wait_seconds(wait_ns / 1e9);
  *ss->mutable_client_wait() = Summarize(waits, wait_ns);
  *ss->mutable_read() = Summarize(s.read_latency);
  *ss->mutable_decode() = Summarize(s.decode_latency);
  *ss->mutable_augment() = Summarize(s.augment_latency);
  ss->set_ring_bytes(s.ring->committed_bytes());
  ss->set_ring_depth(ring::DepthCount(s.depth_word));
  if (s.depth_policy != nullptr) ss->set_ring_depth_reason(s.depth_policy->reason());
  ss->set_ring_name(s.ring->name());
  if (s.rate_window.size() >= 2) {
    const auto& a = s.rate_window.front();
    const auto& b = s.rate_window.back();
    if (b.first > a.first) {
      ss->set_images_per_second((b.second - a.second) / ((b.first - a.first) / 1e9));
    }
  }
  ss->set_uptime_seconds((now - s.created_ns) / 1e9);
  ss->set_keepalive_open(s.keepalive_open);
  for (uint32_t p = 0; p < image::kDecodePathCount; ++p) {
    const DecodePathTally& t = s.decode_paths[p];
    auto* dp = ss->add_decode_paths();
    dp->set_path(std::string(image::DecodePathName(static_cast<image::DecodePath>(p))));
    dp->set_samples(t.samples);
    dp->set_decode_seconds(t.decode_ns / 1e9);
    dp->set_mean_decode_ms(t.samples == 0 ? 0.0 : t.decode_ns / 1e6 / t.samples);
  }
  ss->set_transcode_seconds(s.transcode_ns / 1e9);
  ss->set_bytes_read(s.bytes_read);
  for (const auto& [kind, n] : s.failed_by_kind) (*ss->mutable_failed_by_reason())[kind] = n;
  for (uint32_t f = 0; f < image::kImageFormatCount; ++f) {
    const FormatTally& t = s.formats[f];
    if (t.samples == 0 && t.failed == 0) continue;
    auto* fs = ss->add_formats();
    fs->set_format(std::string(image::ImageFormatName(static_cast<image::ImageFormat>(f))));
    fs->set_samples(t.samples);
    fs->set_failed(t.failed);
    *fs->mutable_decode() = Summarize(t.decode_latency);
  }
  if (include_failures) {
    size_t n = 0;
    for (const auto& [index, f] : s.failures) {
      if (n++ >= kMaxFailuresListed) break;
      auto* fr = ss->add_failures();
      SetName(f.path, fr->mutable_path(), fr->mutable_path_bytes());
      fr->set_reason(DisplayName(f.reason));
      fr->set_count(f.count);
      fr->set_dataset_index(index);
    }
  }
}

void ExportDatasetFailures(const FailureMemory& memory, v1::StatusResponse* r) {
  for (const DatasetFailureLog& d : memory.datasets()) {
    auto* df = r->add_dataset_failures();
    SetName(d.dataset, df->mutable_dataset(), df->mutable_dataset_bytes());
    df->set_samples_failed(d.samples_failed);
    df->set_failures_not_kept(d.failures_not_kept);
    std::vector<const std::pair<const std::string, FailureEntry>*> order;
    order.reserve(d.by_path.size());
    for (const auto& kv : d.by_path) order.push_back(&kv);
    std::sort(order.begin(), order.end(),
              [](const auto* a, const auto* b) { return a->second.index < b->second.index; });
    for (const auto* kv : order) {
      auto* fr = df->add_failures();
      SetName(kv->first, fr->mutable_path(), fr->mutable_path_bytes());
      fr->set_reason(DisplayName(kv->second.reason));
      fr->set_count(kv->second.count);
      fr->set_dataset_index(kv->second.index);
    }
  }
}

}  // namespace stoker
