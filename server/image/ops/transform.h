// The geometry and pixel kernels behind SampleProcessor, exposed for tests,
// the image tool and fidelity checks. Internal to stoker_image: the daemon
// calls SampleProcessor (pipeline.h) only.
//
// Glossary
//   oriented   coordinates of the image as displayed, after its EXIF
//              orientation; crop rules (torchvision's) work in these.
//   raw        coordinates of the image as coded in the JPEG.
//   decoded    raw coordinates at the DCT scale chosen (M/8 of raw).
//   AxisSpec   one axis of a resample: which source range the filter may
//              read and where each output pixel's center falls.
//   AxisPlan   an AxisSpec turned into Pillow-style integer coefficients.
//
// Resampling reproduces Pillow's Image.resize(BILINEAR or BICUBIC) (what
// torchvision's PIL backend calls): the filter's support scaled by the downscale
// factor, per-output normalization, 22-bit fixed point, horizontal pass
// first, rounded to uint8 between the passes.

#ifndef STOKER_SERVER_IMAGE_OPS_TRANSFORM_H_
#define STOKER_SERVER_IMAGE_OPS_TRANSFORM_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/half.h"  // FloatToHalf, HalfToFloat
#include "server/image/steps.h"
#include "server/image/ops/rng.h"

namespace stoker::image {

// torchvision RandomResizedCrop.get_params with op.scale and op.ratio, with
// draws from `rng` in this order: per attempt U(scale), U(log ratio), and
// when accepted the top then the left offset. Falls back to the central
// crop after 10 attempts. height and width must be >= 1; the box is always
// inside the image.
CropBox ChooseTrainCrop(uint32_t height, uint32_t width, const OpParams& op, KeyedRng& rng);

// A random flip or RandomGrayscale: one draw, true when U[0,1) < p.
bool ChooseFlip(float p, KeyedRng& rng);

// torchvision Resize's output size for an image of height x width:
// op.height x op.width, or with op.width == 0 the shorter side op.height and
// the longer int(op.height * long / short), then (op.max_size != 0) capped
// so that the longer side is at most max_size (torchvision's
// _compute_resized_output_size). Sides may come out 0 for extreme aspects;
// callers check.
void ResizeOutputSize(uint32_t height, uint32_t width, const OpParams& op, uint32_t* out_height,
                      uint32_t* out_width);

// torchvision CenterCrop's offset on one axis when size >= crop:
// int(round((size - crop) / 2.0)), Python's round (half to even).
uint32_t CenterCropOffset(uint32_t size, uint32_t crop);

// One axis of a resample. The filter reads source pixels [lo, hi) only
// (Pillow clamps at the image's edges: the crop's edges for crop-then-resize).
// Output pixel i (0 <= i < out_size) is centered at source coordinate
//   lo + start + (i + offset + 0.5) * scale.
struct AxisSpec {
  double lo = 0;  // integral except after DCT scaling
  double hi = 0;
  double start = 0;
  double scale = 1;    // source pixels per output pixel
  int32_t offset = 0;  // eval: the center crop's offset in the resized image
  uint32_t out_size = 0;
};

// Crop [pos, pos + len) of an axis, resize the crop to `resized` pixels,
// keep [offset, offset + out) of those: the geometry the planner fuses.
AxisSpec CropResizeCropAxis(uint32_t pos, uint32_t len, uint32_t resized, int32_t offset,
                            uint32_t out);
// Crop [pos, pos + len) of an axis, then resize it to `out` pixels.
AxisSpec CropResizeAxis(uint32_t pos, uint32_t len, uint32_t out);
// Resize a whole axis of `size` pixels to `resized`, keep [offset, offset + out).
AxisSpec ResizeCropAxis(uint32_t size, uint32_t resized, int32_t offset, uint32_t out);
// The same samples on the mirrored axis x' = size - x, in increasing order.
AxisSpec MirrorAxis(const AxisSpec& a, uint32_t size);
// The same samples at DCT scale num/8 on an axis decoded to `decoded` pixels.
AxisSpec ScaleAxis(const AxisSpec& a, int num, uint32_t decoded);

// Integer filter taps for one axis: output i reads `count[i]` source pixels
// from `first[i]` with weights coeffs[i * ksize + t] (sum = 1 << 22).
struct AxisPlan {
  static constexpr int kPrecisionBits = 22;  // Pillow's PRECISION_BITS for 8 bpc
  uint32_t out_size = 0;
  uint32_t ksize = 0;
  int32_t min_index = 0;  // first source pixel any output reads
  int32_t end_index = 0;  // one past the last
  std::vector<int32_t> first;
  std::vector<int32_t> count;
  std::vector<int32_t> coeffs;
  // The same coefficients for pairs of outputs, each broadcast to 4 lanes
  // (SIMD layout; empty when ksize is large).
  std::vector<int32_t> pairs;
};

// Pillow's resampling filters: BILINEAR (triangle, support 1) and BICUBIC
// (Keys' cubic with a = -0.5, support 2; its negative lobes make outputs
// that ResampleRow / ResampleColumns clip to 0..255, as Pillow does).
enum class PilFilter { kBilinear, kBicubic };

// Pillow's Image.resize(filter) coefficients for one axis: the filter's
// support scaled by the downscale factor, normalized per output.
// `size` is the axis' full length in source pixels (the clamp range is
// [lo, hi) intersected with [0, size)). Reuses plan's storage.
void BuildAntialiasPlan(const AxisSpec& spec, uint32_t size, AxisPlan* plan,
                        PilFilter filter = PilFilter::kBilinear);
// Plain 2-tap bilinear, half-pixel centers, no antialias (PyTorch's
// interpolate(mode="bilinear", align_corners=False) on the crop).
void BuildBilinearPlan(const AxisSpec& spec, uint32_t size, AxisPlan* plan);

// Readable bytes ResampleRow needs after the last source pixel of a row.
inline constexpr size_t kResamplePadBytes = 64;

// Horizontal pass over one RGB row (readable kResamplePadBytes past its end). `src` holds source
// pixels starting at source column `src_x0`; writes plan.out_size RGB pixels.
void ResampleRow(const uint8_t* src, int32_t src_x0, const AxisPlan& plan, uint8_t* dst);

// Vertical pass. `src` rows (stride src_stride) hold source rows starting at
// `src_y0`; each row has `row_bytes` bytes. Writes plan.out_size rows.
// `acc` is scratch of row_bytes int32.
void ResampleColumns(const uint8_t* src, size_t src_stride, int32_t src_y0, size_t row_bytes,
                     const AxisPlan& plan, uint8_t* dst, size_t dst_stride, int32_t* acc);

// Caps the SIMD kernels used (0 scalar, 1 SSE4.1, 2 AVX2) for tests that
// check every path gives the same bytes; returns the level now in effect.
// Not for production use (process-wide).
int SetSimdLevelForTesting(int level);

// Adobe CMYK as libjpeg returns it (inverted) to RGB the way PIL converts
// ("CMYK;I" raw mode, then CMYK -> RGB).
void CmykRowToRgb(const uint8_t* cmyk, uint32_t width, uint8_t* rgb);

// Writes an RGB uint8 image `src` (src_height x src_width, raw orientation)
// to `out` in the output's dtype/layout, applying the EXIF `orientation`
// (1..8) and then a horizontal flip. The output is src transposed for
// orientations 5..8. `src` and `out` must not overlap.
void EmitSample(const uint8_t* src, uint32_t src_height, uint32_t src_width, int orientation,
                bool flip, const PipelineParams& p, void* out);


// Orientation helpers: 5..8 swap the axes.
inline bool SwapsAxes(int orientation) { return orientation >= 5 && orientation <= 8; }

// The EXIF orientation (1..8) that shows what `orientation` shows, then
// flipped left-right (hflip) and/or top-bottom (vflip), in displayed
// coordinates: the flips folded into EmitSample's orientation.
int ComposeOrientation(int orientation, bool hflip, bool vflip);

}  // namespace stoker::image

#endif  // STOKER_SERVER_IMAGE_OPS_TRANSFORM_H_
