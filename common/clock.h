// The engine's clock, injectable (leveldb's Env is the model): the worker
// pool's hang check and respawn backoff, and the liveness checks, read the
// time through a Clock so that a test can step it instead of sleeping.

#ifndef STOKER_COMMON_CLOCK_H_
#define STOKER_COMMON_CLOCK_H_

#include <atomic>
#include <cstdint>

#include "common/posix.h"

namespace stoker {

// A monotonic clock in nanoseconds. Implementations are thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual int64_t NowNs() = 0;
};

// CLOCK_MONOTONIC (MonotonicNs()). A process-wide instance; never deleted.
Clock* SystemClock();

// A clock that moves only when told: for tests. Starts at `start_ns`.
class FakeClock : public Clock {
 public:
  explicit FakeClock(int64_t start_ns = 1'000'000'000) : now_ns_(start_ns) {}
  int64_t NowNs() override { return now_ns_.load(); }
  void AdvanceMs(int64_t ms) { now_ns_.fetch_add(ms * 1'000'000); }

 private:
  std::atomic<int64_t> now_ns_;
};

}  // namespace stoker

#endif  // STOKER_COMMON_CLOCK_H_
