// The worker pool: the decode/augment workers behind a WorkerLauncher, their
// channels, and their supervision.
//
// Glossary
//   slot        A WorkerSlot: one place in the pool (id 0..n-1), filled by
//               one incarnation of a worker at a time.
//   in flight   Task ids sent to a worker, oldest first. A worker answers in
//               the order it was sent (server/worker/worker_protocol.h), so the
//               oldest is the one it is on; the rest only wait in its queue.
//   hung        Killed by the pool: no progress for task_timeout_ms, or an
//               answer out of order. Its death counts against its sample.
//   unsendable  A send failed (the worker is gone or stuck); it gets no more
//               tasks until its death arrives. Says nothing about its sample.
//   full        Its socket's buffer holds no more tasks (each is a datagram of
//               some 20 KB; a deep --worker-queue-depth fills it): a send
//               would block. It takes tasks again once it answers one.
//
// Supervision, as the dispatcher drives it:
//   1. Start launches every slot; each new incarnation is told every ring
//      by the engine (MapRing).
//   2. Service reads a slot's channel when the Poller says it has input:
//      results go to the engine in order; a closed channel or a malformed
//      message is a death.
//   3. Bury handles a death: reaps the worker, says why it died, whether it
//      caused it itself (a signal other than SIGKILL, an exit, or hung), and
//      which tasks it held; the slot waits to be started again.
//   4. Supervise, every loop: kills workers that made no progress for
//      task_timeout_ms, and starts dead slots whose time has come. A worker
//      that died within 1 s of starting waits 500 ms before the next start
//      (it keeps dying young); a start that fails is retried 1 s later.
//   5. Resize (the autotuner's, server/engine/autotuner.h) grows the pool by
//      starting retired slots again, then new ones; it shrinks it by
//      retiring the highest slots: a retiring worker takes no new task, is
//      asked to exit once it holds none (Supervise), and its death (Bury)
//      retires the slot instead of restarting it. Slot ids stay stable, so
//      the scheduler's indices and the workers' ids in logs keep meaning.
//
// Crash attribution (CrashTally): each death of a worker counts against the
// sample it was on (the oldest task in flight) and the engine fails the
// sample after kMaxSelfCrashes deaths the worker caused itself, or after
// kMaxAnyDeaths deaths of any kind (a worker killed from outside does not
// blame its sample before that); the other tasks in flight are redone.
//
// Threads: the Poller is thread-safe; WorkerPool is not (the engine's lock
// guards it).

#ifndef STOKER_SERVER_ENGINE_WORKER_POOL_H_
#define STOKER_SERVER_ENGINE_WORKER_POOL_H_

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "common/clock.h"
#include "common/posix.h"
#include "server/engine/worker_launcher.h"
#include "server/worker/worker_protocol.h"

namespace stoker {

// Deaths of a worker while on the same sample before the sample fails:
// crashes it caused itself (SIGSEGV, abort, a hang), and any death at all.
inline constexpr uint32_t kMaxSelfCrashes = 2;
inline constexpr uint32_t kMaxAnyDeaths = 8;

// The deaths counted against one sample (reset when it is replaced).
struct CrashTally {
  uint32_t self_crashes = 0;
  uint32_t deaths = 0;
  // Counts a death of the worker that was on the sample; true when the
  // sample must now fail.
  bool Count(bool self_inflicted) {
    ++deaths;
    if (self_inflicted) ++self_crashes;
    return self_crashes >= kMaxSelfCrashes || deaths >= kMaxAnyDeaths;
  }
};

// The dispatcher's wait: the workers' channels and a wake-up eventfd in one
// epoll set. Thread-safe after Init.
class Poller {
 public:
  Poller() = default;
  Poller(const Poller&) = delete;
  Poller& operator=(const Poller&) = delete;

  [[nodiscard]] absl::Status Init();
  // Channel `fd` of worker `id` (readable, or hung up) wakes Wait.
  void Add(int fd, uint32_t id);
  void Remove(int fd);
  // Makes the current or next Wait return (from any thread).
  void Wake();
  // Waits up to `timeout_ms` and returns the ids of the workers whose
  // channels have input (the wake-up is consumed, not listed).
  std::vector<uint32_t> Wait(int timeout_ms);

 private:
  UniqueFd epoll_fd_;
  UniqueFd wake_fd_;  // eventfd
};

// One place in the pool.
struct WorkerSlot {
  uint32_t id = 0;
  pid_t pid = -1;
  UniqueFd channel;
  std::string state = "starting";  // "idle", "busy", "restarting"
  std::deque<uint64_t> in_flight;  // task ids, oldest first
  int64_t last_progress_ns = 0;
  int64_t respawn_at_ns = 0;  // when dead: when to start again
  int64_t started_ns = 0;
  bool dead = true;
  bool hung = false;        // killed by us: it hung, or answered out of order
  bool unsendable = false;  // a send to it failed; its death comes by epoll
  bool full = false;        // its channel's buffer is full; cleared by its next result
  bool greeted = false;     // its kHello has come (see WorkerPool::set_wait_for_hello)
  bool stopped = false;     // killed by Stop (no blame); its death is on its way
  uint64_t restarts = 0;
  uint64_t crashes = 0;
  uint64_t samples_done = 0;
  uint64_t samples_failed = 0;
  // Shrinking (see Resize): takes no task; asked to exit once it holds none
  // (shutdown_sent); once dead, retired: not restarted, not listed.
  bool retiring = false;
  bool shutdown_sent = false;
  bool retired = false;
  // Time spent holding at least one task: finished spans, and the start of
  // the current one (0: holds none).
  int64_t busy_ns = 0;
  int64_t busy_since_ns = 0;
};

// A worker's death, as Bury found it.
struct WorkerDeath {
  uint32_t worker = 0;
  std::string why;  // the cause and how it ended ("channel closed, killed by signal 11 (...)")
  bool self_inflicted = false;
  std::vector<uint64_t> tasks;  // in flight, oldest first: tasks[0] is the one it was on
};

// What a death was: the cause given, plus how the worker ended; and whether
// the worker caused it itself (it `hung`, a signal other than SIGKILL, or an
// exit). Pure.
void ClassifyDeath(const std::string& cause, bool hung, const WorkerExit& exit, std::string* why,
                   bool* self_inflicted);

class WorkerPool {
 public:
  // `launcher`, `clock` and `poller` are borrowed and must outlive the pool.
  // Slot `id`'s channel is `poller_id_base` + id in the Poller (two pools
  // share one: the engine's local and remote ones).
  WorkerPool(WorkerLauncher* launcher, Clock* clock, Poller* poller, uint32_t task_timeout_ms,
             uint32_t poller_id_base = 0);
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Fills `count` slots; the first launch error is returned (the slots
  // started stay, for Shutdown).
  [[nodiscard]] absl::Status Start(uint32_t count);
  // Slots, retired ones included (ids are 0..size()-1).
  size_t size() const { return workers_.size(); }
  // Slots neither retiring nor retired: the pool's size as Resize sets it.
  uint32_t active() const;
  // Makes `count` slots (at least 1) active: retires the highest active
  // ones, or starts retired ones again, then new ones. Returns the ids
  // launched (the caller tells them the rings); a launch that fails leaves
  // its slot dead, for Supervise to retry.
  std::vector<uint32_t> Resize(uint32_t count);
  // Retires slot `id` as Resize retires the highest (its tasks finish
  // first), and a new slot past the last: its id once launched, nullopt when
  // the launch failed (Supervise retries it; its id is size() - 1). The
  // remote pool's, whose slots stand for addresses that come and go.
  void Retire(uint32_t id);
  std::optional<uint32_t> Add();
  // Kills worker `id` without blaming its sample (SIGKILL, not hung): its
  // tasks are redone when its death arrives (Service / Bury). The remote
  // pool's, to take tasks back from a decode node that fell behind.
  void Stop(uint32_t id);
  // Worker-nanoseconds spent holding tasks, every slot since it was made,
  // up to `now_ns` (the autotuner's busy load).
  int64_t BusyNs(int64_t now_ns) const;
  const WorkerSlot& worker(uint32_t id) const { return *workers_[id]; }
  uint64_t restarts_total() const { return restarts_total_; }

  // A worker takes tasks only once it has said kHello: a relay
  // (server/remote/relay.h) says it once its decode node is connected, so
  // no task waits on a node that cannot be reached. Off by default (a local
  // worker's tasks wait in its socket while it starts).
  void set_wait_for_hello(bool on) { wait_for_hello_ = on; }
  uint32_t poller_id_base() const { return poller_id_base_; }

  // Whether worker `id` may take a task at queue depth `depth`: alive, not
  // hung, unsendable or full (nor, with set_wait_for_hello, yet to say
  // kHello), holding at most `depth` tasks.
  bool CanTake(uint32_t id, uint32_t depth) const;
  // Sends the first `bytes` of `msg` (a task); on success it is in flight.
  // False when the send failed: the worker is marked full when its channel's
  // buffer would not take the task while it holds others (a send that
  // would block), else unsendable.
  bool SendTask(uint32_t id, const worker::TaskMsg& msg, size_t bytes);
  // Sends a control message (with `fd` as SCM_RIGHTS, -1 for none) to one
  // live worker, or to every live one. Failures are left to the death
  // that follows.
  void Send(uint32_t id, const void* msg, size_t bytes, int fd);
  void SendAll(const void* msg, size_t bytes, int fd);

  // Reads worker `id`'s channel until it is drained: `on_result` gets each
  // result in turn, once the pool has taken it off the worker's in-flight
  // list. A result out of order kills the worker (hung) and ends the
  // reading. True when the worker is dead (channel closed, or a malformed
  // message): the caller calls Bury.
  bool Service(uint32_t id, absl::FunctionRef<void(const worker::ResultMsg&)> on_result);
  // The worker in slot `id` died (`cause`): reaps it, empties its slot and
  // says what it held. `shutting_down`: not logged, no restart counted. A
  // retiring worker's death retires its slot (not logged, not restarted).
  WorkerDeath Bury(uint32_t id, const std::string& cause, bool shutting_down);
  // Kills workers with no progress for task_timeout_ms (not counting time
  // the daemon itself did not run: a gap of over kStalledNs between two
  // calls, as after SIGSTOP, is added to every worker's clock); asks retiring
  // workers that hold no task to exit; unless `shutting_down`, starts dead
  // slots whose time has come. Returns the ids started (the caller tells
  // them the rings).
  std::vector<uint32_t> Supervise(bool shutting_down);
  // Counts a sample the worker finished: decoded, or failed by it.
  void CountSample(uint32_t id, bool ok);
  // The worker's CPU seconds (0 when dead).
  double CpuSeconds(uint32_t id) const;

  // Asks every live worker to exit; kills those still running at
  // `deadline_ms` from now. Every slot ends dead.
  void Shutdown(int64_t deadline_ms);

 private:
  absl::Status Launch(WorkerSlot& w);

  WorkerLauncher* const launcher_;
  Clock* const clock_;
  Poller* const poller_;
  const uint32_t task_timeout_ms_;
  const uint32_t poller_id_base_;
  bool wait_for_hello_ = false;
  // Supervise runs every loop (at least every 50 ms): a longer gap is the
  // daemon's own.
  static constexpr int64_t kStalledNs = 2'000'000'000;
  int64_t last_supervise_ns_ = 0;
  std::vector<std::unique_ptr<WorkerSlot>> workers_;
  uint64_t restarts_total_ = 0;
};

}  // namespace stoker

#endif  // STOKER_SERVER_ENGINE_WORKER_POOL_H_
