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
#include "server/image/ops/policy.h"
#include "server/image/ops/rng.h"
#include "server/image/ops/transform.h"

namespace stoker::image {
namespace {

using internal::ApplyChannelTables;
using internal::ApplyTable;
using internal::Histograms;
using internal::kMaxTapsPerPass;
using internal::PadIndex;
using internal::SumTaps;

// One channel of PIL's ImagingBlend(degenerate, image, alpha): in float32,
// d + alpha * (x - d), clipped to [0, 255] and truncated.
inline uint8_t Blend(int d, int x, float alpha) {
  const float v = static_cast<float>(d) + alpha * static_cast<float>(x - d);
  if (v <= 0.0f) return 0;
  if (v >= 255.0f) return 255;
  return static_cast<uint8_t>(v);
}

// Blend against one grey level for every channel value, as a table.
void BlendTable(int degenerate, float alpha, uint8_t table[256]) {
  for (int v = 0; v < 256; ++v) table[v] = Blend(degenerate, v, alpha);
}

}  // namespace

void CropImage(const uint8_t* src, uint32_t src_width, const CropBox& box, uint8_t* dst) {
  const size_t row = size_t{box.width} * 3;
  for (uint32_t y = 0; y < box.height; ++y) {
    std::memcpy(dst + y * row, src + (size_t{box.top + y} * src_width + box.left) * 3, row);
  }
}

void PadImage(const uint8_t* src, uint32_t height, uint32_t width, const uint32_t pad[4],
              PadMode mode, const uint8_t fill[3], uint8_t* dst) {
  const uint32_t left = pad[0], top = pad[1];
  const uint32_t out_h = height + pad[1] + pad[3];
  const uint32_t out_w = width + pad[0] + pad[2];
  const size_t out_row = size_t{out_w} * 3;
  for (uint32_t y = 0; y < out_h; ++y) {
    uint8_t* d = dst + y * out_row;
    const int64_t sy = PadIndex(int64_t{y} - top, height, mode);
    if (sy < 0) {  // constant: a whole row of fill
      for (uint32_t x = 0; x < out_w; ++x) std::memcpy(d + 3 * x, fill, 3);
      continue;
    }
    const uint8_t* s = src + static_cast<size_t>(sy) * width * 3;
    for (uint32_t x = 0; x < left; ++x) {
      const int64_t sx = PadIndex(int64_t{x} - left, width, mode);
      std::memcpy(d + 3 * x, sx < 0 ? fill : s + 3 * sx, 3);
    }
    std::memcpy(d + size_t{left} * 3, s, size_t{width} * 3);
    for (uint32_t x = left + width; x < out_w; ++x) {
      const int64_t sx = PadIndex(int64_t{x} - left, width, mode);
      std::memcpy(d + 3 * x, sx < 0 ? fill : s + 3 * sx, 3);
    }
  }
}

void PadLabels(const uint8_t* src, uint32_t height, uint32_t width, uint32_t bpp,
               const uint32_t pad[4], PadMode mode, const uint8_t* fill, uint8_t* dst) {
  const uint32_t left = pad[0], top = pad[1];
  const uint32_t out_h = height + pad[1] + pad[3];
  const uint32_t out_w = width + pad[0] + pad[2];
  const size_t out_row = size_t{out_w} * bpp;
  for (uint32_t y = 0; y < out_h; ++y) {
    uint8_t* d = dst + y * out_row;
    const int64_t sy = PadIndex(int64_t{y} - top, height, mode);
    const uint8_t* s = sy < 0 ? nullptr : src + static_cast<size_t>(sy) * width * bpp;
    for (uint32_t x = 0; x < out_w; ++x) {
      const int64_t sx = s == nullptr ? -1 : PadIndex(int64_t{x} - left, width, mode);
      std::memcpy(d + size_t{bpp} * x, sx < 0 ? fill : s + size_t{bpp} * sx, bpp);
    }
  }
}

void FlipHorizontal(uint8_t* img, uint32_t height, uint32_t width) {
  for (uint32_t y = 0; y < height; ++y) {
    uint8_t* row = img + size_t{y} * width * 3;
    for (uint32_t a = 0, b = width - 1; a < b; ++a, --b) {
      for (int c = 0; c < 3; ++c) std::swap(row[3 * a + c], row[3 * b + c]);
    }
  }
}

void FlipVertical(uint8_t* img, uint32_t height, uint32_t width) {
  const size_t row = size_t{width} * 3;
  for (uint32_t a = 0, b = height - 1; a < b && height > 0; ++a, --b) {
    std::swap_ranges(img + a * row, img + (a + 1) * row, img + b * row);
  }
}

void ToGrayscale(uint8_t* img, size_t pixels) {
  for (size_t i = 0; i < pixels; ++i) {
    uint8_t* px = img + 3 * i;
    const uint8_t l = Luma(px[0], px[1], px[2]);
    px[0] = px[1] = px[2] = l;
  }
}

void AdjustBrightness(uint8_t* img, size_t pixels, float factor) {
  uint8_t table[256];
  BlendTable(0, factor, table);
  ApplyTable(img, pixels * 3, table);
}

void AdjustContrast(uint8_t* img, size_t pixels, float factor) {
  uint64_t sum = 0;
  for (size_t i = 0; i < pixels; ++i) {
    const uint8_t* px = img + 3 * i;
    sum += Luma(px[0], px[1], px[2]);
  }
  // ImageStat's mean of the L image (a double), rounded as int(mean + 0.5).
  const double mean = pixels > 0 ? static_cast<double>(sum) / static_cast<double>(pixels) : 0.0;
  const int grey = static_cast<int>(mean + 0.5);
  uint8_t table[256];
  BlendTable(grey, factor, table);
  ApplyTable(img, pixels * 3, table);
}

void AdjustSaturation(uint8_t* img, size_t pixels, float factor) {
  for (size_t i = 0; i < pixels; ++i) {
    uint8_t* px = img + 3 * i;
    const int l = Luma(px[0], px[1], px[2]);
    px[0] = Blend(l, px[0], factor);
    px[1] = Blend(l, px[1], factor);
    px[2] = Blend(l, px[2], factor);
  }
}

void ColorJitter(uint8_t* img, size_t pixels, const Step& step) {
  for (uint32_t k = 0; k < step.jitter_count && k < 4; ++k) {
    const uint32_t j = step.jitter_order[k];
    // _apply_op's ratio, 1.0 + magnitude in double, for a policy's tensor
    // step (its float factor has lost the magnitude's low bits).
    const double ratio = step.from_policy != 0 ? 1.0 + static_cast<double>(step.aug_magnitude)
                                               : static_cast<double>(step.factor[j]);
    switch (j) {
      case kBrightness:
        // float32(ratio) * x either way.
        AdjustBrightness(img, pixels, step.factor[j]);
        break;
      case kContrast:
        if (step.tensor_kernels != 0) {
          TensorAdjustContrast(img, pixels, ratio);
        } else {
          AdjustContrast(img, pixels, step.factor[j]);
        }
        break;
      case kSaturation:
        if (step.tensor_kernels != 0) {
          TensorAdjustSaturation(img, pixels, ratio);
        } else {
          AdjustSaturation(img, pixels, step.factor[j]);
        }
        break;
      case kHue:
        AdjustHue(img, pixels, step.factor[j]);
        break;
      default:
        break;
    }
  }
}

void GaussianKernel(uint32_t k, float sigma, float* kernel) {
  // torch.linspace(-half, half, k) in float32: start + i * step, with the
  // second half computed from the end (end - (k - 1 - i) * step), as
  // torch's linspace kernel does.
  const float half = static_cast<float>(k - 1) * 0.5f;
  const float step = k > 1 ? (half - -half) / static_cast<float>(k - 1) : 0.0f;
  float sum = 0.0f;
  for (uint32_t i = 0; i < k; ++i) {
    const float x = i < k / 2 ? -half + step * static_cast<float>(i)
                              : half - step * static_cast<float>(k - 1 - i);
    const float t = x / sigma;
    kernel[i] = std::exp(-0.5f * (t * t));
    sum += kernel[i];
  }
  for (uint32_t i = 0; i < k; ++i) kernel[i] /= sum;
}

size_t GaussianBlurScratch(uint32_t height, uint32_t width, uint32_t kernel_x, uint32_t kernel_y) {
  return size_t{height} * width * 3        // horizontal pass
         + (size_t{width} + kernel_x) * 3  // one padded input row
         + size_t{width} * 3               // one output row's sums
         + kernel_x + kernel_y;
}


void GaussianBlur(const uint8_t* src, uint32_t height, uint32_t width, uint32_t kernel_x,
                  uint32_t kernel_y, float sigma, float* scratch, uint8_t* dst) {
  const size_t row = size_t{width} * 3;
  const uint32_t rx = kernel_x / 2, ry = kernel_y / 2;
  float* const pass = scratch;
  float* const padded = pass + size_t{height} * row;
  float* const sums = padded + (size_t{width} + kernel_x) * 3;
  float* const kx = sums + row;
  float* const ky = kx + kernel_x;
  GaussianKernel(kernel_x, sigma, kx);
  GaussianKernel(kernel_y, sigma, ky);
  // Each output value sums its taps in kernel order, one axis then the
  // other; the loops run over a whole row per tap so that they vectorize.
  for (uint32_t y = 0; y < height; ++y) {
    const uint8_t* s = src + y * row;
    for (uint32_t x = 0; x < rx; ++x) {  // the reflected edges
      const int64_t l = PadIndex(int64_t{x} - rx, width, PadMode::kReflect);
      const int64_t r = PadIndex(int64_t{width} + x, width, PadMode::kReflect);
      for (int c = 0; c < 3; ++c) {
        padded[3 * x + c] = s[3 * l + c];
        padded[3 * (size_t{rx} + width + x) + c] = s[3 * r + c];
      }
    }
    float* __restrict mid = padded + 3 * size_t{rx};
    for (size_t i = 0; i < row; ++i) mid[i] = s[i];
    for (uint32_t t0 = 0; t0 < kernel_x; t0 += kMaxTapsPerPass) {
      SumTaps([&](uint32_t t) { return padded + 3 * size_t{t0 + t}; }, kx + t0,
              std::min(kMaxTapsPerPass, kernel_x - t0), row, t0 == 0, pass + y * row);
    }
  }
  const float* rows[kMaxTapsPerPass];
  for (uint32_t y = 0; y < height; ++y) {
    // The rows of each group of taps, reflected at the top and bottom.
    for (uint32_t t0 = 0; t0 < kernel_y; t0 += kMaxTapsPerPass) {
      const uint32_t n = std::min(kMaxTapsPerPass, kernel_y - t0);
      for (uint32_t t = 0; t < n; ++t) {
        const int64_t sy = PadIndex(int64_t{y} + t0 + t - ry, height, PadMode::kReflect);
        rows[t] = pass + static_cast<size_t>(sy) * row;
      }
      SumTaps([&](uint32_t t) { return rows[t]; }, ky + t0, n, row, t0 == 0, sums);
    }
    const float* __restrict acc = sums;
    uint8_t* __restrict d = dst + y * row;
    for (size_t i = 0; i < row; ++i) {
      // torch.round (half to even): adding and taking away 1.5 * 2^23 rounds
      // to an integer in the current (to nearest even) mode. The sums are
      // >= 0 (weights and pixels are), and at most 255 plus the kernel's
      // rounding, which rounds to 255.
      const float rounded = (acc[i] + 0x1.8p23f) - 0x1.8p23f;
      const int v = static_cast<int>(rounded);
      d[i] = static_cast<uint8_t>(v < 255 ? v : 255);
    }
  }
}

// --- The ops of the augmentation policies ---

void ApplyLut(uint8_t* img, size_t pixels, const uint8_t lut[256]) {
  ApplyTable(img, pixels * 3, lut);
}

void Posterize(uint8_t* img, size_t pixels, uint32_t bits) {
  // A mask rather than the table: the loop vectorizes.
  const auto mask = static_cast<uint8_t>(~((1u << (8 - std::min(bits, 8u))) - 1u) & 0xffu);
  for (size_t i = 0; i < pixels * 3; ++i) img[i] = static_cast<uint8_t>(img[i] & mask);
}

void Solarize(uint8_t* img, size_t pixels, double threshold) {
  // v < threshold for integers v is v < first, the least integer in
  // [0, 256] that is not below it: one compare per byte, vectorized.
  int first = 0;
  while (first < 256 && static_cast<double>(first) < threshold) ++first;
  for (size_t i = 0; i < pixels * 3; ++i) {
    const int v = img[i];
    img[i] = static_cast<uint8_t>(v < first ? v : 255 - v);
  }
}

void Invert(uint8_t* img, size_t pixels) {
  for (size_t i = 0; i < pixels * 3; ++i) img[i] = static_cast<uint8_t>(255 - img[i]);
}

namespace {

}  // namespace

void Autocontrast(uint8_t* img, size_t pixels) {
  uint64_t hist[3][256];
  Histograms(img, pixels, hist);
  uint8_t lut[3][256];
  for (int c = 0; c < 3; ++c) {
    int lo = 0, hi = 255;
    while (lo < 256 && hist[c][lo] == 0) ++lo;
    while (hi >= 0 && hist[c][hi] == 0) --hi;
    if (hi <= lo) {
      for (int v = 0; v < 256; ++v) lut[c][v] = static_cast<uint8_t>(v);
      continue;
    }
    const double scale = 255.0 / static_cast<double>(hi - lo);
    const double offset = static_cast<double>(-lo) * scale;
    for (int v = 0; v < 256; ++v) {
      const int t = static_cast<int>(static_cast<double>(v) * scale + offset);
      lut[c][v] = static_cast<uint8_t>(t < 0 ? 0 : t > 255 ? 255 : t);
    }
  }
  ApplyChannelTables(img, pixels, lut);
}

void Equalize(uint8_t* img, size_t pixels) {
  uint64_t hist[3][256];
  Histograms(img, pixels, hist);
  uint8_t lut[3][256];
  for (int c = 0; c < 3; ++c) {
    uint64_t total = 0, last = 0;
    int used = 0;
    for (int v = 0; v < 256; ++v) {
      if (hist[c][v] == 0) continue;
      total += hist[c][v];
      last = hist[c][v];
      ++used;
    }
    const uint64_t step = used > 1 ? (total - last) / 255 : 0;
    if (step == 0) {
      for (int v = 0; v < 256; ++v) lut[c][v] = static_cast<uint8_t>(v);
      continue;
    }
    // PIL's list may hold 256 past the last value; Image.point clips it.
    uint64_t n = step / 2;
    for (int v = 0; v < 256; ++v) {
      const uint64_t t = n / step;
      lut[c][v] = static_cast<uint8_t>(t > 255 ? 255 : t);
      n += hist[c][v];
    }
  }
  ApplyChannelTables(img, pixels, lut);
}

namespace {

typedef float Floats4S __attribute__((vector_size(16)));
typedef int32_t Ints4S __attribute__((vector_size(16)));

// Pillow's clip8 then (UINT8) of 4 floats, as ints: the same values as its
// branches, element-wise.
inline Ints4S Clip8(Floats4S v) {
  const Floats4S zero = {0, 0, 0, 0}, top = {255, 255, 255, 255};
  v = v < zero ? zero : v;
  v = v > top ? top : v;
  return __builtin_convertvector(v, Ints4S);
}

inline Floats4S LoadFloats4(const float* p) {
  Floats4S v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// Bytes [first, end) of one inner row of AdjustSharpness: `rows` are the
// row above, the row and the row below (the originals), `out` the row to
// write. Converted to float a chunk at a time on the stack; each lane is one
// byte's float32 computation in Pillow's order (no reassociation).
void SharpenRow(const uint8_t* const rows[3], size_t first, size_t end, float factor,
                uint8_t* out) {
  constexpr size_t kChunk = 256;
  float in[3][kChunk + 8];
  int32_t res[kChunk];
  const float k1 = 1.0f / 13.0f, k5 = 5.0f / 13.0f;  // _imaging.c's kernel / divisor
  const Floats4S vk1 = {k1, k1, k1, k1}, vk5 = {k5, k5, k5, k5};
  const Floats4S vf = {factor, factor, factor, factor};
  for (size_t i0 = first; i0 < end; i0 += kChunk) {
    const size_t n = std::min(kChunk, end - i0);
    const size_t n4 = (n + 3) & ~size_t{3};  // lanes past n read zeros, unused
    for (int r = 0; r < 3; ++r) {
      const uint8_t* s = rows[r] + i0 - 3;
      for (size_t k = 0; k < n + 6; ++k) in[r][k] = s[k];
      for (size_t k = n + 6; k < n4 + 6; ++k) in[r][k] = 0.0f;
    }
    for (size_t k = 0; k < n4; k += 4) {
      // 0.5, then the row below, this row, the row above, each row's three
      // products summed left to right.
      Floats4S ss = {0.5f, 0.5f, 0.5f, 0.5f};
      ss += LoadFloats4(in[2] + k) * vk1 + LoadFloats4(in[2] + k + 3) * vk1 +
            LoadFloats4(in[2] + k + 6) * vk1;
      ss += LoadFloats4(in[1] + k) * vk1 + LoadFloats4(in[1] + k + 3) * vk5 +
            LoadFloats4(in[1] + k + 6) * vk1;
      ss += LoadFloats4(in[0] + k) * vk1 + LoadFloats4(in[0] + k + 3) * vk1 +
            LoadFloats4(in[0] + k + 6) * vk1;
      const Ints4S smooth = Clip8(ss);
      // Blend(smooth, image, factor): d + factor * (x - d) in float32; x - d
      // is exact in float.
      const Floats4S d = __builtin_convertvector(smooth, Floats4S);
      const Floats4S v = d + vf * (LoadFloats4(in[1] + k + 3) - d);
      const Ints4S r = Clip8(v);
      std::memcpy(res + k, &r, sizeof(r));
    }
    for (size_t k = 0; k < n; ++k) out[i0 + k] = static_cast<uint8_t>(res[k]);
  }
}

}  // namespace

void AdjustSharpness(uint8_t* img, uint32_t height, uint32_t width, float factor,
                     uint8_t* scratch) {
  // Pillow returns a copy when the image is smaller than the kernel, and
  // copies the outer ring of pixels: Blend(x, x, f) == x, so both stay.
  if (height < 3 || width < 3 || factor == 1.0f) return;
  const size_t row = size_t{width} * 3;
  std::memcpy(scratch, img, size_t{height} * row);
  for (uint32_t y = 1; y + 1 < height; ++y) {
    const uint8_t* mid = scratch + y * row;
    const uint8_t* const rows[3] = {mid - row, mid, mid + row};
    SharpenRow(rows, 3, row - 3, factor, img + y * row);
  }
}

void MixStart(const uint8_t* img, size_t pixels, float weight, float* acc) {
  for (size_t i = 0; i < pixels * 3; ++i) acc[i] = weight * static_cast<float>(img[i]);
}

void MixAdd(const uint8_t* img, size_t pixels, float weight, float* acc) {
  for (size_t i = 0; i < pixels * 3; ++i) acc[i] += weight * static_cast<float>(img[i]);
}

void MixFinish(const float* acc, size_t pixels, uint8_t* img) {
  for (size_t i = 0; i < pixels * 3; ++i) {
    img[i] = static_cast<uint8_t>(static_cast<int>(std::min(std::max(acc[i], 0.0f), 255.0f)));
  }
}

namespace {

// The box's normal(0, 1) noise in [c][y][x] order, written through `put(c,
// y, x, v)` (ops.h gives the recipe).
template <typename Put>
void EraseNoise(const Step& step, Put put) {
  KeyedRng rng(step.noise_seed);
  constexpr double kTwoPi = 2.0 * std::numbers::pi;
  float spare = 0.0f;
  bool has_spare = false;
  for (uint32_t c = 0; c < 3; ++c) {
    for (uint32_t y = 0; y < step.height; ++y) {
      for (uint32_t x = 0; x < step.width; ++x) {
        float z;
        if (has_spare) {
          z = spare;
          has_spare = false;
        } else {
          // float32 log / sqrt / sin / cos: half the cost of double's.
          const double u1 = rng.Uniform(), u2 = rng.Uniform();
          const float r = std::sqrt(-2.0f * std::log(static_cast<float>(1.0 - u1)));
          const auto a = static_cast<float>(kTwoPi * u2);
          z = r * std::cos(a);
          spare = r * std::sin(a);
          has_spare = true;
        }
        put(c, y, x, z);
      }
    }
  }
}

// The box set to one value per channel, row by row.
template <typename T>
void EraseConstant(T* out, uint32_t out_height, uint32_t out_width, bool nchw, const Step& step,
                   const T value[3]) {
  for (uint32_t y = step.top; y < step.top + step.height; ++y) {
    if (nchw) {
      for (uint32_t c = 0; c < 3; ++c) {
        T* row = out + (size_t{c} * out_height + y) * out_width + step.left;
        std::fill(row, row + step.width, value[c]);
      }
    } else {
      T* px = out + (size_t{y} * out_width + step.left) * 3;
      for (uint32_t x = 0; x < step.width; ++x, px += 3) {
        px[0] = value[0], px[1] = value[1], px[2] = value[2];
      }
    }
  }
}

// torch's uint8 of a value: truncated toward zero, clamped here.
inline uint8_t ToUint8(float v) {
  return v <= 0.0f ? 0 : v >= 255.0f ? 255 : static_cast<uint8_t>(v);
}

}  // namespace

void EraseOutput(void* out, uint32_t out_height, uint32_t out_width, uint32_t dtype,
                 uint32_t layout, const Step& step) {
  const bool nchw = layout == ring::kNCHW;
  const size_t plane = size_t{out_height} * out_width;
  auto index = [&](uint32_t c, uint32_t y, uint32_t x) {
    const size_t py = size_t{step.top} + y, px = size_t{step.left} + x;
    return nchw ? c * plane + py * out_width + px : (py * out_width + px) * 3 + c;
  };
  const float* v = step.erase_value;
  switch (dtype) {
    case ring::kUint8: {
      auto* o = static_cast<uint8_t*>(out);
      if (step.erase_random == 0) {
        const uint8_t value[3] = {ToUint8(v[0]), ToUint8(v[1]), ToUint8(v[2])};
        EraseConstant(o, out_height, out_width, nchw, step, value);
      } else {
        EraseNoise(step, [&](uint32_t c, uint32_t y, uint32_t x, float z) {
          o[index(c, y, x)] = ToUint8(z);
        });
      }
      break;
    }
    case ring::kFloat32: {
      auto* o = static_cast<float*>(out);
      if (step.erase_random == 0) {
        EraseConstant(o, out_height, out_width, nchw, step, v);
      } else {
        EraseNoise(step,
                   [&](uint32_t c, uint32_t y, uint32_t x, float z) { o[index(c, y, x)] = z; });
      }
      break;
    }
    case ring::kFloat16: {
      auto* o = static_cast<uint16_t*>(out);
      if (step.erase_random == 0) {
        const uint16_t value[3] = {FloatToHalf(v[0]), FloatToHalf(v[1]), FloatToHalf(v[2])};
        EraseConstant(o, out_height, out_width, nchw, step, value);
      } else {
        EraseNoise(step, [&](uint32_t c, uint32_t y, uint32_t x, float z) {
          o[index(c, y, x)] = FloatToHalf(z);
        });
      }
      break;
    }
    default:
      break;
  }
}

}  // namespace stoker::image
