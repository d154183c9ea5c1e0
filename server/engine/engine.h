// The daemon's logic under the gRPC layer: the facade over the engine's
// rooms, and the one owner of their lock. Takes and returns protos and
// Status; testable without a socket (and, with an injected WorkerLauncher,
// without a worker process).
//
// Rooms (each a file pair with its unit test; none has a thread of its own):
//   attach_plan       request + dataset size + limits -> a session's plan
//                     (pipeline, sampler, ring geometry, start); pure
//   dataset_registry  indexed datasets and their index gates (own lock)
//   session           a session's batch/slot state machine: fills, outcomes,
//                     replacements, failures
//   scheduler         which session's sample goes to which worker next
//   worker_pool       the workers behind a WorkerLauncher (worker_launcher.h:
//                     posix_spawn in production), supervision, crash
//                     attribution, respawn
//   liveness          release watching, heartbeats, keepalive reclaim, ring
//                     truncation
//   status_export     GetStatus's assembly; failure_memory: what it reports
//                     of failed samples by dataset
//   transcode_cache   --transcode-cache: the index of the workers' baseline
//                     copies, their byte budget and counters (own lock)
//   autotuner         --workers auto: the pool's size from the trainers'
//                     waits, the workers' busy time and the rate; pure
//   cpu_budget        the CPUs the daemon may use (cgroup, affinity)
//   ring_depth        when a session's ring deepens (a bursty trainer); pure
//   remote_pool       --decode-nodes: a second pool whose workers are relays
//                     to decode nodes; remote_gate: when it gets work
//
// Threads
//   - gRPC handler threads call Attach / Detach / KeepAlive / GetStatus /
//     ListSamples.
//   - One dispatcher thread owns the worker channels (a Poller): it starts
//     batches in free slots, sends sample tasks to workers round-robin over
//     sessions, takes results, finishes batches, and replaces dead or hung
//     workers, redoing their samples.
//   - One ticker thread bumps each ring's heartbeat, reclaims sessions
//     whose client went away, and once a second feeds the autotuner and
//     resizes the pool (--workers auto) and deepens bursty sessions' rings.
//   - One ReleaseWatcher thread per session sleeps on its ring's release
//     futex and wakes the dispatcher when the client frees a slot.
//
// Lock: mu_ guards all mutable engine state and every room in it except the
// dataset registry (its own lock, never held with mu_), the transcode cache
// (its own lock, taken under mu_) and the Poller (thread-safe). Clang's
// -Wthread-safety checks the annotations (scripts/thread-safety.sh). Not
// checked by it: a DaemonSession reached through a shared_ptr held outside
// sessions_ (KeepAlive's, the one being removed), whose mutable fields are
// still only touched with mu_ held. Indexing, making a ring, joining a watcher
// and sending on a KeepAlive stream happen outside mu_.

#ifndef STOKER_SERVER_ENGINE_ENGINE_H_
#define STOKER_SERVER_ENGINE_ENGINE_H_

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "server/engine/attach_plan.h"
#include "server/engine/autotuner.h"
#include "stoker/v1/config.pb.h"
#include "server/engine/cpu_budget.h"
#include "server/dataset/dataset.h"
#include "server/engine/dataset_registry.h"
#include "server/engine/dataset_totals.h"
#include "server/engine/failure_memory.h"
#include "server/image/decode/decode_planner.h"
#include "server/engine/prefetch.h"
#include "server/engine/remote_pool.h"
#include "server/engine/scheduler.h"
#include "server/engine/session.h"
#include "server/engine/transcode_cache.h"
#include "server/engine/prepared_cache_budget.h"
#include "server/engine/video_prober.h"
#include "server/engine/video_tables.h"
#include "server/engine/worker_launcher.h"
#include "server/engine/worker_pool.h"
#include "stoker/v1/stoker.pb.h"

namespace stoker {

// What an Engine reaches of the OS, for tests (leveldb's Env): null means
// the real one. Borrowed; must outlive the Engine.
struct EngineEnv {
  // Starts and reaps the workers. Null: posix_spawn of stoker-worker
  // (v1::DaemonConfig::worker_binary, or the one beside this executable).
  WorkerLauncher* launcher = nullptr;
  // The worker pool's clock (hang check, respawn backoff). Null: monotonic.
  Clock* clock = nullptr;
  // With --decode-calibration on: taken as what the start-up calibration
  // measured, none is run (tests script the disabled scales). Null: measured.
  const image::DecodeCalibration* decode_calibration = nullptr;
  // What the CPU budget is read from (cgroup files, affinity), unless
  // v1::DaemonConfig::cpu_budget sets it. Null: the system's.
  const CpuBudgetEnv* cpu_budget = nullptr;
  // The autotuner's rules (dwell times, thresholds). Null: the defaults.
  const AutotuneOptions* autotune = nullptr;
  // Who indexes video datasets (server/engine/video_prober.h). Null: sandboxed
  // stoker-worker processes, when the workers are real (with an injected
  // launcher and no prober, video sessions are refused).
  VideoProber* video_prober = nullptr;
  // With --decode-nodes: starts the remote pool's workers. Null:
  // stoker-relay processes beside this executable (remote_pool.h).
  WorkerLauncher* remote_launcher = nullptr;
};

class Engine {
 public:
  explicit Engine(v1::DaemonConfig config) : Engine(std::move(config), EngineEnv()) {}
  Engine(v1::DaemonConfig config, EngineEnv env);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Opens the data root, times the decode at each DCT
  // scale (--decode-calibration, before any session: every session gets the
  // same disabled scales), starts the workers and threads.
  [[nodiscard]] absl::Status Start() ABSL_LOCKS_EXCLUDED(mu_);
  // Stops taking sessions, lets in-flight samples finish (bounded by
  // drain_timeout_ms), tells every client, then removes every session.
  void Drain() ABSL_LOCKS_EXCLUDED(mu_);
  // Drain() if needed, then stops workers and threads. Idempotent.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

  // A session (v1::Stoker.Attach). While the engine is still starting (the
  // socket listens before the calibration and the workers are done) it
  // waits for it, up to kStartWait, as a trainer started beside its sidecar
  // expects; UNAVAILABLE once it drains or stops, or if it is still starting
  // then.
  [[nodiscard]] absl::StatusOr<v1::AttachResponse> Attach(const v1::AttachRequest& req)
      ABSL_LOCKS_EXCLUDED(mu_);
  static constexpr absl::Duration kStartWait = absl::Seconds(60);
  // The ring socket's lookup (ring_handover.h): a duplicate of the fd of
  // the ring of the session whose ring token this is; NOT_FOUND otherwise.
  [[nodiscard]] absl::StatusOr<UniqueFd> RingFd(std::string_view token) ABSL_LOCKS_EXCLUDED(mu_);
  [[nodiscard]] absl::Status Detach(const std::string& session_id, const std::string& why)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Serves one KeepAlive stream: sends events through `send` until the
  // session ends (OK) or `cancelled()` turns true, in which case the session
  // is reclaimed. NOT_FOUND for an unknown session.
  [[nodiscard]] absl::Status KeepAlive(const std::string& session_id,
                                       const std::function<bool()>& cancelled,
                                       const std::function<bool(const v1::SessionEvent&)>& send)
      ABSL_LOCKS_EXCLUDED(mu_);
  // With include_failures, each session's failures; with
  // include_dataset_failures, the failure memory per dataset
  // (v1::DatasetFailures, which states its bounds).
  v1::StatusResponse GetStatus(bool include_failures, bool include_dataset_failures)
      ABSL_LOCKS_EXCLUDED(mu_);
  // A page of a session's dataset in index order (v1::Stoker.ListSamples):
  // NOT_FOUND for an unknown session, INVALID_ARGUMENT for a limit over
  // 65536 (0 means 4096).
  [[nodiscard]] absl::StatusOr<v1::ListSamplesResponse> ListSamples(
      const v1::ListSamplesRequest& req) ABSL_LOCKS_EXCLUDED(mu_);

  // "starting", "serving", "draining", "stopped".
  std::string state() const ABSL_LOCKS_EXCLUDED(mu_);
  // Attaches waiting for the engine to start, now.
  uint32_t attaches_waiting() const ABSL_LOCKS_EXCLUDED(mu_);
  const v1::DaemonConfig& config() const { return config_; }
  // The tag in this daemon's shm names (from the socket path and uid).
  const std::string& shm_tag() const { return shm_tag_; }

 private:
  void DispatchLoop() ABSL_LOCKS_EXCLUDED(mu_);
  void TickerLoop() ABSL_LOCKS_EXCLUDED(mu_);

  void StartBatchesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DispatchLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends session `s`'s front sample to worker `w` (or fails it, or leaves
  // it queued when the send fails).
  // `pool`: the local pool (pool_) or the remote one (remote_'s).
  void DispatchOneLocked(WorkerPool& pool, uint32_t w, DaemonSession& s)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnResultLocked(WorkerPool& pool, uint32_t w, const worker::ResultMsg& r)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnWorkerDeathLocked(WorkerPool& pool, uint32_t w, const std::string& cause)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A worker just started: it learns every session's ring.
  void MapRingsLocked(uint32_t w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MapRingsLocked(WorkerPool& pool, uint32_t w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes tasks back from decode nodes that fell behind while the local
  // workers have room (RemotePool::Laggards).
  void StealBackLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The remote pool's gate (remote_gate.h), once a second: the trainers'
  // waits and the local workers' busy time since the last call.
  void GateRemoteLocked(int64_t now_ns) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // limits' shm budget fields: the budget, and what the sessions hold.
  void RingBudgetLocked(AttachLimits* limits) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The budget as configured or read now (reads files: call outside mu_).
  CpuBudget ReadBudget() const;
  // The most workers allowed now, the CPUs reserved and the trainers.
  uint32_t MaxWorkersLocked(double* reserved, uint32_t* trainers) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One autotuner tick (--workers auto): measures since the last one,
  // applies the target to the pool.
  void AutotuneLocked(int64_t now_ns) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Deepens the rings whose trainers consume in bursts (server/engine/ring_depth.h).
  void DeepenRingsLocked(int64_t now_ns) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ExportAutotuneLocked(v1::AutotuneStatus* out) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // UNAVAILABLE unless serving, RESOURCE_EXHAUSTED at --max-sessions.
  absl::Status RoomForSessionLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemoveSessionLocked(const std::string& id, const std::string& why,
                           std::vector<std::shared_ptr<DaemonSession>>* removed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Joins the removed sessions' watchers (outside mu_), then drops their
  // fills and rings.
  void FinalizeRemoved(std::vector<std::shared_ptr<DaemonSession>>& removed)
      ABSL_LOCKS_EXCLUDED(mu_);
  DaemonSession* FindByNumberLocked(uint64_t number) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  EngineEnv env_;
  Clock* const clock_;
  // Constant after Start().
  v1::DaemonConfig config_;
  std::string shm_tag_;
  uint64_t ring_budget_bytes_ = 0;  // --ring-budget-mb, or half the memory available
  std::unique_ptr<DataRoot> data_root_;
  std::unique_ptr<DataRootIndexer> indexer_;
  std::unique_ptr<DatasetRegistry> registry_;  // thread-safe (its own lock)
  std::unique_ptr<Prefetcher> prefetch_;  // null: readahead off; uses data_root_
  std::unique_ptr<WorkerLauncher> own_launcher_;  // when env_ names none
  WorkerLauncher* launcher_ = nullptr;
  // Video datasets' indexing (null: no video sessions) and their tables.
  std::unique_ptr<WorkerLauncher> probe_launcher_;
  std::unique_ptr<VideoProber> own_prober_;
  VideoProber* prober_ = nullptr;
  VideoTables video_tables_;  // thread-safe (its own lock)
  TaskOptions task_options_;
  // The transcode cache (all null / invalid when off). The cache is
  // thread-safe (its own lock, taken under mu_, never the other way).
  UniqueFd transcode_cache_fd_;
  UniqueFd prepared_cache_fd_;  // --prepared-cache (server/volume/volume_cache.h), or none
  std::unique_ptr<CacheDir> prepared_cache_dir_;
  std::unique_ptr<PreparedCacheBudget> prepared_cache_;  // null without a prepared cache
  std::unique_ptr<CacheDir> transcode_cache_dir_;
  std::unique_ptr<TranscodeCache> transcode_cache_;
  int64_t start_ns_ = 0;
  // The start-up calibration (empty, nothing disabled, when it is off).
  image::DecodeCalibration decode_calibration_;
  std::string decode_calibration_source_;  // "measured" or the file it was loaded from
  Poller poller_;  // thread-safe

  std::thread dispatcher_;
  std::thread ticker_;
  std::atomic<bool> stopping_{false};

  mutable absl::Mutex mu_;
  // Session events, drain progress, stopping; waited on with mu_ held. A
  // std::condition_variable_any: its waits keep to the monotonic clock.
  std::condition_variable_any cv_;
  std::string state_ ABSL_GUARDED_BY(mu_) = "starting";
  uint32_t attaches_waiting_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, std::shared_ptr<DaemonSession>> sessions_ ABSL_GUARDED_BY(mu_);
  // Made in Start(), then never replaced: only what it points to is guarded.
  std::unique_ptr<WorkerPool> pool_ ABSL_PT_GUARDED_BY(mu_);
  // --decode-nodes: the decode nodes' relays (remote_pool.h); null without.
  std::unique_ptr<RemotePool> remote_ ABSL_PT_GUARDED_BY(mu_);
  // Set in Start with remote_: resolves its entries (the ticker, outside mu_).
  std::function<std::vector<std::vector<std::string>>()> resolve_decode_nodes_;
  int64_t gate_last_ns_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t gate_busy_ns_ ABSL_GUARDED_BY(mu_) = 0;
  Scheduler scheduler_ ABSL_GUARDED_BY(mu_);
  std::unordered_map<uint64_t, SampleTask*> in_flight_ ABSL_GUARDED_BY(mu_);  // by task id
  // What the sessions' state machine reaches beyond one session.
  BatchContext batch_ ABSL_GUARDED_BY(mu_);
  // Failures by dataset, beyond the sessions that hit them (bounds:
  // server/engine/failure_memory.h).
  FailureMemory failure_memory_ ABSL_GUARDED_BY(mu_);
  DatasetTotals dataset_totals_ ABSL_GUARDED_BY(mu_);  // per-dataset counters that only grow
  uint64_t next_session_number_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t next_task_id_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t sessions_total_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t sessions_reclaimed_ ABSL_GUARDED_BY(mu_) = 0;
  // The CPU budget (re-read every 10 s) and, with --workers auto, the
  // autotuner and what its last tick measured from.
  CpuBudget budget_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<Autotuner> autotuner_ ABSL_GUARDED_BY(mu_);  // null: fixed
  int64_t tune_last_ns_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t depth_last_ns_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t tune_busy_ns_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t tune_samples_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<pid_t, double> tune_cpu_ ABSL_GUARDED_BY(mu_);  // workers' CPU s at the last tick
};

}  // namespace stoker

#endif  // STOKER_SERVER_ENGINE_ENGINE_H_
