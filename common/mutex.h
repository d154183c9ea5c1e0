// A mutex, its scoped lock and a condition variable that clang's
// -Wthread-safety analysis understands (scripts/thread-safety.sh), for code
// that cannot use absl::Mutex: the client's CUDA copier is also built by nvcc
// alone (scripts/gpu-check.sh), with no absl. Header-only, standard library
// only; under GCC the annotations compile to nothing.
//
//   Mutex mu_;
//   int n_ STOKER_GUARDED_BY(mu_);
//   void Add() STOKER_EXCLUDES(mu_) { MutexLock l(&mu_); ++n_; cv_.NotifyAll(); }
//   void WaitPositive() { MutexLock l(&mu_); while (n_ <= 0) cv_.Wait(&mu_); }
//
// Conditions are loops around CondVar::Wait (not predicate lambdas, which the
// analysis reads as code without the lock).

#ifndef STOKER_COMMON_MUTEX_H_
#define STOKER_COMMON_MUTEX_H_

#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define STOKER_TSA(x) __attribute__((x))
#else
#define STOKER_TSA(x)
#endif

#define STOKER_CAPABILITY(x) STOKER_TSA(capability(x))
#define STOKER_SCOPED_CAPABILITY STOKER_TSA(scoped_lockable)
#define STOKER_GUARDED_BY(x) STOKER_TSA(guarded_by(x))
#define STOKER_REQUIRES(...) STOKER_TSA(requires_capability(__VA_ARGS__))
#define STOKER_ACQUIRE(...) STOKER_TSA(acquire_capability(__VA_ARGS__))
#define STOKER_RELEASE(...) STOKER_TSA(release_capability(__VA_ARGS__))
#define STOKER_EXCLUDES(...) STOKER_TSA(locks_excluded(__VA_ARGS__))

namespace stoker {

class STOKER_CAPABILITY("mutex") Mutex {
 public:
  void lock() STOKER_ACQUIRE() { mu_.lock(); }
  void unlock() STOKER_RELEASE() { mu_.unlock(); }

 private:
  std::mutex mu_;
};

// Holds a Mutex for its scope.
class STOKER_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) STOKER_ACQUIRE(mu) : mu_(mu) { mu_->lock(); }
  ~MutexLock() STOKER_RELEASE() { mu_->unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

// Waits release the Mutex held by the caller and hold it again on return
// (spurious wake-ups included: wait in a loop on the condition).
class CondVar {
 public:
  void Wait(Mutex* mu) STOKER_REQUIRES(mu) { cv_.wait(*mu); }
  void NotifyOne() { cv_.notify_one(); }
  void NotifyAll() { cv_.notify_all(); }

 private:
  std::condition_variable_any cv_;
};

}  // namespace stoker

#endif  // STOKER_COMMON_MUTEX_H_
