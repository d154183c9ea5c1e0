#include "server/image/ops/box_blur.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace stoker::image {
namespace {

constexpr int kPasses = 3;

// One box pass down the columns of a rows x cols matrix of bytes (cols: a
// row's bytes, every channel its own column), from `in` to `out` (not
// overlapping). Pillow's ImagingLineBoxBlur along each column, written with
// its three loops' indexes as clamps (an index past either end reads the end
// row): the window's sum moves down, the two rows just outside it weigh
// `outer`. All columns advance together, so the loops vectorize. `acc`
// holds cols values. The unsigned wrap-around of the running sum is Pillow's.
[[gnu::always_inline]] inline void BoxColumnsBody(const uint8_t* in, uint8_t* out, int32_t rows,
                                                  size_t cols, const BoxWeights& w,
                                                  uint32_t* acc) {
  const int32_t r = w.radius;
  const int32_t last = rows - 1;
  auto row = [&](int32_t k) { return in + static_cast<size_t>(std::clamp(k, 0, last)) * cols; };
  const uint8_t* first = row(0);
  for (size_t c = 0; c < cols; ++c) acc[c] = first[c] * static_cast<uint32_t>(r + 1);
  for (int32_t k = 0; k < r; ++k) {
    const uint8_t* p = row(k);
    for (size_t c = 0; c < cols; ++c) acc[c] += p[c];
  }
  const uint32_t inner = w.inner, outer = w.outer;
  for (int32_t y = 0; y < rows; ++y) {
    const uint8_t* add = row(y + r);
    const uint8_t* sub = row(y - r - 1);
    const uint8_t* right = row(y + r + 1);
    uint8_t* o = out + static_cast<size_t>(y) * cols;
    for (size_t c = 0; c < cols; ++c) {
      acc[c] += static_cast<uint32_t>(add[c]) - static_cast<uint32_t>(sub[c]);
      const uint32_t bulk = acc[c] * inner + (static_cast<uint32_t>(sub[c]) + right[c]) * outer;
      o[c] = static_cast<uint8_t>((bulk + (1u << 23)) >> 24);
    }
  }
}

// The same loops compiled for AVX2 (integers only: the same values on
// every path), chosen once by the CPU.
void BoxColumnsGeneric(const uint8_t* in, uint8_t* out, int32_t rows, size_t cols,
                       const BoxWeights& w, uint32_t* acc) {
  BoxColumnsBody(in, out, rows, cols, w, acc);
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) void BoxColumnsAvx2(const uint8_t* in, uint8_t* out,
                                                    int32_t rows, size_t cols,
                                                    const BoxWeights& w, uint32_t* acc) {
  BoxColumnsBody(in, out, rows, cols, w, acc);
}
#endif

void BoxColumns(const uint8_t* in, uint8_t* out, int32_t rows, size_t cols, const BoxWeights& w,
                uint32_t* acc) {
#if defined(__x86_64__)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) return BoxColumnsAvx2(in, out, rows, cols, w, acc);
#endif
  BoxColumnsGeneric(in, out, rows, cols, w, acc);
}

// dst[x][y] = src[y][x] for an RGB image of height x width (dst is width x
// height), in tiles that stay in cache.
void Transpose(const uint8_t* src, uint32_t height, uint32_t width, uint8_t* dst) {
  constexpr uint32_t kTile = 32;
  for (uint32_t y0 = 0; y0 < height; y0 += kTile) {
    for (uint32_t x0 = 0; x0 < width; x0 += kTile) {
      const uint32_t y1 = std::min(height, y0 + kTile), x1 = std::min(width, x0 + kTile);
      for (uint32_t y = y0; y < y1; ++y) {
        for (uint32_t x = x0; x < x1; ++x) {
          std::memcpy(dst + (size_t{x} * height + y) * 3, src + (size_t{y} * width + x) * 3, 3);
        }
      }
    }
  }
}

}  // namespace

BoxWeights GaussianBoxWeights(float radius) {
  // Pillow's float arithmetic, statement by statement (the library builds
  // without FMA contraction).
  const float sigma2 = radius * radius / kPasses;
  const float big_l = static_cast<float>(std::sqrt(12.0 * sigma2 + 1.0));
  const float l = static_cast<float>(std::floor((big_l - 1.0) / 2.0));
  float a = (2 * l + 1) * (l * (l + 1) - 3 * sigma2);
  a /= 6 * (sigma2 - (l + 1) * (l + 1));
  const float box = l + a;
  BoxWeights w;
  w.radius = static_cast<int32_t>(box);
  w.inner = static_cast<uint32_t>(static_cast<float>(1u << 24) / (box * 2 + 1));
  w.outer = ((1u << 24) - static_cast<uint32_t>(w.radius * 2 + 1) * w.inner) / 2;
  return w;
}

size_t BoxBlurScratch(uint32_t height, uint32_t width) {
  return size_t{height} * width * 3 + size_t{std::max(height, width)} * 3 * sizeof(uint32_t);
}

void BoxBlur(uint8_t* img, uint32_t height, uint32_t width, float radius, uint8_t* scratch,
             uint8_t* dst) {
  const BoxWeights w = GaussianBoxWeights(radius);
  auto* acc = reinterpret_cast<uint32_t*>(scratch);
  uint8_t* spare = scratch + size_t{std::max(height, width)} * 3 * sizeof(uint32_t);
  // As Pillow: the passes along rows on the transposed image, then along
  // columns. img -> spare (transposed) -> dst -> spare -> dst; dst -> img
  // (transposed back) -> dst -> spare -> dst.
  Transpose(img, height, width, spare);
  const size_t trow = size_t{height} * 3;
  BoxColumns(spare, dst, static_cast<int32_t>(width), trow, w, acc);
  BoxColumns(dst, spare, static_cast<int32_t>(width), trow, w, acc);
  BoxColumns(spare, dst, static_cast<int32_t>(width), trow, w, acc);
  Transpose(dst, width, height, img);
  const size_t row = size_t{width} * 3;
  BoxColumns(img, dst, static_cast<int32_t>(height), row, w, acc);
  BoxColumns(dst, spare, static_cast<int32_t>(height), row, w, acc);
  BoxColumns(spare, dst, static_cast<int32_t>(height), row, w, acc);
}

}  // namespace stoker::image
