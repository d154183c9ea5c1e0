#include "server/engine/worker_pool.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace stoker {

namespace {

constexpr uint64_t kWakeKey = UINT64_MAX;

}  // namespace

// --- Poller ---

absl::Status Poller::Init() {
  epoll_fd_.Reset(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_fd_.valid()) return PosixError("epoll_create1", errno);
  wake_fd_.Reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake_fd_.valid()) return PosixError("eventfd", errno);
  struct epoll_event ev = {};
  ev.events = EPOLLIN;
  ev.data.u64 = kWakeKey;
  ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, wake_fd_.get(), &ev);
  return absl::OkStatus();
}

void Poller::Add(int fd, uint32_t id) {
  struct epoll_event ev = {};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.u64 = id;
  ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, fd, &ev);
}

void Poller::Remove(int fd) { ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, fd, nullptr); }

void Poller::Wake() {
  uint64_t one = 1;
  ssize_t n = ::write(wake_fd_.get(), &one, sizeof(one));
  (void)n;
}

std::vector<uint32_t> Poller::Wait(int timeout_ms) {
  struct epoll_event events[64];
  int n = ::epoll_wait(epoll_fd_.get(), events, 64, timeout_ms);
  std::vector<uint32_t> ready;
  for (int i = 0; i < n; ++i) {
    if (events[i].data.u64 == kWakeKey) {
      uint64_t v;
      while (::read(wake_fd_.get(), &v, sizeof(v)) > 0) {
      }
      continue;
    }
    ready.push_back(static_cast<uint32_t>(events[i].data.u64));
  }
  return ready;
}

// --- Deaths ---

void ClassifyDeath(const std::string& cause, bool hung, const WorkerExit& e, std::string* why,
                   bool* self_inflicted) {
  *self_inflicted = hung;
  *why = cause;
  if (e.known && e.signaled) {
    *why = absl::StrCat(cause, ", killed by signal ", e.signal, " (", strsignal(e.signal), ")");
    if (e.signal != SIGKILL) *self_inflicted = true;
  } else if (e.known && (e.exit_status == worker::kExitNodeLost ||
                          e.exit_status == worker::kExitNodeBad)) {
    *why = absl::StrCat(cause, e.exit_status == worker::kExitNodeLost
                                   ? ", its decode node was lost"
                                   : ", its decode node answered something malformed");
  } else if (e.known) {
    *why = absl::StrCat(cause, ", exited with status ", e.exit_status);
    *self_inflicted = true;
  }
}

// --- WorkerPool ---

WorkerPool::WorkerPool(WorkerLauncher* launcher, Clock* clock, Poller* poller,
                       uint32_t task_timeout_ms, uint32_t poller_id_base)
    : launcher_(launcher),
      clock_(clock),
      poller_(poller),
      task_timeout_ms_(task_timeout_ms),
      poller_id_base_(poller_id_base) {}

absl::Status WorkerPool::Start(uint32_t count) {
  for (uint32_t i = 0; i < count; ++i) {
    auto w = std::make_unique<WorkerSlot>();
    w->id = i;
    absl::Status st = Launch(*w);
    if (!st.ok()) return st;
    workers_.push_back(std::move(w));
  }
  return absl::OkStatus();
}

absl::Status WorkerPool::Launch(WorkerSlot& w) {
  auto launched = launcher_->Launch(w.id);
  if (!launched.ok()) return launched.status();
  w.pid = launched->pid;
  w.channel = std::move(launched->channel);
  w.dead = false;
  w.hung = false;
  w.unsendable = false;
  w.full = false;
  w.greeted = false;
  w.stopped = false;
  w.state = "idle";
  w.in_flight.clear();
  w.started_ns = clock_->NowNs();
  w.last_progress_ns = w.started_ns;
  poller_->Add(w.channel.get(), poller_id_base_ + w.id);
  spdlog::debug("worker {} started, pid {}", w.id, w.pid);
  return absl::OkStatus();
}

bool WorkerPool::CanTake(uint32_t id, uint32_t depth) const {
  const WorkerSlot& w = *workers_[id];
  return !(w.dead || w.hung || w.stopped || w.unsendable || w.full || w.retiring || w.retired ||
           (wait_for_hello_ && !w.greeted) || w.in_flight.size() > depth);
}

uint32_t WorkerPool::active() const {
  uint32_t n = 0;
  for (const auto& w : workers_) n += !(w->retiring || w->retired);
  return n;
}

std::vector<uint32_t> WorkerPool::Resize(uint32_t count) {
  count = std::max(1u, count);
  std::vector<uint32_t> launched;
  uint32_t have = active();
  // Shrink: the highest active slots retire.
  for (size_t i = workers_.size(); i-- > 0 && have > count;) {
    WorkerSlot& w = *workers_[i];
    if (w.retiring || w.retired) continue;
    --have;
    w.retiring = true;
    w.shutdown_sent = false;
    if (w.dead) {  // waiting to restart: nothing to stop
      w.retiring = false;
      w.retired = true;
      w.state = "retired";
    } else {
      w.state = "retiring";
    }
    spdlog::debug("worker {} (pid {}) retiring", w.id, w.dead ? 0 : w.pid);
  }
  // Grow: retiring slots first (still running), then retired ones, then new.
  for (auto& wp : workers_) {
    if (have >= count) break;
    if (wp->retiring) {
      wp->retiring = false;
      wp->state = wp->in_flight.empty() ? "idle" : "busy";
      ++have;
    }
  }
  for (auto& wp : workers_) {
    if (have >= count) break;
    if (!wp->retired) continue;
    wp->retired = false;
    ++have;
    if (Launch(*wp).ok()) {
      launched.push_back(wp->id);
    } else {
      wp->respawn_at_ns = clock_->NowNs() + 1000000000LL;
    }
  }
  while (have < count) {
    auto w = std::make_unique<WorkerSlot>();
    w->id = static_cast<uint32_t>(workers_.size());
    if (Launch(*w).ok()) {
      launched.push_back(w->id);
    } else {
      w->respawn_at_ns = clock_->NowNs() + 1000000000LL;
    }
    workers_.push_back(std::move(w));
    ++have;
  }
  return launched;
}

void WorkerPool::Retire(uint32_t id) {
  WorkerSlot& w = *workers_[id];
  if (w.retiring || w.retired) return;
  w.shutdown_sent = false;
  if (w.dead) {  // waiting to restart: nothing to stop
    w.retired = true;
    w.state = "retired";
  } else {
    w.retiring = true;
    w.state = "retiring";
  }
  spdlog::debug("worker {} (pid {}) retiring", w.id, w.dead ? 0 : w.pid);
}

void WorkerPool::Stop(uint32_t id) {
  WorkerSlot& w = *workers_[id];
  if (w.dead || w.stopped) return;
  w.stopped = true;
  launcher_->Kill(w.pid);
}

std::optional<uint32_t> WorkerPool::Add() {
  auto w = std::make_unique<WorkerSlot>();
  w->id = static_cast<uint32_t>(workers_.size());
  const bool ok = Launch(*w).ok();
  if (!ok) w->respawn_at_ns = clock_->NowNs() + 1000000000LL;
  workers_.push_back(std::move(w));
  if (!ok) return std::nullopt;
  return static_cast<uint32_t>(workers_.size() - 1);
}

int64_t WorkerPool::BusyNs(int64_t now_ns) const {
  int64_t total = 0;
  for (const auto& w : workers_) {
    total += w->busy_ns;
    if (w->busy_since_ns != 0) total += now_ns - w->busy_since_ns;
  }
  return total;
}

bool WorkerPool::SendTask(uint32_t id, const worker::TaskMsg& msg, size_t bytes) {
  WorkerSlot& w = *workers_[id];
  if (!SendWithFd(w.channel.get(), &msg, bytes, -1)) {
    if ((errno == EAGAIN || errno == EWOULDBLOCK) && !w.in_flight.empty()) {
      // Its queue fills the socket's buffer: wait for an answer, which
      // drains one task's datagram.
      w.full = true;
      return false;
    }
    // The worker is gone (killed from outside, say) or stuck; its death
    // is handled from epoll, or by the hang check. Not `hung`: a send that
    // failed says nothing about the sample the worker was on, and must not
    // count as a crash it caused.
    w.unsendable = true;
    return false;
  }
  if (w.in_flight.empty()) {
    w.last_progress_ns = clock_->NowNs();
    w.busy_since_ns = w.last_progress_ns;
  }
  w.in_flight.push_back(msg.task_id);
  w.state = "busy";
  return true;
}

void WorkerPool::Send(uint32_t id, const void* msg, size_t bytes, int fd) {
  WorkerSlot& w = *workers_[id];
  if (!w.dead) SendWithFd(w.channel.get(), msg, bytes, fd);
}

void WorkerPool::SendAll(const void* msg, size_t bytes, int fd) {
  for (auto& w : workers_) {
    if (!w->dead) SendWithFd(w->channel.get(), msg, bytes, fd);
  }
}

bool WorkerPool::Service(uint32_t id,
                         absl::FunctionRef<void(const worker::ResultMsg&)> on_result) {
  WorkerSlot& w = *workers_[id];
  if (w.dead) return false;
  alignas(worker::ResultMsg) char buf[sizeof(worker::ResultMsg) + 64];
  for (;;) {
    ssize_t got = ::recv(w.channel.get(), buf, sizeof(buf), MSG_DONTWAIT);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
    if (got <= 0) return true;
    uint32_t type;
    std::memcpy(&type, buf, sizeof(type));
    if (type == worker::kHello && got == sizeof(worker::HelloMsg)) {
      w.greeted = true;
      continue;
    }
    if (type != worker::kResult || got != sizeof(worker::ResultMsg)) {
      spdlog::error("worker {} sent a malformed message; replacing it", w.id);
      return true;
    }
    const auto& r = *reinterpret_cast<const worker::ResultMsg*>(buf);
    if (w.in_flight.empty() || w.in_flight.front() != r.task_id) {
      spdlog::error("worker {} (pid {}) answered out of order; replacing it", w.id, w.pid);
      launcher_->Kill(w.pid);
      w.hung = true;
      return false;
    }
    w.in_flight.pop_front();
    w.full = false;
    w.last_progress_ns = clock_->NowNs();
    if (w.in_flight.empty()) {
      w.state = w.retiring ? "retiring" : "idle";
      w.busy_ns += w.last_progress_ns - w.busy_since_ns;
      w.busy_since_ns = 0;
    }
    on_result(r);
    if (w.hung) return false;
  }
}

WorkerDeath WorkerPool::Bury(uint32_t id, const std::string& cause, bool shutting_down) {
  WorkerSlot& w = *workers_[id];
  poller_->Remove(w.channel.get());
  w.channel.Reset();
  launcher_->Kill(w.pid);
  const WorkerExit exit = launcher_->Reap(w.pid);
  WorkerDeath d;
  d.worker = id;
  ClassifyDeath(cause, w.hung, exit, &d.why, &d.self_inflicted);
  if (w.busy_since_ns != 0) {
    w.busy_ns += clock_->NowNs() - w.busy_since_ns;
    w.busy_since_ns = 0;
  }
  if (w.retiring) {
    // Asked to go (or gone on its own while retiring): no restart. Work it
    // still held, if it died on it, is redone like any other death's.
    if (!w.in_flight.empty()) {
      spdlog::warn("worker {} (pid {}) died while retiring: {}; {} sample(s) will be redone",
                   w.id, w.pid, d.why, w.in_flight.size());
    }
    d.tasks.assign(w.in_flight.begin(), w.in_flight.end());
    w.in_flight.clear();
    w.dead = true;
    w.hung = false;
    w.retiring = false;
    w.retired = true;
    w.state = "retired";
    spdlog::debug("worker {} retired", w.id);
    return d;
  }
  if (!shutting_down) {
    spdlog::warn("worker {} (pid {}) died: {}; {} sample(s) in flight will be redone", w.id,
                 w.pid, d.why, w.in_flight.size());
  }
  d.tasks.assign(w.in_flight.begin(), w.in_flight.end());
  w.in_flight.clear();
  w.dead = true;
  w.hung = false;
  w.state = "restarting";
  ++w.crashes;
  if (!shutting_down) {
    ++w.restarts;
    ++restarts_total_;
    // Restart at once, unless it keeps dying young.
    const int64_t now = clock_->NowNs();
    w.respawn_at_ns = (now - w.started_ns < 1000000000LL) ? now + 500000000LL : now;
  }
  return d;
}

std::vector<uint32_t> WorkerPool::Supervise(bool shutting_down) {
  std::vector<uint32_t> started;
  const int64_t now = clock_->NowNs();
  // The daemon did not run for a while (SIGSTOP, a frozen container, a
  // starved host): the workers' silence over that time is not theirs.
  const int64_t gap = last_supervise_ns_ == 0 ? 0 : now - last_supervise_ns_;
  last_supervise_ns_ = now;
  if (gap > kStalledNs) {
    spdlog::info("stokerd did not run for {} ms (stopped?); the workers' task clocks move on",
                 gap / 1000000);
    for (auto& wp : workers_) wp->last_progress_ns += gap;
  }
  for (auto& wp : workers_) {
    WorkerSlot& w = *wp;
    if (!w.dead && !w.in_flight.empty() && !w.hung &&
        now - w.last_progress_ns > int64_t{task_timeout_ms_} * 1000000) {
      spdlog::warn("worker {} (pid {}) made no progress for {} ms; killing it", w.id, w.pid,
                   task_timeout_ms_);
      w.hung = true;
      launcher_->Kill(w.pid);
    }
    if (w.retiring && !w.dead && !w.shutdown_sent && w.in_flight.empty()) {
      worker::ShutdownMsg m;
      SendWithFd(w.channel.get(), &m, sizeof(m), -1);
      w.shutdown_sent = true;
    }
    if (w.dead && !w.retired && !shutting_down && now >= w.respawn_at_ns) {
      absl::Status st = Launch(w);
      if (!st.ok()) {
        spdlog::error("cannot restart worker {}: {}", w.id, st.ToString());
        w.respawn_at_ns = now + 1000000000LL;
      } else {
        started.push_back(w.id);
      }
    }
  }
  return started;
}

void WorkerPool::CountSample(uint32_t id, bool ok) {
  WorkerSlot& w = *workers_[id];
  if (ok) {
    ++w.samples_done;
  } else {
    ++w.samples_failed;
  }
}

double WorkerPool::CpuSeconds(uint32_t id) const {
  const WorkerSlot& w = *workers_[id];
  return w.dead ? 0 : launcher_->CpuSeconds(w.pid);
}

void WorkerPool::Shutdown(int64_t deadline_ms) {
  for (auto& w : workers_) {
    if (w->dead) continue;
    worker::ShutdownMsg m;
    SendWithFd(w->channel.get(), &m, sizeof(m), -1);
  }
  const int64_t deadline = clock_->NowNs() + deadline_ms * 1'000'000;
  for (auto& w : workers_) {
    if (w->dead) continue;
    while (!launcher_->TryReap(w->pid)) {
      if (clock_->NowNs() > deadline) {
        launcher_->Kill(w->pid);
        launcher_->Reap(w->pid);
        break;
      }
      ::usleep(5000);
    }
    w->dead = true;
    w->channel.Reset();
  }
}

}  // namespace stoker
