#include "testing/fake_launcher.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "common/posix.h"
#include "stoker/ring_layout.h"

namespace stoker::testing {

struct FakeLauncher::Proc {
  uint32_t id = 0;
  pid_t pid = -1;
  int fd = -1;          // the worker's end; closed by its thread as it ends
  bool killed = false;  // SIGKILL was asked for
  bool done = false;    // its thread has ended (exit says how)
  WorkerExit exit;
  std::thread thread;
};

namespace {

WorkerExit Signaled(int sig) {
  WorkerExit e;
  e.known = true;
  e.signaled = true;
  e.signal = sig;
  return e;
}

WorkerExit Exited(int status) {
  WorkerExit e;
  e.known = true;
  e.exit_status = status;
  return e;
}

}  // namespace

FakeLauncher::FakeLauncher(Script script) : script_(std::move(script)) {}

FakeLauncher::~FakeLauncher() {
  std::vector<pid_t> pids;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& [pid, p] : procs_) pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    Kill(pid);
    Reap(pid);
  }
}

absl::StatusOr<LaunchedWorker> FakeLauncher::Launch(uint32_t id) {
  std::lock_guard<std::mutex> l(mu_);
  if (fail_launches_ > 0) {
    --fail_launches_;
    return absl::UnavailableError("fake launch failure");
  }
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    return PosixError("socketpair", errno);
  }
  auto p = std::make_unique<Proc>();
  p->id = id;
  p->pid = next_pid_++;
  p->fd = sv[1];
  Proc* raw = p.get();
  procs_[p->pid] = std::move(p);
  raw->thread = std::thread([this, raw] { Serve(raw); });
  ++launches_;
  LaunchedWorker w;
  w.pid = raw->pid;
  w.channel = UniqueFd(sv[0]);
  return w;
}

void FakeLauncher::Kill(pid_t pid) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = procs_.find(pid);
  if (it == procs_.end() || it->second->done) return;
  Proc& p = *it->second;
  p.killed = true;
  if (p.fd >= 0) ::shutdown(p.fd, SHUT_RDWR);
  cv_.notify_all();
}

WorkerExit FakeLauncher::Reap(pid_t pid) {
  Proc* p = nullptr;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = procs_.find(pid);
    if (it == procs_.end()) return WorkerExit{};
    p = it->second.get();
  }
  p->thread.join();
  std::lock_guard<std::mutex> l(mu_);
  WorkerExit e = p->exit;
  procs_.erase(pid);
  return e;
}

bool FakeLauncher::TryReap(pid_t pid) {
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = procs_.find(pid);
    if (it == procs_.end()) return true;
    if (!it->second->done) return false;
  }
  Reap(pid);
  return true;
}

void FakeLauncher::FailLaunches(int n) {
  std::lock_guard<std::mutex> l(mu_);
  fail_launches_ = n;
}

bool FakeLauncher::KillFromOutside(uint32_t id) {
  pid_t pid = -1;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& [k, p] : procs_) {
      if (p->id == id && !p->done) pid = k;
    }
  }
  if (pid < 0) return false;
  Kill(pid);
  return true;
}

int FakeLauncher::launches() const {
  std::lock_guard<std::mutex> l(mu_);
  return launches_;
}

std::vector<uint64_t> FakeLauncher::tasks_of(uint32_t id) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = tasks_.find(id);
  return it == tasks_.end() ? std::vector<uint64_t>() : it->second;
}

bool FakeLauncher::WaitFor(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    l.unlock();
    if (pred()) return true;
    l.lock();
    if (std::chrono::steady_clock::now() >= deadline) return false;
    // Also polled: what `pred` watches may change outside this launcher.
    cv_.wait_for(l, std::chrono::milliseconds(10));
  }
}

void FakeLauncher::Died(Proc* p, const WorkerExit& e) {
  std::lock_guard<std::mutex> l(mu_);
  if (p->fd >= 0) ::close(p->fd);
  p->fd = -1;
  p->exit = p->killed && !(e.known && e.signaled && e.signal != SIGKILL) ? Signaled(SIGKILL) : e;
  p->done = true;
  cv_.notify_all();
}

void FakeLauncher::Serve(Proc* p) {
  int fd;
  {
    std::lock_guard<std::mutex> l(mu_);
    fd = p->fd;
  }
  worker::HelloMsg hello;
  hello.pid = p->pid;
  ::send(fd, &hello, sizeof(hello), MSG_NOSIGNAL);
  std::map<uint64_t, Mapping> rings;
  auto buf = std::make_unique<worker::TaskMsg>();
  char* raw = reinterpret_cast<char*>(buf.get());
  for (;;) {
    UniqueFd owned_fd;
    const ssize_t n = ReceiveWithFd(fd, raw, sizeof(worker::TaskMsg), &owned_fd);
    if (n <= 0) return Died(p, Exited(0));  // the daemon is gone, or we were killed
    uint32_t type;
    std::memcpy(&type, raw, sizeof(type));
    if (type == worker::kMapRing) {
      worker::MapRingMsg m;
      std::memcpy(&m, raw, sizeof(m));
      Mapping map;
      if (!MapShared(owned_fd.get(), m.data_offset, m.data_bytes, &map).ok()) {
        return Died(p, Exited(3));
      }
      rings[m.ring_id] = std::move(map);
      continue;
    }
    if (type == worker::kUnmapRing) {
      worker::UnmapRingMsg m;
      std::memcpy(&m, raw, sizeof(m));
      rings.erase(m.ring_id);
      continue;
    }
    if (type == worker::kShutdown) return Died(p, Exited(0));
    if (type != worker::kTask) return Died(p, Exited(2));
    const worker::TaskMsg& t = *buf;
    const std::string path(t.path, t.path_bytes);
    {
      std::lock_guard<std::mutex> l(mu_);
      tasks_[p->id].push_back(t.key.dataset_index);
      cv_.notify_all();
    }
    Reply reply = script_ ? script_(p->id, t, path) : Reply();
    if (t.fault == worker::kFaultCrash) reply = Reply{Act::kCrash, "", SIGABRT};
    if (t.fault == worker::kFaultHang) reply.act = Act::kHang;
    if (reply.act == Act::kCrash) return Died(p, Signaled(reply.signal));
    if (reply.act == Act::kHang) {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [p] { return p->killed; });
      l.unlock();
      return Died(p, Signaled(SIGKILL));
    }
    worker::ResultMsg r{};
    r.task_id = t.task_id;
    if (reply.act == Act::kFail) {
      r.code = static_cast<uint32_t>(absl::StatusCode::kInvalidArgument);
      std::snprintf(r.reason, sizeof(r.reason), "%s", reply.reason.c_str());
    } else {
      const uint32_t h = t.params.out_height != 0 ? t.params.out_height : 4;
      const uint32_t w = t.params.out_width != 0 ? t.params.out_width : 4;
      const uint64_t bytes = uint64_t{h} * w * 3 * ring::DTypeBytes(t.params.dtype);
      auto it = rings.find(t.ring_id);
      if (it == rings.end() || bytes > t.out_capacity ||
          t.out_offset + bytes > it->second.bytes()) {
        r.code = static_cast<uint32_t>(absl::StatusCode::kInternal);
        std::snprintf(r.reason, sizeof(r.reason), "task names memory outside its ring");
      } else {
        std::memset(static_cast<uint8_t*>(it->second.addr()) + t.out_offset,
                    PatternByte(t.key.dataset_index), bytes);
        r.height = h;
        r.width = w;
        r.channels = 3;
        r.bytes = bytes + (reply.act == Act::kBadSize ? 1 : 0);
      }
    }
    if (::send(fd, &r, sizeof(r), MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof(r))) {
      return Died(p, Exited(1));
    }
  }
}

}  // namespace stoker::testing
