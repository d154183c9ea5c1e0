// A counter-based random generator: its stream is a pure function of a key,
// so a sample's augmentation depends on (seed, epoch, dataset index) only,
// never on which worker drew it or when.

#ifndef STOKER_SERVER_IMAGE_OPS_RNG_H_
#define STOKER_SERVER_IMAGE_OPS_RNG_H_

#include <cmath>
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

// Shuffles data[0..n) in place, Fisher-Yates driven by `rng`:
//   for i = n-1 down to 1: j = rng.Below(i + 1); swap(data[i], data[j])
// (the sampler's epoch permutation, and the clip samplers' order, are this
// applied to their lists).
template <typename T>
void Shuffle(T* data, uint64_t n, KeyedRng& rng) {
  for (uint64_t i = n; i > 1; --i) {
    const uint64_t j = rng.Below(i);
    T t = data[i - 1];
    data[i - 1] = data[j];
    data[j] = t;
  }
}

// A standard normal draw (Box-Muller, one of the pair; two uniform draws).
inline double StandardNormal(KeyedRng& rng) {
  const double u1 = 1.0 - rng.Uniform();  // (0, 1]: log(u1) is finite
  const double u2 = rng.Uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

// A Gamma(alpha, 1) draw, alpha > 0: Marsaglia and Tsang's method ("A
// simple method for generating gamma variables", 2000) for alpha >= 1, and
// for alpha < 1 Gamma(alpha + 1) * U^(1 / alpha). Its draws from `rng` vary
// in number (the method rejects some candidates). Dirichlet(a_1 .. a_k) is
// (g_1 .. g_k) / sum(g) of independent Gamma(a_i) draws (what torch's
// _sample_dirichlet samples); Beta(a, b) its k = 2 case.
inline double GammaDraw(KeyedRng& rng, double alpha) {
  double boost = 1.0;
  if (alpha < 1.0) {
    boost = std::pow(1.0 - rng.Uniform(), 1.0 / alpha);
    alpha += 1.0;
  }
  const double d = alpha - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    const double x = StandardNormal(rng);
    double v = 1.0 + c * x;
    if (v <= 0.0) continue;
    v = v * v * v;
    const double u = 1.0 - rng.Uniform();
    if (u < 1.0 - 0.0331 * (x * x) * (x * x) ||
        std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v))) {
      return d * v * boost;
    }
  }
}

}  // namespace stoker

#endif  // STOKER_SERVER_IMAGE_OPS_RNG_H_
