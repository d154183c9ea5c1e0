// When the remote pool (decode nodes, stokerd --decode-nodes) gets work:
// local workers first, remote capacity while the trainers are data-stalled,
// given back once the local workers could do without it. Fed once a second
// by the engine's ticker; pure.
//
//   open    when a trainer waited for data for at least kStallShare of the
//           tick (the ring's client_wait_ns, as the autotuner measures it);
//   closed  after kCalmTicks ticks in a row in which no trainer waited that
//           long and the local workers were busy less than kBusyShare of
//           the time: they have room, the remote work can come home. While
//           the remote workers carry the load the trainers do not wait, but
//           the local workers stay saturated, so the gate stays open.
// A closed gate only stops new tasks; the remote workers finish what they
// hold. With --decode-when always the gate is always open.

#ifndef STOKER_SERVER_ENGINE_REMOTE_GATE_H_
#define STOKER_SERVER_ENGINE_REMOTE_GATE_H_

#include <cstdint>
#include <string>

namespace stoker {

class RemoteGate {
 public:
  static constexpr double kStallShare = 0.02;
  static constexpr double kBusyShare = 0.85;
  static constexpr uint32_t kCalmTicks = 3;

  explicit RemoteGate(bool always);
  // One tick: the largest share of it any trainer waited for data, and the
  // share of it the local workers held tasks (busy time / (tick x workers)).
  // Returns whether the remote workers take tasks now.
  bool Observe(double wait_share, double local_busy_share);
  bool open() const { return open_; }
  // Why it is as it is, for Status.
  const std::string& reason() const { return reason_; }

 private:
  const bool always_;
  bool open_;
  uint32_t calm_ = 0;
  std::string reason_;
};

}  // namespace stoker

#endif  // STOKER_SERVER_ENGINE_REMOTE_GATE_H_
