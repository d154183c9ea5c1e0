// Tests only: a WorkerLauncher whose workers are threads of the test process
// speaking server/worker/worker_protocol.h on a real SOCK_SEQPACKET socketpair, as
// stoker-worker does (Hello, MapRing with the ring's fd, UnmapRing, Task ->
// Result in order, Shutdown). Nothing is decoded: an answered task writes a
// recognizable pattern (FakeLauncher::PatternByte of the dataset index) over
// the output shape into the ring and reports that shape. A script decides
// each task's fate: answer, fail, crash (the thread "dies" with a signal),
// hang (until killed), or answer with a size that does not fit. The
// TaskMsg's fault field (--fault-crash-substring / --fault-hang-substring)
// is honoured as the real worker honours it (crash with SIGABRT, hang).
//
// Thread-safe: the pool calls the WorkerLauncher methods under the engine's
// lock, the fake workers run the script on their own threads, and a test
// calls the rest from its own.

#ifndef STOKER_TESTING_FAKE_LAUNCHER_H_
#define STOKER_TESTING_FAKE_LAUNCHER_H_

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/engine/worker_launcher.h"
#include "server/worker/worker_protocol.h"

namespace stoker::testing {

class FakeLauncher : public WorkerLauncher {
 public:
  enum class Act {
    kAnswer,    // write the pattern, report the output shape
    kFail,      // report failure `reason` (code INVALID_ARGUMENT)
    kCrash,     // die by `signal` without answering
    kHang,      // never answer (until killed)
    kBadSize,   // answer, with one byte more than the shape holds
  };
  struct Reply {
    Act act = Act::kAnswer;
    std::string reason = "scripted failure";
    int signal = SIGSEGV;
  };
  // What one task meets; runs on the fake worker's thread. The path is the
  // task's (relative to the data root).
  using Script = std::function<Reply(uint32_t worker, const worker::TaskMsg& task,
                                     const std::string& path)>;

  // Without a script every task is answered.
  explicit FakeLauncher(Script script = nullptr);
  ~FakeLauncher() override;  // kills and joins every worker left
  FakeLauncher(const FakeLauncher&) = delete;
  FakeLauncher& operator=(const FakeLauncher&) = delete;

  // The byte an answered task writes over its sample's output.
  static uint8_t PatternByte(uint64_t dataset_index) {
    return static_cast<uint8_t>(1 + dataset_index % 251);
  }

  // WorkerLauncher.
  absl::StatusOr<LaunchedWorker> Launch(uint32_t id) override;
  void Kill(pid_t pid) override;
  WorkerExit Reap(pid_t pid) override;
  bool TryReap(pid_t pid) override;
  double CpuSeconds(pid_t pid) override { return 0; }

  // The next `n` launches fail (UNAVAILABLE).
  void FailLaunches(int n);
  // Kills worker `id` as `kill -9` from outside would: it dies by SIGKILL,
  // and the pool did not ask for it (not hung). False when it is not running.
  bool KillFromOutside(uint32_t id);
  // Launches so far (failed ones not counted).
  int launches() const;
  // Tasks each worker received, in order (dataset indices), over all its
  // incarnations.
  std::vector<uint64_t> tasks_of(uint32_t id) const;
  // Waits until `pred()` holds, checked after each task a fake worker takes
  // and each death (true), or `timeout` passes (false).
  bool WaitFor(const std::function<bool()>& pred, std::chrono::milliseconds timeout);

 private:
  struct Proc;
  void Serve(Proc* p);
  void Died(Proc* p, const WorkerExit& e);

  const Script script_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<pid_t, std::unique_ptr<Proc>> procs_;
  std::map<uint32_t, std::vector<uint64_t>> tasks_;
  pid_t next_pid_ = 1 << 22;  // above any real pid (pid_max is at most 2^22)
  int launches_ = 0;
  int fail_launches_ = 0;
};

}  // namespace stoker::testing

#endif  // STOKER_TESTING_FAKE_LAUNCHER_H_
