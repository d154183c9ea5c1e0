#include "server/engine/liveness.h"

#include "stoker/ring_futex.h"

namespace stoker {

ReleaseWatcher::ReleaseWatcher(std::atomic<uint32_t>* release_count, std::function<void()> wake)
    : word_(release_count), wake_(std::move(wake)), thread_([this] { Loop(); }) {}

ReleaseWatcher::~ReleaseWatcher() { Stop(); }

void ReleaseWatcher::Stop() {
  if (!thread_.joinable()) return;
  stop_.store(true);
  ring::FutexWakeAll(word_);
  thread_.join();
}

void ReleaseWatcher::Loop() {
  uint32_t last = word_->load(std::memory_order_acquire);
  while (!stop_.load()) {
    ring::FutexWait(word_, last, 200);
    uint32_t now = word_->load(std::memory_order_acquire);
    if (now != last) {
      last = now;
      wake_();
    }
  }
}

TickVerdict Tick(const std::map<std::string, std::shared_ptr<DaemonSession>>& sessions, int64_t now,
                 uint32_t keepalive_grace_ms) {
  TickVerdict v;
  for (auto& [id, s] : sessions) {
    s->ring->header()->daemon_heartbeat.fetch_add(1, std::memory_order_release);
    s->rate_window.emplace_back(now, s->samples_produced);
    while (s->rate_window.size() > 2 && now - s->rate_window.front().first > kRateWindowNs) {
      s->rate_window.pop_front();
    }
    if (!s->keepalive_open &&
        now - s->keepalive_closed_ns > int64_t{keepalive_grace_ms} * 1000000) {
      v.stale.push_back(id);
    }
  }
  return v;
}

}  // namespace stoker
