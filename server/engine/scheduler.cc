#include "server/engine/scheduler.h"

namespace stoker {

size_t Scheduler::Pick(size_t sessions, absl::FunctionRef<bool(size_t)> has_work) {
  for (size_t k = 0; k < sessions; ++k) {
    const size_t cand = (cursor_ + k) % sessions;
    if (has_work(cand)) {
      cursor_ = (cursor_ + k + 1) % sessions;
      return cand;
    }
  }
  return kNone;
}

void Scheduler::Round(size_t workers, size_t sessions,
                      absl::FunctionRef<bool(size_t, uint32_t)> can_take,
                      absl::FunctionRef<bool(size_t)> has_work,
                      absl::FunctionRef<void(size_t, size_t)> assign) {
  if (sessions == 0) return;
  for (uint32_t depth = 0; depth < depth_; ++depth) {
    for (size_t w = 0; w < workers; ++w) {
      if (!can_take(w, depth)) continue;
      const size_t pick = Pick(sessions, has_work);
      if (pick != kNone) {
        assign(w, pick);
        continue;
      }
      bool any = false;
      for (size_t s = 0; s < sessions && !any; ++s) any = has_work(s);
      if (!any) return;
    }
  }
}

}  // namespace stoker
