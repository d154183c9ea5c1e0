// The worker as a library: what one stoker-worker process does, with its
// file descriptors given, so that tests run it on a thread against a
// socketpair, a memfd ring and a scratch data root (worker_test.cc), and
// worker_main.cc is only the process's set-up.
//
// Serve speaks worker_protocol.h on `channel`: it sends kHello, then handles
// the daemon's messages strictly in order until the channel closes or
// kShutdown:
//   kMapRing    maps the ring's data area (the fd that came with it)
//   kUnmapRing  unmaps it
//   kTask       opens the file beneath `data_root` (never outside it), reads
//               it (or its transcode cache copy), decodes and augments it
//               straight into the ring, moves its mask and boxes, and sends
//               one kResult; a failed sample is a kResult with a code and a
//               reason, never a dead worker
// Tasks carry fault injections for tests (kFaultCrash aborts the process,
// kFaultHang pauses it): a test thread must not send them.
//
// Thread safety: one Serve per channel; it owns every buffer it uses.

#ifndef STOKER_SERVER_WORKER_WORKER_H_
#define STOKER_SERVER_WORKER_WORKER_H_

namespace stoker::worker {

struct WorkerFds {
  int channel = -1;          // SOCK_SEQPACKET: the worker's end of its socketpair
  int data_root = -1;        // O_DIRECTORY: every file is opened beneath it
  int transcode_cache = -1;  // O_DIRECTORY of the transcode cache; -1: none
  int prepared_cache = -1;   // O_DIRECTORY of the prepared cache; -1: none
  int shipped_files = -1;    // O_DIRECTORY of a decode node's shipped files; -1: none
};

// Serves until the daemon is done. Returns the process's exit status: 0
// when the channel closed or kShutdown came, 1 when a send failed, 2 on a
// message out of protocol, 3 when a ring could not be mapped.
int Serve(const WorkerFds& fds);

}  // namespace stoker::worker

#endif  // STOKER_SERVER_WORKER_WORKER_H_
