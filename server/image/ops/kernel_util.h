// Helpers the image kernels share (ops.cc, tensor_ops.cc): numpy.pad's
// index rule, the float32 tap sums of the Gaussian blurs, lookup tables and
// histograms. Internal to
// stoker_image. Built with -ffp-contract=off like its users (no fused
// multiply-add: the sums must round as written).

#ifndef STOKER_SERVER_IMAGE_OPS_KERNEL_UTIL_H_
#define STOKER_SERVER_IMAGE_OPS_KERNEL_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "server/image/pipeline_params.h"

namespace stoker::image::internal {

// numpy.pad's index for position i (may be negative or >= n) of an axis of
// n pixels.
inline int64_t PadIndex(int64_t i, int64_t n, PadMode mode) {
  if (i >= 0 && i < n) return i;
  switch (mode) {
    case PadMode::kEdge:
      return i < 0 ? 0 : n - 1;
    case PadMode::kReflect: {
      if (n == 1) return 0;  // numpy extends a 1-pixel axis as edge
      const int64_t period = 2 * (n - 1);
      int64_t m = i % period;
      if (m < 0) m += period;
      return m < n ? m : period - m;
    }
    case PadMode::kSymmetric: {
      const int64_t period = 2 * n;
      int64_t m = i % period;
      if (m < 0) m += period;
      return m < n ? m : period - 1 - m;
    }
    case PadMode::kConstant:
      break;
  }
  return -1;
}

constexpr uint32_t kMaxTapsPerPass = 32;

// 4 floats (one SSE register); arithmetic on it is element-wise, in the
// order written, with no contraction (see the top).
typedef float Floats4 __attribute__((vector_size(16)));

inline Floats4 Load4(const float* p) {
  Floats4 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// out[i] = (first ? 0 : out[i]) + sum over t of k[t] * src(t)[i], for i < n,
// the terms added in tap order (what a one-tap-at-a-time loop gives, bit for
// bit): 32 outputs stay in registers across the taps. src(t) returns tap
// t's input row.
template <typename Source>
inline void SumTaps(Source src, const float* k, uint32_t taps, size_t n, bool first,
             float* __restrict out) {
  constexpr size_t kLanes = 4, kRegs = 8, kBlock = kLanes * kRegs;
  size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    Floats4 a[kRegs] = {};
    if (!first) {
#pragma GCC unroll 8
      for (size_t r = 0; r < kRegs; ++r) a[r] = Load4(out + i + r * kLanes);
    }
    for (uint32_t t = 0; t < taps; ++t) {
      const float* p = src(t) + i;
      const Floats4 kt = {k[t], k[t], k[t], k[t]};
#pragma GCC unroll 8
      for (size_t r = 0; r < kRegs; ++r) a[r] += kt * Load4(p + r * kLanes);
    }
    std::memcpy(out + i, a, sizeof(a));
  }
  for (; i < n; ++i) {
    float acc = first ? 0.0f : out[i];
    for (uint32_t t = 0; t < taps; ++t) acc += k[t] * src(t)[i];
    out[i] = acc;
  }
}


// A 256-entry table applied to each of `bytes` values.
inline void ApplyTable(uint8_t* img, size_t bytes, const uint8_t table[256]) {
  for (size_t i = 0; i < bytes; ++i) img[i] = table[img[i]];
}

// The 256-bin histograms of the three channels (64-bit: a decode may
// reach 2^32 pixels).
inline void Histograms(const uint8_t* img, size_t pixels, uint64_t hist[3][256]) {
  std::memset(hist, 0, sizeof(uint64_t) * 3 * 256);
  for (size_t i = 0; i < pixels; ++i) {
    const uint8_t* px = img + 3 * i;
    ++hist[0][px[0]];
    ++hist[1][px[1]];
    ++hist[2][px[2]];
  }
}

// One table per channel, applied to the pixels.
inline void ApplyChannelTables(uint8_t* img, size_t pixels, const uint8_t lut[3][256]) {
  for (size_t i = 0; i < pixels; ++i) {
    uint8_t* px = img + 3 * i;
    px[0] = lut[0][px[0]];
    px[1] = lut[1][px[1]];
    px[2] = lut[2][px[2]];
  }
}

}  // namespace stoker::image::internal

#endif  // STOKER_SERVER_IMAGE_OPS_KERNEL_UTIL_H_
