#include "server/engine/ring_owner.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/numbers.h"

namespace stoker {

absl::StatusOr<std::unique_ptr<RingOwner>> RingOwner::Create(const std::string& name,
                                                             const RingSpec& spec) {
  ring::Geometry g;
  std::vector<ring::FieldSpec> fields = spec.fields;
  const auto field_count = static_cast<uint32_t>(fields.size());
  uint64_t slot_data = 0;
  if (!ring::LayoutFields(fields.data(), field_count, spec.batch_size, &slot_data) ||
      !ring::ComputeGeometry(spec.slot_count, spec.batch_size, field_count, slot_data, &g)) {
    return absl::InvalidArgumentError("ring sizes out of range");
  }
  for (size_t k = 0; k < fields.size(); ++k) {
    const ring::FieldSpec& f = fields[k];
    if (const char* why = ring::ValidateField(f, spec.batch_size, g.slot_bytes)) {
      return absl::InvalidArgumentError(
          absl::StrCat("ring field '", std::string(ring::FieldName(f)), "': ", why));
    }
    // The workers write where the plan laid the fields out; the header
    // must say the same.
    if (spec.fields[k].offset != 0 && spec.fields[k].offset != f.offset) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ring field '", std::string(ring::FieldName(f)), "' planned at ",
          spec.fields[k].offset, ", laid out at ", f.offset));
    }
  }
  auto ring = std::unique_ptr<RingOwner>(new RingOwner());
  ring->name_ = "memfd:" + name;
  ring->geometry_ = g;
  ring->fields_ = fields;
  int fd = ::memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return PosixError("memfd_create " + name, errno);
  ring->fd_.Reset(fd);
  const uint32_t depth = spec.depth == 0 ? spec.slot_count : spec.depth;
  if (depth > spec.slot_count) return absl::InvalidArgumentError("ring depth over its slots");
  // posix_fallocate reserves the pages now, so a lack of memory fails here
  // with ENOSPC instead of killing a worker with SIGBUS later. The slots
  // beyond the depth stay a hole until Commit. The seals keep anyone
  // holding the fd (the client maps it read-write) from cutting it short.
  const uint64_t reserve = g.data_offset + g.slot_bytes * depth;
  int rc = ::ftruncate(fd, static_cast<off_t>(g.total_bytes)) == 0 &&
                   ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0
               ? ::posix_fallocate(fd, 0, static_cast<off_t>(reserve))
               : errno;
  if (rc != 0) {
    return PosixError(absl::StrCat("reserving ", reserve, " bytes of shared memory for ", name),
                      rc);
  }
  ring->committed_slots_ = depth;
  absl::Status st = MapShared(fd, 0, g.total_bytes, &ring->map_);
  if (!st.ok()) return st;
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
  h->field_count = field_count;
  h->layout = spec.layout;
  std::copy(fields.begin(), fields.end(), h->fields);
  h->session_number = spec.session_number;
  h->batches_per_epoch = spec.batches_per_epoch;
  h->total_batches = spec.total_batches;
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
    return PosixError(absl::StrCat("reserving ", len, " more bytes of shared memory for ", name_),
                      rc);
  }
  committed_slots_ = slots;
  return absl::OkStatus();
}

RingOwner::~RingOwner() = default;

}  // namespace stoker
