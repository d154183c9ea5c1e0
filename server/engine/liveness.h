// Liveness: how the daemon notices what its clients do, and that they have
// gone.
//   - Release watching: a ReleaseWatcher thread per session sleeps on its
//     ring's release futex (bumped by the client each time it frees a slot)
//     and wakes the dispatcher, which then starts a batch in that slot.
//   - Heartbeat ticking: every ring::kHeartbeatPeriodMs the ticker thread
//     calls Tick, which bumps each ring's daemon_heartbeat (the client's
//     sign that the daemon lives) and samples the session's throughput.
//   - Keepalive reclaim: a session whose KeepAlive stream has been closed
//     for longer than --keepalive-grace-ms is reclaimed (its client died
//     without detaching); a stream that closes while open reclaims at once.
//   (A ring cannot be cut short under the daemon: it is sealed against
//   shrinking, ring_owner.h.)
// Tick decides; the engine removes the sessions it names, with the reasons
// below, under its lock.

#ifndef STOKER_SERVER_ENGINE_LIVENESS_H_
#define STOKER_SERVER_ENGINE_LIVENESS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "server/engine/session.h"

namespace stoker {

// Why a session ended, as its KeepAlive stream (KIND_ENDED), the log and
// the tests see it.
inline constexpr char kWhyNoKeepAlive[] = "no KeepAlive stream from the client; reclaimed";
inline constexpr char kWhyStreamClosed[] = "client went away (its KeepAlive stream closed)";

// A thread that calls `wake` each time the futex word `release_count`
// changes (checking at least every 200 ms). The word (in a ring's header)
// must stay mapped until Stop returns.
class ReleaseWatcher {
 public:
  ReleaseWatcher(std::atomic<uint32_t>* release_count, std::function<void()> wake);
  ~ReleaseWatcher();  // Stop()
  ReleaseWatcher(const ReleaseWatcher&) = delete;
  ReleaseWatcher& operator=(const ReleaseWatcher&) = delete;

  // Ends the thread and joins it. Idempotent; not to be called from `wake`.
  void Stop();

 private:
  void Loop();

  std::atomic<uint32_t>* const word_;
  const std::function<void()> wake_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// The sessions one tick found gone, by id (the engine removes them).
struct TickVerdict {
  std::vector<std::string> stale;  // keepalive grace passed: kWhyNoKeepAlive
};

// Rate samples kept: the last 10 s (and always two).
inline constexpr int64_t kRateWindowNs = 10'000'000'000LL;

// One heartbeat over `sessions` at `now_ns` (under the engine's lock): each
// ring gets its heartbeat bumped and a rate sample
// (DaemonSession::rate_window); a session whose KeepAlive stream has been closed
// for over `keepalive_grace_ms` is stale.
TickVerdict Tick(const std::map<std::string, std::shared_ptr<DaemonSession>>& sessions,
                 int64_t now_ns, uint32_t keepalive_grace_ms);

}  // namespace stoker

#endif  // STOKER_SERVER_ENGINE_LIVENESS_H_
