#include "common/hash64.h"

#include <cstring>

namespace stoker {
namespace {

constexpr uint64_t kK1 = 0x9e3779b97f4a7c15ull;
constexpr uint64_t kK2 = 0xc2b2ae3d27d4eb4full;

inline uint64_t Load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline uint64_t Rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
inline uint64_t Avalanche(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return h;
}

}  // namespace

uint64_t Hash64(const void* data, size_t bytes, uint64_t seed) {
  const auto* p = static_cast<const uint8_t*>(data);
  // Four independent lanes: the multiplies of one do not wait on another's.
  uint64_t h[4] = {seed ^ kK1, seed + kK2, Rotl(seed, 17) ^ kK2, ~seed};
  size_t i = 0;
  for (; i + 32 <= bytes; i += 32) {
    for (int l = 0; l < 4; ++l) {
      h[l] = Rotl(h[l] ^ (Load64(p + i + 8 * l) * kK2), 31) * kK1;
    }
  }
  uint64_t r = Avalanche(h[0]) ^ Rotl(Avalanche(h[1]), 16) ^ Rotl(Avalanche(h[2]), 32) ^
               Rotl(Avalanche(h[3]), 48);
  for (; i + 8 <= bytes; i += 8) r = Rotl(r ^ (Load64(p + i) * kK2), 29) * kK1;
  uint64_t tail = 0;
  for (size_t k = 0; i + k < bytes; ++k) tail |= uint64_t{p[i + k]} << (8 * k);
  r = Rotl(r ^ (tail * kK2), 29) * kK1;
  return Avalanche(r ^ bytes);
}

}  // namespace stoker
