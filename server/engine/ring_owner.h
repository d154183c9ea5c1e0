// The daemon's side of a session's shared-memory ring (layout and protocol:
// proto/stoker/ring_layout.h). Creates the ring as a sealed memfd, named in
// no file system, and lays out the header. The memory goes when the last
// process holding or mapping it lets go: no death can leak it.

#ifndef STOKER_SERVER_ENGINE_RING_OWNER_H_
#define STOKER_SERVER_ENGINE_RING_OWNER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/posix.h"
#include "stoker/ring_layout.h"

namespace stoker {

struct RingSpec {
  uint32_t slot_count = 4;
  uint32_t batch_size = 1;
  // Each sample's fields (ring_layout.h, "field"): 1..ring::kMaxFields, each
  // with its stride set; Create lays them out (ring::LayoutFields), and
  // refuses an offset given here (not 0) that differs from that layout.
  std::vector<ring::FieldSpec> fields;
  uint32_t layout = ring::kNHWC;  // the "image" field's dimension order
  uint64_t session_number = 0;
  uint64_t batches_per_epoch = 0;
  uint64_t total_batches = 0;
  // The ring's first depth (ring_layout.h, "Depth"): 0 for slot_count. Only
  // the first `depth` slots' data is reserved in memory at creation; the
  // rest is reserved by Commit when the ring deepens.
  uint32_t depth = 0;
};

// Not thread-safe itself; the live fields in the header are atomics that
// other threads and processes touch through header().
class RingOwner {
 public:
  // Creates a ring labelled `name` (a memfd's name: for /proc/PID/maps and
  // logs), sized and laid out per `spec`. Errors: INVALID_ARGUMENT for sizes
  // out of range or a field ring::ValidateField refuses, RESOURCE_EXHAUSTED when its memory cannot be reserved.
  static absl::StatusOr<std::unique_ptr<RingOwner>> Create(const std::string& name,
                                                           const RingSpec& spec);
  // Unmaps and closes; the memory goes once no other process holds it.
  ~RingOwner();

  // "memfd:<name>".
  const std::string& name() const { return name_; }
  const ring::Geometry& geometry() const { return geometry_; }
  // The fields as laid out in the header (offsets set).
  const std::vector<ring::FieldSpec>& fields() const { return fields_; }
  int fd() const { return fd_.get(); }
  ring::RingHeader* header() const { return static_cast<ring::RingHeader*>(map_.addr()); }
  ring::SlotDescriptor* descriptor(uint32_t slot) const {
    return ring::Descriptor(map_.addr(), geometry_, slot);
  }
  uint8_t* slot_data(uint32_t slot) const {
    return static_cast<uint8_t*>(map_.addr()) + geometry_.data_offset +
           geometry_.slot_bytes * slot;
  }
  // Slots whose data pages are reserved (the first ones), and the bytes of
  // memory the ring holds: header, descriptors and those.
  uint32_t committed_slots() const { return committed_slots_; }
  uint64_t committed_bytes() const {
    return geometry_.data_offset + geometry_.slot_bytes * committed_slots_;
  }
  // Reserves the data of the first `slots` slots (posix_fallocate, so a lack
  // of memory fails here, not with a worker's SIGBUS). Pages once reserved
  // stay until the ring goes: a client may have pinned them for DMA. Errors:
  // INVALID_ARGUMENT for more than slot_count, RESOURCE_EXHAUSTED (ENOSPC).
  absl::Status Commit(uint32_t slots);

 private:
  RingOwner() = default;
  std::string name_;
  ring::Geometry geometry_;
  std::vector<ring::FieldSpec> fields_;
  UniqueFd fd_;
  Mapping map_;
  uint32_t committed_slots_ = 0;
};

}  // namespace stoker

#endif  // STOKER_SERVER_ENGINE_RING_OWNER_H_
