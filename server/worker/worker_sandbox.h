// Confines a worker process once it is set up: a seccomp filter that allows
// what reading, decoding and answering need. Any other system call fails
// with EPERM (it does not kill the process: a call we did not foresee must
// fail one sample, not crash-loop a worker).

#ifndef STOKER_SERVER_WORKER_WORKER_SANDBOX_H_
#define STOKER_SERVER_WORKER_WORKER_SANDBOX_H_

#include "absl/status/status.h"

namespace stoker {

// True when this build can install the filter (libseccomp was found).
bool WorkerSandboxAvailable();

// Installs the filter on the calling process (all threads). Needs
// PR_SET_NO_NEW_PRIVS set first.
[[nodiscard]] absl::Status ApplyWorkerSandbox();

}  // namespace stoker

#endif  // STOKER_SERVER_WORKER_WORKER_SANDBOX_H_
