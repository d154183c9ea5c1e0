// SampleProcessor's decodes (processor_impl.h): a JPEG decoded straight
// into the leading crop and resize (DCT scaling, region reads), the other
// formats' rows resampled the same way, the whole decode, and the resizes
// of the steps.

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/image/decode/decode_planner.h"
#include "server/image/param_checks.h"
#include "server/image/processor_impl.h"
#include "stoker/ring_layout.h"

namespace stoker::image {
namespace internal {

void BuildPlan(Interpolation interpolation, const AxisSpec& spec, uint32_t size, AxisPlan* plan) {
  if (interpolation == Interpolation::kBilinear) {
    BuildBilinearPlan(spec, size, plan);
  } else if (interpolation == Interpolation::kBicubic) {
    BuildAntialiasPlan(spec, size, plan, PilFilter::kBicubic);
  } else {
    BuildAntialiasPlan(spec, size, plan);
  }
}

}  // namespace internal

namespace {

using namespace internal;  // NOLINT: param_checks.h and processor_impl.h, this folder's own

constexpr uint32_t kCropMargin = 16;  // decoded pixels, see DecodeFused

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

}  // namespace

absl::Status SampleProcessor::Impl::DecodeFused(const PipelineParams& p, const FusedGeometry& g,
                                                uint8_t* dst) {
  const int o = header.orientation;
  const bool swap = SwapsAxes(o);
  // The resample runs in raw (as coded) coordinates; the orientation and
  // the flips are applied when the small result is written out.
  AxisSpec rx = swap ? g.y : g.x;
  AxisSpec ry = swap ? g.x : g.y;
  const bool mirror_x = o == 2 || o == 3 || o == 7 || o == 8;
  const bool mirror_y = o == 3 || o == 4 || o == 6 || o == 7;
  if (mirror_x) rx = MirrorAxis(rx, header.width);
  if (mirror_y) ry = MirrorAxis(ry, header.height);

  // The smallest DCT scale M/8 that keeps the decoded crop at least
  // kMinDecodedPerOutput times the output in both directions. Only M = 1, 2,
  // 4 (and 8): libjpeg-turbo has SIMD IDCTs for those; the other scaled
  // IDCTs are plain C and measured slower than decoding at the next power of
  // two. A scale the daemon's calibration disabled (decode_planner.h) is
  // passed over for the next larger allowed one; 8 is always allowed.
  // Bicubic's bound was not measured: it decodes at full scale.
  int num = 8;
  if (p.exact_decode == 0 && g.interpolation != Interpolation::kBicubic) {
    for (int m : {1, 2, 4}) {
      if ((p.disabled_dct_scales & DctScaleBit(m)) != 0) continue;
      if (rx.scale * m >= 8.0 * kMinDecodedPerOutput &&
          ry.scale * m >= 8.0 * kMinDecodedPerOutput) {
        num = m;
        break;
      }
    }
  }
  if (num == 1 && inputs_are_baseline_copies && skip_unneeded_scans) {
    return absl::AbortedError(
        "a baseline copy at DCT scale 1/8: its progressive original decodes faster");
  }
  // At 1/8 a progressive file's AC scans of 1x1-IDCT components are never
  // read: the decoder leaves them out (same pixels, jpeg_decoder.h).
  const ScanSelection scans = num == 1 && header.progressive && skip_unneeded_scans
                                  ? ScanSelection::kNeeded
                                  : ScanSelection::kAll;
  DecodeInfo info;
  uint64_t t0 = NowNs();
  absl::Status s = decoder.Start(num, &info, scans);
  decode_ns += NowNs() - t0;
  if (!s.ok()) return s;
  dct_scale = static_cast<uint32_t>(num);
  decode_path = info.skipped_scans ? DecodePath::kDcScans : DecodePath::kWhole;
  const AxisSpec sx = ScaleAxis(rx, num, info.width);
  const AxisSpec sy = ScaleAxis(ry, num, info.height);
  BuildPlan(g.interpolation, sx, info.width, &plan_x);
  BuildPlan(g.interpolation, sy, info.height, &plan_y);
  const auto y0 = static_cast<uint32_t>(plan_y.min_index);
  const auto y1 = static_cast<uint32_t>(plan_y.end_index);
  uint32_t x0 = static_cast<uint32_t>(plan_x.min_index);
  uint32_t width = static_cast<uint32_t>(plan_x.end_index) - x0;
  if (y1 <= y0 || width == 0 || y1 > info.height || x0 + width > info.width) {
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
  bool seeked = false;  // columns may widen to an iMCU boundary
  s = decoder.Window(&x0, &width, y0, &seeked);
  decode_ns += NowNs() - t0;
  if (!s.ok()) return s;
  if (seeked) decode_path = DecodePath::kRestartWindow;

  if (uint64_t{plan_x.out_size} * (y1 - y0) > p.max_decode_pixels) {
    return absl::ResourceExhaustedError(
        "the resample's intermediate image is over max_decode_pixels");
  }
  const size_t src_row_bytes = size_t{width} * info.channels;
  const size_t hrow = size_t{plan_x.out_size} * 3;
  uint8_t* chunk_data = Room(chunk, src_row_bytes * kChunkRows + kResamplePadBytes);
  Room(row_ptrs, kChunkRows);
  for (uint32_t i = 0; i < kChunkRows; ++i) row_ptrs[i] = chunk_data + i * src_row_bytes;
  uint8_t* rgb =
      info.channels == 4 ? Room(rgb_row, size_t{width} * 3 + kResamplePadBytes) : nullptr;
  uint8_t* hp = Room(hpass, hrow * (y1 - y0));
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
      ResampleRow(row, static_cast<int32_t>(x0), plan_x, hp + size_t{y - y0} * hrow);
    }
  }
  t0 = NowNs();
  s = decoder.Stop();  // checks the rest of the file is there
  decode_ns += NowNs() - t0;
  if (!s.ok()) return s;
  ResampleColumns(hp, hrow, static_cast<int32_t>(y0), hrow, plan_y, dst, hrow, Room(acc, hrow));
  return absl::OkStatus();
}

absl::Status SampleProcessor::Impl::DecodeFusedOther(const PipelineParams& p,
                                                     const FusedGeometry& g, uint8_t* dst) {
  // No DCT scaling, no orientation: the region the resample reads is
  // decoded, exactly the whole decode's pixels there (image_decoder.h).
  const AxisSpec sx = ScaleAxis(g.x, 8, header.width);
  const AxisSpec sy = ScaleAxis(g.y, 8, header.height);
  BuildPlan(g.interpolation, sx, header.width, &plan_x);
  BuildPlan(g.interpolation, sy, header.height, &plan_y);
  DecodeRegion r;
  r.top = static_cast<uint32_t>(plan_y.min_index);
  r.left = static_cast<uint32_t>(plan_x.min_index);
  r.height = static_cast<uint32_t>(plan_y.end_index) - r.top;
  r.width = static_cast<uint32_t>(plan_x.end_index) - r.left;
  if (r.height == 0 || r.width == 0 || r.top + r.height > header.height ||
      r.left + r.width > header.width) {
    return absl::InternalError("empty resample region");
  }
  if (uint64_t{plan_x.out_size} * r.height > p.max_decode_pixels) {
    return absl::ResourceExhaustedError(
        "the resample's intermediate image is over max_decode_pixels");
  }
  const size_t row_bytes = size_t{r.width} * 3;
  uint8_t* rows = Room(region, row_bytes * r.height + kResamplePadBytes);
  const uint64_t t0 = NowNs();
  absl::Status s = other->Decode(r, rows, row_bytes);
  decode_ns += NowNs() - t0;
  if (!s.ok()) return s;
  const size_t hrow = size_t{plan_x.out_size} * 3;
  uint8_t* hp = Room(hpass, hrow * r.height);
  for (uint32_t y = 0; y < r.height; ++y) {
    ResampleRow(rows + y * row_bytes, static_cast<int32_t>(r.left), plan_x, hp + y * hrow);
  }
  ResampleColumns(hp, hrow, static_cast<int32_t>(r.top), hrow, plan_y, dst, hrow, Room(acc, hrow));
  return absl::OkStatus();
}

absl::Status SampleProcessor::Impl::DecodeWhole(uint8_t* dst) {
  if (other != nullptr) {
    const uint64_t t0 = NowNs();
    absl::Status s = other->Decode(DecodeRegion{0, 0, header.height, header.width}, dst,
                                   size_t{header.width} * 3);
    decode_ns += NowNs() - t0;
    return s;
  }
  DecodeInfo info;
  uint64_t t0 = NowNs();
  absl::Status s = decoder.Start(8, &info);
  decode_ns += NowNs() - t0;
  if (!s.ok()) return s;
  if (info.width != header.width || info.height != header.height) {
    return absl::InternalError("libjpeg's output size is not the header's");
  }
  const size_t row_bytes = size_t{info.width} * 3;
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
  return s;
}

absl::Status SampleProcessor::Impl::ResizeImage(const uint8_t* src, uint32_t h, uint32_t w,
                                                const Step& s, uint64_t max_pixels, uint8_t* dst) {
  const AxisSpec ay = ResizeCropAxis(h, s.height, 0, s.height);
  const AxisSpec ax = ResizeCropAxis(w, s.width, 0, s.width);
  BuildPlan(s.interpolation, ax, w, &plan_x);
  BuildPlan(s.interpolation, ay, h, &plan_y);
  const size_t hrow = size_t{s.width} * 3;
  const auto y0 = static_cast<uint32_t>(plan_y.min_index);
  const auto y1 = static_cast<uint32_t>(plan_y.end_index);
  if (uint64_t{s.width} * (y1 - y0) > max_pixels) {
    return absl::ResourceExhaustedError(
        "the resize's intermediate image is over max_decode_pixels");
  }
  uint8_t* hp = Room(hpass, hrow * (y1 - y0));
  // Rows are contiguous and `src` has kResamplePadBytes after its last row.
  for (uint32_t y = y0; y < y1; ++y) {
    ResampleRow(src + size_t{y} * w * 3, 0, plan_x, hp + size_t{y - y0} * hrow);
  }
  ResampleColumns(hp, hrow, static_cast<int32_t>(y0), hrow, plan_y, dst, hrow, Room(acc, hrow));
  return absl::OkStatus();
}

}  // namespace stoker::image
