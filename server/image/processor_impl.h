// SampleProcessor's insides (pipeline.h): its scratch and stages, shared by
// pipeline.cc (a sample's frame, the steps, the views) and
// pipeline_decode.cc (the decodes that fuse the leading crop and resize, the
// whole decode, the resizes). Internal to server/image/.

#ifndef STOKER_SERVER_IMAGE_PROCESSOR_IMPL_H_
#define STOKER_SERVER_IMAGE_PROCESSOR_IMPL_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <new>
#include <vector>

#include "absl/status/status.h"
#include "server/image/decode/image_decoder.h"
#include "server/image/decode/jpeg_decoder.h"
#include "server/image/ops/transform.h"
#include "server/image/pipeline.h"
#include "server/image/steps.h"

namespace stoker::image {
namespace internal {

// The leading steps the decode can do itself: [crop] [resize [crop]], as
// one resample of a decoded region. `next` is the first step left.
struct FusedGeometry {
  bool fused = false;
  AxisSpec y, x;  // in displayed coordinates
  Interpolation interpolation = Interpolation::kAntialias;
  uint32_t next = 0;
};

constexpr uint32_t kChunkRows = 16;

// The monotonic clock in nanoseconds (stage times).
inline uint64_t NowNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

// Grows `v` to at least n elements, never shrinking its storage.
template <typename T>
inline T* Room(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

// One axis' resample plan for a resize's interpolation (kAntialias,
// kBicubic or kBilinear).
void BuildPlan(Interpolation interpolation, const AxisSpec& spec, uint32_t size, AxisPlan* plan);

}  // namespace internal

struct SampleProcessor::Impl {
  // The next draw's boxes (set_boxes; not owned).
  const float* boxes = nullptr;
  uint32_t box_count = 0;
  // Constant after construction: none. Everything below is scratch reused
  // between samples; it grows to the largest sample seen and stays.
  JpegDecoder decoder;
  // The other formats' decoders, made on first use (MakeDecoder).
  std::unique_ptr<ImageDecoder> decoders[kImageFormatCount];
  // The current sample's: its format, and its decoder unless a JPEG. For
  // the other formats `header` holds the size, orientation 1.
  ImageFormat format = ImageFormat::kJpeg;
  ImageDecoder* other = nullptr;
  JpegHeader header;
  std::vector<uint8_t> chunk;  // kChunkRows decoded rows
  std::vector<uint8_t> region;  // a non-JPEG image's rows the fused geometry reads
  std::vector<uint8_t*> row_ptrs;
  std::vector<uint8_t> rgb_row;  // one row converted from CMYK
  std::vector<uint8_t> hpass;    // horizontal pass output, one row per source row
  std::vector<uint8_t> decoded;  // a multi-view sample's image, decoded once
  std::vector<uint8_t> image;    // the image the steps work on
  std::vector<uint8_t> spare;    // where a step that cannot work in place writes
  std::vector<int32_t> acc;
  std::vector<float> blur;
  std::vector<float> field;     // an elastic step's displacement
  std::vector<uint8_t> scratch8;   // sharpness's copy of the image; a box blur's sums and transposed image
  std::vector<uint8_t> mix_start;  // the image at kMixBegin
  std::vector<float> mix_acc;      // AugMix's weighted sum
  AxisPlan plan_x, plan_y;
  SampleSteps drawn;
  uint64_t decode_ns = 0;
  bool skip_unneeded_scans = true;
  bool inputs_are_baseline_copies = false;
  DecodePath decode_path = DecodePath::kWhole;  // of the current sample
  uint32_t dct_scale = 8;

  absl::Status Open(const uint8_t* jpeg, size_t size, const PipelineParams& p);
  // `source`: the image already decoded whole (raw orientation, header's
  // size), which Execute reads and leaves as it is; nullptr: decode it here.
  absl::Status Execute(const PipelineParams& p, const SampleSteps& steps, void* out,
                       size_t capacity, SampleResult* result,
                       const uint8_t* source = nullptr);
  absl::Status DecodeFused(const PipelineParams& p, const internal::FusedGeometry& g,
                           uint8_t* dst);
  absl::Status DecodeWhole(uint8_t* dst);
  absl::Status DecodeFusedOther(const PipelineParams& p, const internal::FusedGeometry& g,
                                uint8_t* dst);
  absl::Status ResizeImage(const uint8_t* src, uint32_t h, uint32_t w, const Step& s,
                           uint64_t max_pixels, uint8_t* dst);

  uint32_t OrientedHeight() const {
    return SwapsAxes(header.orientation) ? header.width : header.height;
  }
  uint32_t OrientedWidth() const {
    return SwapsAxes(header.orientation) ? header.height : header.width;
  }

  // Reads up to `rows` rows into the chunk buffer; timed as decode.
  absl::Status ReadChunk(uint32_t rows, uint32_t* got) {
    const uint64_t t0 = internal::NowNs();
    absl::Status s = decoder.ReadRows(row_ptrs.data(), rows, got);
    decode_ns += internal::NowNs() - t0;
    if (s.ok() && *got == 0) return absl::InternalError("libjpeg returned no rows");
    return s;
  }

  // The frame of Process and ProcessSteps: checks, Open, then `render`
  // with the oriented height and width. A failed sample leaves the decoder
  // reset and an empty result; both report their stage times.
  template <typename Render>
  absl::Status Run(const uint8_t* jpeg, size_t size, const PipelineParams& p, const void* out,
                   SampleResult* result, Render&& render) {
    const uint64_t start = internal::NowNs();
    *result = SampleResult();
    decode_ns = 0;
    decode_path = DecodePath::kWhole;
    dct_scale = 8;
    format = ImageFormat::kUnknown;
    other = nullptr;
    absl::Status s = ValidateParams(p);
    if (!s.ok()) return s;
    if (out == nullptr) return absl::InvalidArgumentError("no output buffer");
    try {
      s = Open(jpeg, size, p);
      if (s.ok()) s = render(OrientedHeight(), OrientedWidth());
    } catch (const std::bad_alloc&) {
      s = absl::ResourceExhaustedError("out of memory while decoding");
    }
    if (!s.ok()) {
      decoder.Abort();
      *result = SampleResult();
    }
    result->format = format;
    const uint64_t total = internal::NowNs() - start;
    result->decode_ns = decode_ns;
    result->augment_ns = total > decode_ns ? total - decode_ns : 0;
    if (s.ok()) {
      result->decode_path = decode_path;
      result->dct_scale = dct_scale;
      result->progressive = header.progressive;
    }
    return s;
  }
};

}  // namespace stoker::image

#endif  // STOKER_SERVER_IMAGE_PROCESSOR_IMPL_H_
