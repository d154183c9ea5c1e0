// The on-GPU normalize: uint8 NHWC pixels -> (x/255 - mean) / std as
// float32, float16 or bfloat16, NCHW or NHWC (channels-last).
//
// The formula and the float -> half / bfloat16 conversions are written once,
// here, as `__host__ __device__` inline functions: nvcc compiles them into the
// kernel (cuda_normalize.cu) and the host compiler into NormalizeReference
// below, so the CPU reference test and the GPU check compare the same
// arithmetic. This header needs no CUDA header; it builds without a toolkit.
//
// Exactness: every step is one IEEE float32 operation, rounded to nearest
// (division included: nvcc's default -prec-div=true; --use_fast_math would
// break it and is refused below), so the kernel's output is bit-identical to
// NormalizeReference, and equal to the daemon's float32 pipeline
// (server/image/ops/transform.cc computes the same expression in the same order,
// torchvision's ToTensor + Normalize order). The conversions round to nearest
// even, as __float2half_rn / __float2bfloat16_rn do (the GPU check verifies
// that against the CUDA intrinsics for every float bit pattern).

#ifndef STOKER_CLIENT_SRC_CUDA_NORMALIZE_H_
#define STOKER_CLIENT_SRC_CUDA_NORMALIZE_H_

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define STOKER_HD __host__ __device__
#else
#define STOKER_HD
#endif

#if defined(__USE_FAST_MATH__)
#error "stoker's normalize must be compiled without --use_fast_math (it relies on IEEE division)"
#endif

struct CUstream_st;

namespace stoker::cuda {

// The element type a device copy writes. kAsIs: the batch's bytes unchanged.
enum class OutDType : uint32_t { kAsIs = 0, kFloat32 = 1, kFloat16 = 2, kBFloat16 = 3 };

inline constexpr uint32_t OutDTypeBytes(OutDType d) {
  return d == OutDType::kFloat32                                 ? 4
         : (d == OutDType::kFloat16 || d == OutDType::kBFloat16) ? 2
                                                                 : 1;
}

// A [n, h, w, 3] uint8 NHWC batch to normalize.
struct NormalizeParams {
  uint32_t n = 0, h = 0, w = 0;
  OutDType dtype = OutDType::kFloat32;
  bool nchw = true;  // else NHWC (channels-last)
  float mean[3] = {0.485f, 0.456f, 0.406f};
  float std[3] = {0.229f, 0.224f, 0.225f};
};

// Pixels in the batch, and output bytes.
inline uint64_t NormalizePixels(const NormalizeParams& p) { return uint64_t{p.n} * p.h * p.w; }
inline uint64_t NormalizeOutBytes(const NormalizeParams& p) {
  return NormalizePixels(p) * 3 * OutDTypeBytes(p.dtype);
}

// ---------------------------------------------------------------------------
// The formula and the conversions (host and device).

// (v / 255 - mean) / std, in float32, in that order.
STOKER_HD inline float NormalizeValue(uint8_t v, float mean, float std) {
  return (static_cast<float>(v) / 255.0f - mean) / std;
}

STOKER_HD inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

// float -> IEEE half, round to nearest even; overflow to inf, NaN stays NaN.
STOKER_HD inline uint16_t FloatToHalfBits(float f) {
  const uint32_t x = FloatBits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t mag = x & 0x7fffffffu;
  if (mag >= 0x7f800000u) {  // inf, NaN (quieted)
    return static_cast<uint16_t>(sign | 0x7c00u | (mag > 0x7f800000u ? 0x200u : 0u));
  }
  if (mag >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65536
  if (mag < 0x33000000u) return static_cast<uint16_t>(sign);             // <= 2^-25: zero
  uint32_t h, rest, halfway;
  if (mag < 0x38800000u) {         // a subnormal half: units of 2^-24
    const uint32_t e = mag >> 23;  // 102..112
    const uint32_t m = (mag & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - e;  // 14..24
    h = m >> shift;
    rest = m & ((1u << shift) - 1u);
    halfway = 1u << (shift - 1u);
  } else {
    h = (((mag >> 23) - 112u) << 10) | ((mag >> 13) & 0x3ffu);
    rest = mag & 0x1fffu;
    halfway = 0x1000u;
  }
  if (rest > halfway || (rest == halfway && (h & 1u))) ++h;  // may carry into the exponent
  return static_cast<uint16_t>(sign | h);
}

// float -> bfloat16 (the high half of a float), round to nearest even.
STOKER_HD inline uint16_t FloatToBFloat16Bits(float f) {
  const uint32_t x = FloatBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // NaN
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// Where the output element of pixel `pixel` (0 .. n*h*w), channel c lies.
STOKER_HD inline uint64_t NormalizeOutIndex(uint64_t pixel, uint32_t c, uint64_t plane, bool nchw) {
  if (!nchw) return pixel * 3 + c;
  const uint64_t image = pixel / plane;
  return (image * 3 + c) * plane + (pixel - image * plane);
}

// Writes one output element of the requested type.
STOKER_HD inline void StoreNormalized(void* dst, uint64_t at, OutDType dtype, float v) {
  if (dtype == OutDType::kFloat32) {
    static_cast<float*>(dst)[at] = v;
  } else if (dtype == OutDType::kFloat16) {
    static_cast<uint16_t*>(dst)[at] = FloatToHalfBits(v);
  } else {
    static_cast<uint16_t*>(dst)[at] = FloatToBFloat16Bits(v);
  }
}

// The CPU reference: what the kernel writes, element by element.
inline void NormalizeReference(const uint8_t* src, void* dst, const NormalizeParams& p) {
  const uint64_t pixels = NormalizePixels(p), plane = uint64_t{p.h} * p.w;
  for (uint64_t px = 0; px < pixels; ++px) {
    for (uint32_t c = 0; c < 3; ++c) {
      StoreNormalized(dst, NormalizeOutIndex(px, c, plane, p.nchw), p.dtype,
                      NormalizeValue(src[px * 3 + c], p.mean[c], p.std[c]));
    }
  }
}

// Enqueues the normalize kernel on `stream` (device pointers, on the
// stream's device, which must be current). Returns the cudaError_t value
// (0: enqueued). Defined in cuda_normalize.cu (CUDA builds only).
int LaunchNormalize(const uint8_t* src, void* dst, const NormalizeParams& p, CUstream_st* stream);

}  // namespace stoker::cuda

#endif  // STOKER_CLIENT_SRC_CUDA_NORMALIZE_H_
