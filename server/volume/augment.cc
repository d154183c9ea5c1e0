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

AffineDraw DrawRandAffine(KeyedRng& rng, double prob, const double* rotate, int rotate_count,
                          const double* scale, int scale_count) {
  AffineDraw d;
  d.apply = rng.Uniform() < prob;
  double angle[3] = {0, 0, 0}, factor[3] = {1, 1, 1};
  for (int a = 0; a < rotate_count; ++a) angle[a] = rng.Uniform(-rotate[a], rotate[a]);
  for (int a = 0; a < scale_count; ++a) factor[a] = 1.0 + rng.Uniform(-scale[a], scale[a]);
  if (!d.apply) return d;
  // create_rotate: about axis 0 (the j-k plane), then 1, then 2, multiplied
  // in that order.
  auto mul = [](const std::array<double, 9>& x, const std::array<double, 9>& y) {
    std::array<double, 9> z{};
    for (int r = 0; r < 3; ++r) {
      for (int c = 0; c < 3; ++c) {
        for (int k = 0; k < 3; ++k) z[r * 3 + c] += x[r * 3 + k] * y[k * 3 + c];
      }
    }
    return z;
  };
  std::array<double, 9> m = {1, 0, 0, 0, 1, 0, 0, 0, 1};
  if (rotate_count >= 1) {
    const double s = std::sin(angle[0]), c = std::cos(angle[0]);
    m = mul(m, {1, 0, 0, 0, c, -s, 0, s, c});
  }
  if (rotate_count >= 2) {
    const double s = std::sin(angle[1]), c = std::cos(angle[1]);
    m = mul(m, {c, 0, s, 0, 1, 0, -s, 0, c});
  }
  if (rotate_count >= 3) {
    const double s = std::sin(angle[2]), c = std::cos(angle[2]);
    m = mul(m, {c, -s, 0, s, c, 0, 0, 0, 1});
  }
  d.m = mul(m, {factor[0], 0, 0, 0, factor[1], 0, 0, 0, factor[2]});
  return d;
}

namespace {

// grid_sample's coordinate handling (align_corners=False), one axis: the
// coordinate for an input of n voxels after padding, and whether it falls
// outside (zeros).
double PadCoordinate(double x, int64_t n, AffinePad pad, bool* outside) {
  *outside = false;
  if (pad == AffinePad::kBorder) return std::clamp(x, 0.0, static_cast<double>(n - 1));
  if (pad == AffinePad::kReflection) {
    // Reflect about -0.5 and n - 0.5, then clip (torch: reflect_coordinates
    // over [-1, 2n - 1] in doubled units, clip_coordinates).
    const double lo = -0.5, span = static_cast<double>(n);
    double y = std::fabs(x - lo);
    const double flips = std::floor(y / span);
    const double extra = std::fmod(y, span);
    y = static_cast<int64_t>(flips) % 2 == 0 ? extra + lo : span - extra + lo;
    return std::clamp(y, 0.0, static_cast<double>(n - 1));
  }
  *outside = x <= -1.0 || x >= static_cast<double>(n);
  return x;
}

// Calls fn(at, p) for each output voxel (its index `at`) with the input
// coordinates `p` it samples (A about the centre, then padded).
template <typename Fn>
void ForEachSource(const AffineDraw& d, const Shape3& s, AffinePad pad, Fn&& fn) {
  const double ci = (s[0] - 1) / 2.0, cj = (s[1] - 1) / 2.0, ck = (s[2] - 1) / 2.0;
  for (int64_t k = 0; k < s[2]; ++k) {
    for (int64_t j = 0; j < s[1]; ++j) {
      for (int64_t i = 0; i < s[0]; ++i) {
        const double x = i - ci, y = j - cj, z = k - ck;
        double p[3] = {d.m[0] * x + d.m[1] * y + d.m[2] * z + ci,
                       d.m[3] * x + d.m[4] * y + d.m[5] * z + cj,
                       d.m[6] * x + d.m[7] * y + d.m[8] * z + ck};
        bool outside = false;
        for (int a = 0; a < 3; ++a) {
          bool out = false;
          p[a] = PadCoordinate(p[a], s[a], pad, &out);
          outside |= out;
        }
        fn(static_cast<size_t>((k * s[1] + j) * s[0] + i), p, outside);
      }
    }
  }
}

}  // namespace

void ApplyAffine(const AffineDraw& d, const Shape3& s, int64_t channels, AffinePad pad,
                 const float* in, float* out) {
  const int64_t per = s[0] * s[1] * s[2];
  ForEachSource(d, s, pad, [&](size_t at, const double* p, bool outside) {
    int64_t lo[3];
    double w[3];
    for (int a = 0; a < 3; ++a) {
      lo[a] = static_cast<int64_t>(std::floor(p[a]));
      w[a] = p[a] - lo[a];
    }
    for (int64_t c = 0; c < channels; ++c) {
      const float* v = in + c * per;
      double sum = 0;
      for (int t = 0; t < 8 && !outside; ++t) {
        const int64_t ti = lo[0] + (t & 1), tj = lo[1] + ((t >> 1) & 1), tk = lo[2] + (t >> 2);
        const double wt = ((t & 1) ? w[0] : 1 - w[0]) * (((t >> 1) & 1) ? w[1] : 1 - w[1]) *
                          ((t >> 2) ? w[2] : 1 - w[2]);
        if (wt == 0 || ti < 0 || tj < 0 || tk < 0 || ti >= s[0] || tj >= s[1] || tk >= s[2]) {
          continue;  // a tap outside: zero (zeros padding), or weight 0 at the last voxel
        }
        sum += wt * v[(tk * s[1] + tj) * s[0] + ti];
      }
      out[c * per + static_cast<int64_t>(at)] = static_cast<float>(sum);
    }
  });
}

void ApplyAffineNearest(const AffineDraw& d, const Shape3& s, AffinePad pad, const uint8_t* in,
                        uint8_t* out) {
  ForEachSource(d, s, pad, [&](size_t at, const double* p, bool outside) {
    int64_t n[3];
    for (int a = 0; a < 3; ++a) {
      n[a] = static_cast<int64_t>(std::nearbyint(p[a]));
      outside |= n[a] < 0 || n[a] >= s[a];
    }
    out[at] = outside ? 0 : in[(n[2] * s[1] + n[1]) * s[0] + n[0]];
  });
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
