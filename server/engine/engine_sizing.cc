// The Engine's sizing (engine.h): its CPU budget, the rings' memory budget,
// the autotuner's ticks (the worker count) and the rings' deepening. Every
// *Locked method runs with mu_ held.

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "server/control/daemon_flags.h"
#include "server/engine/engine.h"
#include "server/engine/status_export.h"
#include "spdlog/spdlog.h"
#include "stoker/ring_layout.h"

namespace stoker {

CpuBudget Engine::ReadBudget() const {
  if (config_.cpu_budget() > 0) return CpuBudget{config_.cpu_budget(), "--cpu-budget"};
  if (env_.cpu_budget != nullptr) return ReadCpuBudget(*env_.cpu_budget);
  return ReadCpuBudget(SystemCpuBudgetEnv());
}

void Engine::RingBudgetLocked(AttachLimits* limits) const {
  limits->ring_budget_bytes = ring_budget_bytes_;
  limits->ring_budget_default = MiB(config_.ring_budget_mb()) == 0;
  limits->ring_used_bytes = 0;
  for (const auto& [id, s] : sessions_) {
    // What the ring holds of memory: its first depth's data until Attach
    // made it, then every slot it committed.
    limits->ring_used_bytes += s->ring != nullptr ? s->ring->geometry().slot_bytes *
                                                       s->ring->committed_slots()
                                                 : s->plan.ring_bytes;
  }
  limits->sessions = static_cast<uint32_t>(sessions_.size());
}

uint32_t Engine::MaxWorkersLocked(double* reserved, uint32_t* trainers) const {
  std::vector<uint32_t> pids;
  for (const auto& [id, s] : sessions_) pids.push_back(s->req.client_pid());
  std::sort(pids.begin(), pids.end());
  *trainers = static_cast<uint32_t>(std::unique(pids.begin(), pids.end()) - pids.begin());
  *reserved = config_.has_reserve_cpus() ? config_.reserve_cpus() : *trainers;
  const double room = std::floor(budget_.cpus - *reserved + 1e-9);
  uint32_t most = room < 1 ? 1 : static_cast<uint32_t>(std::min(room, 1024.0));
  if (config_.workers_max() != 0) most = std::min(most, config_.workers_max());
  return most;
}

void Engine::AutotuneLocked(int64_t now_ns) {
  if (autotuner_ == nullptr) return;  // --workers N: nothing to measure for
  const int64_t busy = pool_->BusyNs(now_ns);
  const uint64_t samples = batch_.samples_total + batch_.samples_failed_total;
  // The live workers' CPU since the last tick (a worker started since counts
  // from 0; one retired since, its last moments are lost).
  std::map<pid_t, double> cpu_now;
  double cpu_s = 0;
  for (uint32_t w = 0; w < pool_->size(); ++w) {
    const WorkerSlot& slot = pool_->worker(w);
    if (slot.dead) continue;
    const double c = pool_->CpuSeconds(w);
    cpu_now[slot.pid] = c;
    auto it = tune_cpu_.find(slot.pid);
    cpu_s += std::max(0.0, c - (it != tune_cpu_.end() ? it->second : 0.0));
  }
  tune_cpu_.swap(cpu_now);
  AutotuneSample t;
  t.now_ns = now_ns;
  t.elapsed_ns = now_ns - tune_last_ns_;
  t.samples = samples - tune_samples_;
  t.busy_ns = busy - tune_busy_ns_;
  t.cpu_ns = static_cast<int64_t>(cpu_s * 1e9);
  t.sessions = static_cast<uint32_t>(sessions_.size());
  for (auto& [id, s] : sessions_) {
    const uint64_t wait = s->ring->header()->client_wait_ns.load(std::memory_order_relaxed);
    if (t.elapsed_ns > 0 && wait >= s->tuned_wait_ns) {
      t.wait_share = std::max(
          t.wait_share, std::min(1.0, static_cast<double>(wait - s->tuned_wait_ns) / t.elapsed_ns));
    }
    s->tuned_wait_ns = wait;
  }
  double reserved;
  uint32_t trainers;
  t.max_workers = MaxWorkersLocked(&reserved, &trainers);
  tune_last_ns_ = now_ns;
  tune_busy_ns_ = busy;
  tune_samples_ = samples;
  if (t.elapsed_ns <= 0) return;
  const size_t before = autotuner_->decisions().size();
  const uint32_t target = autotuner_->Observe(t);
  if (autotuner_->decisions().size() != before || target != pool_->active()) {
    if (!autotuner_->decisions().empty()) {
      const AutotuneDecision& d = autotuner_->decisions().back();
      spdlog::info("workers {} -> {}: {}", d.from, d.to, d.reason);
    }
    for (uint32_t w : pool_->Resize(target)) MapRingsLocked(w);
    poller_.Wake();
  }
}

void Engine::DeepenRingsLocked(int64_t now_ns) {
  depth_last_ns_ = now_ns;
  AttachLimits shm;
  RingBudgetLocked(&shm);
  // A deeper ring leaves a quarter of the budget to sessions yet to attach.
  const uint64_t cap = shm.ring_budget_bytes == 0 ? UINT64_MAX : shm.ring_budget_bytes / 4 * 3;
  bool deepened = false;
  for (auto& [id, s] : sessions_) {
    if (s->depth_policy == nullptr || s->ended) continue;
    RingDepthSample x;
    x.now_ns = now_ns;
    x.wait_ns = s->ring->header()->client_wait_ns.load(std::memory_order_relaxed);
    x.full_ns = FullNs(*s, now_ns);
    const uint64_t slot_bytes = s->ring->geometry().slot_bytes;
    const uint64_t room_bytes = cap > shm.ring_used_bytes ? cap - shm.ring_used_bytes : 0;
    const uint32_t room = static_cast<uint32_t>(
        std::min<uint64_t>(room_bytes / slot_bytes, s->plan.slots()));
    const std::string before = s->depth_policy->reason();
    const uint32_t from = s->depth_policy->depth();
    const uint32_t want = s->depth_policy->Observe(x, room);
    if (want == 0) {
      if (s->depth_policy->reason() != before) {
        spdlog::info("session {}: ring stays at {} batches: {}", id, from,
                     s->depth_policy->reason());
      }
      continue;
    }
    if (absl::Status st = s->ring->Commit(want); !st.ok()) {
      s->depth_policy->Failed(want, std::string(st.message()), now_ns);
      spdlog::warn("session {}: {}", id, s->depth_policy->reason());
      continue;
    }
    if (!SetDepth(*s, want)) continue;  // the client is behind a change: next tick
    s->depth_policy->Deepened(want, now_ns);
    shm.ring_used_bytes += slot_bytes * (want - from);
    spdlog::info("session {}: ring {} -> {} batches from batch {}: {}", id, from, want,
                 ring::DepthFrom(s->depth_word), s->depth_policy->reason());
    deepened = true;
  }
  if (deepened) {
    StartBatchesLocked();
    poller_.Wake();
  }
}

void Engine::ExportAutotuneLocked(v1::AutotuneStatus* out) const {
  PoolSizing p;
  p.tuner = autotuner_.get();
  p.budget = budget_;
  p.active = pool_->active();
  p.max_workers = MaxWorkersLocked(&p.reserved_cpus, &p.trainers);
  p.workers_cap = config_.workers_max();
  p.start_ns = start_ns_;
  ExportAutotune(p, out);
}

void Engine::GateRemoteLocked(int64_t now_ns) {
  if (remote_ == nullptr) return;
  const int64_t elapsed = now_ns - gate_last_ns_;
  const int64_t busy = pool_->BusyNs(now_ns);
  double wait_share = 0;
  for (auto& [id, s] : sessions_) {
    const uint64_t wait = s->ring->header()->client_wait_ns.load(std::memory_order_relaxed);
    if (gate_last_ns_ != 0 && elapsed > 0 && wait >= s->gated_wait_ns) {
      wait_share = std::max(
          wait_share, std::min(1.0, static_cast<double>(wait - s->gated_wait_ns) / elapsed));
    }
    s->gated_wait_ns = wait;
  }
  const double busy_share =
      gate_last_ns_ != 0 && elapsed > 0
          ? static_cast<double>(busy - gate_busy_ns_) /
                (static_cast<double>(elapsed) * std::max<uint32_t>(1, pool_->active()))
          : 0;
  const bool was = remote_->open();
  if (remote_->Tick(now_ns, wait_share, busy_share) != was) {
    spdlog::info("decode nodes {}", remote_->open() ? "take work" : "given back");
    poller_.Wake();
  }
  gate_last_ns_ = now_ns;
  gate_busy_ns_ = busy;
}

void Engine::StealBackLocked() {
  bool queued = false;
  for (const auto& [id, s] : sessions_) queued = queued || !s->queue.empty();
  bool room = false;
  for (uint32_t w = 0; w < pool_->size() && !room; ++w) room = pool_->CanTake(w, 0);
  for (uint32_t w : remote_->Laggards(clock_->NowNs(), room && !queued)) {
    spdlog::info("decode node {}: relay {} fell behind ({} task(s) held); its tasks are redone "
                 "here",
                 remote_->node_of(w), w, remote_->pool().worker(w).in_flight.size());
    remote_->CountStolen(w);
    remote_->pool().Stop(w);
  }
}

}  // namespace stoker
