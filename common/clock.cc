#include "common/clock.h"

namespace stoker {

namespace {
class MonotonicClock : public Clock {
 public:
  int64_t NowNs() override { return MonotonicNs(); }
};
}  // namespace

Clock* SystemClock() {
  static MonotonicClock* const clock = new MonotonicClock();
  return clock;
}

}  // namespace stoker
