// A decode node's service (stokerd --decode-node): trainer nodes' relays
// stream decode tasks in; a pool of ordinary stoker-workers decodes them;
// each stream gets its answers back in the order it sent its tasks.
//
// A task's life on the node:
//   1. Decode's reader takes a DecodeTask off the stream and checks it
//      (wire.h: ParseTask); a malformed one ends the stream with
//      INVALID_ARGUMENT.
//   2. It takes a range of the arena (arena.h) for the task's inputs and
//      outputs, waiting while the arena is full: the node's backpressure,
//      on top of the trainer's credits (a relay holds at most its queue
//      depth of tasks). A task bigger than the whole arena is answered
//      RESOURCE_EXHAUSTED at once.
//   3. The inputs are copied in (the trainer's encoded bytes; none when it
//      reads from the node's own data root), the task's offsets rewritten to
//      the range, its caches and faults cleared, and it is queued. A clip or
//      volume whose files were shipped (TaskMsg.shipped_files) pins them in
//      the store (file_store.h) until it is answered or dropped; a piece of a
//      shipped file (DecodeTask.file) is written to the store, and answered
//      by nothing.
//   4. The dispatcher sends queued tasks to workers (WorkerPool, as
//      stokerd's own; the arena is every worker's one ring); a worker's
//      death redoes its tasks here, and a sample that kills kMaxSelfCrashes
//      workers is answered as failed (the trainer node counts it as any
//      failed sample).
//   5. Decode's writer waits for the stream's oldest task, copies its
//      outputs into the DecodeResult, frees its range and writes it.
//   6. When the stream ends (the trainer is done, its relay was killed, the
//      network failed), its queued tasks are dropped and its tasks on
//      workers are orphaned: their ranges are freed when they finish.
//      Nothing of a stream outlives it.
//
// Threads: gRPC handler threads (two per stream: the handler writes, a
// thread it starts reads), one dispatcher. One lock (mu_) guards the pool,
// the arena, the queue and the streams; inputs and outputs are copied
// outside it. Each stream's handler waits on its own condition, readers
// waiting for task memory on another. Clang's -Wthread-safety checks the
// annotations.

#ifndef STOKER_SERVER_REMOTE_DECODE_NODE_H_
#define STOKER_SERVER_REMOTE_DECODE_NODE_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "common/posix.h"
#include "server/engine/worker_launcher.h"
#include "server/engine/prepared_cache_budget.h"
#include "server/engine/worker_pool.h"
#include "server/remote/arena.h"
#include "server/remote/file_store.h"
#include "stoker/v1/decode.grpc.pb.h"

namespace stoker::remote {

struct DecodeNodeOptions {
  uint32_t workers = 1;
  uint32_t queue_depth = 2;         // tasks a node worker holds at most
  uint32_t task_timeout_ms = 30000;  // a node worker stuck this long is replaced
  uint64_t arena_bytes = uint64_t{1} << 30;
  uint64_t max_task_bytes = uint64_t{256} << 20;  // one output at most
  bool keep_faults = false;  // tests: honour TaskMsg.fault (--fault-*-substring on the node)
  std::string token;         // token mode: the token every call must carry
};

// What the node has done, for its log and Info.
struct DecodeNodeStats {
  uint64_t streams_open = 0;
  uint64_t streams_total = 0;
  uint64_t tasks_done = 0;
  uint64_t tasks_failed = 0;
  uint64_t bytes_in = 0;
  uint64_t bytes_out = 0;
  uint64_t worker_restarts = 0;
  uint64_t arena_used = 0;
  FileStoreStats files;
  uint64_t prepared_entries = 0;
  uint64_t prepared_hits = 0;
};

// What a node works with, all borrowed (they must outlive it), injected as
// leveldb injects its Env.
struct DecodeNodeEnv {
  WorkerLauncher* launcher = nullptr;
  Clock* clock = nullptr;
  // Where shipped clips' and volumes' files go (the launcher gives its
  // folder to the workers); null: they are refused, naming
  // --decode-shared-root.
  FileStore* files = nullptr;
  // The node's --prepared-cache (the launcher gives its folder to the
  // workers): volumes are prepared once per node, not once per patch; null:
  // none.
  PreparedCacheBudget* prepared = nullptr;
};

class DecodeNode final : public v1::DecodeNode::Service {
 public:
  DecodeNode(DecodeNodeEnv env, DecodeNodeOptions o);
  ~DecodeNode() override;
  DecodeNode(const DecodeNode&) = delete;
  DecodeNode& operator=(const DecodeNode&) = delete;

  // The arena (a memfd), the workers, the dispatcher. Errors: memfd,
  // mmap, the first worker launch.
  [[nodiscard]] absl::Status Start();
  // Ends every stream (their handlers return CANCELLED) and the workers.
  void Stop();
  DecodeNodeStats stats() const;

  grpc::Status Info(grpc::ServerContext* ctx, const v1::DecodeNodeInfoRequest* req,
                    v1::DecodeNodeInfo* out) override;
  grpc::Status Decode(
      grpc::ServerContext* ctx,
      grpc::ServerReaderWriter<v1::DecodeResult, v1::DecodeTask>* stream) override;
  grpc::Status Has(grpc::ServerContext* ctx, const v1::HasFilesRequest* req,
                   v1::HasFilesReply* out) override;

 private:
  struct Stream;
  struct Task {
    uint64_t id = 0;          // the node's, the workers' task id
    uint64_t trainer_id = 0;  // the trainer's task id, given back in the answer
    Stream* stream = nullptr;  // null once the stream is gone (orphaned)
    std::unique_ptr<worker::TaskMsg> msg;
    size_t msg_bytes = 0;
    uint64_t arena_offset = 0;
    bool queued = false;
    bool in_flight = false;
    bool done = false;
    worker::ResultMsg result;
    CrashTally crashes;
    std::vector<std::string> files;  // shipped files it pins (released when answered)
  };
  struct Stream {
    std::deque<std::shared_ptr<Task>> order;  // as sent; answered from the front
    bool reader_done = false;
    bool dropped = false;  // step 6 ran: takes no more tasks
    std::string error;  // a malformed task: the stream's end status
    std::unique_ptr<FileStore::Upload> upload;  // a shipped file coming in (the reader's)
    // Its handler's wake-up: its oldest task finished, its reader ended, the
    // node stops (one stream's answer wakes no other stream's handler).
    absl::CondVar ready;
  };

  // Steps 1-3 for one request (the reader). Not OK: end the stream.
  absl::Status Submit(Stream* s, const v1::DecodeTask& req) ABSL_LOCKS_EXCLUDED(mu_);
  // A piece of a shipped file (the reader).
  absl::Status Receive(Stream* s, const v1::FileChunk& chunk) ABSL_LOCKS_EXCLUDED(mu_);
  // The store keys a shipped task names, checked, and pinned.
  absl::Status PinFiles(const worker::TaskMsg& m, std::vector<std::string>* keys);
  void UnpinFilesLocked(Task& t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The dispatcher (step 4).
  void DispatchLoop();
  void OnResultLocked(const worker::ResultMsg& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnDeathLocked(uint32_t w, const std::string& cause) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishLocked(Task& t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MapArenaLocked(uint32_t w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Step 6.
  void DropStreamLocked(Stream* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Step 5: the answer to a finished task, from its arena range.
  void Answer(const Task& t, v1::DecodeResult* out) const;

  WorkerLauncher* const launcher_;
  Clock* const clock_;
  FileStore* const files_;
  PreparedCacheBudget* const prepared_;
  const DecodeNodeOptions options_;
  const uint64_t arena_bytes_;  // the arena's size (Arena::capacity)
  UniqueFd arena_fd_;
  Mapping arena_map_;
  Poller poller_;
  std::thread dispatcher_;
  std::atomic<bool> stopping_{false};

  mutable absl::Mutex mu_;
  absl::CondVar freed_;  // arena memory was freed (or the node stops)
  std::set<Stream*> streams_ ABSL_GUARDED_BY(mu_);  // open, each woken by Stop
  std::unique_ptr<WorkerPool> pool_ ABSL_GUARDED_BY(mu_);
  Arena arena_ ABSL_GUARDED_BY(mu_);
  std::deque<std::shared_ptr<Task>> queue_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, std::shared_ptr<Task>> in_flight_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  DecodeNodeStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace stoker::remote

#endif  // STOKER_SERVER_REMOTE_DECODE_NODE_H_
