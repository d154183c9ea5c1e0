// Batch::CopyToDevice where it cannot work: built without CUDA, or built
// with CUDA on a machine without a driver or a GPU (this project's CI). The
// call must fail with a clear FAILED_PRECONDITION, never crash, and leave the
// session fully usable. On a machine with a GPU, the error cases are skipped
// (scripts/gpu-check.sh checks the device path there).

#include <sys/mman.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_transfer.h"
#include "stoker/client.h"
#include "stoker/cuda.h"
#include "testing/daemon_harness.h"

#ifndef STOKER_HAVE_CUDA
#error "the build defines STOKER_HAVE_CUDA to 0 or 1"
#endif

namespace stoker::testing {
namespace {

bool HaveDevice() { return CudaDeviceCount().ok(); }

// The message a copy must give on this machine.
std::string ExpectedError() {
  return STOKER_HAVE_CUDA ? "no CUDA device: cudaGetDeviceCount" : "stoker was built without CUDA";
}

TEST_CASE("the build says whether it has CUDA", "[cuda]") {
  CHECK(BuiltWithCuda() == static_cast<bool>(STOKER_HAVE_CUDA));
  int count = -1;
  absl::Status s = CudaDeviceCount(&count);
  if (s.ok()) {
    CHECK(count > 0);
  } else {
    CHECK(count == 0);
    CHECK(s.code() == absl::StatusCode::kFailedPrecondition);
    CHECK_THAT(std::string(s.message()), Catch::Contains(ExpectedError()));
  }
}

TEST_CASE("a device copy without a GPU fails clearly and keeps the slot", "[cuda]") {
  if (HaveDevice()) {
    WARN("a CUDA device is present: the no-device error is not exercised here");
    return;
  }
  // A ring-like mapping, as the session maps its shm object.
  const uint64_t bytes = 4 * 4096;
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(base != MAP_FAILED);
  std::vector<uint32_t> released;
  {
    // Two slots of 8 KiB from the mapping's start.
    internal::DeviceTransfer t(base, bytes, 2, 0, 8192, true,
                               [&](uint32_t s) { released.push_back(s); });
    CHECK(t.Status().mode == "none");
    internal::DeviceTransfer::Source src;
    src.slot = 1;
    src.data = static_cast<const uint8_t*>(base) + 8192;
    src.bytes = 2 * 4 * 4 * 3;
    src.samples = 2;
    src.height = src.width = 4;
    src.same_shape = src.uint8_nhwc = true;
    uint64_t fake_device_memory = 0x1000;  // never dereferenced: the call fails first
    for (DeviceDType d : {DeviceDType::kAsIs, DeviceDType::kFloat16, DeviceDType::kBFloat16}) {
      DeviceCopyOptions o;
      o.dtype = d;
      absl::Status s =
          t.Copy(src, nullptr, reinterpret_cast<void*>(fake_device_memory), 1 << 20, o);
      CHECK(s.code() == absl::StatusCode::kFailedPrecondition);
      CHECK_THAT(std::string(s.message()), Catch::Contains(ExpectedError()));
    }
    // Nothing is in flight: the lease ends at once, nothing is deferred.
    CHECK_FALSE(t.EndLease(1));
    CHECK(t.Reap() == 0);
    CHECK_FALSE(t.Deferred(1));
    DeviceTransferStatus st = t.Status();
    CHECK(st.built_with_cuda == static_cast<bool>(STOKER_HAVE_CUDA));
    CHECK(st.mode == "none");
    CHECK(st.copies == 0);
  }
  CHECK(released.empty());
  ::munmap(base, bytes);
}

TEST_CASE("Batch::CopyToDevice without a GPU: clear error, the session goes on", "[cuda][e2e]") {
  if (HaveDevice()) {
    WARN("a CUDA device is present: the no-device error is not exercised here");
    return;
  }
  TempDir data;
  MakeImageFolder(data.path() + "/ds", 2, 5, 3);  // 10 samples
  auto daemon = Daemon::Start(data.path());
  REQUIRE(daemon != nullptr);
  auto client = Client::Connect(daemon->socket());
  REQUIRE(client.ok());
  AttachOptions o;
  o.dataset = "ds";
  o.batch_size = 4;
  o.epochs = 2;
  o.ring_slots = 2;
  o.pipeline = R"({"size": 16})";
  o.client_name = "cuda_copy_test";
  auto session = (*client)->Attach(o);
  REQUIRE(session.ok());
  // Attach touched no CUDA API.
  CHECK((*session)->DeviceStatus().mode == "none");
  CHECK((*session)->DeviceStatus().built_with_cuda == static_cast<bool>(STOKER_HAVE_CUDA));

  // Every batch of both epochs: a failed copy must not keep any slot, or a
  // 2-slot ring would stall at the third batch.
  uint64_t batches = 0;
  for (;;) {
    absl::StatusOr<Batch> b = (*session)->Next(20000);
    if (absl::IsOutOfRange(b.status())) break;
    REQUIRE(b.ok());
    std::vector<uint8_t> host(b->data_bytes());
    std::memcpy(host.data(), b->data(), host.size());  // the host path still works
    DeviceCopyOptions d;
    d.dtype = batches % 2 == 0 ? DeviceDType::kAsIs : DeviceDType::kFloat32;
    absl::Status s =
        b->CopyToDevice(nullptr, reinterpret_cast<void*>(uintptr_t{0x1000}), 1 << 24, d);
    CHECK(s.code() == absl::StatusCode::kFailedPrecondition);
    CHECK_THAT(std::string(s.message()), Catch::Contains(ExpectedError()));
    // One sample a copy (any-size batches) says the same; past the batch, which.
    s = b->CopySampleToDevice(0, nullptr, reinterpret_cast<void*>(uintptr_t{0x1000}), 1 << 24, d);
    CHECK(s.code() == absl::StatusCode::kFailedPrecondition);
    s = b->CopySampleToDevice(b->size(), nullptr, reinterpret_cast<void*>(uintptr_t{0x1000}),
                              1 << 24, d);
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    ++batches;
  }
  CHECK(batches == 6);  // ceil(10 / 4) * 2
  DeviceTransferStatus st = (*session)->DeviceStatus();
  CHECK(st.mode == "none");
  CHECK(st.copies == 0);
  CHECK(st.deferred_slots == 0);

  // A released batch says so.
  Batch empty;
  DeviceCopyOptions d;
  CHECK(empty.CopyToDevice(nullptr, nullptr, 0, d).code() == absl::StatusCode::kFailedPrecondition);
  CHECK(empty.CopySampleToDevice(0, nullptr, nullptr, 0, d).code() ==
        absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace stoker::testing
