// Small RAII owners for POSIX resources and the one place errno becomes a
// Status.

#ifndef STOKER_COMMON_POSIX_H_
#define STOKER_COMMON_POSIX_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace stoker {

// A Status for a failed system call: the code follows errno (ENOENT ->
// NOT_FOUND, EACCES -> PERMISSION_DENIED, ...), the message is
// "<context>: <strerror>".
absl::Status PosixError(const std::string& context, int err);

// Owns a file descriptor; closes it on destruction.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { Reset(); }
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.Release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) Reset(o.Release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int Release() { return std::exchange(fd_, -1); }
  void Reset(int fd = -1);

 private:
  int fd_ = -1;
};

// Owns a memory mapping; unmaps it on destruction.
class Mapping {
 public:
  Mapping() = default;
  Mapping(void* addr, size_t bytes) : addr_(addr), bytes_(bytes) {}
  ~Mapping() { Reset(); }
  Mapping(Mapping&& o) noexcept
      : addr_(std::exchange(o.addr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  Mapping& operator=(Mapping&& o) noexcept {
    if (this != &o) {
      Reset();
      addr_ = std::exchange(o.addr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  void* addr() const { return addr_; }
  size_t bytes() const { return bytes_; }
  void Reset();

 private:
  void* addr_ = nullptr;
  size_t bytes_ = 0;
};

// mmap(fd, offset, bytes) shared, read-write. `populate`: fault in the
// first `populate_bytes` now (all when 0), MAP_POPULATE: a ring's slots
// beyond its depth are holes in its memory, and faulting them in would
// allocate them.
absl::Status MapShared(int fd, uint64_t offset, uint64_t bytes, Mapping* out,
                       bool populate = false, uint64_t populate_bytes = 0);

// Monotonic clock in nanoseconds / milliseconds.
// One message over a SOCK_SEQPACKET socket, with an fd as SCM_RIGHTS
// ancillary data (the daemon <-> worker channel, server/worker/worker_protocol.h).
// SendWithFd: never blocks (MSG_DONTWAIT) nor raises SIGPIPE; fd < 0 sends
// none; false unless the whole message went. ReceiveWithFd: blocks; the
// bytes received (0 at the peer's end, < 0 on error; EINTR retried), and
// *passed owns the fd that came with it (invalid if none).
bool SendWithFd(int channel, const void* msg, size_t bytes, int fd);
ssize_t ReceiveWithFd(int channel, void* buf, size_t bytes, UniqueFd* passed);

// Writes all `bytes` to `fd`, retrying short writes and EINTR; false (errno
// set) on an error or a write that made no progress.
[[nodiscard]] bool WriteAll(int fd, const void* data, size_t bytes);

// Reads up to `bytes` at `offset` of `fd` into `out`, retrying short reads
// and EINTR: the bytes read (fewer only at the end of the file), or the
// errno's status naming `what`.
absl::StatusOr<size_t> ReadFullyAt(int fd, uint64_t offset, void* out, size_t bytes,
                                   const std::string& what);
// Writes all `bytes` of `data` at `offset` of `fd`, retrying short writes
// and EINTR; the errno's status naming `what` (ENOSPC for a write of 0).
absl::Status WriteFullyAt(int fd, uint64_t offset, const void* data, size_t bytes,
                          const std::string& what);

int64_t MonotonicNs();
// Whether the page holding byte `offset` of `fd` is in the page cache, asked
// with mincore(2) on a one-page mapping, which reads nothing and so starts no
// readahead; kUnknown where the file cannot be mapped (some file systems) or
// mincore fails.
enum class Residency { kCached, kNotCached, kUnknown };
Residency PageResidency(int fd, uint64_t offset);
// PageResidency(...) != kNotCached: true when it cannot be told.
bool Cached(int fd, uint64_t offset);

// CLOCK_REALTIME in ns (file times are on this clock).
int64_t WallNs();
inline int64_t MonotonicMs() { return MonotonicNs() / 1000000; }

}  // namespace stoker

#endif  // STOKER_COMMON_POSIX_H_
