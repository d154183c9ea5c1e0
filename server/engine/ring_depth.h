// RingDepthPolicy: when a session's ring deepens (prefetches more batches),
// decided from what the session measured, with no clock or ring of its own.
//
// A trainer that waits for data while its ring is never full needs more
// producers (the autotuner's business), not a deeper ring. One that waits
// *and* leaves its ring full at other times consumes in bursts: between its
// bursts the workers idle on a full ring, during them it drains the ring and
// waits. A deeper ring turns those idle moments into batches held for the
// next burst. So the ring deepens when, over two windows in a row (bursts
// recur; the start or a one-off pause does not), the trainer waited at least
// kDeepenWaitShare of the time and the ring was full at least
// kDeepenFullShare of it.
//
// It deepens by doubling (depths stay multiples of the first, which the
// ring's depth protocol needs; proto/stoker/ring_layout.h, "Depth"), up to
// the ring's slot count and the slots the shared-memory budget has room
// for. It never grows shallower: the pages it reserved may be pinned by a
// CUDA client, and holding them costs no CPU.
//
// Thread-safety: none; the engine calls it under its lock.

#ifndef STOKER_SERVER_ENGINE_RING_DEPTH_H_
#define STOKER_SERVER_ENGINE_RING_DEPTH_H_

#include <cstdint>
#include <string>

namespace stoker {

// Share of a window the trainer must wait, and the ring be full, to deepen.
inline constexpr double kDeepenWaitShare = 0.02;
inline constexpr double kDeepenFullShare = 0.05;
// The shortest window measured, and the wait after a deepening (so that the
// deeper ring is judged on its own).
inline constexpr int64_t kDepthWindowNs = 2'000'000'000;
inline constexpr int64_t kDepthDwellNs = 4'000'000'000;

// The session's totals since it started; both only grow.
struct RingDepthSample {
  int64_t now_ns = 0;
  uint64_t wait_ns = 0;  // the trainer's wait in Next (the ring's client_wait_ns)
  uint64_t full_ns = 0;  // time the ring was full with nothing of it filling
};

class RingDepthPolicy {
 public:
  // `depth`: the ring's first depth; `max_depth`: its slot count (>= depth).
  RingDepthPolicy(uint32_t depth, uint32_t max_depth);

  // Feeds a measurement. Returns the depth to move to (> depth()), or 0 to
  // stay. `room`: how many more slots the shared-memory budget can hold
  // for this ring now. The caller says Deepened() once it has moved.
  uint32_t Observe(const RingDepthSample& s, uint32_t room);
  void Deepened(uint32_t depth, int64_t now_ns);
  // The deepening Observe asked for could not be made (its memory could not
  // be reserved: `why`): the reason says so, and the policy holds off as
  // after a change (kDepthDwellNs) before it asks again.
  void Failed(uint32_t wanted, const std::string& why, int64_t now_ns);

  uint32_t depth() const { return depth_; }
  uint32_t max_depth() const { return max_depth_; }
  // Why the last decision (a deepening, or one the budget refused); empty
  // until there is one.
  const std::string& reason() const { return reason_; }

 private:
  uint32_t depth_;
  const uint32_t max_depth_;
  bool started_ = false;
  RingDepthSample window_start_;
  int64_t hold_until_ns_ = 0;
  int bursty_windows_ = 0;  // in a row
  std::string reason_;
};

}  // namespace stoker

#endif  // STOKER_SERVER_ENGINE_RING_DEPTH_H_
