#include "server/remote/arena.h"

#include <iterator>

namespace stoker::remote {

Arena::Arena(uint64_t bytes) : capacity_(bytes / kAlign * kAlign) {
  if (capacity_ != 0) free_[0] = capacity_;
}

std::optional<uint64_t> Arena::Allocate(uint64_t bytes) {
  if (bytes > capacity_) return std::nullopt;
  const uint64_t need = Round(bytes);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < need) continue;
    const uint64_t at = it->first;
    const uint64_t left = it->second - need;
    free_.erase(it);
    if (left != 0) free_[at + need] = left;
    taken_[at] = need;
    used_ += need;
    return at;
  }
  return std::nullopt;
}

void Arena::Free(uint64_t offset) {
  auto t = taken_.find(offset);
  if (t == taken_.end()) return;
  uint64_t at = t->first, bytes = t->second;
  used_ -= bytes;
  taken_.erase(t);
  auto next = free_.lower_bound(at);
  if (next != free_.end() && at + bytes == next->first) {
    bytes += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == at) {
      prev->second += bytes;
      return;
    }
  }
  free_[at] = bytes;
}

}  // namespace stoker::remote
