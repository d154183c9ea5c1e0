// The daemon's configuration: one struct, filled from flags, exported as
// JSON by Status. 0 / empty means the default named in the comment.

#ifndef STOKER_SERVER_CONTROL_CONFIG_H_
#define STOKER_SERVER_CONTROL_CONFIG_H_

#include <cstdint>
#include <string>

namespace stoker {

struct DaemonConfig {
  // gRPC Unix socket path. Created mode 0600 (see socket_mode).
  std::string socket_path;
  // Optional TCP address (HOST:PORT) serving Status, Watch and health only.
  std::string status_addr;
  // Optional HOST:PORT serving Prometheus metrics at /metrics over HTTP
  // (server/control/metrics.h). Empty: none.
  std::string metrics_addr;
  // Every dataset and file must lie beneath this directory.
  std::string data_root;
  // Where dataset indexes are cached (see IndexOptions). Empty: none.
  std::string index_cache;
  // The transcode cache's folder (server/engine/transcode_cache.h): baseline copies
  // of the progressive files read. Empty: none. Created 0700. stokerd's
  // default: the user's cache folder (main.cc).
  std::string transcode_cache;
  // The bytes its copies may take at most. 0: 4 GiB, and at most a quarter
  // of its file system's free space when the daemon starts.
  uint64_t transcode_cache_bytes = 0;
  // Decode/augment worker processes. 0: auto (server/engine/autotuner.h): from 1,
  // grown while a trainer waits for data and it helps, shrunk when the
  // workers idle, within the CPU budget less the trainers' reserve.
  uint32_t workers = 0;
  // Auto only: the most workers (0: no cap beyond the budget).
  uint32_t workers_max = 0;
  // Auto only: CPUs left to the trainers. <0: 1 per attached trainer
  // process (sessions' distinct client pids).
  double reserve_cpus = -1;
  // The CPUs the daemon may use. 0: read from the cgroup and the affinity
  // mask (server/engine/cpu_budget.h), again every 10 s.
  double cpu_budget = 0;
  // The worker executable. Empty: stoker-worker beside stokerd.
  std::string worker_binary;
  // Permission bits of the socket and of the ring socket beside it (rings
  // are memfds, handed only to the client that attached: no bits of their own).
  uint32_t socket_mode = 0600;
  // Attached sessions at most.
  uint32_t max_sessions = 64;
  // Bytes of shared memory one session's ring may take (4 GiB).
  uint64_t max_ring_bytes = 4ull << 30;
  // Bytes of memory all sessions' rings may take together. 0: half the
  // memory available when the daemon starts (common/memory_available.h).
  uint64_t shm_budget_bytes = 0;
  // Tasks sent to a worker before its results come back (hides the
  // round-trip; each is redone if the worker dies).
  uint32_t worker_queue_depth = 2;
  // A worker that holds a task longer than this is killed and replaced.
  uint32_t task_timeout_ms = 30000;
  // A session whose KeepAlive stream is not open for this long is reclaimed.
  uint32_t keepalive_grace_ms = 10000;
  // A client declares the daemon dead after this long without a heartbeat.
  uint32_t heartbeat_timeout_ms = 3000;
  // Readahead (server/engine/prefetch.h): I/O threads, and the bytes they may read
  // ahead of the workers. 0 threads or 0 bytes: off.
  uint32_t io_threads = 16;
  uint64_t readahead_bytes = 64ull << 20;
  // Benchmarks and tests only: a read of data not in the page cache first
  // sleeps this long, in the workers and in readahead (a slow disk). 0: off.
  uint32_t simulate_read_latency_us = 0;
  // Input files larger than this fail as samples (256 MiB).
  uint64_t max_file_bytes = 256ull << 20;
  // On SIGTERM, wait at most this long for in-flight samples.
  uint32_t drain_timeout_ms = 5000;
  // Time the decode at each DCT scale once at start-up and never choose a
  // scale that decodes slower than a larger one (server/image/
  // decode_planner.h). Off: no measurement, every scale allowed.
  bool decode_calibration = true;
  // Workers run under a seccomp filter (when built with libseccomp).
  bool worker_sandbox = true;
  // Logging: trace, debug, info, warn, error; JSON lines when log_json.
  std::string log_level = "info";
  bool log_json = false;
  // A private daemon (one a trainer started for itself): drain and exit
  // once this process is no longer our parent. 0: off.
  int64_t parent_pid = 0;
  // Tests only: a worker given a file whose path contains this crashes
  // (abort) or hangs, to exercise supervision. Empty: off.
  std::string fault_crash_substring;
  std::string fault_hang_substring;

  std::string ToJson() const;
};

}  // namespace stoker

#endif  // STOKER_SERVER_CONTROL_CONFIG_H_
