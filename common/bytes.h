// Values in byte buffers at an offset, as the on-disk entry formats lay
// their headers out (server/volume/volume_cache.h, server/worker/
// image_entry.h): memcpy, so unaligned offsets are fine; this machine's byte
// order (little-endian: the formats are read where they were written).

#ifndef STOKER_COMMON_BYTES_H_
#define STOKER_COMMON_BYTES_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace stoker {

template <typename T>
void StoreAt(uint8_t* buffer, size_t at, T value) {
  std::memcpy(buffer + at, &value, sizeof(T));
}

template <typename T>
T LoadAt(const uint8_t* buffer, size_t at) {
  T value;
  std::memcpy(&value, buffer + at, sizeof(T));
  return value;
}

}  // namespace stoker

#endif  // STOKER_COMMON_BYTES_H_
