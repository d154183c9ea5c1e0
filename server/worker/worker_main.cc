// stoker-worker: one decode/augment process of stokerd (worker.h). Started
// by the daemon with exec (never forked from it), its channel at fd 3, the
// data root at fd 4 and the transcode cache's directory, if any, at fd 5
// (worker_protocol.h); here only the process is set up.

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "server/image/decode/decode_memory.h"
#include "server/worker/worker.h"
#include "server/worker/worker_protocol.h"
#include "server/worker/worker_sandbox.h"

int main(int argc, char** argv) {
  // Die with the daemon; exit at once if it died before this line.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  bool sandbox = true;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--parent") == 0 && i + 1 < argc &&
        ::getppid() != std::atoi(argv[i + 1])) {
      return 1;
    }
    if (std::strcmp(argv[i], "--no-sandbox") == 0) sandbox = false;
  }
  ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
  ::signal(SIGPIPE, SIG_IGN);
  stoker::image::KeepDecoderMemory();
  // A crashing worker is replaced; a core file of it helps no one.
  struct rlimit no_core = {0, 0};
  ::setrlimit(RLIMIT_CORE, &no_core);
  // The transcode cache's fd is there only when the daemon has a cache.
  const int cache = ::fcntl(stoker::worker::kTranscodeCacheFd, F_GETFD) >= 0
                        ? stoker::worker::kTranscodeCacheFd
                        : -1;
  const int volumes = ::fcntl(stoker::worker::kPreparedCacheFd, F_GETFD) >= 0
                          ? stoker::worker::kPreparedCacheFd
                          : -1;
  const int shipped = ::fcntl(stoker::worker::kShippedFilesFd, F_GETFD) >= 0
                          ? stoker::worker::kShippedFilesFd
                          : -1;
  if (sandbox && stoker::WorkerSandboxAvailable()) {
    absl::Status st = stoker::ApplyWorkerSandbox();
    if (!st.ok()) {
      std::fprintf(stderr, "stoker-worker: %s\n", std::string(st.message()).c_str());
      return 4;
    }
  }
  return stoker::worker::Serve(
      {stoker::worker::kChannelFd, stoker::worker::kDataRootFd, cache, volumes, shipped});
}
