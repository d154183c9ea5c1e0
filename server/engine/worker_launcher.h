// How the worker pool starts, stops and reaps its workers: the OS seam of
// worker supervision (leveldb's Env is the model). Production is
// PosixSpawnLauncher: a stoker-worker process per worker, exec'd with
// posix_spawn. A test substitutes a launcher whose "workers" are threads in
// its own process speaking server/worker/worker_protocol.h on the same kind of
// socketpair (server/fake_worker.h), scripted to answer, fail, crash or hang.

#ifndef STOKER_SERVER_ENGINE_WORKER_LAUNCHER_H_
#define STOKER_SERVER_ENGINE_WORKER_LAUNCHER_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/posix.h"

namespace stoker {

// A started worker: its pid (a launcher's own numbering for a fake one) and
// the daemon's end of its SOCK_SEQPACKET channel (close-on-exec). The
// worker's end is worker::kChannelFd in the worker.
struct LaunchedWorker {
  pid_t pid = -1;
  UniqueFd channel;
};

// How a worker ended (what waitpid said).
struct WorkerExit {
  bool known = false;     // false: it could not be reaped (no status)
  bool signaled = false;  // killed by `signal`
  int signal = 0;
  int exit_status = 0;    // when !signaled: its exit status
};

// All calls are made by the pool under the engine's lock, one at a time;
// implementations need not be thread-safe.
class WorkerLauncher {
 public:
  virtual ~WorkerLauncher() = default;
  // Starts worker `id` (the pool's slot number).
  virtual absl::StatusOr<LaunchedWorker> Launch(uint32_t id) = 0;
  // SIGKILL (no-op for one already gone).
  virtual void Kill(pid_t pid) = 0;
  // Waits until it has ended (the caller killed it first) and says how.
  virtual WorkerExit Reap(pid_t pid) = 0;
  // Whether it has ended, without waiting (reaping it if so).
  virtual bool TryReap(pid_t pid) = 0;
  // CPU seconds (user + system) it has used; 0 when unknown.
  virtual double CpuSeconds(pid_t pid) = 0;
};

// The stoker-worker to run: `configured` (--worker-binary) if set, else
// stoker-worker beside this executable. Errors: readlink /proc/self/exe,
// or the binary not executable (PosixError naming it).
absl::StatusOr<std::string> WorkerBinaryPath(const std::string& configured);
// `name` in this executable's folder (stoker-relay beside stokerd), if it is
// executable; else the PosixError naming it.
absl::StatusOr<std::string> BesideExecutable(const std::string& name);

// Real processes: `binary` --parent <our pid> --id <id> --sandbox|--no-sandbox,
// with the channel as worker::kChannelFd, `data_root_fd` as
// worker::kDataRootFd and, unless it is -1, `transcode_cache_fd` (the
// --transcode-cache directory) as worker::kTranscodeCacheFd; both borrowed,
// they must outlive the launcher. posix_spawn clones
// vfork-style and runs no atfork handlers: safe while gRPC threads run.
class PosixSpawnLauncher : public WorkerLauncher {
 public:
  // The cache folders' fds (-1: none) are given to each worker as
  // worker::kTranscodeCacheFd and worker::kPreparedCacheFd.
  PosixSpawnLauncher(std::string binary, int data_root_fd, bool sandbox,
                     int transcode_cache_fd = -1, int volume_cache_fd = -1);
  // Flags after the usual ones for worker `id` (stoker-relay's: its node,
  // its credentials' files); set before the first Launch.
  void set_extra_args(std::function<std::vector<std::string>(uint32_t id)> f) {
    extra_args_ = std::move(f);
  }
  // A decode node's store of shipped files (borrowed, O_DIRECTORY), given
  // to each worker as worker::kShippedFilesFd; set before the first Launch.
  void set_shipped_files_fd(int fd) { shipped_files_fd_ = fd; }
  absl::StatusOr<LaunchedWorker> Launch(uint32_t id) override;
  void Kill(pid_t pid) override;
  WorkerExit Reap(pid_t pid) override;
  bool TryReap(pid_t pid) override;
  double CpuSeconds(pid_t pid) override;

 private:
  std::function<std::vector<std::string>(uint32_t)> extra_args_;
  const std::string binary_;
  const int data_root_fd_;
  const bool sandbox_;
  const int transcode_cache_fd_;
  const int prepared_cache_fd_;
  int shipped_files_fd_ = -1;
};

}  // namespace stoker

#endif  // STOKER_SERVER_ENGINE_WORKER_LAUNCHER_H_
