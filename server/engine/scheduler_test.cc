// The scheduler alone: sessions are indices with queue lengths, workers are
// indices with task counts.

#include "server/engine/scheduler.h"

#include <catch2/catch.hpp>
#include <vector>

namespace stoker {
namespace {

// A round over `queues` (samples queued per session) and workers holding
// `held` tasks each; returns the (worker, session) assignments in order.
std::vector<std::pair<size_t, size_t>> RunRound(Scheduler& sched, std::vector<int>& queues,
                                                std::vector<uint32_t>& held) {
  std::vector<std::pair<size_t, size_t>> out;
  sched.Round(
      held.size(), queues.size(), [&](size_t w, uint32_t depth) { return held[w] <= depth; },
      [&](size_t s) { return queues[s] > 0; },
      [&](size_t w, size_t s) {
        --queues[s];
        ++held[w];
        out.emplace_back(w, s);
      });
  return out;
}

TEST_CASE("sessions take turns round-robin") {
  Scheduler sched(1);
  std::vector<int> queues = {100, 100, 100};
  std::vector<size_t> served;
  for (int round = 0; round < 6; ++round) {
    std::vector<uint32_t> held = {0};  // one worker, emptied between rounds
    for (auto [w, s] : RunRound(sched, queues, held)) served.push_back(s);
  }
  CHECK(served == std::vector<size_t>{0, 1, 2, 0, 1, 2});
}

TEST_CASE("no session starves behind a deep queue") {
  Scheduler sched(2);
  std::vector<int> queues = {1000, 0, 0};
  std::vector<uint32_t> held = {0, 0, 0, 0};
  auto first = RunRound(sched, queues, held);
  CHECK(first.size() == 8);  // 4 workers x depth 2, all from session 0
  // Session 2 gets work: the next free worker serves it, before session 0
  // gets another turn.
  queues[2] = 1;
  held = {0, 1, 2, 2};
  auto next = RunRound(sched, queues, held);
  REQUIRE_FALSE(next.empty());
  CHECK(next[0] == std::make_pair(size_t{0}, size_t{2}));
  // Over many rounds each of two busy sessions gets half the samples.
  queues = {1000, 1000, 0};
  int per[3] = {0, 0, 0};
  for (int round = 0; round < 50; ++round) {
    std::vector<uint32_t> idle = {0, 0, 0};
    for (auto [w, s] : RunRound(sched, queues, idle)) ++per[s];
  }
  CHECK(per[0] == per[1]);
  CHECK(per[2] == 0);
}

TEST_CASE("workers are filled emptiest first, up to the queue depth") {
  Scheduler sched(2);
  std::vector<int> queues = {10};
  std::vector<uint32_t> held = {1, 0, 2};
  auto a = RunRound(sched, queues, held);
  // Depth 0: only worker 1 is empty. Depth 1: workers 0 and 1 hold one each.
  // Worker 2 holds two already: nothing.
  REQUIRE(a.size() == 3);
  CHECK(a[0].first == 1);
  CHECK(a[1].first == 0);
  CHECK(a[2].first == 1);
  CHECK(held == std::vector<uint32_t>{2, 2, 2});
  CHECK(sched.queue_depth() == 2);
  CHECK(Scheduler(0).queue_depth() == 1);
}

TEST_CASE("a round ends when no session has work, and skips workers that cannot take") {
  Scheduler sched(4);
  std::vector<int> queues = {2, 1};
  std::vector<uint32_t> held = {0, 0};
  int asked = 0;
  sched.Round(
      2, 2,
      [&](size_t w, uint32_t depth) {
        ++asked;
        return w == 1 && held[w] <= depth;  // worker 0 is dead
      },
      [&](size_t s) { return queues[s] > 0; },
      [&](size_t w, size_t s) {
        CHECK(w == 1);
        --queues[s];
        ++held[w];
      });
  CHECK(queues == std::vector<int>{0, 0});
  CHECK(held[1] == 3);
  CHECK(asked < 2 * 4 + 1);  // it stopped once the queues were empty

  std::vector<int> none = {0, 0};
  bool assigned = false;
  sched.Round(
      2, 2, [](size_t, uint32_t) { return true; }, [&](size_t s) { return none[s] > 0; },
      [&](size_t, size_t) { assigned = true; });
  CHECK_FALSE(assigned);
  // No session at all.
  sched.Round(
      2, 0, [](size_t, uint32_t) { return true; }, [](size_t) { return true; },
      [&](size_t, size_t) { assigned = true; });
  CHECK_FALSE(assigned);
}

TEST_CASE("Pick keeps its place when sessions come and go") {
  Scheduler sched(1);
  auto all = [](size_t) { return true; };
  CHECK(sched.Pick(3, all) == 0);
  CHECK(sched.Pick(3, all) == 1);
  // One session left: the cursor (2) wraps.
  CHECK(sched.Pick(1, all) == 0);
  CHECK(sched.Pick(4, [](size_t s) { return s == 3; }) == 3);
  CHECK(sched.Pick(4, [](size_t) { return false; }) == Scheduler::kNone);
  CHECK(sched.Pick(4, all) == 0);  // past 3, wrapped
}

}  // namespace
}  // namespace stoker
