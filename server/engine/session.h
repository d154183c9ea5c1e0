// A session and its batch state machine: which batch fills which ring slot,
// which samples it is waiting for, what became of each (decoded, replaced,
// failed), and when a slot is handed to the client.
//
// Glossary
//   seq         A session's batch counter from 0: batch seq lives in slot
//               seq % slots (the ring's order; proto/stoker/ring_layout.h).
//   global      start_global + seq: the batch's place in the whole run;
//               epoch = global / batches_per_epoch, b = global % that.
//   fill        A BatchFill: a batch started in a slot, not yet finished.
//   task        A SampleTask: one sample of a fill. It waits in the
//               session's queue, goes to a worker (in flight), and ends
//               decoded, failed, or as a replacement that is queued again.
//   replacement Under the skip policy a failed sample is replaced by the next
//               sample of the shard not known to be bad, up to
//               kMaxReplacements times; the batch keeps its shape.
//
// A slot's life, as this file drives it:
//   1. StartBatches: a slot the client freed (kFree again after its lease)
//      is counted consumed; the next seq's fill starts there (kFilling), its
//      tasks join the queue and readahead.
//   2. The engine sends queued tasks to workers (BuildTaskMsg); each answer
//      is CompleteSample, a worker's death on one may end in FailSample.
//   3. FailSample: skip policy, the task is queued again at the front with a
//      replacement index; error policy (or no replacement left), the sample
//      is failed: zeros of the output shape, and under the error policy the
//      whole batch is failed with the first reason (and an event for the
//      client's KeepAlive stream).
//   4. When no sample is left, FinishBatch writes the per-sample records and
//      marks the slot kReady, waking the client.
//
// Threads: none of its own. Every function here, and every field in
// DaemonSession's "guarded" part, runs under the engine's lock (Engine::mu_).

#ifndef STOKER_SERVER_ENGINE_SESSION_H_
#define STOKER_SERVER_ENGINE_SESSION_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "server/engine/attach_plan.h"
#include "server/engine/clip_source.h"
#include "server/dataset/dataset.h"
#include "server/engine/failure_memory.h"
#include "server/engine/latency.h"
#include "server/engine/prefetch.h"
#include "server/engine/ring_depth.h"
#include "server/engine/ring_owner.h"
#include "server/engine/worker_pool.h"
#include "server/worker/worker_protocol.h"
#include "stoker/v1/stoker.pb.h"

namespace stoker {

class Clock;           // common/clock.h
class ReleaseWatcher;  // server/engine/liveness.h

// Replacements at most per planned sample (skip policy).
inline constexpr uint32_t kMaxReplacements = 64;

// One sample's work. Lives in its BatchFill until the batch is finished.
struct SampleTask {
  uint64_t id = 0;  // while in flight (the engine's task id)
  bool in_flight = false;
  uint64_t session = 0;  // DaemonSession::number
  uint64_t seq = 0;
  uint32_t pos = 0;  // within the batch
  uint32_t epoch = 0;
  uint64_t shard_pos = 0;
  uint64_t planned_index = 0;
  uint64_t index = 0;  // what is being decoded: planned or a replacement
  uint32_t replacements = 0;
  CrashTally crashes;  // deaths of workers while on `index`
  uint64_t prefetch_key = 0;  // queued for readahead (0: not)
};

// The samples decoded by one image::DecodePath, and their decode time.
struct DecodePathTally {
  uint64_t samples = 0;
  uint64_t decode_ns = 0;
};

// The samples of one image::ImageFormat (by the file's content) that the
// workers decoded or failed, and the decode latency of those decoded.
struct FormatTally {
  uint64_t samples = 0;
  uint64_t failed = 0;
  LatencyHistogram decode_latency;
};

// What became of one sample of a fill.
struct SampleOutcome {
  uint32_t status = ring::kSampleOk;
  uint32_t height = 0;
  uint32_t width = 0;
  uint32_t channels = 0;
  uint32_t box_count = 0;   // detection sets: the boxes kept
  uint64_t index = 0;
};

// A batch being filled in its slot.
struct BatchFill {
  uint64_t seq = 0;
  uint32_t slot = 0;
  uint32_t epoch = 0;
  uint64_t batch_in_epoch = 0;
  uint32_t remaining = 0;  // samples not yet decoded or failed
  std::vector<std::unique_ptr<SampleTask>> tasks;  // one per sample, stable addresses
  std::vector<SampleOutcome> outcomes;
  bool failed = false;  // error policy: a sample failed
  std::string error;
};

// A dataset entry that failed in this session: the first reason, how often.
struct FailureRecord {
  std::string path;
  std::string reason;
  uint64_t count = 0;
};

struct DaemonSession {
  DaemonSession();
  ~DaemonSession();  // stops the watcher (if any) before the ring goes
  DaemonSession(const DaemonSession&) = delete;
  DaemonSession& operator=(const DaemonSession&) = delete;

  // Constant after Attach.
  std::string id;
  uint64_t number = 0;
  v1::AttachRequest req;
  std::shared_ptr<const Dataset> dataset;
  // A video session: its clips (a sample index is a clip number; its
  // dataset entry the clip's video). Null for still images.
  std::shared_ptr<const ClipSource> clips;
  AttachPlan plan;
  std::unique_ptr<RingOwner> ring;
  std::string ring_token;  // what the ring socket takes for the ring's fd
  int64_t created_ns = 0;
  // Declared after `ring`: destroyed, and so joined, before it.
  std::unique_ptr<ReleaseWatcher> watcher;

  // Guarded by Engine::mu_.
  uint64_t next_fill_seq = 0;
  std::map<uint64_t, BatchFill> filling;
  std::deque<SampleTask*> queue;  // front first
  std::vector<uint8_t> slot_busy;  // given to the client, not yet seen free
  std::map<uint32_t, std::vector<uint64_t>> shards;  // by epoch
  uint64_t batches_produced = 0;
  uint64_t batches_consumed = 0;
  uint64_t samples_produced = 0;
  uint64_t samples_failed = 0;  // planned samples that failed (replaced or not)
  uint64_t samples_replaced = 0;
  uint64_t replacement_failures = 0;  // replacements that failed too (tried again)
  uint32_t current_epoch = 0;
  std::map<uint64_t, FailureRecord> failures;  // by dataset index
  std::deque<v1::SessionEvent> events;  // for the KeepAlive stream
  bool ended = false;
  std::string end_reason;
  bool keepalive_open = false;
  int64_t keepalive_closed_ns = 0;
  std::deque<std::pair<int64_t, uint64_t>> rate_window;  // (ns, samples_produced)
  LatencyHistogram read_latency;
  LatencyHistogram decode_latency;
  LatencyHistogram augment_latency;
  // By image::DecodePath (decoded samples only).
  std::array<DecodePathTally, image::kDecodePathCount> decode_paths{};
  // By image::ImageFormat (the worker's results: samples it decoded or
  // failed once their file was read; not files it could not open or read,
  // nor failures of the worker itself, e.g. a crash).
  std::array<FormatTally, image::kImageFormatCount> formats{};
  // The workers' time re-coding this session's progressive files for the
  // transcode cache (not in any decode time).
  uint64_t transcode_ns = 0;
  // The ring's client_wait_ns at the autotuner's last tick, and at the
  // remote gate's (engine.cc, GateRemoteLocked).
  uint64_t tuned_wait_ns = 0;
  uint64_t gated_wait_ns = 0;
  // Failed planned samples by FailSample's `kind`.
  std::map<std::string, uint64_t> failed_by_kind;
  // Bytes of input the workers read for this session (files, members, or
  // transcode cache copies).
  uint64_t bytes_read = 0;
  // The ring's depth word as this daemon last stored it (ring_layout.h,
  // "Depth"), and the time the ring was full (StartBatches): total, and
  // since when it is full now (0: it is not).
  uint64_t depth_word = 0;
  uint64_t full_ns = 0;
  int64_t full_since_ns = 0;
  // When the ring may deepen (plan.depth() < plan.slots()): the engine's.
  std::unique_ptr<RingDepthPolicy> depth_policy;
};

// What the state machine reaches beyond one session. The engine owns one
// and guards it with its lock.
struct BatchContext {
  // Readahead: null when off. Keys are unique among those not yet Done.
  Prefetcher* prefetch = nullptr;
  uint64_t next_prefetch_key = 1;
  // The daemon's failure memory (required).
  FailureMemory* failure_memory = nullptr;
  // A session gained an event (the engine wakes its KeepAlive streams).
  std::function<void()> on_event;
  // Measures the time rings are full; null: not measured.
  Clock* clock = nullptr;
  // Daemon-wide counters for the status page.
  uint64_t samples_total = 0;
  uint64_t samples_failed_total = 0;
};

// Makes `s` ready for its first batch (slots all free, epoch at the start,
// the keepalive grace running from `now_ns`). The plan, ring and dataset
// must be set.
void InitSession(DaemonSession& s, int64_t now_ns);

// The dataset entry of sample index `index`: itself, or a clip's video.
inline uint64_t EntryOf(const DaemonSession& s, uint64_t index) {
  return s.clips != nullptr ? s.clips->VideoOf(index) : index;
}
// How to name sample `index` to a person: its file, and a clip's place.
std::string DisplayOf(const DaemonSession& s, uint64_t index);

// The shard of `epoch`, computed once (a ring spans few epochs at once: the
// last four are kept).
const std::vector<uint64_t>& ShardFor(DaemonSession& s, uint32_t epoch);

// Starts batches in the session's slots while it has slots to fill and
// batches left (step 1 above).
void StartBatches(DaemonSession& s, BatchContext& ctx);

// The time the session's ring was full, to `now_ns`.
uint64_t FullNs(const DaemonSession& s, int64_t now_ns);

// Moves the ring to `depth` slots from the first batch the protocol allows
// (ring_layout.h, "Depth"; the caller has committed the slots). False when
// not yet allowed: the client has not passed the last change point.
bool SetDepth(DaemonSession& s, uint32_t depth);

// The dispatcher took `t` off the queue to send it: its readahead is done.
void ReleaseReadahead(SampleTask& t, BatchContext& ctx);

// What tasks carry besides the sample: the daemon's settings.
struct TaskOptions {
  uint64_t max_file_bytes = 0;
  uint32_t simulate_latency_us = 0;
  // Tests: a path containing one of these makes the worker crash / hang.
  std::string fault_crash_substring;
  std::string fault_hang_substring;
  // The daemon has a prepared cache (--prepared-cache): an evaluation
  // pipeline's tasks carry its recipe (AttachPlan::prepared_recipe).
  bool prepared_cache = false;
};

// The message that asks a worker for `t` (task_id left 0 for the caller),
// and the bytes of it to send; 0 when the sample's path (with its mask's,
// for a segmentation set) is too long for the message (the caller fails
// it: "path too long"). For a detection set it also writes the sample's
// input boxes into its place in the slot (every dispatch: a redone or
// replaced sample starts from its own boxes again).
size_t BuildTaskMsg(const DaemonSession& s, const SampleTask& t, const TaskOptions& o,
                    worker::TaskMsg* msg);

// A worker's answer for `t` (step 2): decoded (checked against the slot), or
// failed with the worker's reason. False when the task's batch is gone
// (nothing was done).
bool CompleteSample(DaemonSession& s, SampleTask& t, const worker::ResultMsg& r, BatchContext& ctx);

// `t` failed for `reason` (step 3): remembered (session and daemon), then
// replaced and queued again at the front, or failed for good. Counted (the
// session's samples_failed, the file's count, failed_by_kind, the daemon's
// memory) once per planned sample, where the trainer sees it; a failed
// replacement counts in replacement_failures only. `kind` is the
// reason's class, counted per session (DaemonSession::failed_by_kind; the
// metrics' `reason` label): the worker's status code in lower case
// ("data_loss", "invalid_argument", ...), "worker_crash", "bad_result",
// "path_too_long".
void FailSample(DaemonSession& s, SampleTask& t, const std::string& reason, BatchContext& ctx,
                const std::string& kind = "other");

// Writes batch `seq`'s records and hands its slot to the client (step 4).
void FinishBatch(DaemonSession& s, uint64_t seq);

// The session is removed: marks it ended with `why`, forgets its tasks
// (erased from `in_flight`, their readahead done, the queue emptied), and
// tells the client through the ring (kStopped, futexes woken). Its fills and
// ring stay until the caller drops them.
void EndSession(DaemonSession& s, const std::string& why, BatchContext& ctx,
                std::unordered_map<uint64_t, SampleTask*>* in_flight);

}  // namespace stoker

#endif  // STOKER_SERVER_ENGINE_SESSION_H_
