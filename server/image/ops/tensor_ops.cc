// torchvision's tensor kernels, reproduced for the ops that run them on a
// PIL image's tensor (AugMix's chains, the policies' tensor steps, the
// tensor affine path, ElasticTransform). Declared in ops.h.

// Built with -ffp-contract=off (CMakeLists.txt): Pillow computes its blend
// as separate float32 multiplies and adds, and a fused multiply-add rounds
// once instead of twice, which changes the truncated result of some pixels.

#include "server/image/ops/ops.h"
#include "server/image/ops/kernel_util.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numbers>

#include "proto/stoker/ring_layout.h"
#include "server/image/ops/pil_filters.h"
#include "server/image/ops/policy.h"
#include "server/image/ops/rng.h"
#include "server/image/ops/transform.h"

namespace stoker::image {

using internal::ApplyChannelTables;
using internal::ApplyTable;
using internal::Histograms;
using internal::kMaxTapsPerPass;
using internal::PadIndex;
using internal::SumTaps;

// --- torchvision's tensor kernels ---

namespace {

// _blend(img1, img2, ratio) for uint8 images: float32(ratio) * x + float32(
// 1 - ratio) * d, each product and the sum rounded to float32 (torch's mul
// and add kernels), clamped to [0, 255], truncated.
inline uint8_t TensorBlend(float ratio, float rest, float x, float d) {
  const float a = ratio * x;
  const float b = rest * d;
  const float v = a + b;
  if (!(v > 0.0f)) return 0;
  if (v >= 255.0f) return 255;
  return static_cast<uint8_t>(v);
}

// rgb_to_grayscale of one uint8 pixel: (0.2989 r + 0.587 g) + 0.114 b in
// float32, truncated.
inline uint8_t TensorGray(const uint8_t* px) {
  const float r = 0.2989f * static_cast<float>(px[0]);
  const float g = 0.587f * static_cast<float>(px[1]);
  const float b = 0.114f * static_cast<float>(px[2]);
  const float rg = r + g;
  return static_cast<uint8_t>(rg + b);
}

}  // namespace

uint8_t TensorGrayscale(uint8_t r, uint8_t g, uint8_t b) {
  const uint8_t px[3] = {r, g, b};
  return TensorGray(px);
}

namespace {

// torch 1.13's float32 sum of n values (value(i)) on one thread, as its
// AVX2 cascade_sum reduces a contiguous row: vectors of 8 lanes, taken 4 at
// a time into 4 levels of accumulators (multi_row_sum), the leftover
// vectors into the first, the 4 added, then the scalar tail and the 8 lanes
// in order.
template <typename Value>
float TorchSum(size_t n, Value value) {
  constexpr int kLanes = 8, kRows = 4, kLevels = 4;
  const size_t vectors = n / kLanes, groups = vectors / kRows;
  float acc[kLevels][kRows][kLanes] = {};
  auto add_group = [&](size_t g) {
    for (int k = 0; k < kRows; ++k) {
      for (int l = 0; l < kLanes; ++l) acc[0][k][l] += value((g * kRows + k) * kLanes + l);
    }
  };
  int64_t ceil_log2 = 1;  // utils::CeilLog2
  if (groups > 2) ceil_log2 = 64 - __builtin_clzll(uint64_t{groups} - 1);
  const int64_t level_power = std::max<int64_t>(4, ceil_log2 / kLevels);
  const size_t level_step = size_t{1} << level_power, level_mask = level_step - 1;
  size_t g = 0;
  while (g + level_step <= groups) {
    for (size_t j = 0; j < level_step; ++j) add_group(g++);
    for (int j = 1; j < kLevels; ++j) {
      for (int k = 0; k < kRows; ++k) {
        for (int l = 0; l < kLanes; ++l) acc[j][k][l] += acc[j - 1][k][l], acc[j - 1][k][l] = 0;
      }
      if ((g & (level_mask << (j * level_power))) != 0) break;
    }
  }
  for (; g < groups; ++g) add_group(g);
  for (int j = 1; j < kLevels; ++j) {
    for (int k = 0; k < kRows; ++k) {
      for (int l = 0; l < kLanes; ++l) acc[0][k][l] += acc[j][k][l];
    }
  }
  float* partial = acc[0][0];
  for (size_t v = groups * kRows; v < vectors; ++v) {
    for (int l = 0; l < kLanes; ++l) partial[l] += value(v * kLanes + l);
  }
  for (int k = 1; k < kRows; ++k) {
    for (int l = 0; l < kLanes; ++l) partial[l] += acc[0][k][l];
  }
  float sum = 0;
  for (size_t i = vectors * kLanes; i < n; ++i) sum += value(i);
  for (int l = 0; l < kLanes; ++l) sum += partial[l];
  return sum;
}

}  // namespace

float TensorGrayMean(const uint8_t* img, size_t pixels) {
  // torch.mean on the CPU: the sum, divided by the count.
  const float sum =
      TorchSum(pixels, [img](size_t i) { return static_cast<float>(TensorGray(img + 3 * i)); });
  return sum / static_cast<float>(pixels);
}

void TensorAdjustContrast(uint8_t* img, size_t pixels, double ratio) {
  if (pixels == 0) return;
  const float mean = TensorGrayMean(img, pixels);
  const float r = static_cast<float>(ratio), rest = static_cast<float>(1.0 - ratio);
  uint8_t table[256];
  for (int v = 0; v < 256; ++v) table[v] = TensorBlend(r, rest, static_cast<float>(v), mean);
  ApplyTable(img, pixels * 3, table);
}

void TensorAdjustSaturation(uint8_t* img, size_t pixels, double ratio) {
  const float r = static_cast<float>(ratio), rest = static_cast<float>(1.0 - ratio);
  for (size_t i = 0; i < pixels; ++i) {
    uint8_t* px = img + 3 * i;
    const float l = static_cast<float>(TensorGray(px));
    for (int c = 0; c < 3; ++c) px[c] = TensorBlend(r, rest, static_cast<float>(px[c]), l);
  }
}

void TensorAutocontrast(uint8_t* img, size_t pixels) {
  uint64_t hist[3][256];
  Histograms(img, pixels, hist);
  uint8_t lut[3][256];
  for (int c = 0; c < 3; ++c) {
    int lo = 0, hi = 255;
    while (lo < 256 && hist[c][lo] == 0) ++lo;
    while (hi >= 0 && hist[c][hi] == 0) --hi;
    if (hi <= lo) {  // scale 255 / 0 is not finite: minimum 0, scale 1
      for (int v = 0; v < 256; ++v) lut[c][v] = static_cast<uint8_t>(v);
      continue;
    }
    const float minimum = static_cast<float>(lo);
    // bound / tensor is Tensor.__rtruediv__: reciprocal(tensor) * bound.
    const float scale = (1.0f / (static_cast<float>(hi) - minimum)) * 255.0f;
    for (int v = 0; v < 256; ++v) {
      const float t = (static_cast<float>(v) - minimum) * scale;
      lut[c][v] = t <= 0.0f ? 0 : t >= 255.0f ? 255 : static_cast<uint8_t>(t);
    }
  }
  ApplyChannelTables(img, pixels, lut);
}

void TensorAdjustSharpness(uint8_t* img, uint32_t height, uint32_t width, double ratio,
                           uint8_t* scratch) {
  if (height <= 2 || width <= 2) return;
  const float r = static_cast<float>(ratio), rest = static_cast<float>(1.0 - ratio);
  const size_t row = size_t{width} * 3;
  std::memcpy(scratch, img, size_t{height} * row);
  for (uint32_t y = 0; y < height; ++y) {
    const bool inner_row = y > 0 && y + 1 < height;
    for (uint32_t x = 0; x < width; ++x) {
      const bool inner = inner_row && x > 0 && x + 1 < width;
      for (int c = 0; c < 3; ++c) {
        const size_t at = y * row + size_t{x} * 3 + c;
        int d = scratch[at];
        if (inner) {
          // The 3x3 float32 conv sums k / 13 (k an integer): k / 13 is never
          // within float error of a half, so torch.round gives round(k / 13)
          // in any summation order.
          int k = 4 * scratch[at];
          for (int dy = -1; dy <= 1; ++dy) {
            for (int dx = -3; dx <= 3; dx += 3)
              k += scratch[at + dy * static_cast<ptrdiff_t>(row) + dx];
          }
          d = (2 * k + 13) / 26;
        }
        img[at] = TensorBlend(r, rest, static_cast<float>(scratch[at]), static_cast<float>(d));
      }
    }
  }
}

namespace {

struct LibmFmaOp {
  float operator()(float a, float b, float c) const { return std::fmaf(a, b, c); }
};

struct BuiltinFmaOp {
  __attribute__((always_inline)) float operator()(float a, float b, float c) const {
    return __builtin_fmaf(a, b, c);
  }
};

// TensorAffine's and ElasticTransform's constants.
struct GridSample {
  const uint8_t* src;
  uint32_t height, width;
  float rx[3], ry[3];      // theta's rows / [0.5 w, 0.5 h]
  float scale_x, scale_y;  // size / 2
  float fw, fh;
  float x0, x1, y0, y1;  // the base grid's linspace ends
  bool nearest;
  const uint8_t* fill;  // nullptr: fill None
  float fill_f[3];
};

// grid_sample's steps at one grid point (gx, gy), written to out[0..2]. Fma
// is a fused multiply-add (the instruction, or libm's exact one).
template <typename Fma>
__attribute__((always_inline)) inline void SamplePoint(const GridSample& g, float gx, float gy,
                                                       uint8_t* out) {
  const size_t row = size_t{g.width} * 3;
  auto store = [](float v, uint8_t* o) {
    v = std::nearbyint(v);  // torch.round: half to even
    *o = !(v > 0.0f) ? 0 : v >= 255.0f ? 255 : static_cast<uint8_t>(v);
  };
  // (g + 1) * (size / 2) - 0.5, one fused multiply-add in torch's AVX2
  // kernel.
  const float ix = Fma()(gx + 1.0f, g.scale_x, -0.5f);
  const float iy = Fma()(gy + 1.0f, g.scale_y, -0.5f);
  if (g.nearest) {
    const float nx = std::nearbyint(ix), ny = std::nearbyint(iy);
    const bool in = nx > -1.0f && nx < g.fw && ny > -1.0f && ny < g.fh;
    if (in) {
      const uint8_t* p = g.src + static_cast<size_t>(ny) * row + static_cast<size_t>(nx) * 3;
      out[0] = p[0], out[1] = p[1], out[2] = p[2];
    } else {
      // With a fill, the mask channel is 0 exactly where the point is
      // outside: mask < 0.5 takes the fill.
      for (int c = 0; c < 3; ++c) store(g.fill_f[c], out + c);
    }
    return;
  }
  const float xw = std::floor(ix), yn = std::floor(iy);
  const float w = ix - xw, e = 1.0f - w;
  const float n = iy - yn, s = 1.0f - n;
  const float weight[4] = {s * e, s * w, n * e, n * w};  // nw, ne, sw, se
  const bool w_in = xw > -1.0f && xw<g.fw, e_in = xw + 1.0f> - 1.0f && xw + 1.0f < g.fw;
  const bool n_in = yn > -1.0f && yn<g.fh, s_in = yn + 1.0f> - 1.0f && yn + 1.0f < g.fh;
  const bool in[4] = {n_in && w_in, n_in && e_in, s_in && w_in, s_in && e_in};
  const uint8_t* corner[4] = {nullptr, nullptr, nullptr, nullptr};
  if (in[0] || in[1] || in[2] || in[3]) {
    // Only corners inside are read: their indices are in range.
    const int64_t ixw = static_cast<int64_t>(std::max(xw, -1.0f));
    const int64_t iyn = static_cast<int64_t>(std::max(yn, -1.0f));
    for (int k = 0; k < 4; ++k) {
      if (in[k]) {
        corner[k] =
            g.src + static_cast<size_t>(iyn + k / 2) * row + static_cast<size_t>(ixw + k % 2) * 3;
      }
    }
  }
  // (nw_val * nw) + (ne_val * ne) + (sw_val * sw) + (se_val * se) as
  // torch's kernel compiles it: a product, then three fused multiply-adds;
  // corners outside read 0.
  float mask = 1.0f;
  if (g.fill != nullptr) {
    mask = (in[0] ? 1.0f : 0.0f) * weight[0];
    for (int k = 1; k < 4; ++k) mask = Fma()(in[k] ? 1.0f : 0.0f, weight[k], mask);
  }
  for (int c = 0; c < 3; ++c) {
    float v = (corner[0] != nullptr ? static_cast<float>(corner[0][c]) : 0.0f) * weight[0];
    for (int k = 1; k < 4; ++k) {
      v = Fma()(corner[k] != nullptr ? static_cast<float>(corner[k][c]) : 0.0f, weight[k], v);
    }
    if (g.fill != nullptr) {
      const float kept = v * mask;
      const float rest = (1.0f - mask) * g.fill_f[c];
      v = kept + rest;
    }
    store(v, out + c);
  }
}

// The affine grid's points for the columns [x_begin, x_end) of every row,
// each sampled.
template <typename Fma>
__attribute__((always_inline)) inline void GridSampleColumns(const GridSample& g, uint32_t x_begin,
                                                             uint32_t x_end, uint8_t* dst) {
  constexpr uint32_t kBlock = 256;
  float base_x[kBlock];
  for (uint32_t x = x_begin; x < x_end; ++x) {
    base_x[x - x_begin] = TorchLinspace(g.x0, g.x1, g.width, x);
  }
  const size_t row = size_t{g.width} * 3;
  for (uint32_t y = 0; y < g.height; ++y) {
    const float base_y = TorchLinspace(g.y0, g.y1, g.height, y);
    const float py0 = base_y * g.rx[1], py1 = base_y * g.ry[1];
    for (uint32_t x = x_begin; x < x_end; ++x) {
      const float bx = base_x[x - x_begin];
      const float px0 = bx * g.rx[0], px1 = bx * g.ry[0];
      const float gx = (px0 + py0) + g.rx[2];
      const float gy = (px1 + py1) + g.ry[2];
      SamplePoint<Fma>(g, gx, gy, dst + y * row + size_t{x} * 3);
    }
  }
}

// F_t.elastic_transform's grid: _create_identity_grid (linspace from
// (1 - s) / s to (s - 1) / s on each axis) plus the displacement, in float32.
template <typename Fma>
__attribute__((always_inline)) inline void ElasticSampleAll(const GridSample& g,
                                                            const float* field, uint8_t* dst) {
  const size_t row = size_t{g.width} * 3;
  for (uint32_t y = 0; y < g.height; ++y) {
    const float base_y = TorchLinspace(g.y0, g.y1, g.height, y);
    for (uint32_t x = 0; x < g.width; ++x) {
      const float* d = field + 2 * (size_t{y} * g.width + x);
      const float gx = TorchLinspace(g.x0, g.x1, g.width, x) + d[0];
      const float gy = base_y + d[1];
      SamplePoint<Fma>(g, gx, gy, dst + y * row + size_t{x} * 3);
    }
  }
}

__attribute__((target("fma"))) void ElasticSampleFma(const GridSample& g, const float* field,
                                                     uint8_t* dst) {
  ElasticSampleAll<BuiltinFmaOp>(g, field, dst);
}

void ElasticSampleLibm(const GridSample& g, const float* field, uint8_t* dst) {
  ElasticSampleAll<LibmFmaOp>(g, field, dst);
}

template <typename Fma>
__attribute__((always_inline)) inline void GridSampleAll(const GridSample& g, uint8_t* dst) {
  for (uint32_t x = 0; x < g.width; x += 256) {
    GridSampleColumns<Fma>(g, x, std::min(g.width, x + 256), dst);
  }
}

__attribute__((target("fma"))) void GridSampleFma(const GridSample& g, uint8_t* dst) {
  GridSampleAll<BuiltinFmaOp>(g, dst);
}

void GridSampleLibm(const GridSample& g, uint8_t* dst) { GridSampleAll<LibmFmaOp>(g, dst); }

}  // namespace

void TensorAffine(const uint8_t* src, uint32_t height, uint32_t width, const double matrix[6],
                  Interpolation interpolation, const uint8_t* fill, uint8_t* dst) {
  if (height == 0 || width == 0) return;
  GridSample g;
  g.src = src;
  g.height = height, g.width = width;
  float theta[6];
  for (int i = 0; i < 6; ++i) theta[i] = static_cast<float>(matrix[i]);
  // _gen_affine_grid: theta^T / [0.5 w, 0.5 h] in float32, then each grid
  // point (x, y, 1) times it (bmm: products and sums rounded in turn).
  const float half_w = static_cast<float>(0.5 * width), half_h = static_cast<float>(0.5 * height);
  for (int k = 0; k < 3; ++k) g.rx[k] = theta[k] / half_w, g.ry[k] = theta[3 + k] / half_h;
  g.scale_x = static_cast<float>(width) / 2, g.scale_y = static_cast<float>(height) / 2;
  g.fw = static_cast<float>(width), g.fh = static_cast<float>(height);
  g.x0 = static_cast<float>(-0.5 * width + 0.5);
  g.x1 = static_cast<float>(0.5 * width + 0.5 - 1);
  g.y0 = static_cast<float>(-0.5 * height + 0.5);
  g.y1 = static_cast<float>(0.5 * height + 0.5 - 1);
  g.nearest = interpolation == Interpolation::kNearest;
  g.fill = fill;
  for (int c = 0; c < 3; ++c) g.fill_f[c] = fill != nullptr ? static_cast<float>(fill[c]) : 0.0f;
  static const bool has_fma = __builtin_cpu_supports("fma");
  if (has_fma) {
    GridSampleFma(g, dst);
  } else {
    GridSampleLibm(g, dst);
  }
}

}  // namespace stoker::image

namespace stoker::image {

uint32_t ElasticKernelSize(float sigma) {
  auto k = static_cast<uint32_t>(8.0 * static_cast<double>(sigma) + 1.0);
  return k % 2 == 0 ? k + 1 : k;
}

size_t ElasticScratch(uint32_t height, uint32_t width, const float sigma[2]) {
  const uint32_t k = std::max(ElasticKernelSize(sigma[0]), ElasticKernelSize(sigma[1]));
  return 2 * size_t{height} * width  // the noise field, its horizontal pass
         + size_t{width} + k          // one padded row
         + width                      // one output row's sums
         + 2 * size_t{k};             // the kernels
}

namespace {

// F.gaussian_blur(f, [k, k], [sx, sy]) of a height x width float32 field in
// place: reflect padding, one axis after the other.
void BlurField(float* f, uint32_t height, uint32_t width, uint32_t k, float sx, float sy,
               float* scratch) {
  float* const pass = scratch;
  float* const padded = pass + size_t{height} * width;
  float* const sums = padded + width + k;
  float* const kx = sums + width;
  float* const ky = kx + k;
  GaussianKernel(k, sx, kx);
  GaussianKernel(k, sy, ky);
  const uint32_t r = k / 2;
  for (uint32_t y = 0; y < height; ++y) {
    const float* s = f + size_t{y} * width;
    for (uint32_t x = 0; x < width + 2 * r; ++x) {
      padded[x] = s[PadIndex(int64_t{x} - r, width, PadMode::kReflect)];
    }
    for (uint32_t t0 = 0; t0 < k; t0 += kMaxTapsPerPass) {
      SumTaps([&](uint32_t t) { return padded + t0 + t; }, kx + t0,
              std::min(kMaxTapsPerPass, k - t0), width, t0 == 0, pass + size_t{y} * width);
    }
  }
  const float* rows[kMaxTapsPerPass];
  for (uint32_t y = 0; y < height; ++y) {
    for (uint32_t t0 = 0; t0 < k; t0 += kMaxTapsPerPass) {
      const uint32_t n = std::min(kMaxTapsPerPass, k - t0);
      for (uint32_t t = 0; t < n; ++t) {
        const int64_t sy_row = PadIndex(int64_t{y} + t0 + t - r, height, PadMode::kReflect);
        rows[t] = pass + static_cast<size_t>(sy_row) * width;
      }
      SumTaps([&](uint32_t t) { return rows[t]; }, ky + t0, n, width, t0 == 0, sums);
    }
    std::memcpy(f + size_t{y} * width, sums, sizeof(float) * width);
  }
}

}  // namespace

void ElasticDisplacement(uint32_t height, uint32_t width, const float alpha[2],
                         const float sigma[2], uint64_t noise_seed, float* field,
                         float* scratch) {
  const size_t n = size_t{height} * width;
  float* const noise = scratch;
  float* const blur = scratch + n;
  KeyedRng rng(noise_seed);
  const float size[2] = {static_cast<float>(height), static_cast<float>(width)};
  for (int a = 0; a < 2; ++a) {  // dx, then dy
    for (size_t i = 0; i < n; ++i) {
      const float u = static_cast<float>(rng.Next() >> 40) * 0x1p-24f;  // torch.rand: 24 bits
      noise[i] = u * 2.0f - 1.0f;
    }
    if (sigma[a] > 0.0f) {
      BlurField(noise, height, width, ElasticKernelSize(sigma[a]), sigma[0], sigma[1], blur);
    }
    for (size_t i = 0; i < n; ++i) field[2 * i + a] = noise[i] * alpha[a] / size[a];
  }
}

void ElasticTransform(const uint8_t* src, uint32_t height, uint32_t width, const float* field,
                      Interpolation interpolation, const uint8_t fill[3], uint8_t* dst) {
  if (height == 0 || width == 0) return;
  GridSample g{};
  g.src = src;
  g.height = height, g.width = width;
  g.scale_x = static_cast<float>(width) / 2, g.scale_y = static_cast<float>(height) / 2;
  g.fw = static_cast<float>(width), g.fh = static_cast<float>(height);
  g.x0 = static_cast<float>((1.0 - width) / width);
  g.x1 = static_cast<float>((width - 1.0) / width);
  g.y0 = static_cast<float>((1.0 - height) / height);
  g.y1 = static_cast<float>((height - 1.0) / height);
  g.nearest = interpolation == Interpolation::kNearest;
  g.fill = fill;
  for (int c = 0; c < 3; ++c) g.fill_f[c] = static_cast<float>(fill[c]);
  static const bool has_fma = __builtin_cpu_supports("fma");
  if (has_fma) {
    ElasticSampleFma(g, field, dst);
  } else {
    ElasticSampleLibm(g, field, dst);
  }
}

}  // namespace stoker::image
