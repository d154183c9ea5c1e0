#include "server/image/ops/transform.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "stoker/ring_layout.h"

namespace stoker::image {
namespace {

constexpr int kPrecisionBits = AxisPlan::kPrecisionBits;
constexpr int32_t kHalf = 1 << (kPrecisionBits - 1);
constexpr double kOne = static_cast<double>(1 << kPrecisionBits);

inline uint8_t Clip8(int32_t v) {
  v >>= kPrecisionBits;
  return static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
}

// Pillow's bilinear (triangle) filter, support 1.
inline double Triangle(double x) {
  if (x < 0.0) x = -x;
  return x < 1.0 ? 1.0 - x : 0.0;
}

// Pillow's bicubic filter (a = -0.5), support 2.
inline double Bicubic(double x) {
  constexpr double a = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

// Python's round(): half to even (the default floating-point rounding mode).
inline int64_t RoundHalfEven(double v) { return static_cast<int64_t>(std::nearbyint(v)); }

void ResetPlan(uint32_t out_size, uint32_t ksize, AxisPlan* plan) {
  plan->out_size = out_size;
  plan->ksize = ksize;
  plan->first.resize(out_size);
  plan->count.resize(out_size);
  plan->coeffs.resize(size_t{out_size} * ksize);
}

void FinishPlan(AxisPlan* plan) {
  int32_t lo = INT32_MAX, hi = INT32_MIN;
  for (uint32_t i = 0; i < plan->out_size; ++i) {
    if (plan->count[i] <= 0) continue;
    lo = std::min(lo, plan->first[i]);
    hi = std::max(hi, plan->first[i] + plan->count[i]);
  }
  if (lo > hi) lo = hi = 0;
  plan->min_index = lo;
  plan->end_index = hi;
  // Coefficients laid out for the two-pixel AVX2 row kernel.
  plan->pairs.clear();
  const uint32_t k = plan->ksize;
  if (k > 13) return;
  const uint32_t pair_count = (plan->out_size + 1) / 2;
  plan->pairs.resize(size_t{pair_count} * k * 8);
  for (uint32_t p = 0; p < pair_count; ++p) {
    for (uint32_t t = 0; t < k; ++t) {
      int32_t* dst = &plan->pairs[(size_t{p} * k + t) * 8];
      const uint32_t i0 = 2 * p, i1 = std::min(2 * p + 1, plan->out_size - 1);
      for (int lane = 0; lane < 4; ++lane) {
        dst[lane] = plan->coeffs[size_t{i0} * k + t];
        dst[4 + lane] = plan->coeffs[size_t{i1} * k + t];
      }
    }
  }
}

// The clamp range of a spec on an axis of `size` pixels, as integers.
void ClampRange(const AxisSpec& spec, uint32_t size, int32_t* lo, int32_t* len) {
  const int64_t l = std::clamp<int64_t>(static_cast<int64_t>(spec.lo), 0, int64_t{size} - 1);
  const int64_t h = std::clamp<int64_t>(static_cast<int64_t>(spec.hi), l + 1, int64_t{size});
  *lo = static_cast<int32_t>(l);
  *len = static_cast<int32_t>(h - l);
}

}  // namespace

CropBox ChooseTrainCrop(uint32_t height, uint32_t width, const OpParams& op, KeyedRng& rng) {
  const double area = static_cast<double>(height) * width;
  const float ratio_min = op.ratio[0], ratio_max = op.ratio[1];
  const double log_ratio_min = std::log(static_cast<double>(ratio_min));
  const double log_ratio_max = std::log(static_cast<double>(ratio_max));
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * rng.Uniform(op.scale[0], op.scale[1]);
    const double aspect = std::exp(rng.Uniform(log_ratio_min, log_ratio_max));
    const int64_t w = RoundHalfEven(std::sqrt(target_area * aspect));
    const int64_t h = RoundHalfEven(std::sqrt(target_area / aspect));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      CropBox box;
      box.height = static_cast<uint32_t>(h);
      box.width = static_cast<uint32_t>(w);
      box.top = static_cast<uint32_t>(rng.Below(height - box.height + 1));
      box.left = static_cast<uint32_t>(rng.Below(width - box.width + 1));
      return box;
    }
  }
  // Fallback: the central crop, the aspect ratio clamped into [min, max].
  const double in_ratio = static_cast<double>(width) / height;
  int64_t w = width, h = height;
  if (in_ratio < ratio_min) {
    h = RoundHalfEven(static_cast<double>(w) / ratio_min);
  } else if (in_ratio > ratio_max) {
    w = RoundHalfEven(static_cast<double>(h) * ratio_max);
  }
  h = std::clamp<int64_t>(h, 1, height);
  w = std::clamp<int64_t>(w, 1, width);
  CropBox box;
  box.height = static_cast<uint32_t>(h);
  box.width = static_cast<uint32_t>(w);
  box.top = (height - box.height) / 2;
  box.left = (width - box.width) / 2;
  return box;
}

bool ChooseFlip(float p, KeyedRng& rng) { return rng.Uniform() < p; }

void ResizeOutputSize(uint32_t height, uint32_t width, const OpParams& op, uint32_t* out_height,
                      uint32_t* out_width) {
  if (op.width != 0) {
    *out_height = op.height;
    *out_width = op.width;
    return;
  }
  const uint64_t short_side = std::min(height, width);
  const uint64_t long_side = std::max(height, width);
  // int(size * long / short): a true division of the exact product, truncated.
  uint64_t new_short = op.height;
  auto new_long = static_cast<uint64_t>(static_cast<double>(new_short * long_side) /
                                        static_cast<double>(short_side));
  if (op.max_size != 0 && new_long > op.max_size) {
    new_short = static_cast<uint64_t>(static_cast<double>(uint64_t{op.max_size} * new_short) /
                                      static_cast<double>(new_long));
    new_long = op.max_size;
  }
  const auto s = static_cast<uint32_t>(std::min<uint64_t>(new_short, UINT32_MAX));
  const auto l = static_cast<uint32_t>(std::min<uint64_t>(new_long, UINT32_MAX));
  *out_height = width <= height ? l : s;
  *out_width = width <= height ? s : l;
}

uint32_t CenterCropOffset(uint32_t size, uint32_t crop) {
  return static_cast<uint32_t>(RoundHalfEven((static_cast<double>(size) - crop) / 2.0));
}

AxisSpec CropResizeCropAxis(uint32_t pos, uint32_t len, uint32_t resized, int32_t offset,
                            uint32_t out) {
  AxisSpec a;
  a.lo = pos;
  a.hi = static_cast<double>(pos) + len;
  a.start = 0;
  a.scale = static_cast<double>(len) / resized;
  a.offset = offset;
  a.out_size = out;
  return a;
}

AxisSpec CropResizeAxis(uint32_t pos, uint32_t len, uint32_t out) {
  return CropResizeCropAxis(pos, len, out, 0, out);
}

AxisSpec ResizeCropAxis(uint32_t size, uint32_t resized, int32_t offset, uint32_t out) {
  return CropResizeCropAxis(0, size, resized, offset, out);
}

AxisSpec MirrorAxis(const AxisSpec& a, uint32_t size) {
  AxisSpec m;
  m.lo = size - a.hi;
  m.hi = size - a.lo;
  m.scale = a.scale;
  m.out_size = a.out_size;
  m.offset = 0;
  m.start = (a.hi - a.lo) - a.start - (static_cast<double>(a.out_size) + a.offset) * a.scale;
  return m;
}

AxisSpec ScaleAxis(const AxisSpec& a, int num, uint32_t decoded) {
  if (num == 8) return a;
  const double f = num / 8.0;
  AxisSpec s;
  s.lo = std::floor(a.lo * f + 0.5);
  s.hi = std::min<double>(std::floor(a.hi * f + 0.5), decoded);
  if (s.hi < s.lo + 1) s.hi = s.lo + 1;
  s.start = a.lo * f - s.lo + a.start * f;
  s.scale = a.scale * f;
  s.offset = a.offset;
  s.out_size = a.out_size;
  return s;
}

void BuildAntialiasPlan(const AxisSpec& spec, uint32_t size, AxisPlan* plan, PilFilter filter) {
  int32_t lo, in_size;
  ClampRange(spec, size, &lo, &in_size);
  const bool bicubic = filter == PilFilter::kBicubic;
  const double scale = spec.scale;
  const double filterscale = std::max(scale, 1.0);
  const double support = (bicubic ? 2.0 : 1.0) * filterscale;
  const auto ksize = static_cast<uint32_t>(std::ceil(support)) * 2 + 1;
  ResetPlan(spec.out_size, ksize, plan);
  // Doubles first (as Pillow), then normalized, then to fixed point.
  double weights[64];
  double* w = ksize <= 64 ? weights : nullptr;
  std::vector<double> big;
  if (w == nullptr) {
    big.resize(ksize);
    w = big.data();
  }
  const double ss = 1.0 / filterscale;
  for (uint32_t i = 0; i < spec.out_size; ++i) {
    const double center = spec.start + (static_cast<double>(i) + spec.offset + 0.5) * scale;
    int32_t xmin = static_cast<int32_t>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int32_t xmax = static_cast<int32_t>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    if (xmax < 0) xmax = 0;
    if (static_cast<uint32_t>(xmax) > ksize) xmax = static_cast<int32_t>(ksize);
    double ww = 0.0;
    for (int32_t x = 0; x < xmax; ++x) {
      const double t = (x + xmin - center + 0.5) * ss;
      w[x] = bicubic ? Bicubic(t) : Triangle(t);
      ww += w[x];
    }
    int32_t* k = &plan->coeffs[size_t{i} * ksize];
    for (int32_t x = 0; x < xmax; ++x) {
      const double v = ww != 0.0 ? w[x] / ww : w[x];
      k[x] = v < 0 ? static_cast<int32_t>(-0.5 + v * kOne) : static_cast<int32_t>(0.5 + v * kOne);
    }
    for (uint32_t x = xmax; x < ksize; ++x) k[x] = 0;
    plan->first[i] = lo + xmin;
    plan->count[i] = xmax;
  }
  FinishPlan(plan);
}

void BuildBilinearPlan(const AxisSpec& spec, uint32_t size, AxisPlan* plan) {
  int32_t lo, in_size;
  ClampRange(spec, size, &lo, &in_size);
  ResetPlan(spec.out_size, 2, plan);
  for (uint32_t i = 0; i < spec.out_size; ++i) {
    double src = spec.start + (static_cast<double>(i) + spec.offset + 0.5) * spec.scale - 0.5;
    if (src < 0) src = 0;
    int32_t x0 = static_cast<int32_t>(src);
    if (x0 > in_size - 1) x0 = in_size - 1;
    const double lambda = std::clamp(src - x0, 0.0, 1.0);
    int32_t* k = &plan->coeffs[size_t{i} * 2];
    plan->first[i] = lo + x0;
    if (x0 < in_size - 1) {
      const auto c1 = static_cast<int32_t>(0.5 + lambda * kOne);
      k[0] = (1 << kPrecisionBits) - c1;
      k[1] = c1;
      plan->count[i] = 2;
    } else {
      k[0] = 1 << kPrecisionBits;
      k[1] = 0;
      plan->count[i] = 1;
    }
  }
  FinishPlan(plan);
}

namespace {

// Horizontal kernels are templates on kTaps. kTaps > 0 (the plan's ksize):
// every output has kTaps taps (zero weights past its count), so the loops
// unroll; they read up to kTaps - 1 pixels (+1 byte) past an output's last
// tap, and callers pad rows by kResamplePadBytes. kTaps == 0: output i has
// plan.count[i] taps at a stride of plan.ksize (large downscales without DCT
// scaling). Vertical kernels use each output's exact row count. The SIMD
// versions compute exactly the same int32 sums as the scalar ones.
template <int kTaps>
void RowScalar(const uint8_t* src, int32_t src_x0, const AxisPlan& plan, uint8_t* dst) {
  // Locals: stores through dst (uint8_t) may alias the plan's vectors.
  const int32_t *first = plan.first.data(), *count = plan.count.data();
  const int32_t* coeffs = plan.coeffs.data();
  const uint32_t out_size = plan.out_size;
  const size_t stride = kTaps > 0 ? kTaps : plan.ksize;
  for (uint32_t i = 0; i < out_size; ++i) {
    const uint8_t* s = src + static_cast<ptrdiff_t>(first[i] - src_x0) * 3;
    const int32_t* k = coeffs + i * stride;
    const int32_t n = kTaps > 0 ? kTaps : count[i];
    int32_t a0 = kHalf, a1 = kHalf, a2 = kHalf;
    for (int32_t t = 0; t < n; ++t) {
      a0 += s[3 * t + 0] * k[t];
      a1 += s[3 * t + 1] * k[t];
      a2 += s[3 * t + 2] * k[t];
    }
    dst[3 * i + 0] = Clip8(a0);
    dst[3 * i + 1] = Clip8(a1);
    dst[3 * i + 2] = Clip8(a2);
  }
}

void ColumnScalar(const uint8_t* const* rows, const int32_t* k, int32_t n, size_t begin, size_t end,
                  uint8_t* out) {
  for (size_t x = begin; x < end; ++x) {
    int32_t a = kHalf;
    for (int32_t t = 0; t < n; ++t) a += rows[t][x] * k[t];
    out[x] = Clip8(a);
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
#define STOKER_X86_SIMD 1

// One output pixel = one 4 x int32 vector (R, G, B, and a lane discarded).
// kTaps as for RowScalar.
template <int kTaps>
__attribute__((target("sse4.1"))) void RowSse41(const uint8_t* src, int32_t src_x0,
                                                const AxisPlan& plan, uint8_t* dst) {
  const int32_t *first = plan.first.data(), *count = plan.count.data();
  const int32_t* coeffs = plan.coeffs.data();
  const uint32_t out_size = plan.out_size;
  const size_t stride = kTaps > 0 ? kTaps : plan.ksize;
  const __m128i half = _mm_set1_epi32(kHalf);
  for (uint32_t i = 0; i < out_size; ++i) {
    const uint8_t* s = src + static_cast<ptrdiff_t>(first[i] - src_x0) * 3;
    const int32_t* k = coeffs + i * stride;
    const int32_t n = kTaps > 0 ? kTaps : count[i];
    __m128i a = half;
#pragma GCC unroll 16
    for (int32_t t = 0; t < n; ++t) {
      int32_t bytes;
      std::memcpy(&bytes, s + 3 * t, sizeof(bytes));
      const __m128i px = _mm_cvtepu8_epi32(_mm_cvtsi32_si128(bytes));
      a = _mm_add_epi32(a, _mm_mullo_epi32(px, _mm_set1_epi32(k[t])));
    }
    a = _mm_srai_epi32(a, kPrecisionBits);
    const __m128i packed = _mm_packus_epi16(_mm_packs_epi32(a, a), a);
    const int32_t rgbx = _mm_cvtsi128_si32(packed);
    // 4 bytes: the 4th is overwritten by the next pixel; the last writes 3.
    std::memcpy(dst + 3 * i, &rgbx, i + 1 < out_size ? 4 : 3);
  }
}

// Two output pixels per step: lanes 0-3 pixel i, lanes 4-7 pixel i + 1.
// `pairs` holds, per pair and tap, {k_i[t] x 4, k_i+1[t] x 4}.
template <int K>
__attribute__((target("avx2"))) void RowKernelAvx2(const uint8_t* src, int32_t src_x0,
                                                   const int32_t* first, const int32_t* pairs,
                                                   uint32_t out_size, uint8_t* dst) {
  const __m256i half = _mm256_set1_epi32(kHalf);
  uint32_t i = 0;
  for (; i + 2 <= out_size; i += 2) {
    const uint8_t* s0 = src + static_cast<ptrdiff_t>(first[i] - src_x0) * 3;
    const uint8_t* s1 = src + static_cast<ptrdiff_t>(first[i + 1] - src_x0) * 3;
    const int32_t* k = pairs + size_t{i / 2} * K * 8;
    __m256i a = half;
#pragma GCC unroll 16
    for (int t = 0; t < K; ++t) {
      int32_t b0, b1;
      std::memcpy(&b0, s0 + 3 * t, sizeof(b0));
      std::memcpy(&b1, s1 + 3 * t, sizeof(b1));
      const __m256i px = _mm256_cvtepu8_epi32(_mm_insert_epi32(_mm_cvtsi32_si128(b0), b1, 1));
      const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(k + 8 * t));
      a = _mm256_add_epi32(a, _mm256_mullo_epi32(px, c));
    }
    a = _mm256_srai_epi32(a, kPrecisionBits);
    const __m256i p16 = _mm256_packs_epi32(a, a);
    const __m256i p8 = _mm256_packus_epi16(p16, p16);
    const int32_t rgb0 = _mm256_extract_epi32(p8, 0);
    const int32_t rgb1 = _mm256_extract_epi32(p8, 4);
    std::memcpy(dst + 3 * i, &rgb0, 4);
    std::memcpy(dst + 3 * i + 3, &rgb1, i + 2 < out_size ? 4 : 3);
  }
  if (i < out_size) {  // odd count: the last pixel alone, its pair's second half unused
    const uint8_t* s0 = src + static_cast<ptrdiff_t>(first[i] - src_x0) * 3;
    const int32_t* k = pairs + size_t{i / 2} * K * 8;
    int32_t a[3] = {kHalf, kHalf, kHalf};
    for (int t = 0; t < K; ++t) {
      for (int c = 0; c < 3; ++c) a[c] += s0[3 * t + c] * k[8 * t];
    }
    for (int c = 0; c < 3; ++c) dst[3 * i + c] = Clip8(a[c]);
  }
}

// 16 columns per step, every tap in registers.
__attribute__((target("sse4.1"))) void ColumnSse41(const uint8_t* const* rows, const int32_t* k,
                                                   int32_t n, size_t row_bytes, uint8_t* out) {
  const __m128i half = _mm_set1_epi32(kHalf);
  size_t x = 0;
  for (; x + 16 <= row_bytes; x += 16) {
    __m128i a0 = half, a1 = half, a2 = half, a3 = half;
    for (int32_t t = 0; t < n; ++t) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[t] + x));
      const __m128i c = _mm_set1_epi32(k[t]);
      a0 = _mm_add_epi32(a0, _mm_mullo_epi32(_mm_cvtepu8_epi32(v), c));
      a1 = _mm_add_epi32(a1, _mm_mullo_epi32(_mm_cvtepu8_epi32(_mm_srli_si128(v, 4)), c));
      a2 = _mm_add_epi32(a2, _mm_mullo_epi32(_mm_cvtepu8_epi32(_mm_srli_si128(v, 8)), c));
      a3 = _mm_add_epi32(a3, _mm_mullo_epi32(_mm_cvtepu8_epi32(_mm_srli_si128(v, 12)), c));
    }
    a0 = _mm_srai_epi32(a0, kPrecisionBits);
    a1 = _mm_srai_epi32(a1, kPrecisionBits);
    a2 = _mm_srai_epi32(a2, kPrecisionBits);
    a3 = _mm_srai_epi32(a3, kPrecisionBits);
    const __m128i packed = _mm_packus_epi16(_mm_packs_epi32(a0, a1), _mm_packs_epi32(a2, a3));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + x), packed);
  }
  ColumnScalar(rows, k, n, x, row_bytes, out);
}

// 32 columns per step.
__attribute__((target("avx2"))) void ColumnAvx2(const uint8_t* const* rows, const int32_t* k,
                                                int32_t n, size_t row_bytes, uint8_t* out) {
  const __m256i half = _mm256_set1_epi32(kHalf);
  size_t x = 0;
  for (; x + 32 <= row_bytes; x += 32) {
    __m256i a0 = half, a1 = half, a2 = half, a3 = half;
    for (int32_t t = 0; t < n; ++t) {
      const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[t] + x));
      const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[t] + x + 16));
      const __m256i c = _mm256_set1_epi32(k[t]);
      a0 = _mm256_add_epi32(a0, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(lo), c));
      a1 = _mm256_add_epi32(a1, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8)), c));
      a2 = _mm256_add_epi32(a2, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(hi), c));
      a3 = _mm256_add_epi32(a3, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8)), c));
    }
    a0 = _mm256_srai_epi32(a0, kPrecisionBits);
    a1 = _mm256_srai_epi32(a1, kPrecisionBits);
    a2 = _mm256_srai_epi32(a2, kPrecisionBits);
    a3 = _mm256_srai_epi32(a3, kPrecisionBits);
    // packs work per 128-bit lane: fix the order with one permute.
    const __m256i p16a = _mm256_packs_epi32(a0, a1);  // a0l a1l | a0h a1h
    const __m256i p16b = _mm256_packs_epi32(a2, a3);
    __m256i p8 = _mm256_packus_epi16(p16a, p16b);  // a0l a1l a2l a3l | a0h a1h a2h a3h
    p8 = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + x), p8);
  }
  ColumnScalar(rows, k, n, x, row_bytes, out);
}

std::atomic<int> simd_cap{2};  // SetSimdLevelForTesting

bool HasSse41() {
  static const bool has = __builtin_cpu_supports("sse4.1");
  return has && simd_cap.load(std::memory_order_relaxed) >= 1;
}
bool HasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has && simd_cap.load(std::memory_order_relaxed) >= 2;
}
#endif

template <int K>
void RowKernel(const uint8_t* src, int32_t src_x0, const AxisPlan& plan, uint8_t* dst) {
#ifdef STOKER_X86_SIMD
  if constexpr (K > 0) {
    if (!plan.pairs.empty() && HasAvx2()) {
      return RowKernelAvx2<K>(src, src_x0, plan.first.data(), plan.pairs.data(), plan.out_size,
                              dst);
    }
  }
  if (HasSse41()) return RowSse41<K>(src, src_x0, plan, dst);
#endif
  RowScalar<K>(src, src_x0, plan, dst);
}

void ColumnKernel(const uint8_t* const* rows, const int32_t* k, int32_t n, size_t row_bytes,
                  uint8_t* out) {
#ifdef STOKER_X86_SIMD
  if (HasAvx2()) return ColumnAvx2(rows, k, n, row_bytes, out);
  if (HasSse41()) return ColumnSse41(rows, k, n, row_bytes, out);
#endif
  ColumnScalar(rows, k, n, 0, row_bytes, out);
}

}  // namespace

int SetSimdLevelForTesting(int level) {
#ifdef STOKER_X86_SIMD
  simd_cap.store(level, std::memory_order_relaxed);
  return HasAvx2() ? 2 : HasSse41() ? 1 : 0;
#else
  (void)level;
  return 0;
#endif
}

void ResampleRow(const uint8_t* src, int32_t src_x0, const AxisPlan& plan, uint8_t* dst) {
  switch (plan.ksize) {
    case 2:
      return RowKernel<2>(src, src_x0, plan, dst);
    case 3:
      return RowKernel<3>(src, src_x0, plan, dst);
    case 5:
      return RowKernel<5>(src, src_x0, plan, dst);
    case 7:
      return RowKernel<7>(src, src_x0, plan, dst);
    case 9:
      return RowKernel<9>(src, src_x0, plan, dst);
    case 11:
      return RowKernel<11>(src, src_x0, plan, dst);
    case 13:
      return RowKernel<13>(src, src_x0, plan, dst);
    default:
      return RowKernel<0>(src, src_x0, plan, dst);
  }
}

void ResampleColumns(const uint8_t* src, size_t src_stride, int32_t src_y0, size_t row_bytes,
                     const AxisPlan& plan, uint8_t* dst, size_t dst_stride, int32_t* acc) {
  (void)acc;
  const uint32_t ksize = plan.ksize;
  std::vector<const uint8_t*> many;
  const uint8_t* few[16];
  for (uint32_t i = 0; i < plan.out_size; ++i) {
    const int32_t* k = plan.coeffs.data() + size_t{i} * ksize;
    const int32_t n = std::max(plan.count[i], 0);
    const uint8_t* base = src + static_cast<ptrdiff_t>(plan.first[i] - src_y0) * src_stride;
    const uint8_t** rows = few;
    if (n > 16) {
      many.resize(n);
      rows = many.data();
    }
    for (int32_t t = 0; t < n; ++t) rows[t] = base + static_cast<size_t>(t) * src_stride;
    ColumnKernel(rows, k, n, row_bytes, dst + size_t{i} * dst_stride);
  }
}

void CmykRowToRgb(const uint8_t* cmyk, uint32_t width, uint8_t* rgb) {
  // PIL reads Adobe CMYK as "CMYK;I" (c = 255 - stored) and converts with
  // r = nk - c * nk / 255 (rounded), nk = 255 - k = stored k.
  for (uint32_t x = 0; x < width; ++x) {
    const int nk = cmyk[4 * x + 3];
    for (int c = 0; c < 3; ++c) {
      const int ink = 255 - cmyk[4 * x + c];
      const int t = ink * nk + 128;
      const int v = nk - (((t >> 8) + t) >> 8);
      rgb[3 * x + c] = static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
    }
  }
}


namespace {

// Where output pixel (y, x) reads from `src`: pixel index base + y*dy + x*dx.
struct PixelMap {
  int64_t base, dy, dx;
};

PixelMap MapFor(uint32_t src_height, uint32_t src_width, uint32_t out_width, int orientation,
                bool flip) {
  const int64_t hr = src_height, wr = src_width;
  auto index = [&](int64_t y, int64_t x) -> int64_t {
    const int64_t xf = flip ? int64_t{out_width} - 1 - x : x;
    int64_t r, c;
    switch (orientation) {
      case 2:
        r = y, c = wr - 1 - xf;
        break;
      case 3:
        r = hr - 1 - y, c = wr - 1 - xf;
        break;
      case 4:
        r = hr - 1 - y, c = xf;
        break;
      case 5:
        r = xf, c = y;
        break;
      case 6:
        r = hr - 1 - xf, c = y;
        break;
      case 7:
        r = hr - 1 - xf, c = wr - 1 - y;
        break;
      case 8:
        r = xf, c = wr - 1 - y;
        break;
      default:
        r = y, c = xf;
        break;
    }
    return r * wr + c;
  };
  const int64_t base = index(0, 0);
  return PixelMap{base, index(1, 0) - base, index(0, 1) - base};
}

template <typename T, typename Convert>
void EmitTyped(const uint8_t* src, const PixelMap& m, uint32_t out_h, uint32_t out_w, bool nchw,
               Convert convert, T* out) {
  const size_t plane = size_t{out_h} * out_w;
  for (uint32_t y = 0; y < out_h; ++y) {
    const uint8_t* row = src + (m.base + m.dy * y) * 3;
    if (nchw) {
      T* o0 = out + size_t{y} * out_w;
      T* o1 = o0 + plane;
      T* o2 = o1 + plane;
      for (uint32_t x = 0; x < out_w; ++x) {
        const uint8_t* px = row + m.dx * 3 * static_cast<int64_t>(x);
        o0[x] = convert(0, px[0]);
        o1[x] = convert(1, px[1]);
        o2[x] = convert(2, px[2]);
      }
    } else {
      T* o = out + size_t{y} * out_w * 3;
      for (uint32_t x = 0; x < out_w; ++x) {
        const uint8_t* px = row + m.dx * 3 * static_cast<int64_t>(x);
        o[3 * x + 0] = convert(0, px[0]);
        o[3 * x + 1] = convert(1, px[1]);
        o[3 * x + 2] = convert(2, px[2]);
      }
    }
  }
}

}  // namespace

int ComposeOrientation(int orientation, bool hflip, bool vflip) {
  // Each orientation as (swap, mirror rows, mirror columns) of the map from
  // displayed (y, x) to raw (r, c): (r, c) = swap ? (x, y) : (y, x), each
  // mirrored or not. A flip of displayed x (y) mirrors whichever raw axis x
  // (y) feeds.
  static constexpr int kSwap[9] = {0, 0, 0, 0, 0, 1, 1, 1, 1};
  static constexpr int kMirrorR[9] = {0, 0, 0, 1, 1, 0, 1, 1, 0};
  static constexpr int kMirrorC[9] = {0, 0, 1, 1, 0, 0, 0, 1, 1};
  if (orientation < 1 || orientation > 8) orientation = 1;
  const int swap = kSwap[orientation];
  int mr = kMirrorR[orientation], mc = kMirrorC[orientation];
  if (hflip) (swap ? mr : mc) ^= 1;
  if (vflip) (swap ? mc : mr) ^= 1;
  for (int o = 1; o <= 8; ++o) {
    if (kSwap[o] == swap && kMirrorR[o] == mr && kMirrorC[o] == mc) return o;
  }
  return 1;
}

void EmitSample(const uint8_t* src, uint32_t src_height, uint32_t src_width, int orientation,
                bool flip, const PipelineParams& p, void* out) {
  const bool swap = SwapsAxes(orientation);
  const uint32_t out_h = swap ? src_width : src_height;
  const uint32_t out_w = swap ? src_height : src_width;
  const PixelMap m = MapFor(src_height, src_width, out_w, orientation, flip);
  const bool nchw = p.layout == ring::kNCHW;
  if (p.dtype == ring::kFloat32 || p.dtype == ring::kFloat16) {
    // (x / 255 - mean) / std in float32, the order torchvision's
    // ToTensor + Normalize compute it in.
    float lut[3][256];
    for (int c = 0; c < 3; ++c) {
      for (int v = 0; v < 256; ++v) {
        lut[c][v] = (static_cast<float>(v) / 255.0f - p.mean[c]) / p.stdev[c];
      }
    }
    if (p.dtype == ring::kFloat32) {
      EmitTyped<float>(
          src, m, out_h, out_w, nchw, [&](int c, uint8_t v) { return lut[c][v]; },
          static_cast<float*>(out));
    } else {
      uint16_t half[3][256];
      for (int c = 0; c < 3; ++c) {
        for (int v = 0; v < 256; ++v) half[c][v] = FloatToHalf(lut[c][v]);
      }
      EmitTyped<uint16_t>(
          src, m, out_h, out_w, nchw, [&](int c, uint8_t v) { return half[c][v]; },
          static_cast<uint16_t*>(out));
    }
    return;
  }
  auto* o = static_cast<uint8_t*>(out);
  if (!nchw && m.dx == 1) {  // rows are contiguous in the source
    for (uint32_t y = 0; y < out_h; ++y) {
      std::memcpy(o + size_t{y} * out_w * 3, src + (m.base + m.dy * y) * 3, size_t{out_w} * 3);
    }
    return;
  }
  EmitTyped<uint8_t>(
      src, m, out_h, out_w, nchw, [](int, uint8_t v) { return v; }, o);
}

}  // namespace stoker::image
