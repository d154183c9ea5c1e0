#include "server/image/pipeline.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <new>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/image/jpeg_decoder.h"
#include "server/image/rng.h"
#include "server/image/transform.h"
#include "stoker/ring_layout.h"

namespace stoker::image {
namespace {

constexpr uint32_t kMaxOutSide = 8192;
constexpr uint64_t kMaxOutPixels = 16ull << 20;
constexpr uint32_t kMaxResize = 65500;
constexpr uint32_t kChunkRows = 16;
constexpr uint32_t kCropMargin = 16;  // decoded pixels, see RenderResampled

// A DCT-scaled decode filters differently from Pillow's full decode + resize
// (each 8x8 block's spectrum truncated; chroma upsampling and the clipping of
// the RGB pixels done at the reduced size), an error that fades only when the
// resize after it still averages several decoded pixels per output pixel.
// The fewest (per output pixel, on each axis) that keep the mean absolute
// error against Pillow under 0.8 levels of 255 on finely textured images
// (print, fur, woven fabric at 4:2:0 and 4:4:4: tests/python/
// textured_corpus.py), measured: worst 0.72 at half scale, fabric, 32 px
// output. At 1 (scaled whenever the crop stayed as large as the output) the
// worst was 11 levels; at 4, 0.94; at 5, 0.81.
constexpr double kMinDecodedPerOutput = 6.5;

bool Finite(float v) { return std::isfinite(v); }

uint64_t DtypeBytes(uint32_t dtype) { return ring::DTypeBytes(dtype); }

uint64_t NowNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

// Grows `v` to at least n elements, never shrinking its storage.
template <typename T>
T* Room(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

}  // namespace

absl::Status ValidateParams(const PipelineParams& p) {
  if (p.kind != PipelineKind::kTrain && p.kind != PipelineKind::kEval &&
      p.kind != PipelineKind::kDecode) {
    return absl::InvalidArgumentError("unknown pipeline kind");
  }
  if (p.interpolation != Interpolation::kAntialias && p.interpolation != Interpolation::kBilinear) {
    return absl::InvalidArgumentError("unknown interpolation");
  }
  if (DtypeBytes(p.dtype) == 0) return absl::InvalidArgumentError("unknown dtype");
  if (p.layout != ring::kNHWC && p.layout != ring::kNCHW) {
    return absl::InvalidArgumentError("unknown layout");
  }
  if (p.exact_decode > 1 || p.apply_exif > 1) {
    return absl::InvalidArgumentError("exact_decode and apply_exif are 0 or 1");
  }
  if (p.max_decode_pixels == 0 || p.max_decode_pixels > (1ull << 32)) {
    return absl::InvalidArgumentError("max_decode_pixels must be in 1..2^32");
  }
  for (int c = 0; c < 3; ++c) {
    if (!Finite(p.mean[c]) || !Finite(p.stdev[c]) || p.stdev[c] == 0.0f) {
      return absl::InvalidArgumentError("mean and std must be finite, std non-zero");
    }
  }
  if (p.kind == PipelineKind::kDecode) {
    if ((p.out_height == 0) != (p.out_width == 0)) {
      return absl::InvalidArgumentError("decode: out_height and out_width are both 0 or both set");
    }
    if (p.out_height != 0 && uint64_t{p.out_height} * p.out_width > p.max_decode_pixels) {
      return absl::InvalidArgumentError("decode: the output shape is over max_decode_pixels");
    }
    return absl::OkStatus();
  }
  if (p.out_height < 1 || p.out_height > kMaxOutSide || p.out_width < 1 ||
      p.out_width > kMaxOutSide) {
    return absl::InvalidArgumentError(absl::StrCat("output sides must be in 1..", kMaxOutSide,
                                                   ", got ", p.out_height, "x", p.out_width));
  }
  if (uint64_t{p.out_height} * p.out_width > kMaxOutPixels) {
    return absl::InvalidArgumentError("output is over 16M pixels");
  }
  if (p.kind == PipelineKind::kEval) {
    if (p.resize_size < std::max(p.out_height, p.out_width) || p.resize_size > kMaxResize) {
      return absl::InvalidArgumentError(
          absl::StrCat("eval: resize_size must be in max(out_height, out_width)..", kMaxResize,
                       ", got ", p.resize_size));
    }
    return absl::OkStatus();
  }
  if (!Finite(p.scale_min) || !Finite(p.scale_max) || !(p.scale_min > 0) ||
      !(p.scale_min <= p.scale_max)) {
    return absl::InvalidArgumentError("train: need 0 < scale_min <= scale_max (finite)");
  }
  if (!Finite(p.ratio_min) || !Finite(p.ratio_max) || !(p.ratio_min > 0) ||
      !(p.ratio_min <= p.ratio_max)) {
    return absl::InvalidArgumentError("train: need 0 < ratio_min <= ratio_max (finite)");
  }
  if (!(p.flip_prob >= 0.0f && p.flip_prob <= 1.0f)) {
    return absl::InvalidArgumentError("train: flip_prob must be in [0, 1]");
  }
  return absl::OkStatus();
}

uint64_t MaxSampleBytes(const PipelineParams& p) {
  const uint64_t dsize = DtypeBytes(p.dtype);
  if (p.kind == PipelineKind::kDecode && p.out_height == 0) {
    return p.max_decode_pixels * 3 * dsize;
  }
  return uint64_t{p.out_height} * p.out_width * 3 * dsize;
}

struct SampleProcessor::Impl {
  // Constant after construction: none. Everything below is scratch reused
  // between samples; it grows to the largest sample seen and stays.
  JpegDecoder decoder;
  JpegHeader header;
  std::vector<uint8_t> chunk;  // kChunkRows decoded rows
  std::vector<uint8_t*> row_ptrs;
  std::vector<uint8_t> rgb_row;  // one row converted from CMYK
  std::vector<uint8_t> hpass;    // horizontal pass output, one row per source row
  std::vector<uint8_t> image;    // resampled sample, or a whole decoded image
  std::vector<int32_t> acc;
  AxisPlan plan_x, plan_y;
  uint64_t decode_ns = 0;

  absl::Status Open(const uint8_t* jpeg, size_t size, const PipelineParams& p);
  absl::Status RenderResampled(const PipelineParams& p, const AxisSpec& oy, const AxisSpec& ox,
                               bool flip, void* out, size_t capacity, SampleResult* result);
  absl::Status RenderWhole(const PipelineParams& p, void* out, size_t capacity,
                           SampleResult* result);

  uint32_t OrientedHeight() const {
    return SwapsAxes(header.orientation) ? header.width : header.height;
  }
  uint32_t OrientedWidth() const {
    return SwapsAxes(header.orientation) ? header.height : header.width;
  }

  // Reads up to `rows` rows into the chunk buffer; timed as decode.
  absl::Status ReadChunk(uint32_t rows, uint32_t* got) {
    const uint64_t t0 = NowNs();
    absl::Status s = decoder.ReadRows(row_ptrs.data(), rows, got);
    decode_ns += NowNs() - t0;
    if (s.ok() && *got == 0) return absl::InternalError("libjpeg returned no rows");
    return s;
  }

  // The frame of Process and ProcessRegion: checks, Open, then `render`
  // with the oriented height and width. A failed sample leaves the decoder
  // reset and an empty result; both report their stage times.
  template <typename Render>
  absl::Status Run(const uint8_t* jpeg, size_t size, const PipelineParams& p, const void* out,
                   SampleResult* result, Render&& render) {
    const uint64_t start = NowNs();
    *result = SampleResult();
    decode_ns = 0;
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
    const uint64_t total = NowNs() - start;
    result->decode_ns = decode_ns;
    result->augment_ns = total > decode_ns ? total - decode_ns : 0;
    return s;
  }
};

absl::Status SampleProcessor::Impl::Open(const uint8_t* jpeg, size_t size,
                                         const PipelineParams& p) {
  DecodeLimits limits;
  limits.max_pixels = p.max_decode_pixels;
  limits.read_exif = p.apply_exif != 0;
  const uint64_t t0 = NowNs();
  absl::Status s = decoder.ReadHeader(jpeg, size, limits, &header);
  decode_ns += NowNs() - t0;
  return s;
}

absl::Status SampleProcessor::Impl::RenderResampled(const PipelineParams& p, const AxisSpec& oy,
                                                    const AxisSpec& ox, bool flip, void* out,
                                                    size_t capacity, SampleResult* result) {
  const int o = header.orientation;
  const bool swap = SwapsAxes(o);
  const uint64_t bytes = uint64_t{oy.out_size} * ox.out_size * 3 * DtypeBytes(p.dtype);
  if (bytes > capacity) {
    decoder.Abort();
    return absl::InvalidArgumentError(
        absl::StrCat("output needs ", bytes, " bytes, capacity is ", capacity));
  }
  // The resample runs in raw (as coded) coordinates; the orientation and
  // the flip are applied when the small result is written out.
  AxisSpec rx = swap ? oy : ox;
  AxisSpec ry = swap ? ox : oy;
  const bool mirror_x = o == 2 || o == 3 || o == 7 || o == 8;
  const bool mirror_y = o == 3 || o == 4 || o == 6 || o == 7;
  if (mirror_x) rx = MirrorAxis(rx, header.width);
  if (mirror_y) ry = MirrorAxis(ry, header.height);

  // The smallest DCT scale M/8 that keeps the decoded crop at least
  // kMinDecodedPerOutput times the output in both directions. Only M = 1, 2,
  // 4 (and 8): libjpeg-turbo has SIMD IDCTs for those; the other scaled
  // IDCTs are plain C and measured slower than decoding at the next power of
  // two.
  int num = 8;
  if (p.exact_decode == 0) {
    for (int m : {1, 2, 4}) {
      if (rx.scale * m >= 8.0 * kMinDecodedPerOutput &&
          ry.scale * m >= 8.0 * kMinDecodedPerOutput) {
        num = m;
        break;
      }
    }
  }
  DecodeInfo info;
  uint64_t t0 = NowNs();
  absl::Status s = decoder.Start(num, &info);
  decode_ns += NowNs() - t0;
  if (!s.ok()) return s;
  const AxisSpec sx = ScaleAxis(rx, num, info.width);
  const AxisSpec sy = ScaleAxis(ry, num, info.height);
  if (p.interpolation == Interpolation::kBilinear) {
    BuildBilinearPlan(sx, info.width, &plan_x);
    BuildBilinearPlan(sy, info.height, &plan_y);
  } else {
    BuildAntialiasPlan(sx, info.width, &plan_x);
    BuildAntialiasPlan(sy, info.height, &plan_y);
  }
  const auto y0 = static_cast<uint32_t>(plan_y.min_index);
  const auto y1 = static_cast<uint32_t>(plan_y.end_index);
  uint32_t x0 = static_cast<uint32_t>(plan_x.min_index);
  uint32_t width = static_cast<uint32_t>(plan_x.end_index) - x0;
  if (y1 <= y0 || width == 0 || y1 > info.height || x0 + width > info.width) {
    decoder.Abort();
    return absl::InternalError("empty resample region");
  }
  // libjpeg's fancy upsampling treats the edges of a cropped region as image
  // edges; a margin keeps the columns we read identical to a full decode.
  if (x0 > 0 || width < info.width) {
    const uint32_t left = x0 > kCropMargin ? x0 - kCropMargin : 0;
    width = std::min(info.width, x0 + width + kCropMargin) - left;
    x0 = left;
  }
  t0 = NowNs();
  if (x0 > 0 || width < info.width) {
    s = decoder.CropColumns(&x0, &width);  // may widen to an iMCU boundary
  }
  if (s.ok() && y0 > 0) s = decoder.SkipRows(y0);
  decode_ns += NowNs() - t0;
  if (!s.ok()) return s;

  const size_t src_row_bytes = size_t{width} * info.channels;
  const size_t hrow = size_t{plan_x.out_size} * 3;
  uint8_t* chunk_data = Room(chunk, src_row_bytes * kChunkRows + kResamplePadBytes);
  Room(row_ptrs, kChunkRows);
  for (uint32_t i = 0; i < kChunkRows; ++i) row_ptrs[i] = chunk_data + i * src_row_bytes;
  uint8_t* rgb =
      info.channels == 4 ? Room(rgb_row, size_t{width} * 3 + kResamplePadBytes) : nullptr;
  uint8_t* h = Room(hpass, hrow * (y1 - y0));
  for (uint32_t y = y0; y < y1;) {
    uint32_t got = 0;
    s = ReadChunk(std::min(kChunkRows, y1 - y), &got);
    if (!s.ok()) return s;
    for (uint32_t i = 0; i < got; ++i, ++y) {
      const uint8_t* row = row_ptrs[i];
      if (rgb != nullptr) {
        CmykRowToRgb(row, width, rgb);
        row = rgb;
      }
      ResampleRow(row, static_cast<int32_t>(x0), plan_x, h + size_t{y - y0} * hrow);
    }
  }
  t0 = NowNs();
  s = decoder.Stop();  // checks the rest of the file is there
  decode_ns += NowNs() - t0;
  if (!s.ok()) return s;

  const bool direct = o == 1 && !flip && p.dtype == ring::kUint8 && p.layout == ring::kNHWC;
  uint8_t* dst = direct ? static_cast<uint8_t*>(out) : Room(image, hrow * plan_y.out_size);
  ResampleColumns(h, hrow, static_cast<int32_t>(y0), hrow, plan_y, dst, hrow, Room(acc, hrow));
  if (!direct) EmitSample(dst, plan_y.out_size, plan_x.out_size, o, flip, p, out);
  result->height = oy.out_size;
  result->width = ox.out_size;
  result->channels = 3;
  result->bytes = bytes;
  return absl::OkStatus();
}

absl::Status SampleProcessor::Impl::RenderWhole(const PipelineParams& p, void* out, size_t capacity,
                                                SampleResult* result) {
  const int o = header.orientation;
  const uint32_t oh = OrientedHeight(), ow = OrientedWidth();
  if (p.out_height != 0 && (oh != p.out_height || ow != p.out_width)) {
    decoder.Abort();
    return absl::InvalidArgumentError(absl::StrCat("image is ", ow, "x", oh,
                                                   ", the pipeline wants ", p.out_width, "x",
                                                   p.out_height, " (width x height)"));
  }
  const uint64_t bytes = uint64_t{oh} * ow * 3 * DtypeBytes(p.dtype);
  if (bytes > capacity) {
    decoder.Abort();
    return absl::ResourceExhaustedError(absl::StrCat("image is ", ow, "x", oh, ": needs ", bytes,
                                                     " bytes, capacity is ", capacity));
  }
  DecodeInfo info;
  uint64_t t0 = NowNs();
  absl::Status s = decoder.Start(8, &info);
  decode_ns += NowNs() - t0;
  if (!s.ok()) return s;
  const bool direct = o == 1 && p.dtype == ring::kUint8 && p.layout == ring::kNHWC;
  const size_t row_bytes = size_t{info.width} * 3;
  uint8_t* dst = direct ? static_cast<uint8_t*>(out) : Room(image, row_bytes * info.height);
  const size_t src_row_bytes = size_t{info.width} * info.channels;
  Room(row_ptrs, kChunkRows);
  uint8_t* chunk_data = info.channels == 4 ? Room(chunk, src_row_bytes * kChunkRows) : nullptr;
  for (uint32_t y = 0; y < info.height;) {
    const uint32_t want = std::min(kChunkRows, info.height - y);
    for (uint32_t i = 0; i < want; ++i) {
      row_ptrs[i] =
          chunk_data != nullptr ? chunk_data + i * src_row_bytes : dst + size_t{y + i} * row_bytes;
    }
    uint32_t got = 0;
    s = ReadChunk(want, &got);
    if (!s.ok()) return s;
    if (chunk_data != nullptr) {
      for (uint32_t i = 0; i < got; ++i) {
        CmykRowToRgb(row_ptrs[i], info.width, dst + size_t{y + i} * row_bytes);
      }
    }
    y += got;
  }
  t0 = NowNs();
  s = decoder.Finish();
  decode_ns += NowNs() - t0;
  if (!s.ok()) return s;
  if (!direct) EmitSample(dst, info.height, info.width, o, false, p, out);
  result->height = oh;
  result->width = ow;
  result->channels = 3;
  result->bytes = bytes;
  return absl::OkStatus();
}

SampleProcessor::SampleProcessor() : impl_(std::make_unique<Impl>()) {}
SampleProcessor::~SampleProcessor() = default;

absl::Status SampleProcessor::Process(const uint8_t* jpeg, size_t size, const PipelineParams& p,
                                      const SampleKey& key, void* out, size_t capacity,
                                      SampleResult* result) {
  Impl& im = *impl_;
  return im.Run(jpeg, size, p, out, result, [&](uint32_t h, uint32_t w) {
    switch (p.kind) {
      case PipelineKind::kTrain: {
        KeyedRng rng(key.seed, key.epoch, key.dataset_index);
        const CropBox box = ChooseTrainCrop(h, w, p, rng);
        const bool flip = ChooseFlip(p, rng);
        return im.RenderResampled(p, CropResizeAxis(box.top, box.height, p.out_height),
                                  CropResizeAxis(box.left, box.width, p.out_width), flip, out,
                                  capacity, result);
      }
      case PipelineKind::kEval: {
        const EvalGeometry g = ComputeEvalGeometry(h, w, p);
        return im.RenderResampled(p, ResizeCropAxis(h, g.resized_height, g.top, p.out_height),
                                  ResizeCropAxis(w, g.resized_width, g.left, p.out_width), false,
                                  out, capacity, result);
      }
      case PipelineKind::kDecode:
        break;
    }
    return im.RenderWhole(p, out, capacity, result);
  });
}

absl::Status SampleProcessor::ProcessRegion(const uint8_t* jpeg, size_t size,
                                            const PipelineParams& params, const CropBox& box,
                                            bool flip, void* out, size_t capacity,
                                            SampleResult* result) {
  PipelineParams p = params;
  p.kind = PipelineKind::kTrain;
  Impl& im = *impl_;
  return im.Run(jpeg, size, p, out, result, [&](uint32_t h, uint32_t w) {
    if (box.height == 0 || box.width == 0 || box.top >= h || box.left >= w ||
        box.height > h - box.top || box.width > w - box.left) {
      return absl::InvalidArgumentError(absl::StrCat("crop box (top ", box.top, ", left ", box.left,
                                                     ", ", box.height, "x", box.width,
                                                     ") is not inside the ", h, "x", w, " image"));
    }
    return im.RenderResampled(p, CropResizeAxis(box.top, box.height, p.out_height),
                              CropResizeAxis(box.left, box.width, p.out_width), flip, out, capacity,
                              result);
  });
}

}  // namespace stoker::image
