#include "server/engine/remote_gate.h"

#include "absl/strings/str_format.h"

namespace stoker {

RemoteGate::RemoteGate(bool always)
    : always_(always),
      open_(always),
      reason_(always ? "always (--decode-when always)" : "closed: no trainer has waited yet") {}

bool RemoteGate::Observe(double wait_share, double local_busy_share) {
  if (always_) return true;
  if (wait_share >= kStallShare) {
    calm_ = 0;
    if (!open_) {
      reason_ = absl::StrFormat("open: a trainer waited %.0f%% of a second for data",
                                100 * wait_share);
    }
    open_ = true;
    return open_;
  }
  if (!open_) return open_;
  if (local_busy_share < kBusyShare) {
    if (++calm_ >= kCalmTicks) {
      open_ = false;
      calm_ = 0;
      reason_ = absl::StrFormat(
          "closed: the trainers did not wait and the local workers were busy %.0f%% of the time",
          100 * local_busy_share);
    }
  } else {
    calm_ = 0;
  }
  return open_;
}

}  // namespace stoker
