// Values in byte buffers at an offset, as the on-disk entry formats lay
// their headers out (server/volume/volume_cache.h, server/worker/
// image_entry.h): memcpy, so unaligned offsets are fine; this machine's byte
// order (little-endian: the formats are read where they were written). And
// little-endian loads for other programs' formats.

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

// Little-endian values as file formats store them (zip, BMP), whatever
// this machine's byte order.
inline uint16_t LoadLe16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | p[1] << 8); }
inline uint32_t LoadLe32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}
inline uint64_t LoadLe64(const uint8_t* p) {
  return LoadLe32(p) | static_cast<uint64_t>(LoadLe32(p + 4)) << 32;
}

}  // namespace stoker

#endif  // STOKER_COMMON_BYTES_H_
