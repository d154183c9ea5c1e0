// The client's side of device copies (stoker/cuda.h): a session's
// DeviceTransfer owns the ring's CUDA registration (or staging buffers) and
// the slots whose release waits for a copy. Two implementations:
// cuda_transfer.cc (CUDA builds, over cuda::RingCopier) and
// cuda_transfer_stub.cc (built without CUDA: every copy fails with
// FAILED_PRECONDITION "stoker was built without CUDA").

#ifndef STOKER_CLIENT_SRC_CUDA_TRANSFER_H_
#define STOKER_CLIENT_SRC_CUDA_TRANSFER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "stoker/cuda.h"

struct CUstream_st;

namespace stoker::internal {

class DeviceTransfer {
 public:
  // `release(slot)` ends the lease on a ring slot (an atomic store and a
  // futex wake; called with an internal mutex held). Slot i's data is the
  // `slot_bytes` at ring_base + data_offset + i * slot_bytes; registration
  // pins each slot at its first copy. Touches no CUDA API.
  DeviceTransfer(void* ring_base, uint64_t ring_bytes, uint32_t slots, uint64_t data_offset,
                 uint64_t slot_bytes, bool try_register, std::function<void(uint32_t)> release);
  // Waits for every copy still reading the ring and releases its slot.
  ~DeviceTransfer();
  DeviceTransfer(const DeviceTransfer&) = delete;
  DeviceTransfer& operator=(const DeviceTransfer&) = delete;

  // One leased batch, as the Batch knows it.
  struct Source {
    uint32_t slot = 0;
    const uint8_t* data = nullptr;  // the slot's data
    uint64_t bytes = 0;             // data_bytes()
    uint32_t samples = 0;
    uint32_t height = 0, width = 0;  // of every sample (same_shape)
    bool same_shape = false;         // every sample h x w x 3, contiguous
    bool uint8_nhwc = false;         // the session serves uint8 NHWC
  };
  absl::Status Copy(const Source& s, CUstream_st* stream, void* dst, uint64_t dst_bytes,
                    const DeviceCopyOptions& o);

  // The host lease on `slot` ended. True when a copy still reads it: it is
  // released later, by Reap. Cheap when no device copy was ever made.
  bool EndLease(uint32_t slot);
  // Releases the slots whose copies completed; returns how many still wait.
  uint32_t Reap();
  bool Deferred(uint32_t slot) const;

  DeviceTransferStatus Status() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::atomic<bool> used_{false};  // a copy reached the CUDA runtime
};

}  // namespace stoker::internal

#endif  // STOKER_CLIENT_SRC_CUDA_TRANSFER_H_
