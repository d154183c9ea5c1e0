// The normalize kernel. The arithmetic is cuda_normalize.h's, shared with the
// CPU reference; this file only maps threads to pixels.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda_normalize.h"

namespace stoker::cuda {
namespace {

constexpr int kThreads = 256;

// One thread per pixel (grid-stride). A warp reads 96 consecutive bytes and
// writes 32 consecutive elements per plane (NCHW) or 96 (NHWC). The 3 x 256
// possible values are computed once per block with the shared formula, so
// each element costs a shared-memory load instead of two divisions.
__global__ void __launch_bounds__(kThreads)
    NormalizeKernel(const uint8_t* __restrict__ src, void* __restrict__ dst, uint64_t pixels,
                    uint64_t plane, OutDType dtype, bool nchw, float m0, float m1, float m2,
                    float s0, float s1, float s2) {
  __shared__ float lut[3][256];
  for (int i = threadIdx.x; i < 3 * 256; i += blockDim.x) {
    const int c = i / 256;
    const float mean = c == 0 ? m0 : c == 1 ? m1 : m2;
    const float std = c == 0 ? s0 : c == 1 ? s1 : s2;
    lut[c][i % 256] = NormalizeValue(static_cast<uint8_t>(i % 256), mean, std);
  }
  __syncthreads();
  const uint64_t stride = uint64_t{gridDim.x} * blockDim.x;
  for (uint64_t px = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; px < pixels; px += stride) {
    const uint8_t r = src[px * 3 + 0], g = src[px * 3 + 1], b = src[px * 3 + 2];
    StoreNormalized(dst, NormalizeOutIndex(px, 0, plane, nchw), dtype, lut[0][r]);
    StoreNormalized(dst, NormalizeOutIndex(px, 1, plane, nchw), dtype, lut[1][g]);
    StoreNormalized(dst, NormalizeOutIndex(px, 2, plane, nchw), dtype, lut[2][b]);
  }
}

}  // namespace

int LaunchNormalize(const uint8_t* src, void* dst, const NormalizeParams& p, CUstream_st* stream) {
  const uint64_t pixels = NormalizePixels(p);
  if (pixels == 0) return cudaSuccess;
  if (p.dtype == OutDType::kAsIs) return cudaErrorInvalidValue;
  int device = 0, sms = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (e != cudaSuccess) return e;
  // Enough blocks to fill the GPU a few times over; the loop covers the rest.
  const uint64_t want = (pixels + kThreads - 1) / kThreads;
  const uint64_t cap = uint64_t(sms > 0 ? sms : 1) * 16;
  const unsigned blocks = static_cast<unsigned>(want < cap ? want : cap);
  NormalizeKernel<<<blocks, kThreads, 0, stream>>>(src, dst, pixels, uint64_t{p.h} * p.w, p.dtype,
                                                   p.nchw, p.mean[0], p.mean[1], p.mean[2],
                                                   p.std[0], p.std[1], p.std[2]);
  return cudaGetLastError();
}

}  // namespace stoker::cuda
