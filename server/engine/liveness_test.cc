// Liveness without an engine: the release watcher, the heartbeat tick, the
// keepalive grace and a truncated ring.

#include "server/engine/liveness.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <mutex>

#include "testing/room_test_util.h"
#include "stoker/ring_futex.h"

namespace stoker {
namespace {

using namespace std::chrono_literals;

TEST_CASE("a ReleaseWatcher wakes the dispatcher each time the client releases a slot") {
  std::atomic<uint32_t> word{0};
  std::mutex mu;
  std::condition_variable cv;
  int wakes = 0;
  ReleaseWatcher w(&word, [&] {
    std::lock_guard<std::mutex> l(mu);
    ++wakes;
    cv.notify_all();
  });
  // (A release before the thread first reads the word is not a change to it:
  // the client releases again until the watcher has seen one.)
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  for (int i = 1; i <= 3; ++i) {
    for (;;) {
      word.fetch_add(1);
      ring::FutexWakeAll(&word);
      std::unique_lock<std::mutex> l(mu);
      if (cv.wait_for(l, 100ms, [&] { return wakes >= i; })) break;
      REQUIRE(std::chrono::steady_clock::now() < deadline);
    }
  }
  w.Stop();
  w.Stop();  // idempotent
  int before;
  {
    std::lock_guard<std::mutex> l(mu);
    before = wakes;
  }
  word.fetch_add(1);
  ring::FutexWakeAll(&word);
  std::lock_guard<std::mutex> l(mu);
  CHECK(wakes == before);  // stopped: no more
}

struct Fixture {
  Fixture() {
    root = *DataRoot::Open(dir.path());
    ds = testing::ManifestDataset(*root, dir.path(), "list.txt", 10);
    REQUIRE(ds != nullptr);
    for (uint64_t n = 1; n <= 2; ++n) {
      auto s = testing::MakeSession(ds, testing::SmallRequest("list.txt", 2), n);
      REQUIRE(s.ok());
      sessions[(*s)->id] = *s;
    }
  }
  testing::ScratchDir dir;
  std::unique_ptr<DataRoot> root;
  std::shared_ptr<const Dataset> ds;
  std::map<std::string, std::shared_ptr<DaemonSession>> sessions;
};

TEST_CASE("Tick bumps every heartbeat and samples each session's rate") {
  Fixture f;
  DaemonSession& s = *f.sessions.begin()->second;
  s.keepalive_open = true;
  f.sessions.rbegin()->second->keepalive_open = true;
  const uint64_t beat = s.ring->header()->daemon_heartbeat.load();
  const int64_t t0 = s.created_ns;
  TickVerdict v = Tick(f.sessions, t0 + 1, 10000);
  CHECK(v.stale.empty());
  CHECK(s.ring->header()->daemon_heartbeat.load() == beat + 1);
  REQUIRE(s.rate_window.size() == 1);
  s.samples_produced = 50;
  Tick(f.sessions, t0 + 1'000'000'000, 10000);
  CHECK(s.rate_window.back() == std::make_pair(t0 + 1'000'000'000, uint64_t{50}));
  // Samples older than 10 s go, but two always stay.
  Tick(f.sessions, t0 + 30'000'000'000, 10000);
  CHECK(s.rate_window.size() == 2);
  CHECK(s.rate_window.front().first == t0 + 1'000'000'000);
}

TEST_CASE("a session whose KeepAlive stream stays closed past the grace is stale") {
  Fixture f;
  auto& a = f.sessions.begin()->second;
  auto& b = f.sessions.rbegin()->second;
  b->keepalive_open = true;
  const int64_t closed = a->keepalive_closed_ns;
  CHECK(Tick(f.sessions, closed + 100'000'000, 100).stale.empty());  // at the grace: not yet
  TickVerdict v = Tick(f.sessions, closed + 100'000'001, 100);
  CHECK(v.stale == std::vector<std::string>{a->id});
  a->keepalive_open = true;
  CHECK(Tick(f.sessions, closed + 900'000'000, 100).stale.empty());
}

}  // namespace
}  // namespace stoker
