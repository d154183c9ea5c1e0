#include "server/engine/autotuner.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"

namespace stoker {

namespace {

std::string Percent(double share) { return absl::StrFormat("%.0f%%", share * 100); }

std::string Seconds(int64_t ns) { return absl::StrFormat("%.1f s", ns / 1e9); }

}  // namespace

Autotuner::Autotuner(AutotuneOptions options, uint32_t initial_workers)
    : o_(options), target_(std::max(initial_workers, std::max(1u, options.min_workers))) {}

double Autotuner::window_wait_share() const { return win_ns_ > 0 ? win_wait_ns_ / win_ns_ : 0; }

double Autotuner::window_rate() const { return win_ns_ > 0 ? win_samples_ * 1e9 / win_ns_ : 0; }

double Autotuner::window_cpu() const {
  return win_ns_ > 0 ? static_cast<double>(win_cpu_ns_) / win_ns_ : 0;
}

double Autotuner::window_busy() const {
  return win_ns_ > 0 ? static_cast<double>(win_busy_ns_) / win_ns_ : 0;
}

void Autotuner::ResetWindow() {
  win_ns_ = 0;
  win_wait_ns_ = 0;
  win_samples_ = 0;
  win_busy_ns_ = 0;
  win_cpu_ns_ = 0;
}

void Autotuner::Change(int64_t now_ns, uint32_t to, std::string reason) {
  AutotuneDecision d;
  d.at_ns = now_ns;
  d.from = target_;
  d.to = to;
  d.reason = std::move(reason);
  decisions_.push_back(std::move(d));
  while (decisions_.size() > kMaxDecisions) decisions_.pop_front();
  target_ = to;
  ResetWindow();
  skip_tick_ = true;
}

uint32_t Autotuner::Observe(const AutotuneSample& s) {
  const uint32_t lo = std::max(1u, o_.min_workers);
  const uint32_t hi = std::max(lo, s.max_workers);
  if (ceiling_ != 0 && s.now_ns >= ceiling_until_ns_) ceiling_ = 0;
  if (s.sessions != sessions_) {  // another load: what was learned no longer holds
    sessions_ = s.sessions;
    floor_ = 0;
    ceiling_ = 0;
    ceiling_strikes_ = 0;
    careful_ = false;
  }

  // 1. Bounds.
  if (target_ > hi) {
    probation_ = false;
    Change(s.now_ns, hi,
           absl::StrFormat("%d workers at most now (the CPU budget less the trainers' reserve)",
                           hi));
    phase_ = "measuring";
    return target_;
  }
  if (target_ < lo) {
    Change(s.now_ns, lo, absl::StrFormat("%d workers at least", lo));
    return target_;
  }

  // 5. No session: nothing to measure.
  if (s.sessions == 0) {
    ResetWindow();
    probation_ = false;
    phase_ = "holding: no session attached";
    return target_;
  }
  if (skip_tick_) {  // the tick a change landed in measures neither size
    skip_tick_ = false;
    return target_;
  }
  win_ns_ += s.elapsed_ns;
  win_wait_ns_ += s.wait_share * s.elapsed_ns;
  win_samples_ += s.samples;
  win_busy_ns_ += s.busy_ns;
  win_cpu_ns_ += s.cpu_ns;
  const double wait = window_wait_share();
  const double rate = window_rate();
  const double busy = window_busy();
  // A rate needs samples enough to mean something: a few per worker.
  const bool counted = win_samples_ >= uint64_t{o_.min_samples_per_worker} * target_ ||
                       win_ns_ >= o_.max_window_ns;

  // 2. Probation.
  if (probation_) {
    if (win_ns_ < o_.grow_dwell_ns || !counted) {
      phase_ = absl::StrFormat("probation: %d workers, measured %s (%d samples)", target_,
                               Seconds(win_ns_), win_samples_);
      return target_;
    }
    probation_ = false;
    // The stall promised up to 1 / (1 - wait) - 1 more; a quarter is asked:
    // enough to tell a gain from none through the noise of a short window.
    const double promised = std::min(1.0, probation_wait_ / std::max(0.05, 1 - probation_wait_));
    const double wanted = std::max(0.05, promised / 4);
    const double cpu = window_cpu();
    const bool rate_gain = rate >= probation_rate_ * (1 + wanted);
    const bool cpu_gain = probation_cpu_ > 0 && cpu >= probation_cpu_ * (1 + wanted) &&
                          rate >= probation_rate_ * (1 - wanted);
    if (wait >= o_.grow_wait_share && !rate_gain && !cpu_gain) {
      // Each time the same size fails again, it is left alone twice as long.
      ceiling_strikes_ = target_ == last_ceiling_ ? std::min(ceiling_strikes_ + 1, 4u) : 0;
      last_ceiling_ = target_;
      const int64_t hold = o_.hold_ns << ceiling_strikes_;
      ceiling_ = target_;
      ceiling_until_ns_ = s.now_ns + hold;
      careful_ = true;  // the next grows go one worker at a time
      Change(s.now_ns, probation_from_,
             absl::StrFormat("%d workers made %.0f samples/s on %.1f CPUs against %.0f on %.1f "
                             "with %d (under the %+.0f%% wanted) while a trainer still waited "
                             "%s: undone, %d not tried again for %s",
                             ceiling_, rate, cpu, probation_rate_, probation_cpu_,
                             probation_from_, wanted * 100, Percent(wait), ceiling_,
                             Seconds(hold)));
      phase_ = "measuring";
      return target_;
    }
    // Kept: the window goes on as this size's measurement.
  }

  // 3. Grow.
  const uint32_t cap = ceiling_ != 0 ? std::min(hi, ceiling_ - 1) : hi;
  if (win_ns_ >= o_.grow_dwell_ns && counted && wait >= o_.grow_wait_share && target_ < cap) {
    const uint32_t step =
        careful_ ? 1u : std::max(1u, static_cast<uint32_t>(std::ceil(target_ * wait)));
    const uint32_t to = std::min(cap, target_ + step);
    if (shrunk_from_ != 0 && s.now_ns - shrunk_at_ns_ < o_.hold_ns && to >= shrunk_from_) {
      floor_ = shrunk_from_;  // the shrink was a mistake: keep this size
    }
    shrunk_from_ = 0;
    probation_ = true;
    probation_from_ = target_;
    probation_rate_ = rate;
    probation_cpu_ = window_cpu();
    probation_wait_ = wait;
    Change(s.now_ns, to,
           absl::StrFormat("a trainer waited for data %s of the last %s; workers %.1f of %d "
                           "busy, %.0f samples/s; %d workers allowed",
                           Percent(wait), Seconds(win_ns_), busy, target_, rate, hi));
    phase_ = "probation";
    return target_;
  }

  // 4. Shrink.
  const uint32_t keep = std::max(lo, floor_);
  if (win_ns_ >= o_.shrink_dwell_ns && counted && wait < o_.idle_wait_share && target_ > keep &&
      busy <= (target_ - 1) * o_.shrink_busy) {
    shrunk_from_ = target_;
    shrunk_at_ns_ = s.now_ns;
    Change(s.now_ns, target_ - 1,
           absl::StrFormat("no trainer waited over %s of the last %s and the workers were "
                           "%.1f of %d busy: %d suffice",
                           Percent(o_.idle_wait_share), Seconds(win_ns_), busy, target_,
                           target_ - 1));
    phase_ = "measuring";
    return target_;
  }

  phase_ = absl::StrFormat("steady at %d: trainer wait %s, workers %.1f busy, %.0f samples/s "
                           "over %s",
                           target_, Percent(wait), busy, rate, Seconds(win_ns_));
  if (target_ >= cap && wait >= o_.grow_wait_share) {
    phase_ += ceiling_ != 0 && cap < hi
                  ? absl::StrFormat("; %d workers gave no gain", ceiling_)
                  : absl::StrFormat("; at the most allowed (%d)", hi);
  }
  // A long window forgets old conditions: start a fresh one.
  if (win_ns_ >= 4 * o_.shrink_dwell_ns) ResetWindow();
  return target_;
}

}  // namespace stoker
