// stoker-gpu-feed: end to end from a running stokerd into GPU memory, for
// scripts/gpu-check.sh (built only with CUDA).
//
//   stoker-gpu-feed --socket PATH --dataset DIR [--batch-size 256]
//                   [--seconds 15] [--device 0] [--dtype float16]
//
// Attaches a uint8 NHWC 224x224 train session and, on one CUDA stream, for
// each batch: Batch::CopyToDevice (the H2D copy from the ring, then the
// normalize kernel into float NCHW), then a stand-in for a model step that
// reads the whole normalized batch on the GPU (a device-to-device copy into
// a sink), then drops the Batch: its slot goes back to stokerd once the copy
// has completed. No host synchronize in the loop.
//
// The first batches are checked: the device output, copied back, must equal
// the CPU reference of the normalize (client/src/cuda_normalize.h) applied
// to the slot's bytes, bit for bit. Prints one JSON line: images/s after a
// warm-up, the copy path (registered ring or staging), and the check.
// Exit status: 0 ok, 1 a check or call failed, 2 no CUDA device.

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_format.h"
#include "cuda_normalize.h"
#include "stoker/client.h"
#include "stoker/cuda.h"

namespace {

int Fail(const std::string& what) {
  std::fprintf(stderr, "stoker-gpu-feed: %s\n", what.c_str());
  return 1;
}

int Cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return 0;
  std::fprintf(stderr, "stoker-gpu-feed: %s: %s\n", what, cudaGetErrorString(e));
  return 1;
}

// Compares the device output of one batch with the CPU reference; returns
// the number of elements that differ.
uint64_t Mismatches(const stoker::Batch& b, const void* device_out, uint64_t out_bytes,
                    const stoker::cuda::NormalizeParams& p) {
  std::vector<uint8_t> got(out_bytes), want(out_bytes);
  if (cudaMemcpy(got.data(), device_out, out_bytes, cudaMemcpyDeviceToHost) != cudaSuccess) {
    return out_bytes;
  }
  stoker::cuda::NormalizeReference(static_cast<const uint8_t*>(b.data()), want.data(), p);
  const uint32_t elem = stoker::cuda::OutDTypeBytes(p.dtype);
  uint64_t bad = 0;
  for (uint64_t i = 0; i < out_bytes; i += elem) {
    bad += std::memcmp(&got[i], &want[i], elem) != 0;
  }
  return bad;
}

}  // namespace

int main(int argc, char** argv) {
  std::string socket, dataset, dtype = "float16";
  uint32_t batch_size = 256, device = 0, check_batches = 3;
  double seconds = 15, warmup_s = 3;
  CLI::App app{"end to end from stokerd into GPU memory"};
  app.add_option("--socket", socket)->required();
  app.add_option("--dataset", dataset)->required();
  app.add_option("--batch-size", batch_size);
  app.add_option("--seconds", seconds, "timed seconds, after the warm-up");
  app.add_option("--warmup", warmup_s, "seconds before the clock starts");
  app.add_option("--device", device);
  app.add_option("--dtype", dtype, "float32, float16 or bfloat16")
      ->check(CLI::IsMember({"float32", "float16", "bfloat16"}));
  app.add_option("--check-batches", check_batches, "batches checked against the CPU reference");
  CLI11_PARSE(app, argc, argv);

  int count = 0;
  if (absl::Status s = stoker::CudaDeviceCount(&count); !s.ok()) {
    std::fprintf(stderr, "stoker-gpu-feed: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  if (static_cast<int>(device) >= count) return Fail(absl::StrFormat("no device %d", device));
  if (Cuda(cudaSetDevice(static_cast<int>(device)), "cudaSetDevice")) return 1;

  auto client = stoker::Client::Connect(socket);
  if (!client.ok()) return Fail(client.status().ToString());
  stoker::AttachOptions o;
  o.dataset = dataset;
  o.batch_size = batch_size;
  o.epochs = 0;  // without end
  o.drop_last = true;
  o.client_name = "stoker-gpu-feed";
  auto session = (*client)->Attach(o);
  if (!session.ok()) return Fail(session.status().ToString());
  const stoker::SessionInfo& info = (*session)->info();

  stoker::DeviceCopyOptions copy;
  copy.dtype = dtype == "float32"   ? stoker::DeviceDType::kFloat32
               : dtype == "float16" ? stoker::DeviceDType::kFloat16
                                    : stoker::DeviceDType::kBFloat16;
  copy.layout = stoker::Layout::kNCHW;
  copy.device = static_cast<int>(device);
  stoker::cuda::NormalizeParams ref;
  ref.n = batch_size;
  ref.h = info.height;
  ref.w = info.width;
  ref.dtype = static_cast<stoker::cuda::OutDType>(copy.dtype);
  ref.nchw = true;
  for (int c = 0; c < 3; ++c) {
    ref.mean[c] = copy.mean[c];
    ref.std[c] = copy.std[c];
  }
  const uint64_t out_bytes = stoker::DeviceCopyBytes(copy, batch_size, info.height, info.width);

  cudaStream_t stream = nullptr;
  void *out = nullptr, *sink = nullptr;
  if (Cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate") ||
      Cuda(cudaMalloc(&out, out_bytes), "cudaMalloc") ||
      Cuda(cudaMalloc(&sink, out_bytes), "cudaMalloc")) {
    return 1;
  }

  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto timed_from = start;
  bool timing = false;
  uint64_t batches = 0, timed_images = 0, checked = 0, mismatches = 0;
  for (;;) {
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    if (!timing && elapsed >= warmup_s) {
      if (Cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize")) return 1;
      timing = true;
      timed_from = Clock::now();
    }
    if (timing && std::chrono::duration<double>(Clock::now() - timed_from).count() >= seconds) {
      break;
    }
    absl::StatusOr<stoker::Batch> b = (*session)->Next(60000);
    if (!b.ok()) return Fail(b.status().ToString());
    if (b->size() != batch_size) return Fail(absl::StrFormat("a batch of %d", b->size()));
    absl::Status s = b->CopyToDevice(stream, out, out_bytes, copy);
    if (!s.ok()) return Fail(s.ToString());
    if (checked < check_batches) {
      if (Cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize")) return 1;
      mismatches += Mismatches(*b, out, out_bytes, ref);
      ++checked;
    }
    // The stand-in model step: read every byte of the batch on the GPU.
    if (Cuda(cudaMemcpyAsync(sink, out, out_bytes, cudaMemcpyDeviceToDevice, stream),
             "cudaMemcpyAsync")) {
      return 1;
    }
    ++batches;
    if (timing) timed_images += b->size();
  }
  if (Cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize")) return 1;
  const double dt = std::chrono::duration<double>(Clock::now() - timed_from).count();
  const stoker::DeviceTransferStatus st = (*session)->DeviceStatus();
  std::string detail = st.detail;
  for (char& c : detail) {
    if (c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20) c = '\'';
  }
  std::printf(
      "{\"images_per_s\":%.1f,\"batches\":%llu,\"batch_size\":%u,\"dtype\":\"%s\",\"mode\":\"%s\","
      "\"copies\":%llu,\"checked_batches\":%llu,\"mismatches\":%llu,\"detail\":\"%s\"}\n",
      timed_images / dt, static_cast<unsigned long long>(batches), batch_size, dtype.c_str(),
      st.mode.c_str(), static_cast<unsigned long long>(st.copies),
      static_cast<unsigned long long>(checked), static_cast<unsigned long long>(mismatches),
      detail.c_str());
  cudaFree(out);
  cudaFree(sink);
  cudaStreamDestroy(stream);
  return mismatches == 0 && checked > 0 ? 0 : 1;
}
