#include "server/ring_owner.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/numbers.h"

namespace stoker {

absl::StatusOr<std::unique_ptr<RingOwner>> RingOwner::Create(const std::string& name,
                                                             const RingSpec& spec) {
  ring::Geometry g;
  uint64_t slot_data = spec.slot_data_bytes != 0 ? spec.slot_data_bytes
                       : spec.sample_bytes != 0    ? spec.sample_bytes * spec.batch_size
                                                   : spec.variable_bytes;
  if (!ring::ComputeGeometry(spec.slot_count, spec.batch_size, slot_data, &g)) {
    return absl::InvalidArgumentError("ring sizes out of range");
  }
  auto ring = std::unique_ptr<RingOwner>(new RingOwner());
  ring->name_ = name;
  ring->geometry_ = g;
  int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, spec.mode);
  if (fd < 0) return PosixError("shm_open " + name, errno);
  ring->fd_.Reset(fd);
  ::fchmod(fd, spec.mode);  // shm_open's mode is filtered by the umask
  const uint32_t depth = spec.depth == 0 ? spec.slot_count : spec.depth;
  if (depth > spec.slot_count) return absl::InvalidArgumentError("ring depth over its slots");
  // posix_fallocate reserves the pages now, so a full /dev/shm fails here
  // with ENOSPC instead of killing a worker with SIGBUS later. The slots
  // beyond the depth stay a hole until Commit.
  const uint64_t reserve = g.data_offset + g.slot_bytes * depth;
  int rc = ::ftruncate(fd, static_cast<off_t>(g.total_bytes)) == 0
               ? ::posix_fallocate(fd, 0, static_cast<off_t>(reserve))
               : errno;
  if (rc != 0) {
    ::shm_unlink(name.c_str());
    return PosixError(absl::StrCat("reserving ", reserve, " bytes of /dev/shm for ", name), rc);
  }
  ring->committed_slots_ = depth;
  absl::Status st = MapShared(fd, 0, g.total_bytes, &ring->map_);
  if (!st.ok()) {
    ::shm_unlink(name.c_str());
    return st;
  }
  ring->map_.WatchTruncation();
  auto* h = ring->header();
  h->version = ring::kLayoutVersion;
  h->header_bytes = ring::kHeaderBytes;
  h->total_bytes = g.total_bytes;
  h->descriptor_offset = g.descriptor_offset;
  h->descriptor_stride = g.descriptor_stride;
  h->data_offset = g.data_offset;
  h->slot_bytes = g.slot_bytes;
  h->slot_count = spec.slot_count;
  h->batch_size = spec.batch_size;
  h->height = spec.height;
  h->width = spec.width;
  h->channels = spec.channels;
  h->dtype = spec.dtype;
  h->layout = spec.layout;
  h->sample_bytes = spec.sample_bytes;
  h->session_number = spec.session_number;
  h->batches_per_epoch = spec.batches_per_epoch;
  h->total_batches = spec.total_batches;
  h->mask_dtype = spec.mask_dtype;
  h->mask_offset = spec.mask_offset;
  h->mask_sample_bytes = spec.mask_sample_bytes;
  h->box_stride = spec.box_stride;
  h->box_offset = spec.boxes.xyxy;
  h->box_label_offset = spec.boxes.labels;
  h->box_flag_offset = spec.boxes.flags;
  h->daemon_state.store(ring::kRunning);
  h->daemon_heartbeat.store(1);
  h->depth.store(ring::PackDepth(0, depth, depth));
  for (uint32_t s = 0; s < spec.slot_count; ++s) {
    ring->descriptor(s)->state.store(ring::kFree);
  }
  // The magic goes last: a reader that sees it sees a complete header.
  std::atomic_thread_fence(std::memory_order_release);
  h->magic = ring::kMagic;
  return ring;
}

absl::Status RingOwner::Commit(uint32_t slots) {
  const uint32_t count = header()->slot_count;
  if (slots > count) {
    return absl::InvalidArgumentError(absl::StrCat("ring ", name_, " has ", count, " slots, not ", slots));
  }
  if (slots <= committed_slots_) return absl::OkStatus();
  const uint64_t from = committed_bytes();
  const uint64_t len = geometry_.slot_bytes * (slots - committed_slots_);
  int rc = ::posix_fallocate(fd_.get(), static_cast<off_t>(from), static_cast<off_t>(len));
  if (rc != 0) {
    return PosixError(absl::StrCat("reserving ", len, " more bytes of /dev/shm for ", name_), rc);
  }
  committed_slots_ = slots;
  return absl::OkStatus();
}

bool RingOwner::Truncated() const {
  if (map_.truncated()) return true;
  struct stat st;
  return ::fstat(fd_.get(), &st) == 0 && static_cast<uint64_t>(st.st_size) < geometry_.total_bytes;
}

RingOwner::~RingOwner() {
  if (!name_.empty() && fd_.valid()) ::shm_unlink(name_.c_str());
}

int SweepStaleRings(const std::string& tag) {
  const std::string prefix = absl::StrCat("stoker-", tag, "-");
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr) return 0;
  int removed = 0;
  const uid_t uid = ::getuid();
  while (struct dirent* e = ::readdir(dir)) {
    const std::string n = e->d_name;
    if (n.compare(0, prefix.size(), prefix) != 0) continue;
    // The rest is "<pid>-<session>".
    int pid = 0;
    const std::string rest = n.substr(prefix.size());
    if (!absl::SimpleAtoi(rest.substr(0, rest.find('-')), &pid)) continue;
    struct stat st;
    if (::fstatat(::dirfd(dir), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || st.st_uid != uid) {
      continue;
    }
    bool alive = pid != ::getpid() && (::kill(pid, 0) == 0 || errno == EPERM);
    if (alive) continue;
    if (::shm_unlink(absl::StrCat("/", n).c_str()) == 0) ++removed;
  }
  ::closedir(dir);
  return removed;
}

}  // namespace stoker
