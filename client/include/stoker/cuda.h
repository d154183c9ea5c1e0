// Batches straight from the shared-memory ring into the trainer's CUDA
// stream: Batch::CopyToDevice and what it takes. No CUDA header is needed to
// include this one (a cudaStream_t is a `CUstream_st*`).
//
//   #include "stoker/cuda.h"
//   stoker::DeviceCopyOptions o;
//   o.dtype = stoker::DeviceDType::kFloat16;      // normalize on the GPU
//   o.layout = stoker::Layout::kNCHW;
//   absl::StatusOr<stoker::Batch> b = session->Next();
//   absl::Status s = b->CopyToDevice(stream, d_images, d_images_bytes, o);
//   // Enqueued on `stream`: kernels launched on it afterwards see the data.
//   // Dropping `b` now is fine: its ring slot goes back to stokerd only once
//   // the copy has completed on the GPU, never before.
//
// How it works:
//   - At the first device copy of a session the client pins the whole mapped
//     ring once with cudaHostRegister (portable, so for every GPU of the
//     process). A copy is then a cudaMemcpyAsync that DMAs from the slot
//     itself, asynchronously, with no staging copy. Attach never touches
//     CUDA.
//   - Where registration is refused (typically RLIMIT_MEMLOCK), the client
//     copies each batch into a pinned staging buffer (cudaHostAlloc) and DMAs
//     from there. It says so once on stderr and in Session::DeviceStatus();
//     the slot is then free as soon as the host copy is done.
//   - After the copy (and the normalize kernel) the client records an event
//     on the stream. When the Batch is released while that event is pending,
//     the slot stays held and is handed back to the daemon by the first
//     Next(), CopyToDevice() or Release() that finds the event completed
//     (cudaEventQuery; no host-side synchronize in the hot path). Next()
//     waiting for such a slot polls every millisecond. Destroying the last
//     Session/Batch of a session waits for outstanding copies.
//   - Normalize: uint8 NHWC -> (x/255 - mean)/std in float32, rounded to
//     nearest even into float16/bfloat16, NCHW or NHWC (channels-last), on the
//     same stream. Bit-identical to the CPU reference in
//     client/src/cuda_normalize.h, and equal in float32 to the daemon's float
//     pipeline.
//
// Builds: with a CUDA toolkit (CMake -DSTOKER_CUDA=ON, the default) the
// library links the CUDA runtime statically. Without one, the same calls
// exist and fail with FAILED_PRECONDITION "stoker was built without CUDA".
// With CUDA built but no driver or no GPU they fail with FAILED_PRECONDITION
// "no CUDA device: cudaGetDeviceCount: ..."; nothing crashes.

#ifndef STOKER_CLIENT_INCLUDE_STOKER_CUDA_H_
#define STOKER_CLIENT_INCLUDE_STOKER_CUDA_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "stoker/client.h"

namespace stoker {

// What CopyToDevice writes into the destination.
enum class DeviceDType {
  // The batch's bytes unchanged: the session's own dtype and layout
  // (data_bytes() bytes).
  kAsIs = 0,
  // Normalized (x/255 - mean) / std. Needs a uint8 NHWC session (the
  // default pipeline output: the fewest bytes through PCIe).
  kFloat32 = 1,
  kFloat16 = 2,
  kBFloat16 = 3,
};

// Bytes per element of `d` (kAsIs: 1).
inline constexpr uint32_t DeviceDTypeBytes(DeviceDType d) {
  return d == DeviceDType::kFloat32                                    ? 4
         : (d == DeviceDType::kFloat16 || d == DeviceDType::kBFloat16) ? 2
                                                                       : 1;
}

struct DeviceCopyOptions {
  // Output element type; see DeviceDType.
  DeviceDType dtype = DeviceDType::kAsIs;
  // Normalized outputs only: [n, 3, h, w] (kNCHW) or [n, h, w, 3] (kNHWC,
  // i.e. torch's channels_last memory format of an NCHW tensor).
  Layout layout = Layout::kNCHW;
  // Normalized outputs only: per RGB channel. Default ImageNet's.
  float mean[3] = {0.485f, 0.456f, 0.406f};
  float std[3] = {0.229f, 0.224f, 0.225f};
  // The device `stream` and `dst` belong to; -1: ask the stream (the
  // legacy default stream, nullptr: the calling thread's current device).
  // The calling thread's current device is restored afterwards.
  int device = -1;
  // Normalized outputs only: device memory of at least data_bytes() bytes
  // for the uint8 pixels, stream-ordered on `stream` (e.g. from a caching
  // allocator; it may be reused by work enqueued on `stream` after this
  // call). nullptr: cudaMallocAsync/cudaFreeAsync on the stream.
  void* scratch = nullptr;
  uint64_t scratch_bytes = 0;
};

// Bytes CopyToDevice writes for a batch of `samples` h x w images.
inline uint64_t DeviceCopyBytes(const DeviceCopyOptions& o, uint32_t samples, uint32_t height,
                                uint32_t width) {
  return uint64_t{samples} * height * width * 3 * DeviceDTypeBytes(o.dtype);
}

// A session's device-copy path, as Session::DeviceStatus() reports it.
struct DeviceTransferStatus {
  bool built_with_cuda = false;
  // "none": no device copy yet; "registered": the ring is pinned, DMA from
  // the slots; "staging": registration refused or disabled, DMA from pinned
  // staging buffers.
  std::string mode = "none";
  std::string detail;  // why staging, or what was registered
  uint64_t copies = 0;
  uint64_t bytes = 0;             // host bytes copied to devices
  uint64_t registered_bytes = 0;  // the pinned ring
  uint64_t staging_bytes = 0;     // pinned staging buffers held
  uint32_t in_flight = 0;         // copies not yet seen complete
  uint32_t deferred_slots = 0;    // released slots waiting for their copy
  uint64_t released_after_copy = 0;
};

// True when this library was built with CUDA.
bool BuiltWithCuda();

// OK when the CUDA runtime finds at least one device; sets *count if given.
// FAILED_PRECONDITION "stoker was built without CUDA" or "no CUDA device:
// cudaGetDeviceCount: ..." otherwise.
absl::Status CudaDeviceCount(int* count = nullptr);

}  // namespace stoker

#endif  // STOKER_CLIENT_INCLUDE_STOKER_CUDA_H_
