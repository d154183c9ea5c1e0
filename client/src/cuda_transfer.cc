// DeviceTransfer for CUDA builds: argument checks and Status conversion over
// cuda::RingCopier, which does the CUDA work.

#include "cuda_transfer.h"

#include <cmath>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cuda_ring_copier.h"

namespace stoker {

namespace {

absl::Status ToStatus(const cuda::CopyStatus& s) {
  switch (s.code) {
    case cuda::CopyStatus::kOk:
      return absl::OkStatus();
    case cuda::CopyStatus::kUnavailable:
      return absl::FailedPreconditionError(s.message);
    case cuda::CopyStatus::kInvalidArgument:
      return absl::InvalidArgumentError(s.message);
    case cuda::CopyStatus::kResourceExhausted:
      return absl::ResourceExhaustedError(s.message);
    case cuda::CopyStatus::kInternal:
      break;
  }
  return absl::InternalError(s.message);
}

}  // namespace

bool BuiltWithCuda() { return true; }

absl::Status CudaDeviceCount(int* count) {
  int n = 0;
  absl::Status s = ToStatus(cuda::CheckDevices(&n));
  if (count != nullptr) *count = n;
  return s;
}

namespace internal {

struct DeviceTransfer::Impl {
  cuda::RingCopier copier;
  Impl(void* base, uint64_t bytes, uint32_t slots, bool try_register,
       std::function<void(uint32_t)> release)
      : copier(base, bytes, slots, try_register, std::move(release)) {}
};

DeviceTransfer::DeviceTransfer(void* ring_base, uint64_t ring_bytes, uint32_t slots,
                               uint64_t data_offset, uint64_t slot_bytes, bool try_register,
                               std::function<void(uint32_t)> release)
    : impl_(
          std::make_unique<Impl>(ring_base, ring_bytes, slots, try_register, std::move(release))) {
  impl_->copier.RegisterBySlot(data_offset, slot_bytes);
}

DeviceTransfer::~DeviceTransfer() = default;  // ~RingCopier drains

absl::Status DeviceTransfer::Copy(const Source& s, CUstream_st* stream, void* dst,
                                  uint64_t dst_bytes, const DeviceCopyOptions& o) {
  cuda::CopyRequest r;
  r.src = s.data;
  r.bytes = s.bytes;
  r.stream = stream;
  r.device = o.device;
  r.dst = dst;
  r.dst_bytes = dst_bytes;
  switch (o.dtype) {
    case DeviceDType::kAsIs:
      r.dtype = cuda::OutDType::kAsIs;
      break;
    case DeviceDType::kFloat32:
      r.dtype = cuda::OutDType::kFloat32;
      break;
    case DeviceDType::kFloat16:
      r.dtype = cuda::OutDType::kFloat16;
      break;
    case DeviceDType::kBFloat16:
      r.dtype = cuda::OutDType::kBFloat16;
      break;
    default:
      return absl::InvalidArgumentError("unknown DeviceDType");
  }
  if (r.dtype != cuda::OutDType::kAsIs) {
    if (!s.uint8_nhwc) {
      return absl::InvalidArgumentError(
          "normalizing on the device needs a session that serves uint8 NHWC (attach with "
          "dtype uint8, layout NHWC), or use DeviceDType::kAsIs");
    }
    if (!s.same_shape) {
      return absl::InvalidArgumentError(
          "normalizing on the device needs samples of one shape, contiguous in the slot");
    }
    if (o.layout != Layout::kNCHW && o.layout != Layout::kNHWC) {
      return absl::InvalidArgumentError("unknown layout");
    }
    for (int c = 0; c < 3; ++c) {
      if (!std::isfinite(o.mean[c]) || !std::isfinite(o.std[c]) || o.std[c] == 0.0f) {
        return absl::InvalidArgumentError("mean and std must be finite, std non-zero");
      }
      r.normalize.mean[c] = o.mean[c];
      r.normalize.std[c] = o.std[c];
    }
    r.normalize.n = s.samples;
    r.normalize.h = s.height;
    r.normalize.w = s.width;
    r.normalize.nchw = o.layout == Layout::kNCHW;
    r.normalize.dtype = r.dtype;
    r.scratch = o.scratch;
    r.scratch_bytes = o.scratch_bytes;
  }
  used_.store(true, std::memory_order_release);
  (void)impl_->copier.Reap();
  return ToStatus(impl_->copier.Copy(s.slot, r));
}

bool DeviceTransfer::EndLease(uint32_t slot) {
  if (!used_.load(std::memory_order_acquire)) return false;
  return impl_->copier.EndLease(slot);
}

uint32_t DeviceTransfer::Reap() {
  if (!used_.load(std::memory_order_acquire)) return 0;
  return impl_->copier.Reap();
}

bool DeviceTransfer::Deferred(uint32_t slot) const {
  if (!used_.load(std::memory_order_acquire)) return false;
  return impl_->copier.Deferred(slot);
}

DeviceTransferStatus DeviceTransfer::Status() const {
  const cuda::CopierStats c = impl_->copier.stats();
  DeviceTransferStatus s;
  s.built_with_cuda = true;
  s.mode = c.mode == cuda::CopierStats::kRegistered ? "registered"
           : c.mode == cuda::CopierStats::kStaging  ? "staging"
                                                    : "none";
  s.detail = c.detail;
  s.copies = c.copies;
  s.bytes = c.bytes;
  s.registered_bytes = c.registered_bytes;
  s.staging_bytes = c.staging_bytes;
  s.in_flight = c.in_flight;
  s.deferred_slots = c.deferred_slots;
  s.released_after_copy = c.released_after_copy;
  return s;
}

}  // namespace internal
}  // namespace stoker
