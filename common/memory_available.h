// How much memory a new ring can take. Rings are memfds (ring_owner.h):
// their pages come from the machine's memory, charged to the daemon's
// memory cgroup, not from /dev/shm. So the room for rings is the smaller of
// the kernel's MemAvailable and what the cgroup's limit leaves (a
// container's --memory).

#ifndef STOKER_COMMON_MEMORY_AVAILABLE_H_
#define STOKER_COMMON_MEMORY_AVAILABLE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace stoker {

// The texts the answer is computed from; an empty one is unknown.
struct MemoryTexts {
  std::string meminfo;         // /proc/meminfo
  std::string cgroup_limit;    // cgroup v2 memory.max ("max" or bytes), or v1 limit_in_bytes
  std::string cgroup_usage;    // memory.current, or v1 usage_in_bytes
};

// Bytes available: MemAvailable, less whatever the cgroup's limit leaves if
// that is smaller; nullopt when MemAvailable cannot be read.
std::optional<uint64_t> MemoryAvailableBytes(const MemoryTexts& texts);

// Reads this process's texts (its cgroup from /proc/self/cgroup, v2 or the
// v1 memory controller).
MemoryTexts SystemMemoryTexts();

}  // namespace stoker

#endif  // STOKER_COMMON_MEMORY_AVAILABLE_H_
