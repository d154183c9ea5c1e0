#include "common/posix.h"

#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace stoker {

absl::Status PosixError(const std::string& context, int err) {
  std::string msg = absl::StrCat(context, ": ", std::strerror(err));
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(msg);
    case EACCES:
    case EPERM:
    case ELOOP:
    case EXDEV:
      return absl::PermissionDeniedError(msg);
    case EEXIST:
      return absl::AlreadyExistsError(msg);
    case ENOMEM:
    case ENOSPC:
    case EMFILE:
    case ENFILE:
      return absl::ResourceExhaustedError(msg);
    case EINVAL:
    case EISDIR:
    case ENAMETOOLONG:
      return absl::InvalidArgumentError(msg);
    case EAGAIN:
    case EINTR:
      return absl::UnavailableError(msg);
    default:
      return absl::InternalError(msg);
  }
}

void UniqueFd::Reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

void Mapping::Reset() {
  if (addr_ != nullptr) ::munmap(addr_, bytes_);
  addr_ = nullptr;
  bytes_ = 0;
}

absl::Status MapShared(int fd, uint64_t offset, uint64_t bytes, Mapping* out, bool populate,
                       uint64_t populate_bytes) {
  const bool all = populate && (populate_bytes == 0 || populate_bytes >= bytes);
  const int flags = MAP_SHARED | (all ? MAP_POPULATE : 0);
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, flags, fd, static_cast<off_t>(offset));
  if (p == MAP_FAILED) return PosixError("mmap", errno);
  *out = Mapping(p, bytes);
  if (populate && !all) {
    // The same pages again over the first part, populated this time.
    void* q = ::mmap(p, populate_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED | MAP_POPULATE,
                     fd, static_cast<off_t>(offset));
    if (q == MAP_FAILED) return PosixError("mmap", errno);
  }
  return absl::OkStatus();
}

Residency PageResidency(int fd, uint64_t offset) {
  // Not a one-byte preadv2(RWF_NOWAIT): on a miss that starts the kernel's
  // readahead of the page, which on fast storage is done before the call
  // looks again, so a cold page reads as cached. mincore starts no I/O.
  static const uint64_t kPage = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t start = offset - offset % kPage;
  void* map = ::mmap(nullptr, kPage, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(start));
  if (map == MAP_FAILED) return Residency::kUnknown;
  unsigned char resident = 0;
  const int rc = ::mincore(map, kPage, &resident);
  ::munmap(map, kPage);
  if (rc != 0) return Residency::kUnknown;
  return (resident & 1) != 0 ? Residency::kCached : Residency::kNotCached;
}

bool Cached(int fd, uint64_t offset) { return PageResidency(fd, offset) != Residency::kNotCached; }

int64_t WallNs() {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

int64_t MonotonicNs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

bool WriteAll(int fd, const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return true;
}

absl::StatusOr<size_t> ReadFullyAt(int fd, uint64_t offset, void* out, size_t bytes,
                                   const std::string& what) {
  auto* p = static_cast<char*>(out);
  size_t got = 0;
  while (got < bytes) {
    const ssize_t n = ::pread(fd, p + got, bytes - got, static_cast<off_t>(offset + got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return PosixError("reading " + what, errno);
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  return got;
}

absl::Status WriteFullyAt(int fd, uint64_t offset, const void* data, size_t bytes,
                          const std::string& what) {
  const auto* p = static_cast<const char*>(data);
  size_t put = 0;
  while (put < bytes) {
    const ssize_t n = ::pwrite(fd, p + put, bytes - put, static_cast<off_t>(offset + put));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return PosixError("writing " + what, errno);
    if (n == 0) return PosixError("writing " + what, ENOSPC);
    put += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

bool SendWithFd(int channel, const void* msg, size_t bytes, int fd) {
  struct iovec iov = {const_cast<void*>(msg), bytes};
  struct msghdr mh = {};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  if (fd >= 0) {
    std::memset(control, 0, sizeof(control));
    mh.msg_control = control;
    mh.msg_controllen = sizeof(control);
    struct cmsghdr* c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  }
  for (;;) {
    ssize_t n = ::sendmsg(channel, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n == static_cast<ssize_t>(bytes)) return true;
    if (n < 0 && errno == EINTR) continue;
    return false;
  }
}

ssize_t ReceiveWithFd(int channel, void* buf, size_t bytes, UniqueFd* passed) {
  passed->Reset();
  for (;;) {
    struct iovec iov = {buf, bytes};
    alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int))];
    struct msghdr mh = {};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = control;
    mh.msg_controllen = sizeof(control);
    ssize_t n = ::recvmsg(channel, &mh, MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return n;
    for (struct cmsghdr* c = CMSG_FIRSTHDR(&mh); c != nullptr; c = CMSG_NXTHDR(&mh, c)) {
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
        int fd = -1;
        std::memcpy(&fd, CMSG_DATA(c), sizeof(int));
        passed->Reset(fd);
      }
    }
    return n;
  }
}

}  // namespace stoker
