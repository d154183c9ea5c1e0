// Decode + augment of one sample, from the bytes of a JPEG file to its place
// in a ring slot. Used by the worker processes, by the single-process bench
// loop and by tests. Pure computation: no I/O, no global state.

#ifndef STOKER_SERVER_IMAGE_PIPELINE_H_
#define STOKER_SERVER_IMAGE_PIPELINE_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"

namespace stoker::image {

enum class PipelineKind : uint32_t { kTrain = 1, kEval = 2, kDecode = 3 };
enum class Interpolation : uint32_t { kAntialias = 1, kBilinear = 2 };

// Plain-old-data so that it crosses the daemon -> worker socket verbatim.
// The daemon fills every field (defaults applied) from the Attach request.
struct PipelineParams {
  PipelineKind kind = PipelineKind::kTrain;
  uint32_t out_height = 224;   // decode: 0 = the image's own size (batch 1)
  uint32_t out_width = 224;
  uint32_t resize_size = 256;  // eval: shorter side before the center crop
  float scale_min = 0.08f;     // train: RandomResizedCrop scale
  float scale_max = 1.0f;
  float ratio_min = 3.0f / 4.0f;  // train: RandomResizedCrop ratio
  float ratio_max = 4.0f / 3.0f;
  float flip_prob = 0.5f;      // train: RandomHorizontalFlip p
  Interpolation interpolation = Interpolation::kAntialias;
  uint32_t dtype = 1;          // ring::DType: uint8 / float32 / float16
  uint32_t layout = 1;         // ring::Layout: NHWC / NCHW
  float mean[3] = {0.485f, 0.456f, 0.406f};  // float outputs: (x/255 - mean) / std
  float stdev[3] = {0.229f, 0.224f, 0.225f};
  uint64_t max_decode_pixels = 64ull << 20;  // refuse larger images before allocating
  uint32_t exact_decode = 0;   // 1: never use DCT scaling
  uint32_t apply_exif = 0;     // 1: turn the image as its EXIF orientation says
                               // (0, as torchvision's ImageFolder: as coded)
};

// Checks ranges (sizes, scale/ratio order, probabilities, std != 0, ...).
[[nodiscard]] absl::Status ValidateParams(const PipelineParams& p);

// Bytes one output sample takes at the fixed output shape (3 channels, the
// dtype's size); for decode with out_height == 0, max_decode_pixels * 3 (times
// the dtype's size). 0 for an unknown dtype.
uint64_t MaxSampleBytes(const PipelineParams& p);

// What keys a sample's randomness: the same key gives the same pixels.
struct SampleKey {
  uint64_t seed = 0;
  uint32_t epoch = 0;
  uint64_t dataset_index = 0;
};

// A crop in pixels, in the image's displayed orientation (after EXIF when
// apply_exif, else as coded).
struct CropBox {
  uint32_t top = 0;
  uint32_t left = 0;
  uint32_t height = 0;
  uint32_t width = 0;
};

struct SampleResult {
  uint32_t height = 0;  // of the written sample
  uint32_t width = 0;
  uint32_t channels = 0;
  uint64_t bytes = 0;
  uint64_t decode_ns = 0;   // JPEG header + entropy decode + IDCT
  uint64_t augment_ns = 0;  // crop/resize/flip/convert and the write into `out`
};

// Reuses its buffers between samples; one per thread.
class SampleProcessor {
 public:
  SampleProcessor();
  ~SampleProcessor();
  SampleProcessor(const SampleProcessor&) = delete;
  SampleProcessor& operator=(const SampleProcessor&) = delete;

  // Decodes `jpeg` and writes the transformed sample to `out` (at most
  // `capacity` bytes; at least MaxSampleBytes(p) for fixed-shape outputs).
  // A bad or hostile file returns a non-OK status whose message is the
  // reason (INVALID_ARGUMENT for corrupt data, UNIMPLEMENTED for unsupported
  // JPEG kinds, RESOURCE_EXHAUSTED for caps); it never crashes or aborts.
  //
  // Train: torchvision RandomResizedCrop(out, scale, ratio) + RandomHorizontal
  // Flip(flip_prob), randomness from KeyedRng(seed, epoch, dataset_index).
  // Eval: Resize(resize_size) + CenterCrop(out). Decode: the whole image.
  // Resampling follows Pillow's BILINEAR resize (kAntialias) or plain
  // bilinear (kBilinear). With apply_exif the EXIF orientation is applied
  // first; by default it is not (PIL's Image.open + convert, what
  // torchvision's ImageFolder gives, does not turn the image). Unless
  // exact_decode, the JPEG is decoded at a reduced DCT scale when the crop
  // is many times (pipeline.cc: kMinDecodedPerOutput) the output on both
  // axes, and only the rows and columns the crop needs are decoded.
  [[nodiscard]] absl::Status Process(const uint8_t* jpeg, size_t size, const PipelineParams& p,
                                     const SampleKey& key, void* out, size_t capacity,
                                     SampleResult* result);

  // Like Process for a train pipeline (p.kind is ignored), but with the crop
  // box and the flip given instead of drawn: for tests, tools and fidelity
  // checks. INVALID_ARGUMENT if the box is empty or not inside the image.
  [[nodiscard]] absl::Status ProcessRegion(const uint8_t* jpeg, size_t size,
                                           const PipelineParams& p, const CropBox& box, bool flip,
                                           void* out, size_t capacity, SampleResult* result);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace stoker::image

#endif  // STOKER_SERVER_IMAGE_PIPELINE_H_
