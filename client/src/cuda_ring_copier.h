// RingCopier: copies batches out of a mapped shared-memory ring into device
// memory on the caller's CUDA stream, and decides when a ring slot may go
// back to its producer. It knows nothing of gRPC or absl (the GPU check,
// tests/gpu_check.cu, builds it alone with nvcc); the client wraps it in
// cuda_transfer.h. CUDA builds only.
//
// Glossary
//   registered  The ring was pinned with cudaHostRegister (portable: pinned
//               for every device's context), so a cudaMemcpyAsync from a
//               slot is a DMA that reads the slot itself, asynchronously,
//               with no staging copy. Whole at the first Copy, or (after
//               RegisterBySlot) each slot's data at its first Copy: a ring
//               that may deepen then pins no page of slots it never used.
//   staging     Registration was refused (e.g. RLIMIT_MEMLOCK) or disabled:
//               the batch is memcpy'd into a pinned buffer (cudaHostAlloc),
//               and the DMA reads that buffer. The slot is free as soon as
//               the host copy is done.
//   in flight   A registered-mode copy enqueued but not known complete: the
//               event recorded after it on the caller's stream has not
//               completed. The slot must not be reused while one exists.
//   deferred    A slot whose lease ended on the host (EndLease) while a copy
//               of it was still in flight. Reap() hands it to `release`
//               once every event of the slot has completed, never before.
//
// The walk of one batch (registered mode):
//   1. Copy(slot, r): sets the stream's device current (restored after),
//      enqueues cudaMemcpyAsync(slot -> dst or device scratch), then for a
//      normalize the kernel (scratch -> dst), then records a pooled event on
//      the stream and appends it to the slot's in-flight list. No host-side
//      synchronize.
//   2. EndLease(slot): the host is done with the slot. If a copy is in
//      flight the slot becomes deferred (returns true) else the caller
//      releases it at once (returns false).
//   3. Reap(): cudaEventQuery on the deferred slots' events; a slot whose
//      events have all completed goes to `release` (its events back to the
//      pool). Called by the client at every Next/copy/release.
//   4. ~RingCopier / Drain(): waits for every event (not the hot path),
//      releases what is deferred, frees staging buffers, unregisters.
//
// Thread-safety: every method may be called from any thread; one mutex
// guards the state. `release` is called with that mutex held and must not
// call back into the RingCopier (the client's is an atomic store and a
// futex wake).

#ifndef STOKER_CLIENT_SRC_CUDA_RING_COPIER_H_
#define STOKER_CLIENT_SRC_CUDA_RING_COPIER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/mutex.h"

#include "cuda_normalize.h"

struct CUstream_st;
struct CUevent_st;

namespace stoker::cuda {

// The result of a RingCopier call (absl-free; the client converts it).
struct CopyStatus {
  enum Code {
    kOk = 0,
    kUnavailable,        // no driver, no device: the message says which
    kInvalidArgument,    // bad sizes or pointers
    kResourceExhausted,  // out of pinned or device memory
    kInternal,           // any other CUDA error
  };
  Code code = kOk;
  std::string message;
  bool ok() const { return code == kOk; }
};

// One copy out of the ring.
struct CopyRequest {
  // The bytes to copy: `bytes` at `src`, inside the ring. When normalizing,
  // a [n, h, w, 3] uint8 NHWC tensor (bytes == n*h*w*3).
  const void* src = nullptr;
  uint64_t bytes = 0;
  NormalizeParams normalize;  // used when dtype != kAsIs
  OutDType dtype = OutDType::kAsIs;
  // The caller's stream (nullptr: the legacy default stream) and the device
  // it belongs to (-1: ask the stream).
  CUstream_st* stream = nullptr;
  int device = -1;
  // Caller-owned device memory on that device.
  void* dst = nullptr;
  uint64_t dst_bytes = 0;
  // Device scratch for the uint8 pixels of a normalize (>= bytes), owned by
  // the caller and stream-ordered on `stream` (e.g. from torch's caching
  // allocator). nullptr: cudaMallocAsync / cudaFreeAsync on the stream.
  void* scratch = nullptr;
  uint64_t scratch_bytes = 0;
};

struct CopierStats {
  enum Mode { kNotStarted = 0, kRegistered = 1, kStaging = 2 };
  Mode mode = kNotStarted;
  std::string detail;  // why staging, or what was registered
  uint64_t copies = 0;
  uint64_t bytes = 0;  // host bytes read by copies
  uint64_t registered_bytes = 0;
  uint64_t staging_bytes = 0;  // pinned staging memory held
  uint32_t in_flight = 0;      // events not yet seen complete
  uint32_t deferred_slots = 0;
  uint64_t released_after_copy = 0;  // slots handed back by Reap/Drain
};

// Asks the driver for devices. kUnavailable with "no CUDA device:
// cudaGetDeviceCount: ..." when there is no driver or no GPU.
CopyStatus CheckDevices(int* count);

class RingCopier {
 public:
  using ReleaseFn = std::function<void(uint32_t slot)>;

  // `base`/`bytes`: the mapped ring (read-write). `slots`: its slot count.
  // `try_register`: pin it with cudaHostRegister at the first Copy (false:
  // always staging). Touches no CUDA API until the first Copy.
  RingCopier(void* base, uint64_t bytes, uint32_t slots, bool try_register, ReleaseFn release);
  ~RingCopier();
  RingCopier(const RingCopier&) = delete;
  RingCopier& operator=(const RingCopier&) = delete;

  // Registers slot by slot, not the whole ring: slot i's data is the
  // `slot_bytes` at base + data_offset + i * slot_bytes (page aligned), and
  // every Copy from slot i must lie inside it. Call before the first Copy.
  void RegisterBySlot(uint64_t data_offset, uint64_t slot_bytes);

  // Enqueues the copy (and the normalize) of r.src on r.stream. On success
  // in registered mode the slot has a copy in flight until its event
  // completes. On failure nothing reads the slot any more.
  CopyStatus Copy(uint32_t slot, const CopyRequest& r);

  // See the walkthrough, steps 2 and 3.
  bool EndLease(uint32_t slot);
  uint32_t Reap();
  bool Deferred(uint32_t slot) const;

  // Waits for every copy, releases every deferred slot. Not the hot path.
  void Drain();

  CopierStats stats() const;

 private:
  struct Pending {
    CUevent_st* event;
    int device;
  };
  struct Staging {
    void* host = nullptr;
    uint64_t bytes = 0;
    CUevent_st* event = nullptr;  // recorded after the DMA that reads it
    int device = -1;
  };

  CopyStatus StartLocked() STOKER_REQUIRES(mu_);
  void* SlotBase(uint32_t slot) const STOKER_REQUIRES(mu_);
  // Whether copies from `slot` may DMA from it (registering it at first).
  bool SlotPinnedLocked(uint32_t slot) STOKER_REQUIRES(mu_);
  CopyStatus EventLocked(int device, CUevent_st** out) STOKER_REQUIRES(mu_);
  void RecycleLocked(const Pending& p) STOKER_REQUIRES(mu_);
  // Completed events of `slot` leave its list; true when none is left.
  bool ReapSlotLocked(uint32_t slot) STOKER_REQUIRES(mu_);
  CopyStatus AcquireStagingLocked(uint64_t bytes, Staging** out) STOKER_REQUIRES(mu_);
  CopyStatus EnqueueLocked(const void* host_src, const CopyRequest& r) STOKER_REQUIRES(mu_);

  // Constant after construction.
  void* const base_;
  const uint64_t bytes_;
  const uint32_t slots_;
  const bool try_register_;
  const ReleaseFn release_;

  mutable Mutex mu_;
  bool started_ STOKER_GUARDED_BY(mu_) = false;
  // Whole ring, or (slot_bytes_ != 0) slots as used.
  bool registered_ STOKER_GUARDED_BY(mu_) = false;
  uint64_t data_offset_ STOKER_GUARDED_BY(mu_) = 0;
  uint64_t slot_bytes_ STOKER_GUARDED_BY(mu_) = 0;
  // By slot, with RegisterBySlot: 0 not yet, 1 registered, 2 refused (staging).
  std::vector<uint8_t> slot_registered_ STOKER_GUARDED_BY(mu_);
  std::string detail_ STOKER_GUARDED_BY(mu_);
  std::vector<std::vector<Pending>> in_flight_ STOKER_GUARDED_BY(mu_);        // per slot
  std::vector<bool> deferred_ STOKER_GUARDED_BY(mu_);                         // per slot
  std::vector<std::vector<CUevent_st*>> free_events_ STOKER_GUARDED_BY(mu_);  // per device
  std::vector<Staging> staging_ STOKER_GUARDED_BY(mu_);
  size_t staging_next_ STOKER_GUARDED_BY(mu_) = 0;
  uint64_t copies_ STOKER_GUARDED_BY(mu_) = 0;
  uint64_t copied_bytes_ STOKER_GUARDED_BY(mu_) = 0;
  uint64_t released_after_copy_ STOKER_GUARDED_BY(mu_) = 0;
};

}  // namespace stoker::cuda

#endif  // STOKER_CLIENT_SRC_CUDA_RING_COPIER_H_
