// The worker pool over in-process fake workers (testing/fake_launcher.h) and
// a clock that moves only when told: results in order, crash attribution,
// hangs, outside kills, respawn backoff, shutdown. No process is spawned.

#include "server/engine/worker_pool.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <csignal>
#include <cstring>
#include <map>
#include <memory>
#include <thread>

#include "testing/fake_launcher.h"

namespace stoker {
namespace {

using testing::FakeLauncher;
using namespace std::chrono_literals;

// A fake worker script: every task answered, but the one of `path` hangs.
FakeLauncher::Script HangOn(std::string path) {
  return [path](uint32_t, const worker::TaskMsg&, const std::string& p) {
    FakeLauncher::Reply r;
    if (p == path) r.act = FakeLauncher::Act::kHang;
    return r;
  };
}

// What a pool test needs: fake workers, the clock, the poller, the pool.
struct Fixture {
  explicit Fixture(FakeLauncher::Script script = nullptr, uint32_t workers = 2)
      : fake(std::move(script)), pool(&fake, &clock, &poller, /*task_timeout_ms=*/1000) {
    REQUIRE(poller.Init().ok());
    REQUIRE(pool.Start(workers).ok());
  }

  void Send(uint32_t w, uint64_t id, const std::string& path) {
    auto msg = std::make_unique<worker::TaskMsg>();
    msg->task_id = id;
    msg->ring_id = 1;  // never mapped: the fake answers with an error, still an answer
    msg->path_bytes = static_cast<uint32_t>(path.size());
    std::memcpy(msg->path, path.data(), path.size());
    REQUIRE(pool.SendTask(w, *msg, worker::TaskHeaderBytes() + path.size()));
  }

  // Serves the channels until `pred` holds (deadline 10 s); deaths are
  // buried and kept.
  bool PumpUntil(const std::function<bool()>& pred) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!pred()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      for (uint32_t w : poller.Wait(20)) {
        if (pool.Service(w, [&](const worker::ResultMsg& r) { results[w].push_back(r.task_id); })) {
          deaths.push_back(pool.Bury(w, "channel closed", false));
        }
      }
    }
    return true;
  }

  FakeLauncher fake;
  FakeClock clock;
  Poller poller;
  WorkerPool pool;
  std::map<uint32_t, std::vector<uint64_t>> results;
  std::vector<WorkerDeath> deaths;
};

TEST_CASE("a worker's results come back in the order its tasks went") {
  Fixture f;
  CHECK(f.pool.size() == 2);
  CHECK(f.fake.launches() == 2);
  CHECK(f.pool.CanTake(0, 0));
  f.Send(0, 1, "a.jpg");
  f.Send(0, 2, "b.jpg");
  CHECK(f.pool.worker(0).state == "busy");
  CHECK(f.pool.worker(0).in_flight.size() == 2);
  CHECK_FALSE(f.pool.CanTake(0, 1));
  CHECK(f.pool.CanTake(0, 2));
  REQUIRE(f.PumpUntil([&] { return f.results[0].size() == 2; }));
  CHECK(f.results[0] == std::vector<uint64_t>{1, 2});
  CHECK(f.pool.worker(0).in_flight.empty());
  CHECK(f.pool.worker(0).state == "idle");
  CHECK(f.deaths.empty());
  CHECK(f.fake.tasks_of(0).size() == 2);
}

TEST_CASE("crash attribution: a worker that crashes names the sample it was on") {
  // The poison crashes only once the second task is queued behind it (else
  // the second send could meet a closed channel).
  auto queued = std::make_shared<std::atomic<bool>>(false);
  Fixture f([queued](uint32_t, const worker::TaskMsg&, const std::string& path) {
    FakeLauncher::Reply r;
    if (path.find("poison") != std::string::npos) {
      r.act = FakeLauncher::Act::kCrash;
      for (int i = 0; i < 1000 && !queued->load(); ++i) std::this_thread::sleep_for(5ms);
    }
    return r;
  });
  f.Send(0, 1, "poison.jpg");
  f.Send(0, 2, "fine.jpg");  // only queued behind it
  queued->store(true);
  REQUIRE(f.PumpUntil([&] { return !f.deaths.empty(); }));
  const WorkerDeath& d = f.deaths[0];
  CHECK(d.worker == 0);
  CHECK(d.tasks == std::vector<uint64_t>{1, 2});  // tasks[0]: the one it was on
  CHECK(d.self_inflicted);
  CHECK(d.why.find("channel closed, killed by signal 11") == 0);
  const WorkerSlot& w = f.pool.worker(0);
  CHECK(w.dead);
  CHECK(w.state == "restarting");
  CHECK(w.crashes == 1);
  CHECK(w.restarts == 1);
  CHECK(w.in_flight.empty());
  CHECK(f.pool.restarts_total() == 1);
  CHECK_FALSE(f.pool.CanTake(0, 5));

  // The rule: twice on the same sample by its own doing, and the sample fails.
  CrashTally tally;
  CHECK_FALSE(tally.Count(d.self_inflicted));
  CHECK(tally.Count(true));
}

TEST_CASE("crash attribution: a worker killed from outside does not blame its sample") {
  Fixture f(HangOn("slow.jpg"));
  f.Send(1, 7, "slow.jpg");
  REQUIRE(f.fake.WaitFor([&] { return f.fake.tasks_of(1).size() == 1; }, 10s));
  REQUIRE(f.fake.KillFromOutside(1));
  REQUIRE(f.PumpUntil([&] { return !f.deaths.empty(); }));
  const WorkerDeath& d = f.deaths[0];
  CHECK(d.worker == 1);
  CHECK(d.tasks == std::vector<uint64_t>{7});
  CHECK_FALSE(d.self_inflicted);
  CHECK(d.why == "channel closed, killed by signal 9 (Killed)");

  // Such deaths count too, but only kMaxAnyDeaths of them fail the sample.
  CrashTally tally;
  for (uint32_t i = 1; i < kMaxAnyDeaths; ++i) CHECK_FALSE(tally.Count(false));
  CHECK(tally.Count(false));
  CHECK(tally.deaths == kMaxAnyDeaths);
  CHECK(tally.self_crashes == 0);
}

TEST_CASE("a worker with no progress for task_timeout_ms is killed, and it is its fault") {
  Fixture f(HangOn("slow.jpg"));
  f.Send(0, 3, "slow.jpg");
  REQUIRE(f.fake.WaitFor([&] { return f.fake.tasks_of(0).size() == 1; }, 10s));
  f.clock.AdvanceMs(1000);
  CHECK(f.pool.Supervise(false).empty());
  CHECK_FALSE(f.pool.worker(0).hung);  // not over the limit yet
  f.clock.AdvanceMs(1);
  CHECK(f.pool.Supervise(false).empty());
  CHECK(f.pool.worker(0).hung);
  CHECK_FALSE(f.pool.worker(1).hung);  // idle: no progress is owed
  CHECK_FALSE(f.pool.CanTake(0, 5));
  REQUIRE(f.PumpUntil([&] { return !f.deaths.empty(); }));
  CHECK(f.deaths[0].self_inflicted);
  CHECK(f.deaths[0].tasks == std::vector<uint64_t>{3});
  CHECK_FALSE(f.pool.worker(0).hung);  // reset for the next incarnation
  // It lived over 1 s: started again at once.
  CHECK(f.pool.Supervise(false) == std::vector<uint32_t>{0});
  CHECK_FALSE(f.pool.worker(0).dead);
  CHECK(f.fake.launches() == 3);
}

TEST_CASE("time the daemon itself did not run (SIGSTOP) is not a worker's lack of progress") {
  Fixture f(HangOn("slow.jpg"));
  f.Send(0, 3, "slow.jpg");
  REQUIRE(f.fake.WaitFor([&] { return f.fake.tasks_of(0).size() == 1; }, 10s));
  CHECK(f.pool.Supervise(false).empty());
  f.clock.AdvanceMs(40000);  // stopped for 40 s, then continued
  CHECK(f.pool.Supervise(false).empty());
  CHECK_FALSE(f.pool.worker(0).hung);
  // Running again, the limit counts from there: at 1 s of the worker's own
  // silence (in steps, as the loop runs), it is hung.
  for (int i = 0; i < 10; ++i) {
    f.clock.AdvanceMs(100);
    f.pool.Supervise(false);
  }
  CHECK_FALSE(f.pool.worker(0).hung);
  f.clock.AdvanceMs(1);
  f.pool.Supervise(false);
  CHECK(f.pool.worker(0).hung);
}

TEST_CASE("respawn: a worker dying young waits 500 ms, a failed start retries after 1 s") {
  Fixture f;
  REQUIRE(f.fake.KillFromOutside(0));
  REQUIRE(f.PumpUntil([&] { return !f.deaths.empty(); }));
  f.clock.AdvanceMs(499);
  CHECK(f.pool.Supervise(false).empty());
  f.clock.AdvanceMs(1);
  CHECK(f.pool.Supervise(true).empty());  // shutting down: no restart
  CHECK(f.pool.Supervise(false) == std::vector<uint32_t>{0});
  CHECK(f.fake.launches() == 3);

  f.clock.AdvanceMs(2000);  // old enough now
  f.fake.FailLaunches(1);
  REQUIRE(f.fake.KillFromOutside(0));
  REQUIRE(f.PumpUntil([&] { return f.deaths.size() == 2; }));
  CHECK(f.pool.Supervise(false).empty());  // the launch failed
  CHECK(f.pool.worker(0).dead);
  f.clock.AdvanceMs(999);
  CHECK(f.pool.Supervise(false).empty());
  f.clock.AdvanceMs(1);
  CHECK(f.pool.Supervise(false) == std::vector<uint32_t>{0});
  CHECK(f.pool.worker(0).restarts == 2);
  CHECK(f.pool.restarts_total() == 2);
  CHECK(f.fake.launches() == 4);
}

TEST_CASE("an answer out of order gets the worker killed as hung") {
  Fixture f;
  auto msg = std::make_unique<worker::TaskMsg>();
  msg->task_id = 9;
  msg->path_bytes = 5;
  std::memcpy(msg->path, "x.jpg", 5);
  f.pool.Send(0, msg.get(), worker::TaskHeaderBytes() + 5, -1);  // not in flight
  REQUIRE(f.PumpUntil([&] { return !f.deaths.empty(); }));
  CHECK(f.results[0].empty());
  CHECK(f.deaths[0].self_inflicted);
  CHECK(f.deaths[0].tasks.empty());
}

TEST_CASE("a send that fails marks the worker unsendable, and its death follows") {
  Fixture f;
  REQUIRE(f.fake.KillFromOutside(1));
  // Its end is shut as it dies; from then on a send fails.
  auto msg = std::make_unique<worker::TaskMsg>();
  msg->task_id = 1;
  REQUIRE(f.fake.WaitFor([&] { return !f.pool.SendTask(1, *msg, worker::TaskHeaderBytes()); },
                         10s));
  CHECK(f.pool.worker(1).unsendable);
  CHECK_FALSE(f.pool.CanTake(1, 9));
  REQUIRE(f.PumpUntil([&] { return !f.deaths.empty(); }));
  CHECK_FALSE(f.deaths[0].self_inflicted);
  f.clock.AdvanceMs(500);
  CHECK(f.pool.Supervise(false) == std::vector<uint32_t>{1});
  CHECK_FALSE(f.pool.worker(1).unsendable);  // reset when it starts again
  CHECK(f.pool.CanTake(1, 0));
}

TEST_CASE("Shutdown asks every worker to exit") {
  Fixture f;
  f.pool.Shutdown(10000);
  CHECK(f.pool.worker(0).dead);
  CHECK(f.pool.worker(1).dead);
  CHECK(f.pool.restarts_total() == 0);
}

TEST_CASE("ClassifyDeath: what the exit says of whose fault it was") {
  std::string why;
  bool self = false;
  WorkerExit e;
  ClassifyDeath("channel closed", false, e, &why, &self);
  CHECK(why == "channel closed");
  CHECK_FALSE(self);
  ClassifyDeath("channel closed", true, e, &why, &self);
  CHECK(self);  // hung
  e.known = true;
  e.exit_status = 3;
  ClassifyDeath("channel closed", false, e, &why, &self);
  CHECK(why == "channel closed, exited with status 3");
  CHECK(self);
  e.signaled = true;
  e.signal = SIGKILL;
  ClassifyDeath("channel closed", false, e, &why, &self);
  CHECK_FALSE(self);
  e.signal = SIGABRT;
  ClassifyDeath("channel closed", false, e, &why, &self);
  CHECK(self);
  CHECK(why.find("killed by signal 6") != std::string::npos);
}

}  // namespace
}  // namespace stoker

namespace stoker {
namespace {

TEST_CASE("resize: grow starts new slots, shrink retires the highest once they hold nothing") {
  // Tasks on "slow" paths wait until the test lets them go.
  auto gate = std::make_shared<std::atomic<bool>>(false);
  Fixture f(
      [gate](uint32_t, const worker::TaskMsg&, const std::string& path) {
        if (path.find("slow") != std::string::npos) {
          for (int i = 0; i < 2000 && !gate->load(); ++i) std::this_thread::sleep_for(5ms);
        }
        return FakeLauncher::Reply{};
      },
      1);
  CHECK(f.pool.active() == 1);
  std::vector<uint32_t> launched = f.pool.Resize(3);
  CHECK(launched == std::vector<uint32_t>{1, 2});
  CHECK(f.pool.size() == 3);
  CHECK(f.pool.active() == 3);
  CHECK(f.fake.launches() == 3);
  CHECK(f.pool.CanTake(2, 0));

  // Busy time: worker 2 holds a task while the clock moves 300 ms.
  const int64_t busy0 = f.pool.BusyNs(f.clock.NowNs());
  f.Send(2, 7, "slow.jpg");
  f.clock.AdvanceMs(300);
  CHECK(f.pool.BusyNs(f.clock.NowNs()) - busy0 == 300'000'000);

  // Shrink to 1 while worker 2 holds its task: it retires only after.
  CHECK(f.pool.Resize(1).empty());
  CHECK(f.pool.active() == 1);
  CHECK(f.pool.worker(2).state == "retiring");
  CHECK_FALSE(f.pool.CanTake(2, 5));
  CHECK_FALSE(f.pool.CanTake(1, 5));
  CHECK(f.pool.CanTake(0, 0));
  f.pool.Supervise(false);
  CHECK_FALSE(f.pool.worker(2).shutdown_sent);  // still holds task 7
  CHECK(f.pool.worker(1).shutdown_sent);
  gate->store(true);
  REQUIRE(f.PumpUntil([&] { return f.results[2].size() == 1; }));
  f.pool.Supervise(false);
  CHECK(f.pool.worker(2).shutdown_sent);
  REQUIRE(f.PumpUntil([&] { return f.deaths.size() == 2; }));
  for (const WorkerDeath& d : f.deaths) CHECK(d.tasks.empty());
  CHECK(f.pool.worker(1).retired);
  CHECK(f.pool.worker(2).retired);
  CHECK(f.pool.worker(2).state == "retired");
  CHECK(f.pool.restarts_total() == 0);  // a retirement is no restart
  // Retired slots stay down however long the clock runs.
  f.clock.AdvanceMs(5000);
  CHECK(f.pool.Supervise(false).empty());
  CHECK(f.fake.launches() == 3);

  // Grow again: the retired slots come back (same ids), nothing appended.
  launched = f.pool.Resize(3);
  CHECK(launched == std::vector<uint32_t>{1, 2});
  CHECK(f.pool.size() == 3);
  CHECK(f.pool.active() == 3);
  CHECK(f.fake.launches() == 5);
  CHECK(f.pool.worker(2).state == "idle");
  f.Send(2, 8, "a.jpg");
  REQUIRE(f.PumpUntil([&] { return f.results[2].size() == 2; }));
}

TEST_CASE("resize: a retiring worker taken back before it left keeps running") {
  Fixture f(nullptr, 2);
  CHECK(f.pool.Resize(1).empty());
  CHECK(f.pool.worker(1).retiring);
  CHECK(f.pool.Resize(2).empty());  // no launch: it never left
  CHECK_FALSE(f.pool.worker(1).retiring);
  CHECK(f.pool.worker(1).state == "idle");
  f.pool.Supervise(false);
  CHECK_FALSE(f.pool.worker(1).shutdown_sent);
  f.Send(1, 3, "a.jpg");
  REQUIRE(f.PumpUntil([&] { return f.results[1].size() == 1; }));
  CHECK(f.fake.launches() == 2);
  CHECK(f.pool.Resize(0).empty());  // at least one
  CHECK(f.pool.active() == 1);
}

}  // namespace
}  // namespace stoker

namespace stoker {
namespace {

TEST_CASE("a worker whose channel's buffer is full waits for its next answer, not its death") {
  std::atomic<bool> release{false};
  Fixture f(
      [&release](uint32_t, const worker::TaskMsg&, const std::string& p) {
        while (p == "slow" && !release.load()) std::this_thread::sleep_for(1ms);
        return FakeLauncher::Reply{};
      },
      1);
  f.Send(0, 1, "slow");  // the worker is on it and reads nothing more
  // Task headers (some 20 KB each) until the socket's buffer takes no more.
  auto msg = std::make_unique<worker::TaskMsg>();
  uint64_t sent = 1;
  for (uint64_t id = 2; id < 1000; ++id) {
    msg->task_id = id;
    if (!f.pool.SendTask(0, *msg, worker::TaskHeaderBytes())) break;
    sent = id;
  }
  REQUIRE(sent < 999);
  CHECK(f.pool.worker(0).full);
  CHECK_FALSE(f.pool.worker(0).unsendable);
  CHECK_FALSE(f.pool.CanTake(0, 100000));
  release = true;
  REQUIRE(f.PumpUntil([&] { return !f.results[0].empty(); }));
  CHECK_FALSE(f.pool.worker(0).full);
  CHECK(f.pool.CanTake(0, 100000));
  // Every task sent is answered, in order; none was lost to the full buffer.
  REQUIRE(f.PumpUntil([&] { return f.results[0].size() == sent; }));
  for (uint64_t i = 0; i < sent; ++i) CHECK(f.results[0][i] == i + 1);
  CHECK(f.deaths.empty());
}

}  // namespace
}  // namespace stoker
