// A counter-based random generator: its stream is a pure function of a key,
// so a sample's augmentation depends on (seed, epoch, dataset index) only,
// never on which worker drew it or when.

#ifndef STOKER_SERVER_IMAGE_RNG_H_
#define STOKER_SERVER_IMAGE_RNG_H_

#include <cstdint>

namespace stoker {

// SplitMix64's finalizer: a bijective 64-bit mixer.
inline constexpr uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Draws are Mix64(key + n * golden), n = 0, 1, 2, ... for a key made from
// up to three words. Not thread-safe; cheap to copy and to construct.
class KeyedRng {
 public:
  constexpr KeyedRng(uint64_t a, uint64_t b = 0, uint64_t c = 0)
      : state_(Mix64(Mix64(Mix64(a ^ 0x5354'4f4b'4552'0001ULL) ^ b) ^ c)) {}

  constexpr uint64_t Next() {
    state_ += 0x9e3779b97f4a7c15ULL;
    return Mix64(state_);
  }
  // Uniform in [0, 1) with 53 bits.
  constexpr double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  // Uniform in [lo, hi).
  constexpr double Uniform(double lo, double hi) { return lo + (hi - lo) * Uniform(); }
  // Uniform integer in [0, n), n > 0, without modulo bias worth noting (n << 2^64).
  constexpr uint64_t Below(uint64_t n) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(Next()) * n) >> 64);
  }

 private:
  uint64_t state_;
};

}  // namespace stoker

#endif  // STOKER_SERVER_IMAGE_RNG_H_
