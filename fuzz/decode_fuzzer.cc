// libFuzzer target: the worker's decode path, SampleProcessor::Process (and
// ProcessRegion), on arbitrary bytes, with the train, eval and decode
// pipelines.
//
// Input: 8 bytes of parameters, then the file.
//   [0] mode: 0 train, 1 eval, 2 decode at a fixed size, 3 decode at the
//       image's own size (variable), 4 train with a given crop box and flip
//   [1] [2] output height, width - 1 (mod 64)
//   [3] flags: 1 exact_decode, 2 apply_exif, 4 bilinear, 8|16 dtype
//       (uint8, uint8, float32, float16), 32 NCHW, 64 flip (mode 4)
//   [4..7] eval: resize_size; train: scale and ratio; mode 4: the crop box;
//       all: the sample key
// The output goes to a buffer of exactly the capacity the daemon would give
// (so that ASan sees any write past it); a success must describe a sample
// that fits it. Caps are small (4 Mpx) so that each input stays fast.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <vector>

#include "server/image/pipeline.h"
#include "stoker/ring_layout.h"

namespace {

constexpr size_t kParamBytes = 8;
constexpr uint64_t kMaxDecodePixels = 4ull << 20;

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "decode_fuzzer: invariant broken: %s\n", what);
  std::abort();
}

// One buffer per capacity, reused: exactly `bytes` long.
uint8_t* Buffer(size_t bytes) {
  static std::map<size_t, std::vector<uint8_t>> buffers;
  auto& b = buffers[bytes];
  if (b.size() != bytes) b.assign(bytes, 0);
  return b.data();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using stoker::image::PipelineKind;
  if (size < kParamBytes) return 0;
  const uint8_t* q = data;
  data += kParamBytes;
  size -= kParamBytes;

  stoker::image::PipelineParams p;
  const int mode = q[0] % 5;
  p.kind = mode == 0 || mode == 4 ? PipelineKind::kTrain
           : mode == 1            ? PipelineKind::kEval
                                  : PipelineKind::kDecode;
  p.out_height = 1 + q[1] % 64;
  p.out_width = 1 + q[2] % 64;
  if (mode == 3) p.out_height = p.out_width = 0;
  p.exact_decode = (q[3] & 1) != 0;
  p.apply_exif = (q[3] & 2) != 0;
  p.interpolation = (q[3] & 4) != 0 ? stoker::image::Interpolation::kBilinear
                                    : stoker::image::Interpolation::kAntialias;
  const int dt = (q[3] >> 3) & 3;
  p.dtype = dt == 2 ? stoker::ring::kFloat32 : dt == 3 ? stoker::ring::kFloat16 : stoker::ring::kUint8;
  p.layout = (q[3] & 32) != 0 ? stoker::ring::kNCHW : stoker::ring::kNHWC;
  p.max_decode_pixels = kMaxDecodePixels;
  if (p.kind == PipelineKind::kEval) {
    p.resize_size = std::max(p.out_height, p.out_width) + q[4] % 200;
  } else {
    p.resize_size = 256;
  }
  if (p.kind == PipelineKind::kTrain) {
    p.scale_min = (1 + q[4] % 100) / 100.0f;
    p.scale_max = std::max(p.scale_min, (1 + q[5] % 100) / 100.0f);
    p.ratio_min = 0.25f + (q[6] % 8) * 0.1f;
    p.ratio_max = p.ratio_min + (q[7] % 8) * 0.25f;
    p.flip_prob = (q[3] & 64) != 0 ? 1.0f : 0.0f;
  } else {
    p.flip_prob = 0.0f;
  }
  if (!stoker::image::ValidateParams(p).ok()) return 0;

  const uint64_t capacity = stoker::image::MaxSampleBytes(p);
  if (capacity == 0) Fail("MaxSampleBytes is 0 for valid params");
  uint8_t* out = Buffer(capacity);
  stoker::image::SampleKey key;
  key.seed = q[4] | (q[5] << 8);
  key.epoch = q[6];
  key.dataset_index = q[7];

  static stoker::image::SampleProcessor processor;  // reused, as in a worker
  stoker::image::SampleResult r;
  absl::Status st;
  if (mode == 4) {
    stoker::image::CropBox box;
    box.top = q[4] * 4u;
    box.left = q[5] * 4u;
    box.height = 1 + q[6] * 4u;
    box.width = 1 + q[7] * 4u;
    st = processor.ProcessRegion(data, size, p, box, (q[3] & 64) != 0, out, capacity, &r);
  } else {
    st = processor.Process(data, size, p, key, out, capacity, &r);
  }
  if (!st.ok()) {
    if (st.message().empty()) Fail("a failure without a reason");
    return 0;
  }
  if (r.bytes > capacity) Fail("result larger than the capacity");
  if (r.channels != 3) Fail("result is not 3 channels");
  const unsigned __int128 need = static_cast<unsigned __int128>(r.height) * r.width * r.channels *
                                 stoker::ring::DTypeBytes(p.dtype);
  if (need != r.bytes) Fail("result bytes disagree with its shape");
  if (p.out_height != 0 && (r.height != p.out_height || r.width != p.out_width)) {
    Fail("fixed-shape result of another shape");
  }
  if (r.height == 0 || r.width == 0) Fail("empty result");
  if (p.out_height == 0 && uint64_t{r.height} * r.width > p.max_decode_pixels) {
    Fail("decoded more pixels than the cap");
  }
  return 0;
}
