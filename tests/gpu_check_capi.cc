// A C API over cuda::RingCopier for tests/gpu_check_torch.py (ctypes), so the
// GPU check can drive the client's copy path with torch's streams and
// torch-allocated memory without building the gRPC client. GPU check only.

#include <cstdint>
#include <cstring>
#include <string>

#include "cuda_ring_copier.h"

using stoker::cuda::CopyRequest;
using stoker::cuda::CopyStatus;
using stoker::cuda::OutDType;
using stoker::cuda::RingCopier;

namespace {
int Report(const CopyStatus& s, char* err, int err_len) {
  if (err != nullptr && err_len > 0) {
    std::strncpy(err, s.message.c_str(), static_cast<size_t>(err_len) - 1);
    err[err_len - 1] = '\0';
  }
  return static_cast<int>(s.code);
}
}  // namespace

extern "C" {

void* stoker_gc_new(void* base, uint64_t bytes, uint32_t slots, int try_register) {
  return new RingCopier(base, bytes, slots, try_register != 0, [](uint32_t) {});
}

void stoker_gc_free(void* c) { delete static_cast<RingCopier*>(c); }

// dtype: 0 as is, 1 float32, 2 float16, 3 bfloat16.
int stoker_gc_copy(void* c, uint32_t slot, const void* src, uint64_t bytes, uint32_t n, uint32_t h,
                   uint32_t w, int dtype, int nchw, const float* mean, const float* std,
                   void* stream, int device, void* dst, uint64_t dst_bytes, void* scratch,
                   uint64_t scratch_bytes, char* err, int err_len) {
  CopyRequest r;
  r.src = src;
  r.bytes = bytes;
  r.dtype = static_cast<OutDType>(dtype);
  r.normalize.n = n;
  r.normalize.h = h;
  r.normalize.w = w;
  r.normalize.dtype = r.dtype;
  r.normalize.nchw = nchw != 0;
  for (int i = 0; i < 3; ++i) {
    r.normalize.mean[i] = mean[i];
    r.normalize.std[i] = std[i];
  }
  r.stream = static_cast<CUstream_st*>(stream);
  r.device = device;
  r.dst = dst;
  r.dst_bytes = dst_bytes;
  r.scratch = scratch;
  r.scratch_bytes = scratch_bytes;
  return Report(static_cast<RingCopier*>(c)->Copy(slot, r), err, err_len);
}

int stoker_gc_end_lease(void* c, uint32_t slot) {
  return static_cast<RingCopier*>(c)->EndLease(slot) ? 1 : 0;
}

uint32_t stoker_gc_reap(void* c) { return static_cast<RingCopier*>(c)->Reap(); }

int stoker_gc_mode(void* c) { return static_cast<int>(static_cast<RingCopier*>(c)->stats().mode); }

}  // extern "C"
