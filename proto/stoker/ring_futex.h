// Waiting on the ring's futex words across processes (see ring_layout.h).
// Shared (not private) futexes: the words live in a MAP_SHARED mapping that
// the daemon and the client each map at their own address.

#ifndef STOKER_PROTO_RING_FUTEX_H_
#define STOKER_PROTO_RING_FUTEX_H_

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>

namespace stoker::ring {

// Sleeps while `*word == expected`, at most `timeout_ms`. Returns when woken,
// when the value differs, on a signal or on timeout; the caller re-reads the
// word and its deadline. Never spins.
inline void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, int64_t timeout_ms) {
  struct timespec ts;
  ts.tv_sec = timeout_ms / 1000;
  ts.tv_nsec = (timeout_ms % 1000) * 1000000;
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

// Wakes every waiter on `word`.
inline void FutexWakeAll(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

}  // namespace stoker::ring

#endif  // STOKER_PROTO_RING_FUTEX_H_
