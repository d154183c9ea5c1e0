// The daemon's logic under the gRPC layer: sessions, their rings, the shared
// worker pool and the scheduler that feeds it. Takes and returns protos and
// Status; testable without a socket.
//
// Threads
//   - gRPC handler threads call Attach / Detach / KeepAlive / GetStatus.
//   - One dispatcher thread owns the worker channels (epoll): it starts
//     batches in free slots, sends sample tasks to workers round-robin over
//     sessions, takes results, finishes batches, and replaces dead or hung
//     workers, redoing their samples.
//   - One ticker thread bumps each ring's heartbeat and reclaims sessions
//     whose client went away.
//   - One watcher thread per session sleeps on its ring's release futex and
//     wakes the dispatcher when the client frees a slot.
// All mutable state is guarded by mu_.

#ifndef STOKER_SERVER_ENGINE_H_
#define STOKER_SERVER_ENGINE_H_

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/config.h"
#include "server/dataset/dataset.h"
#include "server/posix.h"
#include "server/prefetch.h"
#include "stoker/v1/stoker.pb.h"

namespace stoker {

struct Session;
struct DatasetFailureLog;
struct SampleTask;
struct WorkerSlot;
struct ResultView;

class Engine {
 public:
  explicit Engine(DaemonConfig config);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Opens the data root, sweeps stale rings, starts the workers and threads.
  [[nodiscard]] absl::Status Start();
  // Stops taking sessions, lets in-flight samples finish (bounded by
  // drain_timeout_ms), tells every client, then removes every session.
  void Drain();
  // Drain() if needed, then stops workers and threads. Idempotent.
  void Stop();

  [[nodiscard]] absl::StatusOr<v1::AttachResponse> Attach(const v1::AttachRequest& req);
  [[nodiscard]] absl::Status Detach(const std::string& session_id, const std::string& why);
  // Serves one KeepAlive stream: sends events through `send` until the
  // session ends (OK) or `cancelled()` turns true, in which case the session
  // is reclaimed. NOT_FOUND for an unknown session.
  [[nodiscard]] absl::Status KeepAlive(const std::string& session_id,
                                       const std::function<bool()>& cancelled,
                                       const std::function<bool(const v1::SessionEvent&)>& send);
  // With include_failures, each session's failures; with
  // include_dataset_failures, the failure memory per dataset
  // (v1::DatasetFailures, which states its bounds).
  v1::StatusResponse GetStatus(bool include_failures, bool include_dataset_failures);
  // A page of a session's dataset in index order (v1::Stoker.ListSamples):
  // NOT_FOUND for an unknown session, INVALID_ARGUMENT for a limit over
  // 65536 (0 means 4096).
  [[nodiscard]] absl::StatusOr<v1::ListSamplesResponse> ListSamples(
      const v1::ListSamplesRequest& req);

  // "starting", "serving", "draining", "stopped".
  std::string state() const;
  const DaemonConfig& config() const { return config_; }
  // The tag in this daemon's shm names (from the socket path and uid).
  const std::string& shm_tag() const { return shm_tag_; }

 private:
  void DispatchLoop();
  void TickerLoop();
  void WatchReleases(std::shared_ptr<Session> s);
  void Wake();

  // All below: mu_ held.
  void StartBatchesLocked();
  void DispatchLocked();
  void OnResultLocked(WorkerSlot& w, const ResultView& r);
  void OnWorkerDeathLocked(WorkerSlot& w, const std::string& why);
  void FinishBatchLocked(Session& s, uint64_t seq);
  void FailSampleLocked(Session& s, SampleTask& t, const std::string& reason);
  void RememberFailureLocked(const std::string& dataset, uint64_t index, const std::string& path,
                             const std::string& reason);
  absl::Status SpawnWorkerLocked(WorkerSlot& w);
  // UNAVAILABLE unless serving, RESOURCE_EXHAUSTED at --max-sessions.
  absl::Status RoomForSessionLocked() const;
  void RemoveSessionLocked(const std::string& id, const std::string& why,
                           std::vector<std::shared_ptr<Session>>* removed);
  void FinalizeRemoved(std::vector<std::shared_ptr<Session>>& removed);
  Session* FindByNumberLocked(uint64_t number);

  // Constant after construction.
  DaemonConfig config_;  // constant after Start()
  std::string shm_tag_;
  std::string worker_binary_;
  std::unique_ptr<DataRoot> data_root_;
  std::unique_ptr<Prefetcher> prefetch_;  // null: readahead off; uses data_root_
  int64_t start_ns_ = 0;
  UniqueFd epoll_fd_;
  UniqueFd wake_fd_;  // eventfd

  std::thread dispatcher_;
  std::thread ticker_;
  std::atomic<bool> stopping_{false};

  mutable std::mutex mu_;
  std::condition_variable cv_;  // session events, drain progress
  // Guarded by mu_.
  std::string state_ = "starting";
  std::map<std::string, std::shared_ptr<Session>> sessions_;
  std::vector<std::unique_ptr<WorkerSlot>> workers_;
  std::unordered_map<uint64_t, SampleTask*> in_flight_;  // by task id
  // Indexed datasets by DatasetKey (the canonical name the index was built
  // from, the format the request asked for, and IndexOptions::flags(): an
  // index made with allow_empty or skip_unsupported_formats is another one).
  std::map<std::string, std::shared_ptr<const Dataset>> datasets_;
  // One gate per DatasetKey: concurrent Attaches of one dataset (the ranks of
  // a job starting together) index it once; the others wait and share it.
  std::map<std::string, std::shared_ptr<std::mutex>> index_gates_;
  uint64_t next_session_number_ = 1;
  uint64_t next_task_id_ = 1;
  uint64_t next_prefetch_key_ = 1;
  size_t rr_cursor_ = 0;
  uint64_t sessions_total_ = 0;
  uint64_t sessions_reclaimed_ = 0;
  uint64_t samples_total_ = 0;
  uint64_t samples_failed_total_ = 0;
  uint64_t worker_restarts_total_ = 0;
  // Failures by dataset, beyond the sessions that hit them; the dataset that
  // failed most recently first (bounds: kKeptFailureDatasets and
  // kKeptFailuresPerDataset in engine.cc).
  std::list<DatasetFailureLog> failure_memory_;
};

}  // namespace stoker

#endif  // STOKER_SERVER_ENGINE_H_
