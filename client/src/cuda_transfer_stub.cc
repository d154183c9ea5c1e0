// DeviceTransfer for builds without CUDA: the API exists, every copy fails.

#include "cuda_transfer.h"

namespace stoker {

namespace {
absl::Status NoCuda() {
  return absl::FailedPreconditionError(
      "stoker was built without CUDA (no CUDA toolkit at build time, or -DSTOKER_CUDA=OFF): "
      "device copies are unavailable");
}
}  // namespace

bool BuiltWithCuda() { return false; }

absl::Status CudaDeviceCount(int* count) {
  if (count != nullptr) *count = 0;
  return NoCuda();
}

namespace internal {

struct DeviceTransfer::Impl {};

DeviceTransfer::DeviceTransfer(void*, uint64_t, uint32_t, uint64_t, uint64_t, bool,
                               std::function<void(uint32_t)>) {}
DeviceTransfer::~DeviceTransfer() = default;

absl::Status DeviceTransfer::Copy(const Source&, CUstream_st*, void*, uint64_t,
                                  const DeviceCopyOptions&) {
  return NoCuda();
}

bool DeviceTransfer::EndLease(uint32_t) { return false; }
uint32_t DeviceTransfer::Reap() { return 0; }
bool DeviceTransfer::Deferred(uint32_t) const { return false; }

DeviceTransferStatus DeviceTransfer::Status() const {
  DeviceTransferStatus s;
  s.built_with_cuda = false;
  s.detail = "built without CUDA";
  return s;
}

}  // namespace internal
}  // namespace stoker
