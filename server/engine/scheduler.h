// The scheduler: which session's sample goes to which idle worker next.
//
// Sessions take turns, round-robin: each pick starts at the session after
// the last one served and takes the first with a sample queued, so every
// session with work gets a turn before any gets a second (none starves,
// however deep another's queue). Workers are filled emptiest first: a round
// gives each worker holding no task one sample, then each holding one a
// second, up to the queue depth (--worker-queue-depth: samples a worker may
// hold, to hide the round trip).
//
// Sessions and workers are indices here (the engine's stable order of its
// sessions and the pool's slots): the scheduler knows neither. Not
// thread-safe (the engine's lock guards it).

#ifndef STOKER_SERVER_ENGINE_SCHEDULER_H_
#define STOKER_SERVER_ENGINE_SCHEDULER_H_

#include <cstddef>
#include <cstdint>

#include "absl/functional/function_ref.h"

namespace stoker {

class Scheduler {
 public:
  // `queue_depth` 0 is taken as 1.
  explicit Scheduler(uint32_t queue_depth) : depth_(queue_depth == 0 ? 1 : queue_depth) {}

  static constexpr size_t kNone = static_cast<size_t>(-1);

  // The next of `sessions` sessions to serve: the first at or after the
  // cursor for which has_work(i), which moves the cursor past it; kNone
  // when no session has work (the cursor stays).
  size_t Pick(size_t sessions, absl::FunctionRef<bool(size_t)> has_work);

  // One dispatch round over `workers` workers and `sessions` sessions: for
  // depth 0, 1, ... queue_depth - 1, for each worker w with can_take(w,
  // depth) (alive and holding at most `depth` tasks), picks a session and
  // calls assign(w, session), which sends it that session's front sample
  // (or fails the sample, or finds the worker unsendable: the round goes on
  // either way). Ends early when no session has work.
  void Round(size_t workers, size_t sessions, absl::FunctionRef<bool(size_t, uint32_t)> can_take,
             absl::FunctionRef<bool(size_t)> has_work,
             absl::FunctionRef<void(size_t, size_t)> assign);

  uint32_t queue_depth() const { return depth_; }

 private:
  const uint32_t depth_;
  size_t cursor_ = 0;
};

}  // namespace stoker

#endif  // STOKER_SERVER_ENGINE_SCHEDULER_H_
