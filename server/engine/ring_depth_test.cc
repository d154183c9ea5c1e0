// The ring-depth policy against a modelled session: workers that finish a
// batch every 1/`produce` seconds while the ring has a free slot, and a
// trainer that takes batches in bursts (or steadily), in 10 ms steps. And
// the ring's depth protocol (ring_layout.h, "Depth") under a run of
// deepenings.

#include "server/engine/ring_depth.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <vector>

#include "stoker/ring_layout.h"

namespace stoker {
namespace {

struct Trainer {
  // Per cycle: `burst` batches taken one per `fast_s`, then `pause_s` idle.
  int burst = 1;
  double fast_s = 0.01;
  double pause_s = 0.0;
};

class Sim {
 public:
  Sim(double produce_per_s, Trainer t, uint32_t depth, uint32_t max_depth, uint32_t room)
      : produce_(produce_per_s), t_(t), policy_(depth, max_depth), room_(room) {}

  // Runs `seconds`; returns the depth reached.
  uint32_t Run(double seconds) {
    const int steps = static_cast<int>(seconds / kStep);
    for (int i = 0; i < steps; ++i) Step();
    return policy_.depth();
  }
  double WaitShareLast(double seconds) {
    const double w0 = wait_s_;
    Run(seconds);
    return (wait_s_ - w0) / seconds;
  }
  const RingDepthPolicy& policy() const { return policy_; }
  std::vector<double> deepened_at;

 private:
  static constexpr double kStep = 0.01;
  void Step() {
    now_ += kStep;
    const uint32_t depth = policy_.depth();
    // Producer: fills while the ring has room.
    if (ready_ < depth) {
      progress_ += produce_ * kStep;
      while (progress_ >= 1 && ready_ < depth) {
        ++ready_;
        progress_ -= 1;
      }
      if (ready_ >= depth) progress_ = 0;
    } else {
      full_s_ += kStep;
    }
    // Trainer.
    if (pause_left_ > 0) {
      pause_left_ -= kStep;
    } else if (next_take_ <= now_) {
      if (ready_ > 0) {
        --ready_;
        next_take_ = now_ + t_.fast_s;
        if (++taken_in_burst_ >= t_.burst) {
          taken_in_burst_ = 0;
          pause_left_ = t_.pause_s;
        }
      } else {
        wait_s_ += kStep;
      }
    }
    RingDepthSample s;
    s.now_ns = static_cast<int64_t>(now_ * 1e9);
    s.wait_ns = static_cast<uint64_t>(wait_s_ * 1e9);
    s.full_ns = static_cast<uint64_t>(full_s_ * 1e9);
    if (++tick_ % 100 == 0) {  // the engine's one tick a second
      const uint32_t want = policy_.Observe(s, room_);
      if (want != 0) {
        CHECK(want > depth);
        CHECK(want - depth <= room_);
        room_ -= want - depth;
        policy_.Deepened(want, s.now_ns);
        deepened_at.push_back(now_);
      }
    }
  }

  double produce_;
  Trainer t_;
  RingDepthPolicy policy_;
  uint32_t room_;
  double now_ = 0, progress_ = 0, wait_s_ = 0, full_s_ = 0, pause_left_ = 0, next_take_ = 0;
  uint32_t ready_ = 0;
  int taken_in_burst_ = 0;
  uint64_t tick_ = 0;
};

TEST_CASE("a trainer that consumes in bursts gets a deeper ring, and waits less") {
  // 12 batches in quick succession, then 0.8 s of something else (an eval
  // step, a log write): 15 batches/s on average, the workers make 20/s.
  Trainer t{12, 0.01, 0.8};
  Sim sim(20, t, 4, 16, 64);
  const double before = sim.WaitShareLast(6);
  CHECK(before > 0.05);
  const uint32_t depth = sim.Run(60);
  CHECK(depth == 16);
  CHECK(sim.policy().reason().find("bursts") != std::string::npos);
  const double after = sim.WaitShareLast(20);
  CHECK(after < before / 4);
  // One step at a time, each judged after the dwell.
  for (size_t i = 1; i < sim.deepened_at.size(); ++i) {
    CHECK(sim.deepened_at[i] - sim.deepened_at[i - 1] >= kDepthDwellNs / 1e9);
  }
}

TEST_CASE("a steady trainer slower than the workers keeps its ring (full, never waiting)") {
  Trainer t{1, 0.1, 0.0};  // 10 batches/s, evenly
  Sim sim(20, t, 4, 16, 64);
  CHECK(sim.Run(120) == 4);
  CHECK(sim.policy().reason().empty());
}

TEST_CASE("a trainer faster than the workers keeps its ring (waiting, never full)") {
  Trainer t{1, 0.01, 0.0};  // would take 100/s; the workers make 20/s
  Sim sim(20, t, 4, 16, 64);
  CHECK(sim.Run(120) == 4);
}

TEST_CASE("the ring deepens only as far as its slots and the budget allow") {
  Trainer t{12, 0.01, 0.8};
  SECTION("slots") {
    Sim sim(20, t, 4, 8, 64);
    CHECK(sim.Run(120) == 8);
  }
  SECTION("budget with room for 4 more slots: 8, then no further") {
    Sim sim(20, t, 4, 16, 4);
    CHECK(sim.Run(120) == 8);
    CHECK(sim.policy().reason().find("budget") != std::string::npos);
  }
  SECTION("no room at all") {
    Sim sim(20, t, 4, 16, 0);
    CHECK(sim.Run(60) == 4);
    CHECK(sim.policy().reason().find("budget") != std::string::npos);
  }
}

TEST_CASE("a deepening that cannot be reserved (ENOSPC) is said so, and tried again later") {
  RingDepthPolicy p(4, 16);
  // Two bursty windows: the policy asks for 8.
  RingDepthSample x;
  CHECK(p.Observe(x, 64) == 0);  // the first window starts
  uint32_t want = 0;
  for (int i = 1; i <= 2 && want == 0; ++i) {
    x.now_ns = i * kDepthWindowNs;
    x.wait_ns += kDepthWindowNs / 5;  // waited 20%
    x.full_ns += kDepthWindowNs / 5;  // and full 20% of the time
    want = p.Observe(x, 64);
  }
  REQUIRE(want == 8);
  CHECK(p.reason().find("4 -> 8 batches of prefetch") != std::string::npos);
  p.Failed(8, "reserving 1234 more bytes of shared memory: No space left on device", x.now_ns);
  // The reason no longer announces what did not happen.
  CHECK(p.reason() ==
        "deepening 4 -> 8 batches failed: reserving 1234 more bytes of shared memory: No space "
        "left on device; the ring stays at 4");
  CHECK(p.depth() == 4);
  // It holds off for the dwell, then may ask again.
  x.now_ns += kDepthWindowNs;
  x.wait_ns += kDepthWindowNs / 5;
  x.full_ns += kDepthWindowNs / 5;
  CHECK(p.Observe(x, 64) == 0);
}

// The depth protocol: batches n go to SlotOf(word, n); the daemon changes
// the word as RingDepth's rules say. Every batch's slot was last held by a
// batch at least the first depth before it (so a client holding fewer than
// that never holds the slot it asks for), and the batch at a change point
// is in the same slot under the old and the new word.
TEST_CASE("the ring's depth word: change points and slot reuse") {
  const uint32_t slots = 16, first = 4;
  uint64_t word = ring::PackDepth(0, first, first);
  CHECK(ring::DepthFrom(word) == 0);
  CHECK(ring::DepthCount(word) == first);
  CHECK(ring::DepthPrev(word) == first);
  std::vector<int64_t> last(slots, -1000);
  uint32_t depth = first;
  const std::vector<uint64_t> change_at = {7, 20, 41};  // next batch to start when deepening
  size_t next_change = 0;
  for (uint64_t n = 0; n < 200; ++n) {
    if (next_change < change_at.size() && n == change_at[next_change] && depth < slots) {
      const uint32_t to = depth * 2;
      const uint64_t from = ring::DepthChangeFrom(n, depth, to);
      CHECK(from >= n);
      CHECK(from % depth == 0);
      CHECK(from % to == 0);
      const uint64_t old_word = word;
      word = ring::PackDepth(from, to, depth);
      CHECK(ring::SlotOf(old_word, from, slots) == ring::SlotOf(word, from, slots));
      for (uint64_t m = n; m < from; ++m) {
        CHECK(ring::SlotOf(word, m, slots) == ring::SlotOf(old_word, m, slots));
      }
      depth = to;
      ++next_change;
    }
    const uint32_t slot = ring::SlotOf(word, n, slots);
    REQUIRE(slot < slots);
    CHECK(static_cast<int64_t>(n) - last[slot] >= first);
    last[slot] = static_cast<int64_t>(n);
  }
  CHECK(depth == 16);
  // A word naming more slots than the ring has is refused.
  CHECK(ring::SlotOf(ring::PackDepth(0, 32, 32), 5, 16) == 16);
  CHECK(ring::DepthChangeFrom(9, 4, 6) == 12);
}

}  // namespace
}  // namespace stoker
