// Shared memory that another process may shrink under us.
//
// A session's ring is written by stokerd and its workers, but the trainer
// maps the same object and can ftruncate it: by a bug, or with intent where
// --shm-mode 0660 lets a group share the daemon. A load or store into a page
// past the new end raises SIGBUS, which would kill stokerd and every session
// with it (or kill a worker, and count a crash against a good file).
//
// A watched range turns that fault into a flag. The process's SIGBUS handler
// maps private zero pages over the whole range, so the faulting access
// completes there, harmlessly, and marks the range lost; its owner checks
// Lost() and ends the session. A SIGBUS anywhere else keeps the action it had
// (a handler installed before Install() is called, else the default).

#ifndef STOKER_SERVER_TRUNCATION_GUARD_H_
#define STOKER_SERVER_TRUNCATION_GUARD_H_

#include <cstddef>

namespace stoker::truncation_guard {

// Installs the SIGBUS handler; once per process, later calls do nothing.
void Install();

// Starts watching [addr, addr + bytes). Returns a handle, or -1 when the
// table (kMaxWatched ranges) is full: the range is then unwatched.
inline constexpr int kMaxWatched = 1024;
int Watch(void* addr, size_t bytes);

// Stops watching (before the range is unmapped). -1 is ignored.
void Forget(int handle);

// Whether a fault in the range was absorbed since Watch.
bool Lost(int handle);

}  // namespace stoker::truncation_guard

#endif  // STOKER_SERVER_TRUNCATION_GUARD_H_
