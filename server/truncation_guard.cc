#include "server/truncation_guard.h"

#include <signal.h>
#include <sys/mman.h>

#include <atomic>
#include <cstdint>
#include <mutex>

namespace stoker::truncation_guard {
namespace {

// Read by the signal handler: lock-free atomics only. A slot is in use while
// `begin` is non-zero; Watch stores `bytes` before `begin`, Forget clears
// `begin` first.
struct Range {
  std::atomic<uintptr_t> begin{0};
  std::atomic<size_t> bytes{0};
  std::atomic<bool> lost{false};
  std::atomic<bool> taken{false};
};
static_assert(std::atomic<uintptr_t>::is_always_lock_free);
static_assert(std::atomic<bool>::is_always_lock_free);

Range g_ranges[kMaxWatched];
struct sigaction g_previous;
std::once_flag g_installed;

void OnSigbus(int sig, siginfo_t* info, void* context) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(info->si_addr);
  // Only a fault (si_code > 0) has an address; a SIGBUS sent by kill() or
  // tgkill() goes straight to the previous action.
  const bool fault = info->si_code > 0;
  for (Range& r : g_ranges) {
    if (!fault) break;
    const uintptr_t begin = r.begin.load(std::memory_order_acquire);
    if (begin == 0 || at < begin || at - begin >= r.bytes.load(std::memory_order_relaxed)) {
      continue;
    }
    // mmap is a plain system call, safe in a handler. Zero pages over the
    // whole range: later accesses to it fault no more.
    void* p = ::mmap(reinterpret_cast<void*>(begin), r.bytes.load(std::memory_order_relaxed),
                     PROT_READ | PROT_WRITE,
                     MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p != MAP_FAILED) {
      r.lost.store(true, std::memory_order_release);
      return;  // the access is retried, now on the private pages
    }
    break;
  }
  // Not a watched range: what would have happened without us.
  if ((g_previous.sa_flags & SA_SIGINFO) != 0 && g_previous.sa_sigaction != nullptr) {
    g_previous.sa_sigaction(sig, info, context);
    return;
  }
  if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    g_previous.sa_handler(sig);
    return;
  }
  // Default: the process dies of SIGBUS, as it would have. (raise() pends
  // while this handler runs; a fault would also repeat on return.)
  ::signal(SIGBUS, SIG_DFL);
  ::raise(SIGBUS);
}

}  // namespace

void Install() {
  std::call_once(g_installed, [] {
    struct sigaction sa = {};
    sa.sa_sigaction = OnSigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGBUS, &sa, &g_previous);
  });
}

int Watch(void* addr, size_t bytes) {
  if (addr == nullptr || bytes == 0) return -1;
  for (int i = 0; i < kMaxWatched; ++i) {
    bool expected = false;
    if (!g_ranges[i].taken.compare_exchange_strong(expected, true)) continue;
    g_ranges[i].lost.store(false, std::memory_order_relaxed);
    g_ranges[i].bytes.store(bytes, std::memory_order_relaxed);
    g_ranges[i].begin.store(reinterpret_cast<uintptr_t>(addr), std::memory_order_release);
    return i;
  }
  return -1;
}

void Forget(int handle) {
  if (handle < 0 || handle >= kMaxWatched) return;
  g_ranges[handle].begin.store(0, std::memory_order_release);
  g_ranges[handle].taken.store(false, std::memory_order_release);
}

bool Lost(int handle) {
  if (handle < 0 || handle >= kMaxWatched) return false;
  return g_ranges[handle].lost.load(std::memory_order_acquire);
}

}  // namespace stoker::truncation_guard
