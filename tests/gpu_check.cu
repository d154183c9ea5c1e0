// gpu_check: the device half of issue 5, on a machine with a GPU but none of
// stoker's Debian libraries (no gRPC, absl, spdlog, Catch2). Built by
// scripts/gpu-check.sh with nvcc alone, from the same sources the client
// links (client/src/cuda_normalize.cu, cuda_ring_copier.cc), around a
// ring-like POSIX shm mapping this program creates itself.
//
// Checks (each prints "RESULT|name|value|target|PASS/FAIL/INFO"):
//   normalize    the kernel against the CPU reference on fresh random input,
//                every dtype x layout, bit-exact; also through RingCopier
//                (registered ring, own and caller scratch).
//   conversions  the hand-written float->half/bfloat16 (shared with the
//                host) against __float2half_rn/__float2bfloat16_rn, all 2^32
//                float bit patterns (NaNs excluded).
//   h2d          GB/s of a 256x224x224x3 uint8 batch: registered ring(-like
//                shm) via RingCopier vs cudaMallocHost vs pageable memory;
//                target: registered >= 90% of cudaMallocHost.
//   overlap      a ring copy on one stream completes while a kernel on
//                another stream is still running.
//   reuse        a producer loop over a 4-slot ring that poisons each slot
//                the moment RingCopier releases it; a kernel after each copy
//                verifies the device data: no corrupted batch. A control run
//                that releases right after enqueueing must be caught.
//
// Exit status: 0 all passed, 1 a check failed, 2 no CUDA device.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda_normalize.h"
#include "cuda_ring_copier.h"

using stoker::cuda::CopyRequest;
using stoker::cuda::CopyStatus;
using stoker::cuda::NormalizeParams;
using stoker::cuda::OutDType;
using stoker::cuda::RingCopier;

namespace {

int g_failed = 0;

#define CK(call)                                                                                  \
  do {                                                                                            \
    cudaError_t e_ = (call);                                                                      \
    if (e_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      std::exit(1);                                                                               \
    }                                                                                             \
  } while (0)

void Result(const char* name, const std::string& value, const char* target, const char* status) {
  std::printf("RESULT|%s|%s|%s|%s\n", name, value.c_str(), target, status);
  std::fflush(stdout);
  if (std::strcmp(status, "FAIL") == 0) ++g_failed;
}

std::string Fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof(b), f, v);
  return b;
}

double NowS() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A ring-like shared-memory object: a 4 KiB header page, then `slots` slots.
// In /dev/shm as stokerd's rings are; where /dev/shm is too small for it (a
// container's 64 MB default), a memfd: the same shmem pages, so the same
// cudaHostRegister path, without the mount's size limit.
struct ShmRing {
  std::string name;
  uint8_t* base = nullptr;
  uint64_t bytes = 0, slot_bytes = 0, data_offset = 4096;
  uint32_t slots = 0;
  ShmRing(uint32_t n, uint64_t slot) : slot_bytes((slot + 4095) / 4096 * 4096), slots(n) {
    name = "/stoker-gpucheck-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    bytes = data_offset + slot_bytes * n;
    struct statvfs vfs;
    const bool room = ::statvfs("/dev/shm", &vfs) == 0 &&
                      uint64_t{vfs.f_bavail} * vfs.f_frsize >= bytes + (64u << 20);
    int fd = -1;
    if (room) {
      fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    } else {
      if (counter == 1) std::printf("note: /dev/shm is too small; rings are memfds here\n");
      fd = ::memfd_create(name.c_str() + 1, MFD_CLOEXEC);
      name.clear();  // nothing to unlink
    }
    if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      std::perror("shm_open/memfd_create/ftruncate");
      std::exit(1);
    }
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    ::close(fd);
    if (p == MAP_FAILED) {
      std::perror("mmap");
      std::exit(1);
    }
    base = static_cast<uint8_t*>(p);
  }
  ~ShmRing() {
    ::munmap(base, bytes);
    if (!name.empty()) ::shm_unlink(name.c_str());
  }
  uint8_t* slot(uint32_t s) const { return base + data_offset + slot_bytes * s; }
  static inline int counter = 0;
};

void Require(const CopyStatus& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, s.message.c_str());
    std::exit(1);
  }
}

// ---------------------------------------------------------------------------
// normalize

void CheckNormalize(std::mt19937_64& rng) {
  struct Shape {
    uint32_t n, h, w;
  };
  const Shape shapes[] = {{1, 1, 1}, {3, 37, 53}, {16, 224, 224}};
  uint64_t compared = 0, mismatched = 0;
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  for (const Shape& sh : shapes) {
    NormalizeParams p;
    p.n = sh.n;
    p.h = sh.h;
    p.w = sh.w;
    const uint64_t in_bytes = stoker::cuda::NormalizePixels(p) * 3;
    std::vector<uint8_t> src(in_bytes);
    for (auto& v : src) v = static_cast<uint8_t>(rng());
    uint8_t* d_src;
    CK(cudaMalloc(&d_src, in_bytes));
    CK(cudaMemcpy(d_src, src.data(), in_bytes, cudaMemcpyHostToDevice));
    for (OutDType dt : {OutDType::kFloat32, OutDType::kFloat16, OutDType::kBFloat16}) {
      for (bool nchw : {true, false}) {
        p.dtype = dt;
        p.nchw = nchw;
        std::uniform_real_distribution<float> mean(0.0f, 1.0f), sd(0.05f, 2.0f);
        for (int c = 0; c < 3; ++c) {
          p.mean[c] = mean(rng);
          p.std[c] = sd(rng);
        }
        const uint64_t out_bytes = stoker::cuda::NormalizeOutBytes(p);
        std::vector<uint8_t> want(out_bytes), got(out_bytes);
        stoker::cuda::NormalizeReference(src.data(), want.data(), p);
        void* d_out;
        CK(cudaMalloc(&d_out, out_bytes));
        CK(cudaMemsetAsync(d_out, 0xee, out_bytes, st));
        CK(static_cast<cudaError_t>(stoker::cuda::LaunchNormalize(d_src, d_out, p, st)));
        CK(cudaMemcpyAsync(got.data(), d_out, out_bytes, cudaMemcpyDeviceToHost, st));
        CK(cudaStreamSynchronize(st));
        compared += out_bytes;
        if (std::memcmp(want.data(), got.data(), out_bytes) != 0) {
          ++mismatched;
          std::fprintf(stderr, "normalize mismatch: n=%u h=%u w=%u dtype=%u nchw=%d\n", p.n, p.h,
                       p.w, static_cast<unsigned>(dt), nchw);
        }
        CK(cudaFree(d_out));
      }
    }
    CK(cudaFree(d_src));
  }

  // Through RingCopier from a registered ring: own scratch (cudaMallocAsync)
  // and caller scratch.
  {
    NormalizeParams p;
    p.n = 8;
    p.h = 224;
    p.w = 224;
    p.dtype = OutDType::kBFloat16;
    p.nchw = true;
    const uint64_t in_bytes = stoker::cuda::NormalizePixels(p) * 3;
    ShmRing ring(2, in_bytes);
    for (uint64_t i = 0; i < in_bytes; ++i) ring.slot(1)[i] = static_cast<uint8_t>(rng());
    RingCopier copier(ring.base, ring.bytes, ring.slots, true, [](uint32_t) {});
    for (int variant = 0; variant < 4; ++variant) {
      p.dtype = variant % 2 == 0 ? OutDType::kBFloat16 : OutDType::kFloat32;
      p.nchw = variant < 2;
      const uint64_t out_bytes = stoker::cuda::NormalizeOutBytes(p);
      std::vector<uint8_t> want(out_bytes), got(out_bytes);
      stoker::cuda::NormalizeReference(ring.slot(1), want.data(), p);
      void *d_out, *d_scratch = nullptr;
      CK(cudaMalloc(&d_out, out_bytes));
      if (variant % 2 == 1) CK(cudaMalloc(&d_scratch, in_bytes));
      CopyRequest r;
      r.src = ring.slot(1);
      r.bytes = in_bytes;
      r.normalize = p;
      r.dtype = p.dtype;
      r.stream = st;
      r.dst = d_out;
      r.dst_bytes = out_bytes;
      r.scratch = d_scratch;
      r.scratch_bytes = d_scratch ? in_bytes : 0;
      Require(copier.Copy(1, r), "RingCopier::Copy(normalize)");
      CK(cudaMemcpyAsync(got.data(), d_out, out_bytes, cudaMemcpyDeviceToHost, st));
      CK(cudaStreamSynchronize(st));
      compared += out_bytes;
      if (std::memcmp(want.data(), got.data(), out_bytes) != 0) {
        ++mismatched;
        std::fprintf(stderr, "RingCopier normalize mismatch, variant %d\n", variant);
      }
      (void)copier.EndLease(1);
      (void)copier.Reap();
      CK(cudaFree(d_out));
      if (d_scratch) CK(cudaFree(d_scratch));
    }
    std::printf("INFO normalize via RingCopier: %s\n", copier.stats().detail.c_str());
  }
  CK(cudaStreamDestroy(st));
  Result("normalize vs CPU reference",
         mismatched == 0 ? Fmt("bit-exact, %.0f MB compared", compared / 1e6)
                         : Fmt("%.0f configurations differ", static_cast<double>(mismatched)),
         "bit-exact", mismatched == 0 ? "PASS" : "FAIL");
}

// ---------------------------------------------------------------------------
// conversions

__global__ void ConversionKernel(unsigned long long* mismatches, unsigned* first_half,
                                 unsigned* first_bf16) {
  const uint64_t stride = uint64_t{gridDim.x} * blockDim.x;
  unsigned long long local_h = 0, local_b = 0;
  for (uint64_t u = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; u < (uint64_t{1} << 32);
       u += stride) {
    const float f = __uint_as_float(static_cast<unsigned>(u));
    if (f != f) continue;  // NaN payloads may differ; both stay NaN
    if (stoker::cuda::FloatToHalfBits(f) != __half_as_ushort(__float2half_rn(f))) {
      ++local_h;
      atomicMin(first_half, static_cast<unsigned>(u));
    }
    if (stoker::cuda::FloatToBFloat16Bits(f) != __bfloat16_as_ushort(__float2bfloat16_rn(f))) {
      ++local_b;
      atomicMin(first_bf16, static_cast<unsigned>(u));
    }
  }
  if (local_h) atomicAdd(&mismatches[0], local_h);
  if (local_b) atomicAdd(&mismatches[1], local_b);
}

void CheckConversions() {
  unsigned long long* d_mm;
  unsigned* d_first;
  CK(cudaMalloc(&d_mm, 2 * sizeof(unsigned long long)));
  CK(cudaMalloc(&d_first, 2 * sizeof(unsigned)));
  CK(cudaMemset(d_mm, 0, 2 * sizeof(unsigned long long)));
  CK(cudaMemset(d_first, 0xff, 2 * sizeof(unsigned)));
  const double t0 = NowS();
  ConversionKernel<<<4096, 256>>>(d_mm, d_first, d_first + 1);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  const double dt = NowS() - t0;
  unsigned long long mm[2];
  unsigned first[2];
  CK(cudaMemcpy(mm, d_mm, sizeof(mm), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(first, d_first, sizeof(first), cudaMemcpyDeviceToHost));
  CK(cudaFree(d_mm));
  CK(cudaFree(d_first));
  if (mm[0] || mm[1]) {
    std::fprintf(stderr,
                 "conversion mismatches: half %llu (first 0x%08x), bf16 %llu (first 0x%08x)\n",
                 mm[0], first[0], mm[1], first[1]);
  }
  Result("half/bf16 rounding vs CUDA intrinsics",
         mm[0] + mm[1] == 0 ? Fmt("all 2^32 floats equal (%.2f s)", dt)
                            : Fmt("%.0f mismatches", static_cast<double>(mm[0] + mm[1])),
         "0 mismatches", mm[0] + mm[1] == 0 ? "PASS" : "FAIL");
}

// ---------------------------------------------------------------------------
// h2d bandwidth

constexpr uint64_t kBatchBytes = uint64_t{256} * 224 * 224 * 3;  // 38.5 MB

// GB/s of `iters` copies of kBatchBytes from `src` (nullptr: via `copier`).
double TimeCopies(const void* src, RingCopier* copier, const ShmRing* ring, void* d_dst,
                  cudaStream_t st, int iters) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  auto one = [&](int i) {
    if (copier != nullptr) {
      const uint32_t slot = static_cast<uint32_t>(i) % ring->slots;
      CopyRequest r;
      r.src = ring->slot(slot);
      r.bytes = kBatchBytes;
      r.stream = st;
      r.dst = d_dst;
      r.dst_bytes = kBatchBytes;
      Require(copier->Copy(slot, r), "RingCopier::Copy");
      (void)copier->EndLease(slot);
      (void)copier->Reap();
    } else {
      CK(cudaMemcpyAsync(d_dst, src, kBatchBytes, cudaMemcpyHostToDevice, st));
    }
  };
  for (int i = 0; i < 3; ++i) one(i);  // warm up
  CK(cudaStreamSynchronize(st));
  CK(cudaEventRecord(a, st));
  for (int i = 0; i < iters; ++i) one(i);
  CK(cudaEventRecord(b, st));
  CK(cudaEventSynchronize(b));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, a, b));
  if (copier != nullptr) copier->Drain();
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  return static_cast<double>(kBatchBytes) * iters / (ms / 1e3) / 1e9;
}

struct Bandwidth {
  double ring = 0, pinned = 0, pageable = 0, staging = 0;
};

Bandwidth CheckBandwidth() {
  const int iters = 20;
  Bandwidth bw;
  void* d_dst;
  CK(cudaMalloc(&d_dst, kBatchBytes));
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  {
    ShmRing ring(4, kBatchBytes);
    std::memset(ring.base, 7, ring.bytes);
    RingCopier copier(ring.base, ring.bytes, ring.slots, true, [](uint32_t) {});
    bw.ring = TimeCopies(nullptr, &copier, &ring, d_dst, st, iters);
    const auto s = copier.stats();
    std::printf("INFO ring copier: %s\n", s.detail.c_str());
    if (s.mode != stoker::cuda::CopierStats::kRegistered) {
      Result("ring registration", s.detail, "cudaHostRegister accepted", "FAIL");
    }
  }
  {
    ShmRing ring(4, kBatchBytes);
    std::memset(ring.base, 7, ring.bytes);
    RingCopier copier(ring.base, ring.bytes, ring.slots, false, [](uint32_t) {});
    bw.staging = TimeCopies(nullptr, &copier, &ring, d_dst, st, iters);
  }
  {
    void* pinned;
    CK(cudaMallocHost(&pinned, kBatchBytes));
    std::memset(pinned, 7, kBatchBytes);
    bw.pinned = TimeCopies(pinned, nullptr, nullptr, d_dst, st, iters);
    CK(cudaFreeHost(pinned));
  }
  {
    std::vector<uint8_t> pageable(kBatchBytes, 7);
    bw.pageable = TimeCopies(pageable.data(), nullptr, nullptr, d_dst, st, iters);
  }
  CK(cudaStreamDestroy(st));
  CK(cudaFree(d_dst));
  const double ratio = bw.ring / bw.pinned;
  Result("H2D registered ring (256x224x224x3 u8)", Fmt("%.1f GB/s", bw.ring), ">= 90% pinned",
         "INFO");
  Result("H2D cudaMallocHost", Fmt("%.1f GB/s", bw.pinned), "baseline", "INFO");
  Result("H2D pageable", Fmt("%.1f GB/s", bw.pageable), "-", "INFO");
  Result("H2D ring via staging fallback", Fmt("%.1f GB/s", bw.staging), "-", "INFO");
  Result("registered ring / cudaMallocHost", Fmt("%.0f%%", 100 * ratio), ">= 90%",
         ratio >= 0.9 ? "PASS" : "FAIL");
  Result("copy time per 256-image batch", Fmt("%.2f ms", kBatchBytes / bw.ring / 1e6), "-", "INFO");
  return bw;
}

// ---------------------------------------------------------------------------
// overlap

__device__ __forceinline__ uint64_t GlobalTimerNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void SpinKernel(uint64_t ns, int* sink) {
  const uint64_t start = GlobalTimerNs();
  while (GlobalTimerNs() - start < ns) {
  }
  if (threadIdx.x == 0 && sink != nullptr) *sink = 1;
}

void CheckOverlap() {
  const int copies = 8;  // ~300 MB: a few ms at PCIe 5 speed
  ShmRing ring(4, kBatchBytes);
  std::memset(ring.base, 3, ring.bytes);
  RingCopier copier(ring.base, ring.bytes, ring.slots, true, [](uint32_t) {});
  void* d_dst;
  CK(cudaMalloc(&d_dst, kBatchBytes));
  cudaStream_t compute, copy;
  CK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&copy, cudaStreamNonBlocking));
  cudaEvent_t kernel_done, copies_done;
  CK(cudaEventCreateWithFlags(&kernel_done, cudaEventDisableTiming));
  CK(cudaEventCreateWithFlags(&copies_done, cudaEventDisableTiming));
  // Warm up (registration, first-use costs) before timing anything.
  {
    CopyRequest r;
    r.src = ring.slot(0);
    r.bytes = kBatchBytes;
    r.stream = copy;
    r.dst = d_dst;
    r.dst_bytes = kBatchBytes;
    Require(copier.Copy(0, r), "warm-up copy");
    CK(cudaStreamSynchronize(copy));
  }
  const uint64_t spin_ns = 400ull * 1000 * 1000;  // 400 ms
  const double t0 = NowS();
  SpinKernel<<<1, 32, 0, compute>>>(spin_ns, nullptr);
  CK(cudaGetLastError());
  CK(cudaEventRecord(kernel_done, compute));
  for (int i = 0; i < copies; ++i) {
    CopyRequest r;
    r.src = ring.slot(static_cast<uint32_t>(i) % 4);
    r.bytes = kBatchBytes;
    r.stream = copy;
    r.dst = d_dst;
    r.dst_bytes = kBatchBytes;
    Require(copier.Copy(static_cast<uint32_t>(i) % 4, r), "overlap copy");
  }
  CK(cudaEventRecord(copies_done, copy));
  CK(cudaEventSynchronize(copies_done));
  const double copies_s = NowS() - t0;
  const bool kernel_still_running = cudaEventQuery(kernel_done) == cudaErrorNotReady;
  CK(cudaEventSynchronize(kernel_done));
  const double kernel_s = NowS() - t0;
  copier.Drain();
  CK(cudaEventDestroy(kernel_done));
  CK(cudaEventDestroy(copies_done));
  CK(cudaStreamDestroy(compute));
  CK(cudaStreamDestroy(copy));
  CK(cudaFree(d_dst));
  char v[128];
  std::snprintf(v, sizeof(v), "%d copies done at %.0f ms, kernel at %.0f ms", copies,
                copies_s * 1e3, kernel_s * 1e3);
  Result("copy overlaps a kernel on another stream", v, "copies finish first",
         kernel_still_running ? "PASS" : "FAIL");
}

// ---------------------------------------------------------------------------
// reuse: no slot reused before its copy finished

__global__ void DelayKernel(uint64_t ns) {
  const uint64_t start = GlobalTimerNs();
  while (GlobalTimerNs() - start < ns) {
  }
}

// Counts the words of `buf` that differ from the pattern of batch `seq`.
__global__ void VerifyKernel(const uint64_t* buf, uint64_t words, uint64_t seq,
                             unsigned long long* bad) {
  unsigned long long local = 0;
  for (uint64_t i = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < words;
       i += uint64_t{gridDim.x} * blockDim.x) {
    if (buf[i] != (seq << 40) + i) ++local;
  }
  if (local) atomicAdd(bad, local);
}

struct ReuseResult {
  uint64_t batches = 0, corrupted = 0, deferred = 0;
  bool stuck = false;
};

// A producer/consumer loop over a 4-slot ring. `early_release`: the control,
// which frees (and poisons) each slot right after enqueueing its copy.
ReuseResult RunReuse(bool try_register, bool early_release, std::mt19937_64& rng) {
  const uint32_t kSlots = 4;
  const uint64_t slot_bytes = 16ull << 20;  // 16 MiB: ~0.3 ms of DMA
  const uint64_t words = slot_bytes / 8;
  const int kBatches = 160, kBuffers = 8;
  ShmRing ring(kSlots, slot_bytes);
  std::vector<std::atomic<bool>> free_slot(kSlots);
  for (auto& f : free_slot) f.store(true);
  auto poison_and_free = [&](uint32_t s) {
    std::memset(ring.slot(s), 0xA5, slot_bytes);  // the daemon refilling it at once
    free_slot[s].store(true);
  };
  RingCopier copier(ring.base, ring.bytes, kSlots, try_register, poison_and_free);
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  std::vector<void*> bufs(kBuffers);
  for (auto& b : bufs) CK(cudaMalloc(&b, slot_bytes));
  unsigned long long* d_bad;
  CK(cudaMalloc(&d_bad, kBatches * sizeof(unsigned long long)));
  CK(cudaMemset(d_bad, 0, kBatches * sizeof(unsigned long long)));
  ReuseResult res;
  std::uniform_int_distribution<uint64_t> delay_us(0, 400);
  for (int seq = 0; seq < kBatches; ++seq) {
    const uint32_t slot = static_cast<uint32_t>(seq) % kSlots;
    const double deadline = NowS() + 10;
    while (!free_slot[slot].load()) {
      (void)copier.Reap();
      if (NowS() > deadline) {
        res.stuck = true;
        break;
      }
    }
    if (res.stuck) break;
    free_slot[slot].store(false);
    auto* w = reinterpret_cast<uint64_t*>(ring.slot(slot));
    for (uint64_t i = 0; i < words; ++i) w[i] = (uint64_t(seq) << 40) + i;
    // Queue the copy behind GPU work so that it has not run when the lease ends.
    DelayKernel<<<1, 1, 0, st>>>(delay_us(rng) * 1000);
    CK(cudaGetLastError());
    CopyRequest r;
    r.src = ring.slot(slot);
    r.bytes = slot_bytes;
    r.stream = st;
    r.dst = bufs[seq % kBuffers];
    r.dst_bytes = slot_bytes;
    Require(copier.Copy(slot, r), "reuse copy");
    VerifyKernel<<<256, 256, 0, st>>>(static_cast<const uint64_t*>(r.dst), words, seq, d_bad + seq);
    CK(cudaGetLastError());
    const bool deferred = copier.EndLease(slot);
    res.deferred += deferred ? 1 : 0;
    if (!deferred || early_release) {
      poison_and_free(slot);
    }
    (void)copier.Reap();
    ++res.batches;
  }
  copier.Drain();
  CK(cudaStreamSynchronize(st));
  std::vector<unsigned long long> bad(kBatches);
  CK(cudaMemcpy(bad.data(), d_bad, bad.size() * sizeof(bad[0]), cudaMemcpyDeviceToHost));
  for (auto b : bad) res.corrupted += b != 0 ? 1 : 0;
  for (auto& b : bufs) CK(cudaFree(b));
  CK(cudaFree(d_bad));
  CK(cudaStreamDestroy(st));
  return res;
}

void CheckReuse(std::mt19937_64& rng) {
  const ReuseResult reg = RunReuse(true, false, rng);
  const ReuseResult staging = RunReuse(false, false, rng);
  const ReuseResult control = RunReuse(true, true, rng);
  char v[160];
  std::snprintf(v, sizeof(v), "%llu batches, %llu deferred releases, %llu corrupted",
                (unsigned long long)reg.batches, (unsigned long long)reg.deferred,
                (unsigned long long)reg.corrupted);
  Result("no slot reuse before copy done (registered)", v, "0 corrupted",
         !reg.stuck && reg.corrupted == 0 && reg.deferred > 0 ? "PASS" : "FAIL");
  std::snprintf(v, sizeof(v), "%llu batches, %llu corrupted", (unsigned long long)staging.batches,
                (unsigned long long)staging.corrupted);
  Result("no slot reuse before copy done (staging)", v, "0 corrupted",
         !staging.stuck && staging.corrupted == 0 ? "PASS" : "FAIL");
  std::snprintf(v, sizeof(v), "early release corrupts %llu of %llu batches",
                (unsigned long long)control.corrupted, (unsigned long long)control.batches);
  Result("control: the check catches early release", v, "> 0 corrupted",
         control.corrupted > 0 ? "PASS" : "FAIL");
}

}  // namespace

int main(int argc, char** argv) {
  int count = 0;
  CopyStatus s = stoker::cuda::CheckDevices(&count);
  if (!s.ok()) {
    std::printf("%s\n", s.message.c_str());
    Result("CUDA device", s.message, "a GPU", "SKIP");
    return 2;
  }
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  int driver = 0, runtime = 0;
  CK(cudaDriverGetVersion(&driver));
  CK(cudaRuntimeGetVersion(&runtime));
  char dev[512];
  std::snprintf(dev, sizeof(dev), "%s (sm_%d%d), %d device(s), driver %d, runtime %d", prop.name,
                prop.major, prop.minor, count, driver, runtime);
  Result("device", dev, "-", "INFO");
  std::random_device rd;
  const uint64_t seed = (uint64_t{rd()} << 32) ^ rd();
  std::printf("INFO seed %llu\n", (unsigned long long)seed);
  std::mt19937_64 rng(seed);
  const std::string only = argc > 1 ? argv[1] : "";
  if (only.empty() || only == "normalize") CheckNormalize(rng);
  if (only.empty() || only == "conversions") CheckConversions();
  if (only.empty() || only == "h2d") (void)CheckBandwidth();
  if (only.empty() || only == "overlap") CheckOverlap();
  if (only.empty() || only == "reuse") CheckReuse(rng);
  return g_failed == 0 ? 0 : 1;
}
