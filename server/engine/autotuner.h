// The worker autotuner (stokerd --workers auto): how many decode workers the
// pool should have, from what the daemon measures of its sessions.
//
// Glossary
//   window      The time since the last decision (or since the autotuner
//               stopped looking): what every decision is made on. Each
//               Observe adds one tick of measurements to it.
//   wait share  The share of a window's wall time that a session's trainer
//               spent waiting in Next for a batch (the ring's client_wait_ns;
//               the data-stall figure). The largest over sessions counts:
//               one starved trainer is reason enough to grow.
//   busy        Worker-seconds of work per second over the window: the sum
//               over workers of the share of time each held a task. 2.0 of
//               a 4-worker pool: the load would fit in 2 at full speed.
//   cpu         The workers' CPU seconds per second over the window: what
//               they really got of the machine (busy workers on too few
//               cores hold tasks without running).
//   rate        Samples the workers finished per second (decoded or failed).
//   ceiling     A size found not to help: a grow to it gave no gain, so it is
//               not tried again for `hold_ns` (then it may be probed again;
//               each time it fails again, it is left alone twice as long, up
//               to 16 times).
//   floor       A size found to be needed: a shrink below it made a trainer
//               wait within hold_ns, so the pool is not shrunk below it again.
// Ceilings and floors are forgotten when the number of sessions changes.
//
// The rules, in order, each Observe:
//   1. Bounds: the target is clamped to [min_workers, max_workers] at once
//      (max_workers follows the CPU budget and the trainers attached: the
//      caller passes it in every sample).
//   2. Probation: after a grow, once grow_dwell_ns have been measured, the
//      rate, or the workers' CPU (with the rate not clearly lower), must
//      have risen by a quarter of the gain the stall promised (1 / (1 -
//      wait) - 1, at most 100%; at least 5%) while a trainer still waited;
//      else the grow is undone and its size becomes a ceiling. Otherwise it
//      is kept. The CPU tells a gain where samples vary in cost (photos of
//      2 to 20 MP: a short window's rate is noise); the rate tells it where
//      workers wait on a disk.
//   3. Grow: after grow_dwell_ns, when a trainer waited >= grow_wait_share of
//      the window and the target is below max_workers (and the ceiling), by
//      ceil(target * wait share) workers, at least 1; once a grow has been
//      undone, by one worker at a time.
//   4. Shrink: after shrink_dwell_ns, when no trainer waited more than
//      idle_wait_share and the busy load fits one worker less at
//      shrink_busy each, by one worker (never below the floor).
//   5. A window with no session attached is dropped: nothing is decided on
//      an idle daemon (its workers stay as they are).
// A window is long enough for a decision once it spans its dwell and holds
// min_samples_per_worker samples per worker (or spans max_window_ns).
// Every change is a Decision with the reason in plain words, kept (the last
// kMaxDecisions) for Status and logged by the caller. Hysteresis: the grow
// and shrink thresholds are far apart (5% vs 1% wait), a change needs a
// whole dwell of measurement after the previous one, shrinking needs three
// times as long as growing, and ceilings and floors stop a size from being
// retried within hold_ns.
//
// Pure: the caller measures and applies (server/engine/engine.cc), the clock is in
// the samples. Not thread-safe (the engine's lock guards it).

#ifndef STOKER_SERVER_ENGINE_AUTOTUNER_H_
#define STOKER_SERVER_ENGINE_AUTOTUNER_H_

#include <cstdint>
#include <deque>
#include <string>

namespace stoker {

struct AutotuneOptions {
  uint32_t min_workers = 1;
  // Measurement after a change before the next grow (and a grow's
  // probation) / before a shrink.
  int64_t grow_dwell_ns = 2'000'000'000;
  int64_t shrink_dwell_ns = 6'000'000'000;
  // A trainer waiting this share of its time is data-bound; one waiting
  // less than idle_wait_share is not waiting at all.
  double grow_wait_share = 0.05;
  double idle_wait_share = 0.01;
  // Shrink when the busy load fits one worker less, each this busy.
  double shrink_busy = 0.75;
  // A decision also waits for this many samples finished per worker in the
  // window (a rate from a handful of large photos is noise), unless the
  // window is already max_window_ns long.
  uint32_t min_samples_per_worker = 8;
  int64_t max_window_ns = 20'000'000'000;
  // How long a ceiling holds (at first), and how soon after a shrink a
  // stall makes the size shrunk from a floor.
  int64_t hold_ns = 60'000'000'000;
};

// One tick's measurements, made by the caller since the previous Observe.
struct AutotuneSample {
  int64_t now_ns = 0;
  int64_t elapsed_ns = 0;  // wall time this tick covers
  // The largest share of elapsed_ns a session's trainer waited (0..1); 0
  // without sessions.
  double wait_share = 0;
  // Samples the workers finished during the tick.
  uint64_t samples = 0;
  // Worker-nanoseconds spent holding tasks during the tick (all workers).
  int64_t busy_ns = 0;
  // The workers' CPU time during the tick (0 where it is not known).
  int64_t cpu_ns = 0;
  uint32_t sessions = 0;
  // The most workers allowed now (CPU budget less the trainers' reserve,
  // and any cap the operator set); at least 1.
  uint32_t max_workers = 1;
};

// A change of the target, and why.
struct AutotuneDecision {
  int64_t at_ns = 0;
  uint32_t from = 0;
  uint32_t to = 0;
  std::string reason;
};

class Autotuner {
 public:
  static constexpr size_t kMaxDecisions = 32;

  Autotuner(AutotuneOptions options, uint32_t initial_workers);

  // Adds one tick and applies the rules; returns the target (the pool size
  // to have now). A changed target comes with a new decisions().back().
  uint32_t Observe(const AutotuneSample& s);

  uint32_t target() const { return target_; }
  // The latest decisions, oldest first (at most kMaxDecisions).
  const std::deque<AutotuneDecision>& decisions() const { return decisions_; }
  // What the autotuner is doing now, in words ("measuring 3 workers (1.2 of
  // 2.0 s)", "probation: ...", "holding: no session").
  const std::string& phase() const { return phase_; }
  // The window so far (for Status): wait share, rate per second, busy.
  double window_wait_share() const;
  double window_rate() const;
  double window_busy() const;
  double window_cpu() const;
  double window_seconds() const { return win_ns_ / 1e9; }

 private:
  void Change(int64_t now_ns, uint32_t to, std::string reason);
  void ResetWindow();

  const AutotuneOptions o_;
  uint32_t target_;
  std::deque<AutotuneDecision> decisions_;
  std::string phase_ = "starting";

  // The window.
  int64_t win_ns_ = 0;
  double win_wait_ns_ = 0;  // sum of wait_share * elapsed
  uint64_t win_samples_ = 0;
  int64_t win_busy_ns_ = 0;
  int64_t win_cpu_ns_ = 0;
  bool skip_tick_ = false;  // the tick after a change: workers starting or leaving

  // Probation after a grow: the size before and the rate then.
  bool probation_ = false;
  uint32_t probation_from_ = 0;
  double probation_rate_ = 0;
  double probation_cpu_ = 0;
  double probation_wait_ = 0;

  uint32_t sessions_ = 0;  // as of the last sample
  uint32_t ceiling_ = 0;   // 0: none
  int64_t ceiling_until_ns_ = 0;
  uint32_t last_ceiling_ = 0;
  uint32_t ceiling_strikes_ = 0;
  bool careful_ = false;  // a grow was undone: grow by one worker at a time
  uint32_t floor_ = 0;  // 0: none
  // The last shrink: from which size, and when (a stall right after it
  // makes that size a floor).
  uint32_t shrunk_from_ = 0;
  int64_t shrunk_at_ns_ = 0;
};

}  // namespace stoker

#endif  // STOKER_SERVER_ENGINE_AUTOTUNER_H_
