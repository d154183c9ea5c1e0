#include "cuda_ring_copier.h"

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

namespace stoker::cuda {
namespace {

std::string ErrorText(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

CopyStatus Fail(CopyStatus::Code code, std::string message) {
  return CopyStatus{code, std::move(message)};
}

CopyStatus FromCuda(cudaError_t e, const std::string& what) {
  if (e == cudaSuccess) return {};
  (void)cudaGetLastError();  // clear a non-sticky error so it does not resurface later
  const CopyStatus::Code code =
      (e == cudaErrorMemoryAllocation) ? CopyStatus::kResourceExhausted
      : (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver ||
         e == cudaErrorCudartUnloading)
          ? CopyStatus::kUnavailable
      : (e == cudaErrorInvalidValue || e == cudaErrorInvalidDevice ||
         e == cudaErrorInvalidResourceHandle || e == cudaErrorInvalidDevicePointer)
          ? CopyStatus::kInvalidArgument
          : CopyStatus::kInternal;
  return Fail(code, what + ": " + ErrorText(e));
}

std::string MiB(uint64_t bytes) {
  char b[32];
  std::snprintf(b, sizeof(b), "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return b;
}

// Makes `device` current for the calling thread; restores the previous one.
class DeviceGuard {
 public:
  cudaError_t Set(int device) {
    cudaError_t e = cudaGetDevice(&previous_);
    if (e != cudaSuccess || previous_ == device) return e;
    e = cudaSetDevice(device);
    changed_ = e == cudaSuccess;
    return e;
  }
  ~DeviceGuard() {
    if (changed_) (void)cudaSetDevice(previous_);
  }

 private:
  int previous_ = -1;
  bool changed_ = false;
};

// Checks that `p` is device memory usable on `device`.
CopyStatus CheckDevicePointer(const void* p, int device, const char* what) {
  cudaPointerAttributes a;
  cudaError_t e = cudaPointerGetAttributes(&a, p);
  if (e != cudaSuccess) return FromCuda(e, std::string("cudaPointerGetAttributes(") + what + ")");
  if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged) {
    return Fail(CopyStatus::kInvalidArgument,
                std::string(what) + " is not device memory (it must be allocated on device " +
                    std::to_string(device) + ")");
  }
  if (a.type == cudaMemoryTypeDevice && a.device != device) {
    return Fail(CopyStatus::kInvalidArgument,
                std::string(what) + " lies on device " + std::to_string(a.device) +
                    " but the stream (or the requested device) is device " +
                    std::to_string(device));
  }
  return {};
}

}  // namespace

CopyStatus CheckDevices(int* count) {
  *count = 0;
  cudaError_t e = cudaGetDeviceCount(count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    *count = 0;
    return Fail(CopyStatus::kUnavailable, "no CUDA device: cudaGetDeviceCount: " + ErrorText(e));
  }
  if (*count <= 0) {
    return Fail(CopyStatus::kUnavailable, "no CUDA device: cudaGetDeviceCount found none");
  }
  return {};
}

RingCopier::RingCopier(void* base, uint64_t bytes, uint32_t slots, bool try_register,
                       ReleaseFn release)
    : base_(base),
      bytes_(bytes),
      slots_(slots),
      try_register_(try_register),
      release_(std::move(release)),
      in_flight_(slots),
      deferred_(slots, false) {}

RingCopier::~RingCopier() {
  Drain();
  MutexLock l(&mu_);
  if (!started_) return;
  // Errors are ignored: at process exit the runtime may already be gone.
  for (auto& pool : free_events_) {
    for (CUevent_st* ev : pool) (void)cudaEventDestroy(ev);
  }
  for (Staging& s : staging_) {
    if (s.event != nullptr) (void)cudaEventDestroy(s.event);
    (void)cudaFreeHost(s.host);
  }
  if (registered_ && slot_bytes_ == 0) (void)cudaHostUnregister(base_);
  for (uint32_t i = 0; i < slot_registered_.size(); ++i) {
    if (slot_registered_[i] == 1) (void)cudaHostUnregister(SlotBase(i));
  }
  (void)cudaGetLastError();
}

void RingCopier::RegisterBySlot(uint64_t data_offset, uint64_t slot_bytes) {
  MutexLock l(&mu_);
  if (started_ || slot_bytes == 0 || data_offset > bytes_ ||
      slot_bytes * slots_ > bytes_ - data_offset) {
    return;
  }
  data_offset_ = data_offset;
  slot_bytes_ = slot_bytes;
  slot_registered_.assign(slots_, 0);
}

void* RingCopier::SlotBase(uint32_t slot) const {
  return static_cast<uint8_t*>(base_) + data_offset_ + slot_bytes_ * slot;
}

bool RingCopier::SlotPinnedLocked(uint32_t slot) {
  if (!registered_) return false;
  if (slot_bytes_ == 0) return true;
  if (slot_registered_[slot] == 0) {
    cudaError_t e = cudaHostRegister(SlotBase(slot), slot_bytes_, cudaHostRegisterPortable);
    if (e == cudaSuccess) {
      slot_registered_[slot] = 1;
    } else {
      (void)cudaGetLastError();
      slot_registered_[slot] = 2;
      detail_ = "cudaHostRegister of ring slot " + std::to_string(slot) + " (" + MiB(slot_bytes_) +
                ") was refused (" + ErrorText(e) +
                "); that slot copies through pinned staging buffers (cudaHostAlloc). Raise "
                "RLIMIT_MEMLOCK (ulimit -l) to avoid it";
      std::fprintf(stderr, "stoker: %s\n", detail_.c_str());
    }
  }
  return slot_registered_[slot] == 1;
}

CopyStatus RingCopier::StartLocked() {
  int count = 0;
  CopyStatus s = CheckDevices(&count);
  if (!s.ok()) return s;
  free_events_.resize(static_cast<size_t>(count));
  if (try_register_ && slot_bytes_ != 0) {
    registered_ = true;  // each slot at its first Copy (SlotPinnedLocked)
    detail_ = "ring slots registered with cudaHostRegister as first used (" + MiB(slot_bytes_) +
              " each)";
  } else if (try_register_) {
    // The client maps the ring read-write, so plain (not read-only)
    // registration; portable: pinned for every device's context.
    cudaError_t e = cudaHostRegister(base_, bytes_, cudaHostRegisterPortable);
    if (e == cudaSuccess) {
      registered_ = true;
      detail_ = "ring registered with cudaHostRegister (" + MiB(bytes_) + ")";
    } else {
      (void)cudaGetLastError();
      detail_ = "cudaHostRegister of the ring (" + MiB(bytes_) + ") was refused (" + ErrorText(e) +
                "); copying through pinned staging buffers (cudaHostAlloc), one extra host copy "
                "per batch. Raise RLIMIT_MEMLOCK (ulimit -l) to avoid it";
      std::fprintf(stderr, "stoker: %s\n", detail_.c_str());
    }
  } else {
    detail_ = "ring registration disabled; copying through pinned staging buffers (cudaHostAlloc)";
  }
  started_ = true;
  return {};
}

CopyStatus RingCopier::EventLocked(int device, CUevent_st** out) {
  auto& pool = free_events_[static_cast<size_t>(device)];
  if (!pool.empty()) {
    *out = pool.back();
    pool.pop_back();
    return {};
  }
  cudaEvent_t ev = nullptr;
  cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  if (e != cudaSuccess) return FromCuda(e, "cudaEventCreateWithFlags");
  *out = ev;
  return {};
}

void RingCopier::RecycleLocked(const Pending& p) {
  free_events_[static_cast<size_t>(p.device)].push_back(p.event);
}

bool RingCopier::ReapSlotLocked(uint32_t slot) {
  auto& list = in_flight_[slot];
  for (size_t i = 0; i < list.size();) {
    cudaError_t e = cudaEventQuery(list[i].event);
    if (e == cudaErrorNotReady) {
      ++i;
      continue;
    }
    // cudaSuccess, or an error: a context that failed runs nothing more, so
    // no DMA can still read the slot either way.
    if (e != cudaSuccess) (void)cudaGetLastError();
    RecycleLocked(list[i]);
    list.erase(list.begin() + static_cast<std::ptrdiff_t>(i));
  }
  return list.empty();
}

bool RingCopier::EndLease(uint32_t slot) {
  MutexLock l(&mu_);
  if (!started_ || slot >= slots_) return false;
  if (ReapSlotLocked(slot)) return false;
  deferred_[slot] = true;
  return true;
}

uint32_t RingCopier::Reap() {
  MutexLock l(&mu_);
  if (!started_) return 0;
  uint32_t left = 0;
  for (uint32_t s = 0; s < slots_; ++s) {
    if (!deferred_[s]) continue;
    if (ReapSlotLocked(s)) {
      deferred_[s] = false;
      ++released_after_copy_;
      release_(s);
    } else {
      ++left;
    }
  }
  return left;
}

bool RingCopier::Deferred(uint32_t slot) const {
  MutexLock l(&mu_);
  return slot < slots_ && deferred_[slot];
}

void RingCopier::Drain() {
  MutexLock l(&mu_);
  if (!started_) return;
  for (uint32_t s = 0; s < slots_; ++s) {
    for (const Pending& p : in_flight_[s]) {
      (void)cudaEventSynchronize(p.event);
      RecycleLocked(p);
    }
    in_flight_[s].clear();
    if (deferred_[s]) {
      deferred_[s] = false;
      ++released_after_copy_;
      release_(s);
    }
  }
  for (Staging& st : staging_) {
    if (st.event != nullptr) (void)cudaEventSynchronize(st.event);
  }
  (void)cudaGetLastError();
}

CopyStatus RingCopier::AcquireStagingLocked(uint64_t bytes, Staging** out) {
  auto ready = [&](Staging& s) {
    if (s.event == nullptr) return true;
    cudaError_t e = cudaEventQuery(s.event);
    if (e == cudaErrorNotReady) return false;
    if (e != cudaSuccess) (void)cudaGetLastError();
    return true;
  };
  auto take = [&](Staging& s) STOKER_REQUIRES(mu_) -> CopyStatus {
    if (s.event != nullptr) {
      RecycleLocked({s.event, s.device});
      s.event = nullptr;
    }
    if (s.bytes < bytes) {
      (void)cudaFreeHost(s.host);
      s.host = nullptr;
      s.bytes = 0;
      cudaError_t e = cudaHostAlloc(&s.host, bytes, cudaHostAllocPortable);
      if (e != cudaSuccess) return FromCuda(e, "cudaHostAlloc(" + MiB(bytes) + " staging)");
      s.bytes = bytes;
    }
    *out = &s;
    return {};
  };
  for (Staging& s : staging_) {
    if (s.bytes >= bytes && ready(s)) return take(s);
  }
  // Up to one buffer per ring slot; then wait for the oldest DMA (the GPU is
  // that many batches behind: back-pressure, as a full ring would be).
  const size_t max_buffers = slots_ < 2 ? 2 : slots_;
  if (staging_.size() < max_buffers) {
    staging_.emplace_back();
    return take(staging_.back());
  }
  Staging& s = staging_[staging_next_++ % staging_.size()];
  if (s.event != nullptr) {
    cudaError_t e = cudaEventSynchronize(s.event);
    if (e != cudaSuccess) (void)cudaGetLastError();
  }
  return take(s);
}

CopyStatus RingCopier::Copy(uint32_t slot, const CopyRequest& r) {
  MutexLock l(&mu_);
  if (!started_) {
    CopyStatus s = StartLocked();
    if (!s.ok()) return s;
  }
  // Arguments.
  const bool normalize = r.dtype != OutDType::kAsIs;
  const auto* src = static_cast<const uint8_t*>(r.src);
  const auto* ring = static_cast<const uint8_t*>(base_);
  if (slot >= slots_ || src < ring || r.bytes == 0 || r.bytes > bytes_ ||
      static_cast<uint64_t>(src - ring) > bytes_ - r.bytes) {
    return Fail(CopyStatus::kInvalidArgument, "the source is not a slot of the ring");
  }
  if (slot_bytes_ != 0) {
    const auto* base = static_cast<const uint8_t*>(SlotBase(slot));
    if (src < base || r.bytes > slot_bytes_ || static_cast<uint64_t>(src - base) > slot_bytes_ - r.bytes) {
      return Fail(CopyStatus::kInvalidArgument, "the source is not inside its slot");
    }
  }
  uint64_t need = r.bytes;
  if (normalize) {
    NormalizeParams p = r.normalize;
    p.dtype = r.dtype;
    if (NormalizePixels(p) * 3 != r.bytes) {
      return Fail(CopyStatus::kInvalidArgument,
                  "normalize: the source is not a [n, h, w, 3] uint8 tensor");
    }
    need = NormalizeOutBytes(p);
  }
  if (r.dst == nullptr || r.dst_bytes < need) {
    return Fail(CopyStatus::kInvalidArgument, "the destination holds " +
                                                  std::to_string(r.dst_bytes) +
                                                  " bytes, the copy needs " + std::to_string(need));
  }
  if (normalize && r.scratch != nullptr && r.scratch_bytes < r.bytes) {
    return Fail(CopyStatus::kInvalidArgument,
                "the scratch buffer holds " + std::to_string(r.scratch_bytes) +
                    " bytes, the batch has " + std::to_string(r.bytes));
  }
  cudaStream_t stream = r.stream;
  int device = r.device;
  if (device < 0) {
#if CUDART_VERSION >= 12080
    cudaError_t e =
        stream != nullptr ? cudaStreamGetDevice(stream, &device) : cudaGetDevice(&device);
#else
    cudaError_t e = cudaGetDevice(&device);  // older toolkits: the current device
#endif
    if (e != cudaSuccess) return FromCuda(e, "cannot tell the stream's device");
  }
  if (device >= static_cast<int>(free_events_.size())) {
    return Fail(CopyStatus::kInvalidArgument,
                "device " + std::to_string(device) + " does not exist (" +
                    std::to_string(free_events_.size()) + " devices)");
  }
  DeviceGuard guard;
  if (cudaError_t e = guard.Set(device); e != cudaSuccess) {
    return FromCuda(e, "cudaSetDevice(" + std::to_string(device) + ")");
  }
  if (CopyStatus s = CheckDevicePointer(r.dst, device, "the destination"); !s.ok()) return s;
  if (normalize && r.scratch != nullptr) {
    if (CopyStatus s = CheckDevicePointer(r.scratch, device, "the scratch buffer"); !s.ok()) {
      return s;
    }
  }

  // Where the DMA reads: the slot itself, or a pinned staging buffer.
  const void* from = r.src;
  Staging* staging = nullptr;
  if (!SlotPinnedLocked(slot)) {
    if (CopyStatus s = AcquireStagingLocked(r.bytes, &staging); !s.ok()) return s;
    std::memcpy(staging->host, r.src, r.bytes);
    from = staging->host;
  }

  // The uint8 pixels land in dst (as is) or in device scratch (normalize).
  void* landing = r.dst;
  bool own_scratch = false;
  if (normalize) {
    landing = r.scratch;
    if (landing == nullptr) {
      cudaError_t e = cudaMallocAsync(&landing, r.bytes, stream);
      if (e != cudaSuccess) return FromCuda(e, "cudaMallocAsync(" + MiB(r.bytes) + " scratch)");
      own_scratch = true;
    }
  }
  cudaError_t e = cudaMemcpyAsync(landing, from, r.bytes, cudaMemcpyHostToDevice, stream);
  if (e != cudaSuccess) {
    CopyStatus s = FromCuda(e, "cudaMemcpyAsync");
    if (own_scratch) (void)cudaFreeAsync(landing, stream);
    return s;
  }
  CopyStatus result;
  if (normalize) {
    NormalizeParams p = r.normalize;
    p.dtype = r.dtype;
    const int k = LaunchNormalize(static_cast<const uint8_t*>(landing), r.dst, p, stream);
    if (k != cudaSuccess) result = FromCuda(static_cast<cudaError_t>(k), "normalize kernel");
    if (own_scratch) (void)cudaFreeAsync(landing, stream);
  }
  // From here the DMA is enqueued: whatever else fails, the source must stay
  // untouched until it is done, so an event always follows it.
  CUevent_st* ev = nullptr;
  CopyStatus es = EventLocked(device, &ev);
  if (es.ok()) {
    e = cudaEventRecord(ev, stream);
    if (e != cudaSuccess) {
      es = FromCuda(e, "cudaEventRecord");
      RecycleLocked({ev, device});
    }
  }
  if (!es.ok()) {
    (void)cudaStreamSynchronize(stream);  // an error path: wait rather than risk the slot
    (void)cudaGetLastError();
    return es;
  }
  if (staging != nullptr) {
    staging->event = ev;
    staging->device = device;
  } else {
    in_flight_[slot].push_back({ev, device});
  }
  ++copies_;
  copied_bytes_ += r.bytes;
  return result;
}

CopierStats RingCopier::stats() const {
  MutexLock l(&mu_);
  CopierStats s;
  s.mode = !started_     ? CopierStats::kNotStarted
           : registered_ ? CopierStats::kRegistered
                         : CopierStats::kStaging;
  s.detail = detail_;
  s.copies = copies_;
  s.bytes = copied_bytes_;
  s.registered_bytes = registered_ && slot_bytes_ == 0 ? bytes_ : 0;
  for (uint8_t r : slot_registered_) s.registered_bytes += r == 1 ? slot_bytes_ : 0;
  for (const Staging& st : staging_) s.staging_bytes += st.bytes;
  for (const auto& list : in_flight_) s.in_flight += static_cast<uint32_t>(list.size());
  for (bool d : deferred_) s.deferred_slots += d ? 1 : 0;
  s.released_after_copy = released_after_copy_;
  return s;
}

}  // namespace stoker::cuda
