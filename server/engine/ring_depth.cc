#include "server/engine/ring_depth.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace stoker {

RingDepthPolicy::RingDepthPolicy(uint32_t depth, uint32_t max_depth)
    : depth_(depth), max_depth_(std::max(depth, max_depth)) {}

uint32_t RingDepthPolicy::Observe(const RingDepthSample& s, uint32_t room) {
  if (!started_) {
    started_ = true;
    window_start_ = s;
    return 0;
  }
  const int64_t elapsed = s.now_ns - window_start_.now_ns;
  if (depth_ >= max_depth_ || s.now_ns < hold_until_ns_ || elapsed < kDepthWindowNs) {
    if (s.now_ns < hold_until_ns_ || depth_ >= max_depth_) window_start_ = s;
    return 0;
  }
  const double wait = static_cast<double>(s.wait_ns - window_start_.wait_ns) / elapsed;
  const double full = static_cast<double>(s.full_ns - window_start_.full_ns) / elapsed;
  window_start_ = s;
  if (wait < kDeepenWaitShare || full < kDeepenFullShare) {
    bursty_windows_ = 0;
    return 0;
  }
  // Twice in a row: bursts recur, a start-up or a one-off pause does not.
  if (++bursty_windows_ < 2) return 0;
  const uint32_t want = std::min(depth_ * 2, max_depth_);
  if (want - depth_ > room) {
    reason_ = absl::StrFormat(
        "trainer waited %.0f%% of the time while the ring was full %.0f%% of it, but the "
        "shared-memory budget has no room for %u more slots",
        wait * 100, full * 100, want - depth_);
    hold_until_ns_ = s.now_ns + kDepthDwellNs;
    bursty_windows_ = 0;
    return 0;
  }
  reason_ = absl::StrFormat(
      "trainer waited %.0f%% of the time while the ring was full %.0f%% of it: it consumes in "
      "bursts, so %u -> %u batches of prefetch",
      wait * 100, full * 100, depth_, want);
  return want;
}

void RingDepthPolicy::Failed(uint32_t wanted, const std::string& why, int64_t now_ns) {
  reason_ = absl::StrFormat("deepening %u -> %u batches failed: %s; the ring stays at %u",
                            depth_, wanted, why, depth_);
  bursty_windows_ = 0;
  hold_until_ns_ = now_ns + kDepthDwellNs;
}

void RingDepthPolicy::Deepened(uint32_t depth, int64_t now_ns) {
  depth_ = depth;
  bursty_windows_ = 0;
  hold_until_ns_ = now_ns + kDepthDwellNs;
}

}  // namespace stoker
