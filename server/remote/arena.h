// A decode node's task memory: ranges of one shared mapping (the memfd every
// node worker maps as its one "ring"), each holding one task's inputs and
// outputs while a worker works on it. First fit from the lowest address, so
// the pages in use stay few; freed neighbours merge. Offsets are aligned to
// kAlign. Pure bookkeeping, no memory of its own. Not thread-safe (the
// node's lock guards it).

#ifndef STOKER_SERVER_REMOTE_ARENA_H_
#define STOKER_SERVER_REMOTE_ARENA_H_

#include <cstdint>
#include <map>
#include <optional>

namespace stoker::remote {

class Arena {
 public:
  static constexpr uint64_t kAlign = 4096;
  explicit Arena(uint64_t bytes);

  // A free range of at least `bytes` (rounded up to kAlign; 0 takes one
  // unit), or nullopt while none is.
  std::optional<uint64_t> Allocate(uint64_t bytes);
  // Gives back a range Allocate returned.
  void Free(uint64_t offset);

  uint64_t capacity() const { return capacity_; }
  uint64_t used() const { return used_; }
  static uint64_t Round(uint64_t bytes) {
    return bytes == 0 ? kAlign : (bytes + kAlign - 1) / kAlign * kAlign;
  }

 private:
  const uint64_t capacity_;
  uint64_t used_ = 0;
  std::map<uint64_t, uint64_t> free_;   // offset -> bytes
  std::map<uint64_t, uint64_t> taken_;  // offset -> bytes
};

}  // namespace stoker::remote

#endif  // STOKER_SERVER_REMOTE_ARENA_H_
