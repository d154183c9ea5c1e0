#include "server/volume/augment.h"

#include <algorithm>
#include <cmath>

namespace stoker::volume {
namespace {

size_t Index(const Shape3& s, int64_t c, int64_t i, int64_t j, int64_t k) {
  return static_cast<size_t>(((c * s[2] + k) * s[1] + j) * s[0] + i);
}

}  // namespace

FlipDraw DrawRandFlip(KeyedRng& rng, double prob, const std::array<bool, 3>& axes) {
  FlipDraw d;
  if (rng.Uniform() < prob) d.flip = axes;
  return d;
}

template <typename T>
void ApplyFlip(const FlipDraw& d, const Shape3& s, int64_t channels, T* v) {
  if (!d.flip[0] && !d.flip[1] && !d.flip[2]) return;
  for (int64_t c = 0; c < channels; ++c) {
    for (int64_t k = 0; k < s[2]; ++k) {
      for (int64_t j = 0; j < s[1]; ++j) {
        for (int64_t i = 0; i < s[0]; ++i) {
          const int64_t fi = d.flip[0] ? s[0] - 1 - i : i;
          const int64_t fj = d.flip[1] ? s[1] - 1 - j : j;
          const int64_t fk = d.flip[2] ? s[2] - 1 - k : k;
          const size_t a = Index(s, c, i, j, k), b = Index(s, c, fi, fj, fk);
          if (a < b) std::swap(v[a], v[b]);  // each pair once
        }
      }
    }
  }
}

Rot90Draw DrawRandRotate90(KeyedRng& rng, double prob, int max_k, int a, int b) {
  Rot90Draw d;
  d.a = a;
  d.b = b;
  const bool apply = rng.Uniform() < prob;
  const int k = 1 + static_cast<int>(rng.Below(static_cast<uint64_t>(std::max(max_k, 1))));
  if (apply) d.k = k;
  return d;
}

Shape3 Rot90Shape(const Rot90Draw& d, const Shape3& s) {
  Shape3 out = s;
  if (d.k % 2 == 1) std::swap(out[d.a], out[d.b]);
  return out;
}

template <typename T>
void ApplyRot90(const Rot90Draw& d, const Shape3& s, int64_t channels, const T* in, T* out) {
  const Shape3 os = Rot90Shape(d, s);
  const int k = ((d.k % 4) + 4) % 4;
  for (int64_t c = 0; c < channels; ++c) {
    for (int64_t z = 0; z < os[2]; ++z) {
      for (int64_t y = 0; y < os[1]; ++y) {
        for (int64_t x = 0; x < os[0]; ++x) {
          int64_t o[3] = {x, y, z};
          int64_t src[3] = {x, y, z};
          const int64_t p = o[d.a], q = o[d.b];
          // torch.rot90(x, k, (a, b)): k=1 is flip(b) then transpose(a, b):
          // out[p, q] = in[q, n_b - 1 - p]; k=2 flips both; k=3
          // out[p, q] = in[n_a - 1 - q, p].
          if (k == 1) {
            src[d.a] = q;
            src[d.b] = s[d.b] - 1 - p;
          } else if (k == 2) {
            src[d.a] = s[d.a] - 1 - p;
            src[d.b] = s[d.b] - 1 - q;
          } else if (k == 3) {
            src[d.a] = s[d.a] - 1 - q;
            src[d.b] = p;
          }
          out[Index(os, c, x, y, z)] = in[Index(s, c, src[0], src[1], src[2])];
        }
      }
    }
  }
}

IntensityDraw DrawUniform(KeyedRng& rng, double prob, double lo, double hi) {
  IntensityDraw d;
  d.apply = rng.Uniform() < prob;
  d.value = rng.Uniform(lo, hi);
  return d;
}

void ApplyScaleIntensity(double factor, float* v, int64_t n) {
  const float f = static_cast<float>(1.0 + factor);
  for (int64_t i = 0; i < n; ++i) v[i] = v[i] * f;
}

void ApplyShiftIntensity(double offset, float* v, int64_t n) {
  const float o = static_cast<float>(offset);
  for (int64_t i = 0; i < n; ++i) v[i] = v[i] + o;
}

NoiseDraw DrawRandGaussianNoise(KeyedRng& rng, double prob, double mean, double std) {
  NoiseDraw d;
  d.apply = rng.Uniform() < prob;
  d.mean = mean;
  d.std = rng.Uniform(0.0, std);
  return d;
}

void ApplyGaussianNoise(const NoiseDraw& d, KeyedRng& rng, float* v, int64_t n) {
  if (!d.apply) return;
  for (int64_t i = 0; i < n; ++i) {
    const float noise = static_cast<float>(d.mean + d.std * StandardNormal(rng));
    v[i] = v[i] + noise;
  }
}

void ApplyAdjustContrast(double gamma, float* v, int64_t n) {
  if (n == 0) return;
  float lo = v[0], hi = v[0];
  for (int64_t i = 1; i < n; ++i) {
    lo = std::min(lo, v[i]);
    hi = std::max(hi, v[i]);
  }
  const float range = hi - lo;
  const float denom = range + 1e-7f;
  const float g = static_cast<float>(gamma);
  for (int64_t i = 0; i < n; ++i) {
    v[i] = std::pow((v[i] - lo) / denom, g) * range + lo;
  }
}

template void ApplyFlip<float>(const FlipDraw&, const Shape3&, int64_t, float*);
template void ApplyFlip<uint8_t>(const FlipDraw&, const Shape3&, int64_t, uint8_t*);
template void ApplyRot90<float>(const Rot90Draw&, const Shape3&, int64_t, const float*, float*);
template void ApplyRot90<uint8_t>(const Rot90Draw&, const Shape3&, int64_t, const uint8_t*,
                                  uint8_t*);

}  // namespace stoker::volume
