#include "server/worker/worker_sandbox.h"

#include <cerrno>
#include <cstring>
#include <string>

#include "server/worker/worker_protocol.h"

#ifdef STOKER_HAVE_SECCOMP
#include <seccomp.h>
#endif

namespace stoker {

#ifdef STOKER_HAVE_SECCOMP

bool WorkerSandboxAvailable() { return true; }

absl::Status ApplyWorkerSandbox() {
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ERRNO(EPERM));
  if (ctx == nullptr) return absl::InternalError("seccomp_init failed");
  // Reading files beneath the data root, talking to the daemon, memory,
  // time, signals and exit; what glibc and libjpeg-turbo use for those.
  // The caches add only the rename of a written entry into place, below,
  // within the cache's folder (openat and write are here already), and the
  // volume cache the unlink of a temporary its worker failed to fill; their
  // entries are deleted by the daemon.
  static const char* const kAllowed[] = {
      "read",          "pread64",        "preadv2",        "readv",        "write",         "writev",
      "openat",        "openat2",        "close",        "fstat",         "newfstatat",
      "statx",         "lseek",          "fcntl",        "recvmsg",       "recvfrom",
      "sendmsg",       "sendto",         "mmap",         "munmap",        "mremap",
      "mprotect",      "madvise",        "brk",          "futex",         "clock_gettime",
      "clock_nanosleep", "nanosleep",    "gettimeofday", "getpid",        "gettid",
      "getppid",       "tgkill",         "rt_sigaction", "rt_sigprocmask", "rt_sigreturn",
      "restart_syscall", "pause",        "ppoll",        "sched_yield",   "exit",
      "exit_group",    "getrandom",
      // glibc's qsort (libtiff sorts its tag tables with it) asks how much
      // memory the machine has.
      "sysinfo",
      // The volume cache's entries are written in place (write is allowed:
      // pwrite adds only the offset).
      "pwrite64",
      // ... and claimed with flock (volume_cache.h's ClaimEntry).
      "flock",
      // HDF5's H5Fopen resolves the name it is given with realpath(3)
      // (indexing a record file, records.h): link targets, no file access.
      "readlink",      "readlinkat",
      // PageResidency, for the test-only --simulate-read-latency-us: it
      // tells only whether pages of a file this worker has open are cached.
      "mincore",
  };
  for (const char* name : kAllowed) {
    int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR) continue;  // not on this architecture
    int rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 0);
    if (rc != 0) {
      seccomp_release(ctx);
      return absl::InternalError(std::string("seccomp_rule_add ") + name + ": " +
                                 std::strerror(-rc));
    }
  }
  // renameat(2) only with worker::kTranscodeCacheFd, or
  // worker::kPreparedCacheFd, as both directory fds, what the caches'
  // temp-then-rename needs; unlinkat(2) only in the volume cache's folder
  // (a worker removes the temporary of an entry it failed to write). A filter sees numbers, not
  // paths: an absolute or "../" path would still resolve elsewhere, so this
  // narrows the call, it does not confine it (openat, allowed above, can
  // already create files wherever the worker's user may).
  for (const scmp_datum_t dir : {scmp_datum_t{worker::kTranscodeCacheFd},
                                 scmp_datum_t{worker::kPreparedCacheFd}}) {
    for (const char* name : {"renameat", "renameat2"}) {
      int nr = seccomp_syscall_resolve_name(name);
      if (nr == __NR_SCMP_ERROR) continue;
      int rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 2, SCMP_A0(SCMP_CMP_EQ, dir),
                                SCMP_A2(SCMP_CMP_EQ, dir));
      if (rc != 0) {
        seccomp_release(ctx);
        return absl::InternalError(std::string("seccomp_rule_add ") + name + ": " +
                                   std::strerror(-rc));
      }
    }
  }
  {
    const int nr = seccomp_syscall_resolve_name("unlinkat");
    const int rc = nr == __NR_SCMP_ERROR
                       ? 0
                       : seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 1,
                                          SCMP_A0(SCMP_CMP_EQ, worker::kPreparedCacheFd));
    if (rc != 0) {
      seccomp_release(ctx);
      return absl::InternalError(std::string("seccomp_rule_add unlinkat: ") + std::strerror(-rc));
    }
  }
  int rc = seccomp_load(ctx);
  seccomp_release(ctx);
  if (rc != 0) return absl::InternalError(std::string("seccomp_load: ") + std::strerror(-rc));
  return absl::OkStatus();
}

#else

bool WorkerSandboxAvailable() { return false; }

absl::Status ApplyWorkerSandbox() {
  return absl::UnimplementedError("built without libseccomp");
}

#endif

}  // namespace stoker
