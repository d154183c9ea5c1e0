#include "server/image/pipeline.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "server/image/ops/boxes.h"
#include "server/image/decode/decode_planner.h"
#include "server/image/decode/image_decoder.h"
#include "server/image/decode/jpeg_decoder.h"
#include "server/image/ops/ops.h"
#include "server/image/ops/policy.h"
#include "server/image/ops/rng.h"
#include "server/image/ops/transform.h"
#include "stoker/ring_layout.h"

namespace stoker::image {
namespace {

// GaussianBlur's kernel sides: reflect padding needs kernel / 2 < the
// image's side, so no kernel larger than this can ever apply.
constexpr uint32_t kMaxKernel = 2 * kMaxOpSide + 1;
// "47 49 46 38 39 61 (\"GIF89a\")": a file's first bytes, for the message
// naming a format stoker does not read.
std::string StartBytes(const uint8_t* data, size_t size) {
  if (size == 0) return "nothing (an empty file)";
  const size_t n = std::min<size_t>(size, 6);
  std::string hex, text;
  for (size_t i = 0; i < n; ++i) {
    absl::StrAppend(&hex, i == 0 ? "" : " ", absl::Hex(data[i], absl::kZeroPad2));
    const bool shown = data[i] >= 0x20 && data[i] < 0x7f && data[i] != '"';
    text.push_back(shown ? static_cast<char>(data[i]) : '.');
  }
  return absl::StrCat(hex, " (\"", text, "\")");
}

// One axis' resample plan for a resize's interpolation (kAntialias or
// kBilinear).
void BuildPlan(Interpolation interpolation, const AxisSpec& spec, uint32_t size, AxisPlan* plan) {
  if (interpolation == Interpolation::kBilinear) {
    BuildBilinearPlan(spec, size, plan);
  } else {
    BuildAntialiasPlan(spec, size, plan);
  }
}

bool ValidKernel(uint32_t k) { return k >= 1 && k <= kMaxKernel && k % 2 == 1; }
constexpr uint32_t kChunkRows = 16;
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

bool Finite(float v) { return std::isfinite(v); }
bool Finite(double v) { return std::isfinite(v); }

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

bool ValidInterpolation(Interpolation i) {
  return i == Interpolation::kAntialias || i == Interpolation::kBilinear;
}

// The affine ops' resampling (PIL's Image.transform / rotate: NEAREST,
// BILINEAR).
bool ValidAffineInterpolation(Interpolation i) {
  return i == Interpolation::kNearest || i == Interpolation::kBilinear;
}

bool ValidPadMode(PadMode m) {
  return m == PadMode::kConstant || m == PadMode::kEdge || m == PadMode::kReflect ||
         m == PadMode::kSymmetric;
}

bool InSide(uint32_t v) { return v >= 1 && v <= kMaxOpSide; }

bool IsFlip(StepKind k) { return k == StepKind::kHorizontalFlip || k == StepKind::kVerticalFlip; }

// Steps that change each pixel by its own value only (and the image's
// statistics: contrast's mean, autocontrast's and equalize's histograms):
// they commute with flips and orientations, bit for bit. Not sharpness:
// its 3x3 sums run in float32 in Pillow's order, which a flip reverses.
bool IsPerPixel(StepKind k) {
  switch (k) {
    case StepKind::kColorJitter:
    case StepKind::kGrayscale:
    case StepKind::kPosterize:
    case StepKind::kSolarize:
    case StepKind::kAutocontrast:
    case StepKind::kEqualize:
    case StepKind::kInvert:
    case StepKind::kChannelPermute:
      return true;
    default:
      return false;
  }
}

absl::Status OpError(uint32_t i, OpKind kind, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("ops[", i, "] ", OpKindName(kind), ": ", what));
}

// ColorJitter's brightness, contrast, saturation (>= 0) and hue ([-0.5, 0.5])
// bounds.
bool JitterInRange(uint32_t j, float v) {
  if (!Finite(v)) return false;
  return j == kHue ? v >= -0.5f && v <= 0.5f : v >= 0.0f;
}

absl::Status ValidateOp(uint32_t i, const OpParams& op) {
  auto bad = [&](absl::string_view what) { return OpError(i, op.kind, what); };
  switch (op.kind) {
    case OpKind::kRandomResizedCrop:
      if (!InSide(op.height) || !InSide(op.width)) return bad("size must be in 1..65500");
      if (!ValidInterpolation(op.interpolation)) return bad("unknown interpolation");
      if (!Finite(op.scale[0]) || !Finite(op.scale[1]) || !(op.scale[0] > 0) ||
          !(op.scale[0] <= op.scale[1])) {
        return bad("need 0 < scale[0] <= scale[1] (finite)");
      }
      if (!Finite(op.ratio[0]) || !Finite(op.ratio[1]) || !(op.ratio[0] > 0) ||
          !(op.ratio[0] <= op.ratio[1])) {
        return bad("need 0 < ratio[0] <= ratio[1] (finite)");
      }
      return absl::OkStatus();
    case OpKind::kResize:
      if (!InSide(op.height) || (op.width != 0 && !InSide(op.width))) {
        return bad("size must be in 1..65500");
      }
      if (!ValidInterpolation(op.interpolation)) return bad("unknown interpolation");
      if (op.max_size != 0 &&
          (op.width != 0 || op.max_size <= op.height || op.max_size > kMaxOpSide)) {
        return bad("max_size needs a single size and must be in size+1..65500");
      }
      return absl::OkStatus();
    case OpKind::kRandomShortestSize:
      if (op.shortest_count < 1 || op.shortest_count > kMaxShortestSizes) {
        return bad(absl::StrCat("1..", kMaxShortestSizes, " min_size values"));
      }
      for (uint32_t k = 0; k < op.shortest_count; ++k) {
        if (!InSide(op.shortest[k])) return bad("min_size must be in 1..65500");
      }
      if (op.max_size > kMaxOpSide) return bad("max_size must be in 0..65500");
      if (!ValidInterpolation(op.interpolation)) return bad("unknown interpolation");
      return absl::OkStatus();
    case OpKind::kRandomZoomOut:
      if (!(op.p >= 0.0f && op.p <= 1.0f)) return bad("p must be in [0, 1]");
      if (!Finite(op.side_range[0]) || !Finite(op.side_range[1]) || !(op.side_range[0] >= 1) ||
          !(op.side_range[0] <= op.side_range[1]) || op.side_range[1] > 16) {
        return bad("need 1 <= side_range[0] <= side_range[1] <= 16");
      }
      return absl::OkStatus();
    case OpKind::kRandomIoUCrop: {
      if (!Finite(op.iou_scale[0]) || !Finite(op.iou_scale[1]) || !(op.iou_scale[0] > 0) ||
          !(op.iou_scale[0] <= op.iou_scale[1]) || op.iou_scale[1] > 1) {
        return bad("need 0 < min_scale <= max_scale <= 1");
      }
      if (!Finite(op.iou_aspect[0]) || !Finite(op.iou_aspect[1]) || !(op.iou_aspect[0] > 0) ||
          !(op.iou_aspect[0] <= op.iou_aspect[1])) {
        return bad("need 0 < min_aspect_ratio <= max_aspect_ratio");
      }
      if (op.iou_option_count < 1 || op.iou_option_count > 8) return bad("1..8 sampler_options");
      for (uint32_t k = 0; k < op.iou_option_count; ++k) {
        if (!Finite(op.iou_options[k]) || op.iou_options[k] < 0) {
          return bad("sampler_options must be >= 0");
        }
      }
      if (op.iou_trials < 1 || op.iou_trials > 1000) return bad("trials must be in 1..1000");
      return absl::OkStatus();
    }
    case OpKind::kRandomPhotometricDistort:
      if (!(op.p >= 0.0f && op.p <= 1.0f)) return bad("p must be in [0, 1]");
      for (uint32_t j = 0; j < 4; ++j) {
        if (!Finite(op.jitter[j][0]) || !Finite(op.jitter[j][1]) ||
            !(op.jitter[j][0] <= op.jitter[j][1]) || !JitterInRange(j, op.jitter[j][0]) ||
            !JitterInRange(j, op.jitter[j][1])) {
          return bad("ranges must be ordered: factors >= 0, hue within [-0.5, 0.5]");
        }
      }
      return absl::OkStatus();
    case OpKind::kRandomResize:
      if (!InSide(op.resize_range[0]) || op.resize_range[1] <= op.resize_range[0] ||
          op.resize_range[1] > kMaxOpSide + 1) {
        return bad("need 1 <= min_size < max_size <= 65501");
      }
      if (!ValidInterpolation(op.interpolation)) return bad("unknown interpolation");
      return absl::OkStatus();
    case OpKind::kCenterCrop:
      if (!InSide(op.height) || !InSide(op.width)) return bad("size must be in 1..65500");
      return absl::OkStatus();
    case OpKind::kRandomCrop:
      if (!InSide(op.height) || !InSide(op.width)) return bad("size must be in 1..65500");
      for (uint32_t v : op.padding) {
        if (v > kMaxOpSide) return bad("padding must be in 0..65500");
      }
      if (op.pad_if_needed > 1) return bad("pad_if_needed is 0 or 1");
      if (!ValidPadMode(op.padding_mode)) return bad("unknown padding_mode");
      return absl::OkStatus();
    case OpKind::kHorizontalFlip:
    case OpKind::kVerticalFlip:
    case OpKind::kRandomGrayscale:
      if (!(op.p >= 0.0f && op.p <= 1.0f)) return bad("p must be in [0, 1]");
      return absl::OkStatus();
    case OpKind::kColorJitter:
      if (op.jitter_set > 15) return bad("unknown adjustment in jitter_set");
      for (uint32_t j = 0; j < 4; ++j) {
        if ((op.jitter_set & (1u << j)) == 0) continue;
        if (!JitterInRange(j, op.jitter[j][0]) || !JitterInRange(j, op.jitter[j][1]) ||
            !(op.jitter[j][0] <= op.jitter[j][1])) {
          return bad(j == kHue ? "hue must be [min, max] within [-0.5, 0.5]"
                               : "brightness, contrast and saturation must be [min, max], "
                                 "0 <= min <= max (finite)");
        }
      }
      return absl::OkStatus();
    case OpKind::kGrayscale:
      return absl::OkStatus();
    case OpKind::kGaussianBlur:
      for (uint32_t k : {op.kernel_x, op.kernel_y}) {
        if (!ValidKernel(k)) {
          return bad("kernel_size must be odd, in 1..131001");
        }
      }
      if (!Finite(op.sigma[0]) || !Finite(op.sigma[1]) || !(op.sigma[0] > 0) ||
          !(op.sigma[0] <= op.sigma[1])) {
        return bad("need 0 < sigma[0] <= sigma[1] (finite)");
      }
      return absl::OkStatus();
    case OpKind::kRandomRotation:
    case OpKind::kRandomAffine: {
      if (!Finite(op.degrees[0]) || !Finite(op.degrees[1]) || !(op.degrees[0] <= op.degrees[1])) {
        return bad("degrees must be [min, max], min <= max (finite)");
      }
      if (!ValidAffineInterpolation(op.interpolation)) {
        return bad("interpolation must be nearest or bilinear");
      }
      if (op.has_center > 1 || !Finite(op.center[0]) || !Finite(op.center[1])) {
        return bad("center must be [x, y] (finite)");
      }
      if (op.kind == OpKind::kRandomRotation) {
        if (op.has_translate != 0 || op.has_scale != 0 || op.shear_count != 0) {
          return bad("translate, scale and shear are RandomAffine's");
        }
        return absl::OkStatus();
      }
      if (op.has_translate > 1 || op.has_scale > 1)
        return bad("has_translate/has_scale are 0 or 1");
      if (op.has_translate != 0) {
        for (float t : op.translate) {
          if (!(t >= 0.0f && t <= 1.0f)) return bad("translate values must be in [0, 1]");
        }
      }
      if (op.has_scale != 0 &&
          (!Finite(op.affine_scale[0]) || !Finite(op.affine_scale[1]) ||
           !(op.affine_scale[0] > 0) || !(op.affine_scale[0] <= op.affine_scale[1]))) {
        return bad("need 0 < scale[0] <= scale[1] (finite)");
      }
      if (op.shear_count != 0 && op.shear_count != 2 && op.shear_count != 4) {
        return bad("shear has 0, 2 or 4 values");
      }
      for (uint32_t k = 0; k < op.shear_count; k += 2) {
        if (!Finite(op.shear[k]) || !Finite(op.shear[k + 1]) || !(op.shear[k] <= op.shear[k + 1])) {
          return bad("shear ranges must be [min, max], min <= max (finite)");
        }
      }
      return absl::OkStatus();
    }
    case OpKind::kRandomPosterize:
    case OpKind::kRandomSolarize:
    case OpKind::kRandomAdjustSharpness:
    case OpKind::kRandomAutocontrast:
    case OpKind::kRandomEqualize:
    case OpKind::kRandomInvert:
      if (!(op.p >= 0.0f && op.p <= 1.0f)) return bad("p must be in [0, 1]");
      if (op.kind == OpKind::kRandomPosterize && op.bits > 8) return bad("bits must be in 0..8");
      if (op.kind == OpKind::kRandomSolarize && !Finite(op.threshold)) {
        return bad("threshold must be finite");
      }
      if (op.kind == OpKind::kRandomAdjustSharpness &&
          !(Finite(op.sharpness_factor) && op.sharpness_factor >= 0.0f)) {
        return bad("sharpness_factor must be >= 0 (finite)");
      }
      return absl::OkStatus();
    case OpKind::kAutoAugment:
    case OpKind::kRandAugment:
    case OpKind::kTrivialAugmentWide:
    case OpKind::kAugMix:
      if (!ValidAffineInterpolation(op.interpolation)) {
        return bad("interpolation must be nearest or bilinear");
      }
      if (op.kind == OpKind::kAutoAugment && op.policy != AutoAugmentPolicy::kImageNet &&
          op.policy != AutoAugmentPolicy::kCifar10 && op.policy != AutoAugmentPolicy::kSvhn) {
        return bad("unknown policy (imagenet, cifar10 or svhn)");
      }
      if (op.kind == OpKind::kRandAugment || op.kind == OpKind::kTrivialAugmentWide) {
        // torchvision's Posterize bins divide by num_magnitude_bins - 1.
        if (op.num_magnitude_bins < 2 || op.num_magnitude_bins > kMaxMagnitudeBins) {
          return bad("num_magnitude_bins must be within 2..32768");
        }
      }
      if (op.kind == OpKind::kRandAugment) {
        if (op.num_ops > kMaxPolicyOps) {
          return bad(absl::StrCat("num_ops must be in 0..", kMaxPolicyOps));
        }
        if (op.magnitude >= op.num_magnitude_bins) {
          return bad("magnitude must be below num_magnitude_bins");
        }
      }
      if (op.kind == OpKind::kAugMix) {
        if (op.severity < 1 || op.severity > 10) return bad("severity must be in 1..10");
        if (op.mixture_width < 1 || op.mixture_width > kMaxAugMixWidth) {
          return bad(absl::StrCat("mixture_width must be in 1..", kMaxAugMixWidth));
        }
        if (op.chain_depth != -1 &&
            (op.chain_depth < 1 || op.chain_depth > static_cast<int32_t>(kMaxAugMixDepth))) {
          return bad(absl::StrCat("chain_depth must be -1 or in 1..", kMaxAugMixDepth));
        }
        if (!(Finite(op.alpha) && op.alpha > 0.0f)) return bad("alpha must be > 0 (finite)");
        if (op.all_ops > 1) return bad("all_ops is 0 or 1");
      }
      return absl::OkStatus();
    case OpKind::kRandomErasing:
      if (!(op.p >= 0.0f && op.p <= 1.0f)) return bad("p must be in [0, 1]");
      if (!(op.erase_scale[0] >= 0.0f && op.erase_scale[0] <= op.erase_scale[1] &&
            op.erase_scale[1] <= 1.0f)) {
        return bad("scale must be [min, max] within [0, 1]");
      }
      if (!Finite(op.erase_ratio[0]) || !Finite(op.erase_ratio[1]) || !(op.erase_ratio[0] > 0) ||
          !(op.erase_ratio[0] <= op.erase_ratio[1])) {
        return bad("need 0 < ratio[0] <= ratio[1] (finite)");
      }
      if (op.erase_random > 1) return bad("erase_random is 0 or 1");
      for (float v : op.erase_value) {
        if (!Finite(v)) return bad("value must be finite");
      }
      return absl::OkStatus();
    case OpKind::kNone:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("ops[", i, "]: unknown op kind ", static_cast<uint32_t>(op.kind)));
}

// The most steps DrawSteps makes for `op` (kMaxSteps bounds their sum).
uint32_t MaxOpSteps(const OpParams& op) {
  switch (op.kind) {
    case OpKind::kRandomResizedCrop:
    case OpKind::kCenterCrop:
      return 2;
    case OpKind::kRandomCrop:
      return 3;
    case OpKind::kRandomPhotometricDistort:
      return 5;  // four adjustments (contrast once) and the channel shuffle
    case OpKind::kAutoAugment:
    case OpKind::kRandAugment:
    case OpKind::kTrivialAugmentWide:
    case OpKind::kAugMix:
      return MaxPolicySteps(op);
    default:
      return 1;
  }
}

// A uniform permutation of 0..3 from one draw: the draw's index among the
// 24 permutations, decoded (Lehmer code) into the order.
void DrawPermutation(KeyedRng& rng, uint32_t order[4]) {
  uint32_t code = static_cast<uint32_t>(rng.Below(24));
  uint32_t left[4] = {0, 1, 2, 3};
  uint32_t n = 4;
  for (uint32_t i = 0; i < 4; ++i) {
    const uint32_t radix = n;  // 4, 3, 2, 1
    const uint32_t pick = code % radix;
    code /= radix;
    order[i] = left[pick];
    for (uint32_t k = pick; k + 1 < n; ++k) left[k] = left[k + 1];
    --n;
  }
}

// torch's uniform_(lo, hi) on a float32 tensor: U[lo, hi), as float32,
// never past hi.
float UniformFloat(KeyedRng& rng, float lo, float hi) {
  return std::clamp(static_cast<float>(rng.Uniform(lo, hi)), lo, hi);
}

absl::Status StepError(uint32_t index, const Step& s, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("step ", index, " (", StepKindName(s.kind), "): ", what));
}

}  // namespace

absl::Status CheckSteps(const SampleSteps& steps, uint32_t height, uint32_t width,
                        uint64_t max_pixels, uint32_t* out_height, uint32_t* out_width) {
  if (steps.count > kMaxSteps) return absl::InvalidArgumentError("too many steps");
  uint64_t h = height, w = width;
  enum { kNoMix, kMixOpen, kInChain } mix = kNoMix;
  bool erased = false;
  for (uint32_t i = 0; i < steps.count; ++i) {
    const Step& s = steps.steps[i];
    if (erased && s.kind != StepKind::kErase) {
      return StepError(i, s, "only erase steps may follow an erase (it works on the output)");
    }
    if (mix != kNoMix && (s.kind == StepKind::kCrop || s.kind == StepKind::kResize ||
                          s.kind == StepKind::kPad || s.kind == StepKind::kErase)) {
      return StepError(i, s, "changes the image's size inside a mix");
    }
    if (s.tensor_kernels > 1 || s.tensor_fill > 1) {
      return StepError(i, s, "tensor_kernels and tensor_fill are 0 or 1");
    }
    // A policy's tensor blend takes its ratio from the magnitude.
    if (s.tensor_kernels != 0 && s.from_policy != 0 &&
        (s.kind == StepKind::kColorJitter || s.kind == StepKind::kSharpness) &&
        !(Finite(s.aug_magnitude) && 1.0 + double{s.aug_magnitude} >= 0.0)) {
      return StepError(i, s, "its ratio, 1 + magnitude, must be >= 0 (finite)");
    }
    if (mix == kMixOpen && s.kind != StepKind::kMixChain && s.kind != StepKind::kMixEnd) {
      return StepError(i, s, "a mix_begin is followed by a mix_chain or its mix_end");
    }
    switch (s.kind) {
      case StepKind::kCrop:
        if (s.height == 0 || s.width == 0 || uint64_t{s.top} + s.height > h ||
            uint64_t{s.left} + s.width > w) {
          return StepError(i, s,
                           absl::StrCat("crop box (top ", s.top, ", left ", s.left, ", ", s.height,
                                        "x", s.width, ") is not inside the ", h, "x", w, " image"));
        }
        h = s.height;
        w = s.width;
        break;
      case StepKind::kResize:
        if (!InSide(s.height) || !InSide(s.width) || !ValidInterpolation(s.interpolation)) {
          return StepError(i, s, "needs a size in 1..65500 and a known interpolation");
        }
        h = s.height;
        w = s.width;
        break;
      case StepKind::kPad:
        if (!ValidPadMode(s.padding_mode)) return StepError(i, s, "unknown padding_mode");
        h += uint64_t{s.pad[1]} + s.pad[3];
        w += uint64_t{s.pad[0]} + s.pad[2];
        break;
      case StepKind::kHorizontalFlip:
      case StepKind::kVerticalFlip:
      case StepKind::kGrayscale:
        break;
      case StepKind::kColorJitter: {
        if (s.jitter_count > 4) return StepError(i, s, "more than 4 adjustments");
        uint32_t seen = 0;
        for (uint32_t k = 0; k < s.jitter_count; ++k) {
          const uint32_t j = s.jitter_order[k];
          if (j > 3 || (seen & (1u << j)) != 0) {
            return StepError(i, s, "the order must name distinct adjustments 0..3");
          }
          seen |= 1u << j;
          if (!JitterInRange(j, s.factor[j])) {
            return StepError(i, s, "factors must be >= 0, hue in [-0.5, 0.5] (finite)");
          }
        }
        break;
      }
      case StepKind::kGaussianBlur:
        if (!ValidKernel(s.kernel_x) || !ValidKernel(s.kernel_y) || !Finite(s.sigma) ||
            !(s.sigma > 0)) {
          return StepError(i, s, "needs odd kernel sides in 1..131001 and sigma > 0");
        }
        // torch's reflect padding needs the pad to be smaller than the side.
        if (s.kernel_x / 2 >= w || s.kernel_y / 2 >= h) {
          return StepError(i, s,
                           absl::StrCat("a ", s.kernel_x, "x", s.kernel_y,
                                        " kernel (x by y) needs an image larger than half of it "
                                        "on each axis, got ",
                                        w, "x", h, " (width x height)"));
        }
        break;
      case StepKind::kAffine:
      case StepKind::kRotate: {
        bool ok = ValidAffineInterpolation(s.interpolation) && Finite(s.angle) &&
                  s.has_center <= 1 && Finite(s.center[0]) && Finite(s.center[1]);
        if (s.kind == StepKind::kAffine) {
          ok = ok && Finite(s.affine_scale) && s.affine_scale > 0 && std::isfinite(s.shear[0]) &&
               std::isfinite(s.shear[1]);
        }
        if (!ok) {
          return StepError(i, s,
                           "needs finite angle, center, shear, scale > 0 and nearest or bilinear");
        }
        break;
      }
      case StepKind::kPosterize:
        if (s.bits > 8) return StepError(i, s, "bits must be in 0..8");
        break;
      case StepKind::kSolarize:
        if (!Finite(s.threshold)) return StepError(i, s, "threshold must be finite");
        break;
      case StepKind::kSharpness:
        if (!Finite(s.factor[0]) || !(s.factor[0] >= 0)) {
          return StepError(i, s, "factor must be >= 0 (finite)");
        }
        break;
      case StepKind::kAutocontrast:
      case StepKind::kEqualize:
      case StepKind::kInvert:
        break;
      case StepKind::kChannelPermute: {
        const uint32_t* q = s.permutation;
        if (q[0] > 2 || q[1] > 2 || q[2] > 2 || q[0] == q[1] || q[0] == q[2] || q[1] == q[2]) {
          return StepError(i, s, "permutation must order the channels 0, 1, 2");
        }
        break;
      }
      case StepKind::kMixBegin:
      case StepKind::kMixChain:
        if (!Finite(s.mix_weight) || !(s.mix_weight >= 0)) {
          return StepError(i, s, "weight must be >= 0 (finite)");
        }
        if (s.kind == StepKind::kMixBegin ? mix != kNoMix : mix == kNoMix) {
          return StepError(i, s, "mix markers must be mix_begin (mix_chain ...)* mix_end");
        }
        mix = s.kind == StepKind::kMixBegin ? kMixOpen : kInChain;
        break;
      case StepKind::kMixEnd:
        if (mix == kNoMix) return StepError(i, s, "no mix_begin before it");
        mix = kNoMix;
        break;
      case StepKind::kErase:
        if (s.height == 0 || s.width == 0 || uint64_t{s.top} + s.height > h ||
            uint64_t{s.left} + s.width > w) {
          return StepError(i, s,
                           absl::StrCat("box (top ", s.top, ", left ", s.left, ", ", s.height, "x",
                                        s.width, ") is not inside the ", h, "x", w, " output"));
        }
        if (s.erase_random > 1 || !Finite(s.erase_value[0]) || !Finite(s.erase_value[1]) ||
            !Finite(s.erase_value[2])) {
          return StepError(i, s, "needs finite values (or random)");
        }
        erased = true;
        break;
      default:
        return absl::InvalidArgumentError(
            absl::StrCat("step ", i, ": unknown step kind ", static_cast<uint32_t>(s.kind)));
    }
    // Sides first: padded sides can pass 2^32, and their product 2^64.
    if (h > UINT32_MAX || w > UINT32_MAX || h * w > max_pixels) {
      return absl::ResourceExhaustedError(
          absl::StrCat("step ", i, " (", StepKindName(s.kind), ") makes a ", w, "x", h,
                       " image, over max_decode_pixels (", max_pixels, ")"));
    }
  }
  if (mix != kNoMix) return absl::InvalidArgumentError("a mix_begin without its mix_end");
  *out_height = static_cast<uint32_t>(h);
  *out_width = static_cast<uint32_t>(w);
  return absl::OkStatus();
}

namespace {

// The leading steps the decode can do itself: [crop] [resize [crop]], as
// one resample of a decoded region. `next` is the first step left.
struct FusedGeometry {
  bool fused = false;
  AxisSpec y, x;  // in displayed coordinates
  Interpolation interpolation = Interpolation::kAntialias;
  uint32_t next = 0;
};

FusedGeometry PlanFused(const SampleSteps& steps, uint32_t height, uint32_t width) {
  FusedGeometry g;
  uint32_t i = 0;
  uint32_t top = 0, left = 0, crop_h = height, crop_w = width;
  if (i < steps.count && steps.steps[i].kind == StepKind::kCrop) {
    const Step& s = steps.steps[i++];
    top = s.top, left = s.left, crop_h = s.height, crop_w = s.width;
    g.fused = true;
  }
  uint32_t resized_h = crop_h, resized_w = crop_w;
  uint32_t off_y = 0, off_x = 0, out_h = crop_h, out_w = crop_w;
  if (i < steps.count && steps.steps[i].kind == StepKind::kResize) {
    const Step& s = steps.steps[i++];
    resized_h = out_h = s.height;
    resized_w = out_w = s.width;
    g.interpolation = s.interpolation;
    g.fused = true;
    if (i < steps.count && steps.steps[i].kind == StepKind::kCrop) {
      const Step& c = steps.steps[i++];
      off_y = c.top, off_x = c.left, out_h = c.height, out_w = c.width;
    }
  }
  if (!g.fused) return g;
  g.y = CropResizeCropAxis(top, crop_h, resized_h, static_cast<int32_t>(off_y), out_h);
  g.x = CropResizeCropAxis(left, crop_w, resized_w, static_cast<int32_t>(off_x), out_w);
  g.next = i;
  return g;
}

}  // namespace

const char* OpKindName(OpKind kind) {
  switch (kind) {
    case OpKind::kRandomResizedCrop:
      return "RandomResizedCrop";
    case OpKind::kResize:
      return "Resize";
    case OpKind::kRandomResize:
      return "RandomResize";
    case OpKind::kRandomShortestSize:
      return "RandomShortestSize";
    case OpKind::kRandomZoomOut:
      return "RandomZoomOut";
    case OpKind::kRandomIoUCrop:
      return "RandomIoUCrop";
    case OpKind::kRandomPhotometricDistort:
      return "RandomPhotometricDistort";
    case OpKind::kCenterCrop:
      return "CenterCrop";
    case OpKind::kRandomCrop:
      return "RandomCrop";
    case OpKind::kHorizontalFlip:
      return "RandomHorizontalFlip";
    case OpKind::kVerticalFlip:
      return "RandomVerticalFlip";
    case OpKind::kColorJitter:
      return "ColorJitter";
    case OpKind::kGrayscale:
      return "Grayscale";
    case OpKind::kRandomGrayscale:
      return "RandomGrayscale";
    case OpKind::kGaussianBlur:
      return "GaussianBlur";
    case OpKind::kRandomRotation:
      return "RandomRotation";
    case OpKind::kRandomAffine:
      return "RandomAffine";
    case OpKind::kRandomPosterize:
      return "RandomPosterize";
    case OpKind::kRandomSolarize:
      return "RandomSolarize";
    case OpKind::kRandomAdjustSharpness:
      return "RandomAdjustSharpness";
    case OpKind::kRandomAutocontrast:
      return "RandomAutocontrast";
    case OpKind::kRandomEqualize:
      return "RandomEqualize";
    case OpKind::kRandomInvert:
      return "RandomInvert";
    case OpKind::kAutoAugment:
      return "AutoAugment";
    case OpKind::kRandAugment:
      return "RandAugment";
    case OpKind::kTrivialAugmentWide:
      return "TrivialAugmentWide";
    case OpKind::kAugMix:
      return "AugMix";
    case OpKind::kRandomErasing:
      return "RandomErasing";
    case OpKind::kNone:
      break;
  }
  return "unknown";
}

const char* StepKindName(StepKind kind) {
  switch (kind) {
    case StepKind::kCrop:
      return "crop";
    case StepKind::kResize:
      return "resize";
    case StepKind::kPad:
      return "pad";
    case StepKind::kHorizontalFlip:
      return "hflip";
    case StepKind::kVerticalFlip:
      return "vflip";
    case StepKind::kColorJitter:
      return "color_jitter";
    case StepKind::kGrayscale:
      return "grayscale";
    case StepKind::kGaussianBlur:
      return "gaussian_blur";
    case StepKind::kAffine:
      return "affine";
    case StepKind::kRotate:
      return "rotate";
    case StepKind::kPosterize:
      return "posterize";
    case StepKind::kSolarize:
      return "solarize";
    case StepKind::kSharpness:
      return "sharpness";
    case StepKind::kAutocontrast:
      return "autocontrast";
    case StepKind::kEqualize:
      return "equalize";
    case StepKind::kInvert:
      return "invert";
    case StepKind::kMixBegin:
      return "mix_begin";
    case StepKind::kMixChain:
      return "mix_chain";
    case StepKind::kMixEnd:
      return "mix_end";
    case StepKind::kErase:
      return "erase";
    case StepKind::kChannelPermute:
      return "permute";
  }
  return "unknown";
}

absl::Status ValidateParams(const PipelineParams& p) {
  if (DtypeBytes(p.dtype) == 0) return absl::InvalidArgumentError("unknown dtype");
  if (p.layout != ring::kNHWC && p.layout != ring::kNCHW) {
    return absl::InvalidArgumentError("unknown layout");
  }
  if (p.exact_decode > 1 || p.apply_exif > 1) {
    return absl::InvalidArgumentError("exact_decode and apply_exif are 0 or 1");
  }
  if (p.max_decode_pixels == 0 || p.max_decode_pixels > kMaxDecodePixelsLimit) {
    return absl::InvalidArgumentError("max_decode_pixels must be in 1..2^32");
  }
  for (int c = 0; c < 3; ++c) {
    if (!Finite(p.mean[c]) || !Finite(p.stdev[c]) || p.stdev[c] == 0.0f) {
      return absl::InvalidArgumentError("mean and std must be finite, std non-zero");
    }
  }
  if (p.out_height != 0 || p.out_width != 0) {
    if (p.out_height < 1 || p.out_height > kMaxOutputSide || p.out_width < 1 ||
        p.out_width > kMaxOutputSide) {
      return absl::InvalidArgumentError(absl::StrCat("output sides must be in 1..", kMaxOutputSide,
                                                     " (or both 0: any size), got ", p.out_height,
                                                     "x", p.out_width));
    }
    if (uint64_t{p.out_height} * p.out_width > kMaxOutputPixels) {
      return absl::InvalidArgumentError("output is over 16M pixels");
    }
    if (uint64_t{p.out_height} * p.out_width > p.max_decode_pixels) {
      return absl::InvalidArgumentError("the output shape is over max_decode_pixels");
    }
  }
  if (p.op_count > kMaxOps) {
    return absl::InvalidArgumentError(absl::StrCat("at most ", kMaxOps, " ops, got ", p.op_count));
  }
  uint32_t most_steps = 0;
  for (uint32_t i = 0; i < p.op_count; ++i) {
    const OpParams& op = p.ops[i];
    if (absl::Status s = ValidateOp(i, op); !s.ok()) return s;
    most_steps += MaxOpSteps(op);
    if (op.kind == OpKind::kRandomErasing) {
      // torchvision applies it to the tensor, after ToTensor and Normalize.
      for (uint32_t k = i + 1; k < p.op_count; ++k) {
        if (p.ops[k].kind != OpKind::kRandomErasing) {
          return OpError(i, op.kind, "must come after every other op (it erases the output)");
        }
      }
      if (p.dtype == ring::kUint8) {
        if (op.erase_random != 0) {
          return OpError(i, op.kind,
                         "value \"random\" needs a float output (dtype float32 or float16)");
        }
        for (float v : op.erase_value) {
          if (!(v >= 0 && v <= 255 && v == std::floor(v))) {
            return OpError(i, op.kind, "with a uint8 output, values must be whole, in 0..255");
          }
        }
      }
    }
  }
  if (most_steps > kMaxSteps) {
    return absl::InvalidArgumentError(
        absl::StrCat("the ops can make up to ", most_steps, " steps per sample, over ", kMaxSteps));
  }
  return absl::OkStatus();
}

uint64_t MaxOutputPixels(const PipelineParams& p) {
  if (p.out_height != 0) return uint64_t{p.out_height} * p.out_width;
  // Bounds on the sides (0: none) and on the pixels, op by op.
  uint64_t h = 0, w = 0, pixels = p.max_decode_pixels;
  for (uint32_t i = 0; i < std::min(p.op_count, kMaxOps); ++i) {
    const OpParams& op = p.ops[i];
    switch (op.kind) {
      case OpKind::kRandomResizedCrop:
      case OpKind::kCenterCrop:
      case OpKind::kRandomCrop:
        h = op.height, w = op.width, pixels = h * w;
        break;
      case OpKind::kResize:
      case OpKind::kRandomShortestSize: {
        if (op.kind == OpKind::kResize && op.width != 0) {
          h = op.height, w = op.width, pixels = h * w;
          break;
        }
        // The shorter side is at most the (largest) size, the longer at
        // most max_size; without max_size the longer side is unbounded.
        uint64_t shorter = op.height;
        for (uint32_t k = 0; k < op.shortest_count && k < kMaxShortestSizes; ++k) {
          shorter = std::max<uint64_t>(shorter, op.shortest[k]);
        }
        h = w = op.max_size;
        pixels = op.max_size == 0 ? p.max_decode_pixels
                                  : std::min<uint64_t>(shorter, op.max_size) * op.max_size;
        break;
      }
      case OpKind::kRandomResize:
        h = w = 0, pixels = p.max_decode_pixels;
        break;
      case OpKind::kRandomZoomOut: {
        // The canvas is int(side * r), r <= side_range[1] <= 16.
        const double r = op.side_range[1];
        if (h != 0) h = static_cast<uint64_t>(std::ceil(static_cast<double>(h) * r));
        if (w != 0) w = static_cast<uint64_t>(std::ceil(static_cast<double>(w) * r));
        pixels = std::min<uint64_t>(
            p.max_decode_pixels,
            static_cast<uint64_t>(std::ceil(static_cast<double>(pixels) * r * r)));
        break;
      }
      default:  // the size stays (RandomIoUCrop only makes it smaller)
        break;
    }
    if (h != 0 && w != 0) pixels = std::min(pixels, h * w);
  }
  return std::min<uint64_t>(pixels, p.max_decode_pixels);
}

uint64_t MaxSampleBytes(const PipelineParams& p) {
  return MaxOutputPixels(p) * 3 * DtypeBytes(p.dtype);
}

absl::Status DrawSteps(const PipelineParams& p, uint32_t height, uint32_t width,
                       const SampleKey& key, SampleSteps* steps, const float* boxes,
                       uint32_t box_count) {
  steps->count = 0;
  if (height == 0 || width == 0) return absl::InvalidArgumentError("empty image");
  KeyedRng rng(key.seed, key.epoch, key.dataset_index);
  uint32_t h = height, w = width;
  const uint32_t op_count = std::min(p.op_count, kMaxOps);
  for (uint32_t i = 0; i < op_count; ++i) {
    const OpParams& op = p.ops[i];
    auto add = [&](StepKind kind) -> Step& {
      Step& s = steps->steps[steps->count++];
      s = Step();
      s.kind = kind;
      s.op = i;
      return s;
    };
    auto add_crop = [&](uint32_t top, uint32_t left, uint32_t ch, uint32_t cw) {
      Step& s = add(StepKind::kCrop);
      s.top = top, s.left = left, s.height = ch, s.width = cw;
      h = ch, w = cw;
    };
    auto add_resize = [&](uint32_t rh, uint32_t rw, Interpolation interpolation) {
      Step& s = add(StepKind::kResize);
      s.height = rh, s.width = rw, s.interpolation = interpolation;
      h = rh, w = rw;
    };
    // RandomRotation's and RandomAffine's center, resampling and fill.
    auto set_affine_common = [&](Step& s) {
      s.has_center = op.has_center;
      s.center[0] = op.center[0], s.center[1] = op.center[1];
      s.interpolation = op.interpolation;
      for (int c = 0; c < 3; ++c) s.fill[c] = op.fill[c];
    };
    auto add_pad = [&](uint32_t l, uint32_t t, uint32_t r, uint32_t b, PadMode mode,
                       const uint8_t* fill) {
      Step& s = add(StepKind::kPad);
      s.pad[0] = l, s.pad[1] = t, s.pad[2] = r, s.pad[3] = b;
      s.padding_mode = mode;
      for (int c = 0; c < 3; ++c) s.fill[c] = fill[c];
      // Sizes past 2^32 fail in CheckSteps (the pixel cap) before any use.
      h = static_cast<uint32_t>(std::min<uint64_t>(uint64_t{h} + t + b, UINT32_MAX));
      w = static_cast<uint32_t>(std::min<uint64_t>(uint64_t{w} + l + r, UINT32_MAX));
    };
    // The resizes' end: to rh x rw, nothing when that is the size already.
    auto resize_to = [&](uint32_t rh, uint32_t rw) -> absl::Status {
      if (rh == 0 || rw == 0) {
        return OpError(
            i, op.kind,
            absl::StrCat("resizing a ", w, "x", h, " image (width x height) leaves no pixels"));
      }
      if (rh != h || rw != w) add_resize(rh, rw, op.interpolation);
      return absl::OkStatus();
    };
    switch (op.kind) {
      case OpKind::kRandomResizedCrop: {
        const CropBox box = ChooseTrainCrop(h, w, op, rng);
        add_crop(box.top, box.left, box.height, box.width);
        add_resize(op.height, op.width, op.interpolation);
        break;
      }
      case OpKind::kResize: {
        uint32_t rh, rw;
        ResizeOutputSize(h, w, op, &rh, &rw);
        if (absl::Status st = resize_to(rh, rw); !st.ok()) return st;
        break;
      }
      case OpKind::kRandomResize: {
        // v2's torch.randint(min_size, max_size): max excluded.
        OpParams as_resize;
        as_resize.height = op.resize_range[0] + static_cast<uint32_t>(rng.Below(
                                                    op.resize_range[1] - op.resize_range[0]));
        uint32_t rh, rw;
        ResizeOutputSize(h, w, as_resize, &rh, &rw);
        if (absl::Status st = resize_to(rh, rw); !st.ok()) return st;
        break;
      }
      case OpKind::kCenterCrop: {
        if (op.height > h || op.width > w) {
          // torchvision pads with 0 to at least the crop, then crops.
          const uint32_t dh = op.height > h ? op.height - h : 0;
          const uint32_t dw = op.width > w ? op.width - w : 0;
          const uint8_t zero[3] = {0, 0, 0};
          add_pad(dw / 2, dh / 2, (dw + 1) / 2, (dh + 1) / 2, PadMode::kConstant, zero);
        }
        if (op.height != h || op.width != w) {
          add_crop(CenterCropOffset(h, op.height), CenterCropOffset(w, op.width), op.height,
                   op.width);
        }
        break;
      }
      case OpKind::kRandomCrop: {
        const uint32_t* pad = op.padding;
        if (pad[0] != 0 || pad[1] != 0 || pad[2] != 0 || pad[3] != 0) {
          add_pad(pad[0], pad[1], pad[2], pad[3], op.padding_mode, op.fill);
        }
        if (op.pad_if_needed != 0 && (w < op.width || h < op.height)) {
          // torchvision pads both sides of a short axis by the whole shortfall.
          const uint32_t dw = w < op.width ? op.width - w : 0;
          const uint32_t dh = h < op.height ? op.height - h : 0;
          add_pad(dw, dh, dw, dh, op.padding_mode, op.fill);
        }
        if (h < op.height || w < op.width) {
          return OpError(
              i, op.kind,
              absl::StrCat("the crop (", op.width, "x", op.height,
                           ", width x height) is larger than the padded image (", w, "x", h, ")"));
        }
        if (h == op.height && w == op.width) break;  // torchvision draws nothing
        const auto top = static_cast<uint32_t>(rng.Below(uint64_t{h} - op.height + 1));
        const auto left = static_cast<uint32_t>(rng.Below(uint64_t{w} - op.width + 1));
        add_crop(top, left, op.height, op.width);
        break;
      }
      case OpKind::kHorizontalFlip:
        if (ChooseFlip(op.p, rng)) add(StepKind::kHorizontalFlip);
        break;
      case OpKind::kVerticalFlip:
        if (ChooseFlip(op.p, rng)) add(StepKind::kVerticalFlip);
        break;
      case OpKind::kColorJitter: {
        uint32_t order[4];
        DrawPermutation(rng, order);
        float factor[4] = {0, 0, 0, 0};
        for (uint32_t j = 0; j < 4; ++j) {
          if ((op.jitter_set & (1u << j)) == 0) continue;
          factor[j] = static_cast<float>(rng.Uniform(op.jitter[j][0], op.jitter[j][1]));
          // U[lo, hi) rounded to float can land on hi; never past it.
          factor[j] = std::clamp(factor[j], op.jitter[j][0], op.jitter[j][1]);
        }
        if (op.jitter_set == 0) break;
        Step& s = add(StepKind::kColorJitter);
        for (uint32_t k = 0; k < 4; ++k) {
          if ((op.jitter_set & (1u << order[k])) != 0) s.jitter_order[s.jitter_count++] = order[k];
        }
        for (uint32_t j = 0; j < 4; ++j) s.factor[j] = factor[j];
        break;
      }
      case OpKind::kRandomShortestSize: {
        // r = min(s / shorter, max_size / longer) in double, sides int(side * r).
        const double s = op.shortest[rng.Below(op.shortest_count)];
        double r = s / std::min(h, w);
        if (op.max_size != 0) r = std::min(r, static_cast<double>(op.max_size) / std::max(h, w));
        const auto rh = static_cast<uint32_t>(h * r), rw = static_cast<uint32_t>(w * r);
        if (absl::Status st = resize_to(rh, rw); !st.ok()) return st;
        break;
      }
      case OpKind::kRandomZoomOut: {
        // references/detection RandomZoomOut: applied when U < p; the canvas
        // int(side * r) for r in side_range, the image at int(room * U).
        if (!(rng.Uniform() < op.p)) break;
        const double r = rng.Uniform(op.side_range[0], op.side_range[1]);
        const auto cw = static_cast<uint64_t>(w * r), ch = static_cast<uint64_t>(h * r);
        const auto left = static_cast<uint32_t>((cw - std::min<uint64_t>(cw, w)) * rng.Uniform());
        const auto top = static_cast<uint32_t>((ch - std::min<uint64_t>(ch, h)) * rng.Uniform());
        const auto right = static_cast<uint32_t>(cw > uint64_t{left} + w ? cw - left - w : 0);
        const auto bottom = static_cast<uint32_t>(ch > uint64_t{top} + h ? ch - top - h : 0);
        if ((left | top | right | bottom) != 0) {
          add_pad(left, top, right, bottom, PadMode::kConstant, op.fill);
        }
        break;
      }
      case OpKind::kRandomIoUCrop: {
        // references/detection RandomIoUCrop, its `while True` bounded: an
        // option (>= 1: as it is), then up to `trials` crops of sides
        // int(side * U(scale)) within the aspect range, placed at
        // int(room * U), that hold a box center strictly inside and reach
        // the option's IoU with one of those boxes.
        std::vector<double> cur;
        MoveBoxes(*steps, height, width, boxes, boxes != nullptr ? box_count : 0, &cur);
        const size_t nb = cur.size() / 4;
        bool done = false;
        for (int attempt = 0; attempt < 64 && !done; ++attempt) {
          const float min_iou = op.iou_options[rng.Below(op.iou_option_count)];
          if (min_iou >= 1.0f) break;
          for (uint32_t t = 0; t < op.iou_trials && !done; ++t) {
            const auto nw = static_cast<uint32_t>(w * rng.Uniform(op.iou_scale[0], op.iou_scale[1]));
            const auto nh = static_cast<uint32_t>(h * rng.Uniform(op.iou_scale[0], op.iou_scale[1]));
            if (nw == 0 || nh == 0) continue;
            const double aspect = static_cast<double>(nw) / nh;
            if (!(aspect >= op.iou_aspect[0] && aspect <= op.iou_aspect[1])) continue;
            const auto left = static_cast<uint32_t>((w - nw) * rng.Uniform());
            const auto top = static_cast<uint32_t>((h - nh) * rng.Uniform());
            const double l = left, tp = top, r = l + nw, b = tp + nh;
            bool any = false;
            double best = 0;
            for (size_t k = 0; k < nb; ++k) {
              const double* bx = cur.data() + 4 * k;
              const double cx = 0.5 * (bx[0] + bx[2]), cy = 0.5 * (bx[1] + bx[3]);
              if (!(l < cx && cx < r && tp < cy && cy < b)) continue;
              any = true;
              const double iw = std::max(0.0, std::min(bx[2], r) - std::max(bx[0], l));
              const double ih = std::max(0.0, std::min(bx[3], b) - std::max(bx[1], tp));
              const double inter = iw * ih;
              const double uni = (bx[2] - bx[0]) * (bx[3] - bx[1]) + (r - l) * (b - tp) - inter;
              best = std::max(best, uni > 0 ? inter / uni : 0.0);
            }
            if (!any || best < min_iou) continue;
            add_crop(top, left, nh, nw);  // even at the whole image: boxes are filtered
            Step& s = steps->steps[steps->count - 1];
            s.box_centers = 1;
            s.min_iou = min_iou;
            done = true;
          }
        }
        break;
      }
      case OpKind::kRandomPhotometricDistort: {
        // references/detection RandomPhotometricDistort: seven draws first.
        double r[7];
        for (double& v : r) v = rng.Uniform();
        auto adjust = [&](uint32_t j) {
          Step& s = add(StepKind::kColorJitter);
          s.jitter_count = 1;
          s.jitter_order[0] = j;
          s.factor[j] = UniformFloat(rng, op.jitter[j][0], op.jitter[j][1]);
        };
        if (r[0] < op.p) adjust(kBrightness);
        const bool contrast_before = r[1] < 0.5;
        if (contrast_before && r[2] < op.p) adjust(kContrast);
        if (r[3] < op.p) adjust(kSaturation);
        if (r[4] < op.p) adjust(kHue);
        if (!contrast_before && r[5] < op.p) adjust(kContrast);
        if (r[6] < op.p) {
          uint32_t code = static_cast<uint32_t>(rng.Below(6));
          uint32_t left[3] = {0, 1, 2};
          Step& s = add(StepKind::kChannelPermute);
          for (uint32_t k = 0, n = 3; k < 3; ++k, --n) {
            const uint32_t pick = code % n;
            code /= n;
            s.permutation[k] = left[pick];
            for (uint32_t m = pick; m + 1 < n; ++m) left[m] = left[m + 1];
          }
        }
        break;
      }
      case OpKind::kGrayscale:
        add(StepKind::kGrayscale);
        break;
      case OpKind::kRandomGrayscale:
        if (ChooseFlip(op.p, rng)) add(StepKind::kGrayscale);
        break;
      case OpKind::kGaussianBlur: {
        Step& s = add(StepKind::kGaussianBlur);
        s.kernel_x = op.kernel_x;
        s.kernel_y = op.kernel_y;
        s.sigma = std::clamp(static_cast<float>(rng.Uniform(op.sigma[0], op.sigma[1])), op.sigma[0],
                             op.sigma[1]);
        break;
      }
      case OpKind::kRandomRotation: {
        Step& s = add(StepKind::kRotate);
        s.angle = UniformFloat(rng, op.degrees[0], op.degrees[1]);
        set_affine_common(s);
        break;
      }
      case OpKind::kRandomAffine: {
        // RandomAffine.get_params: angle, translate x then y, scale, shear x
        // then (4 values) y, each drawn only when given.
        Step& s = add(StepKind::kAffine);
        s.angle = UniformFloat(rng, op.degrees[0], op.degrees[1]);
        if (op.has_translate != 0) {
          const double max_d[2] = {double{op.translate[0]} * w, double{op.translate[1]} * h};
          for (int k = 0; k < 2; ++k) {
            const float t =
                UniformFloat(rng, static_cast<float>(-max_d[k]), static_cast<float>(max_d[k]));
            s.translate[k] = static_cast<int32_t>(std::nearbyint(double{t}));  // round(): to even
          }
        }
        if (op.has_scale != 0)
          s.affine_scale = UniformFloat(rng, op.affine_scale[0], op.affine_scale[1]);
        if (op.shear_count >= 2) s.shear[0] = UniformFloat(rng, op.shear[0], op.shear[1]);
        if (op.shear_count == 4) s.shear[1] = UniformFloat(rng, op.shear[2], op.shear[3]);
        set_affine_common(s);
        break;
      }
      case OpKind::kRandomPosterize:
        if (ChooseFlip(op.p, rng)) add(StepKind::kPosterize).bits = op.bits;
        break;
      case OpKind::kRandomSolarize:
        if (ChooseFlip(op.p, rng)) add(StepKind::kSolarize).threshold = op.threshold;
        break;
      case OpKind::kRandomAdjustSharpness:
        if (ChooseFlip(op.p, rng)) add(StepKind::kSharpness).factor[0] = op.sharpness_factor;
        break;
      case OpKind::kRandomAutocontrast:
        if (ChooseFlip(op.p, rng)) add(StepKind::kAutocontrast);
        break;
      case OpKind::kRandomEqualize:
        if (ChooseFlip(op.p, rng)) add(StepKind::kEqualize);
        break;
      case OpKind::kRandomInvert:
        if (ChooseFlip(op.p, rng)) add(StepKind::kInvert);
        break;
      case OpKind::kAutoAugment:
      case OpKind::kRandAugment:
      case OpKind::kTrivialAugmentWide:
      case OpKind::kAugMix:
        // Their steps keep the image's size.
        if (absl::Status st = DrawPolicy(op, i, h, w, rng, steps); !st.ok()) return st;
        break;
      case OpKind::kRandomErasing: {
        // RandomErasing.forward and get_params, on the h x w output.
        if (!ChooseFlip(op.p, rng)) break;
        const double area = static_cast<double>(h) * w;
        const float log_ratio[2] = {std::log(op.erase_ratio[0]), std::log(op.erase_ratio[1])};
        for (int attempt = 0; attempt < 10; ++attempt) {
          const double erase_area = area * UniformFloat(rng, op.erase_scale[0], op.erase_scale[1]);
          const double aspect = std::exp(UniformFloat(rng, log_ratio[0], log_ratio[1]));
          const double eh = std::nearbyint(std::sqrt(erase_area * aspect));
          const double ew = std::nearbyint(std::sqrt(erase_area / aspect));
          if (!(eh < h && ew < w)) continue;
          const uint64_t noise_seed = op.erase_random != 0 ? rng.Next() : 0;
          const auto eh32 = static_cast<uint32_t>(eh), ew32 = static_cast<uint32_t>(ew);
          const auto top = static_cast<uint32_t>(rng.Below(uint64_t{h} - eh32 + 1));
          const auto left = static_cast<uint32_t>(rng.Below(uint64_t{w} - ew32 + 1));
          if (eh32 == 0 || ew32 == 0) break;  // an empty box erases nothing
          Step& s = add(StepKind::kErase);
          s.top = top, s.left = left, s.height = eh32, s.width = ew32;
          s.erase_random = op.erase_random;
          s.noise_seed = noise_seed;
          for (int c = 0; c < 3; ++c) s.erase_value[c] = op.erase_value[c];
          break;
        }
        break;  // no attempt fitted: torchvision returns the image as it is
      }
      case OpKind::kNone:
        return absl::InvalidArgumentError(absl::StrCat("ops[", i, "]: no op"));
    }
  }
  return absl::OkStatus();
}

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
  std::vector<uint8_t> image;    // the image the steps work on
  std::vector<uint8_t> spare;    // where a step that cannot work in place writes
  std::vector<int32_t> acc;
  std::vector<float> blur;
  std::vector<uint8_t> scratch8;   // sharpness's copy of the image
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
  absl::Status Execute(const PipelineParams& p, const SampleSteps& steps, void* out,
                       size_t capacity, SampleResult* result);
  absl::Status DecodeFused(const PipelineParams& p, const FusedGeometry& g, uint8_t* dst);
  absl::Status DecodeWhole(uint8_t* dst);
  absl::Status DecodeFusedOther(const PipelineParams& p, const FusedGeometry& g, uint8_t* dst);
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
    const uint64_t t0 = NowNs();
    absl::Status s = decoder.ReadRows(row_ptrs.data(), rows, got);
    decode_ns += NowNs() - t0;
    if (s.ok() && *got == 0) return absl::InternalError("libjpeg returned no rows");
    return s;
  }

  // The frame of Process and ProcessSteps: checks, Open, then `render`
  // with the oriented height and width. A failed sample leaves the decoder
  // reset and an empty result; both report their stage times.
  template <typename Render>
  absl::Status Run(const uint8_t* jpeg, size_t size, const PipelineParams& p, const void* out,
                   SampleResult* result, Render&& render) {
    const uint64_t start = NowNs();
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
    const uint64_t total = NowNs() - start;
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

absl::Status SampleProcessor::Impl::Open(const uint8_t* jpeg, size_t size,
                                         const PipelineParams& p) {
  DecodeLimits limits;
  limits.max_pixels = p.max_decode_pixels;
  limits.read_exif = p.apply_exif != 0;
  const uint64_t t0 = NowNs();
  format = SniffFormat(jpeg, size);
  absl::Status s;
  if (format == ImageFormat::kJpeg) {
    s = decoder.ReadHeader(jpeg, size, limits, &header);
  } else if (format == ImageFormat::kUnknown) {
    s = absl::UnimplementedError(absl::StrCat(
        "not an image format stoker reads (JPEG, PNG, WebP, TIFF, BMP, PPM/PGM): the file starts "
        "with ",
        StartBytes(jpeg, size)));
  } else {
    std::unique_ptr<ImageDecoder>& d = decoders[static_cast<uint32_t>(format)];
    if (d == nullptr) d = MakeDecoder(format);
    ImageHeader h;
    s = d->ReadHeader(jpeg, size, limits, &h);
    header = JpegHeader();
    if (s.ok()) {
      header.width = h.width;
      header.height = h.height;
      header.components = 3;
      other = d.get();
    }
  }
  decode_ns += NowNs() - t0;
  return s;
}

absl::Status SampleProcessor::Impl::Execute(const PipelineParams& p, const SampleSteps& steps,
                                            void* out, size_t capacity, SampleResult* result) {
  const uint32_t oh = OrientedHeight(), ow = OrientedWidth();
  uint32_t fh = 0, fw = 0;
  absl::Status s = CheckSteps(steps, oh, ow, p.max_decode_pixels, &fh, &fw);
  if (!s.ok()) return s;
  if (p.out_height != 0 && (fh != p.out_height || fw != p.out_width)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "image is ", fw, "x", fh,
        steps.count == 0 ? "" : absl::StrCat(" after its ops (", ow, "x", oh, " decoded)"),
        ", the pipeline wants ", p.out_width, "x", p.out_height, " (width x height)"));
  }
  const uint64_t bytes = uint64_t{fh} * fw * 3 * DtypeBytes(p.dtype);
  if (bytes > capacity) {
    const std::string what =
        absl::StrCat("image is ", fw, "x", fh, ": needs ", bytes, " bytes, capacity is ", capacity);
    return p.out_height != 0 ? absl::InvalidArgumentError(what)
                             : absl::ResourceExhaustedError(what);
  }

  // The plan: fused geometry [0, g.next), steps on the image [g.next, tail),
  // then flips (folded into the output's orientation) mixed with per-pixel
  // steps (run on the image, in order) up to the end.
  const FusedGeometry g = PlanFused(steps, oh, ow);
  // Erase steps (always last: CheckSteps) run on the output once written.
  uint32_t image_end = steps.count;
  while (image_end > g.next && steps.steps[image_end - 1].kind == StepKind::kErase) --image_end;
  uint32_t tail = image_end;
  while (tail > g.next &&
         (IsFlip(steps.steps[tail - 1].kind) || IsPerPixel(steps.steps[tail - 1].kind))) {
    --tail;
  }
  bool hflip = false, vflip = false;
  for (uint32_t i = tail; i < image_end; ++i) {
    const StepKind k = steps.steps[i].kind;
    hflip ^= k == StepKind::kHorizontalFlip;
    vflip ^= k == StepKind::kVerticalFlip;
  }
  int orientation = header.orientation;
  // Straight into the slot when nothing moves pixels after the decode: the
  // per-pixel steps of the tail then run in place there.
  const bool direct = tail == g.next && ComposeOrientation(orientation, hflip, vflip) == 1 &&
                      p.dtype == ring::kUint8 && p.layout == ring::kNHWC;

  // The decoded (and fused) image, raw orientation.
  const bool swap = SwapsAxes(orientation);
  uint32_t h = g.fused ? (swap ? g.x.out_size : g.y.out_size) : header.height;
  uint32_t w = g.fused ? (swap ? g.y.out_size : g.x.out_size) : header.width;
  uint8_t* cur =
      direct ? static_cast<uint8_t*>(out) : Room(image, size_t{h} * w * 3 + kResamplePadBytes);
  s = g.fused ? (other != nullptr ? DecodeFusedOther(p, g, cur) : DecodeFused(p, g, cur))
              : DecodeWhole(cur);
  if (!s.ok()) return s;
  {
    // Steps other than per-pixel ones work in displayed coordinates.
    if (tail > g.next && orientation != 1) {
      PipelineParams plain;
      plain.dtype = ring::kUint8;
      plain.layout = ring::kNHWC;
      uint8_t* dst = Room(spare, size_t{h} * w * 3 + kResamplePadBytes);
      EmitSample(cur, h, w, orientation, false, plain, dst);
      if (swap) std::swap(h, w);
      std::swap(image, spare);
      cur = dst;
      orientation = 1;
    }
    float mix_weight = 0;  // of the chain running, while mixing
    bool in_chain = false;
    for (uint32_t i = g.next; i < image_end; ++i) {
      const Step& st = steps.steps[i];
      if (i >= tail && IsFlip(st.kind)) continue;  // folded into the output
      const size_t pixels = size_t{h} * w;
      uint32_t nh = h, nw = w;
      uint8_t* dst = nullptr;  // set by the steps that do not work in place
      switch (st.kind) {
        case StepKind::kCrop: {
          nh = st.height, nw = st.width;
          dst = Room(spare, size_t{nh} * nw * 3 + kResamplePadBytes);
          CropBox box{st.top, st.left, st.height, st.width};
          CropImage(cur, w, box, dst);
          break;
        }
        case StepKind::kResize:
          nh = st.height, nw = st.width;
          dst = Room(spare, size_t{nh} * nw * 3 + kResamplePadBytes);
          s = ResizeImage(cur, h, w, st, p.max_decode_pixels, dst);
          if (!s.ok()) return s;
          break;
        case StepKind::kPad:
          nh = h + st.pad[1] + st.pad[3];
          nw = w + st.pad[0] + st.pad[2];
          dst = Room(spare, size_t{nh} * nw * 3 + kResamplePadBytes);
          PadImage(cur, h, w, st.pad, st.padding_mode, st.fill, dst);
          break;
        case StepKind::kHorizontalFlip:
          FlipHorizontal(cur, h, w);
          break;
        case StepKind::kVerticalFlip:
          FlipVertical(cur, h, w);
          break;
        case StepKind::kColorJitter:
          ColorJitter(cur, pixels, st);
          break;
        case StepKind::kGrayscale:
          ToGrayscale(cur, pixels);
          break;
        case StepKind::kGaussianBlur: {
          dst = Room(spare, pixels * 3 + kResamplePadBytes);
          float* scratch = Room(blur, GaussianBlurScratch(h, w, st.kernel_x, st.kernel_y));
          GaussianBlur(cur, h, w, st.kernel_x, st.kernel_y, st.sigma, scratch, dst);
          break;
        }
        case StepKind::kAffine:
        case StepKind::kRotate: {
          dst = Room(spare, pixels * 3 + kResamplePadBytes);
          double center[2] = {st.center[0], st.center[1]};
          if (st.tensor_kernels != 0) {
            // F.affine / F.rotate for a tensor: the center relative to the
            // image's, rotate's angle negated.
            double center_f[2] = {0.0, 0.0};
            if (st.has_center != 0) {
              center_f[0] = center[0] - w * 0.5, center_f[1] = center[1] - h * 0.5;
            }
            const bool rotate = st.kind == StepKind::kRotate;
            const double translate[2] = {rotate ? 0.0 : static_cast<double>(st.translate[0]),
                                         rotate ? 0.0 : static_cast<double>(st.translate[1])};
            const double no_shear[2] = {0.0, 0.0};
            double matrix[6];
            InverseAffineMatrix(center_f, rotate ? -static_cast<double>(st.angle) : st.angle,
                                translate, rotate ? 1.0 : st.affine_scale,
                                rotate ? no_shear : st.shear, matrix);
            for (double m : matrix) {
              if (!std::isfinite(m)) {
                return absl::InvalidArgumentError(absl::StrCat(
                    "step ", i, " (", StepKindName(st.kind),
                    "): its inverse matrix is not finite (scale, shear or angle too extreme)"));
              }
            }
            TensorAffine(cur, h, w, matrix, st.interpolation,
                         st.tensor_fill != 0 ? st.fill : nullptr, dst);
            break;
          }
          if (st.kind == StepKind::kRotate) {
            RotateImage(cur, h, w, st.angle, st.has_center != 0 ? center : nullptr,
                        st.interpolation, st.fill, dst);
            break;
          }
          double matrix[6];
          if (!AffineStepMatrix(st, h, w, matrix)) {
            return absl::InvalidArgumentError(
                absl::StrCat("step ", i,
                             " (affine): its inverse matrix is not finite (scale, shear or "
                             "angle too extreme)"));
          }
          AffineTransform(cur, h, w, matrix, st.interpolation, st.fill, dst);
          break;
        }
        case StepKind::kPosterize:
          Posterize(cur, pixels, st.bits);
          break;
        case StepKind::kSolarize:
          Solarize(cur, pixels, st.threshold);
          break;
        case StepKind::kSharpness:
          if (st.tensor_kernels != 0) {
            // _apply_op's ratio, 1.0 + magnitude in double, for a policy's.
            const double ratio = st.from_policy != 0 ? 1.0 + static_cast<double>(st.aug_magnitude)
                                                     : static_cast<double>(st.factor[0]);
            TensorAdjustSharpness(cur, h, w, ratio, Room(scratch8, pixels * 3));
          } else {
            AdjustSharpness(cur, h, w, st.factor[0], Room(scratch8, pixels * 3));
          }
          break;
        case StepKind::kAutocontrast:
          if (st.tensor_kernels != 0) {
            TensorAutocontrast(cur, pixels);
          } else {
            Autocontrast(cur, pixels);
          }
          break;
        case StepKind::kEqualize:
          Equalize(cur, pixels);
          break;
        case StepKind::kInvert:
          Invert(cur, pixels);
          break;
        case StepKind::kChannelPermute: {
          const uint32_t* q = st.permutation;
          for (size_t k = 0; k < pixels; ++k) {
            uint8_t* px = cur + 3 * k;
            const uint8_t v[3] = {px[0], px[1], px[2]};
            px[0] = v[q[0]], px[1] = v[q[1]], px[2] = v[q[2]];
          }
          break;
        }
        case StepKind::kMixBegin:
          // Chains keep the size (CheckSteps): each restarts from this copy.
          std::copy_n(cur, pixels * 3, Room(mix_start, pixels * 3));
          MixStart(cur, pixels, st.mix_weight, Room(mix_acc, pixels * 3));
          in_chain = false;
          break;
        case StepKind::kMixChain:
          if (in_chain) {
            MixAdd(cur, pixels, mix_weight, mix_acc.data());
            std::copy_n(mix_start.data(), pixels * 3, cur);
          }
          in_chain = true;
          mix_weight = st.mix_weight;
          break;
        case StepKind::kMixEnd:
          if (in_chain) MixAdd(cur, pixels, mix_weight, mix_acc.data());
          MixFinish(mix_acc.data(), pixels, cur);
          in_chain = false;
          break;
        case StepKind::kErase:  // only after image_end
          return absl::InternalError("erase step on the image");
      }
      if (dst != nullptr) {
        std::swap(image, spare);
        cur = dst;
        h = nh, w = nw;
      }
    }
    if (!direct) {
      EmitSample(cur, h, w, ComposeOrientation(orientation, hflip, vflip), false, p, out);
    }
    for (uint32_t i = image_end; i < steps.count; ++i) {
      EraseOutput(out, fh, fw, p.dtype, p.layout, steps.steps[i]);
    }
  }
  result->height = fh;
  result->width = fw;
  result->channels = 3;
  result->bytes = bytes;
  return absl::OkStatus();
}

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
  int num = 8;
  if (p.exact_decode == 0) {
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

const char* DecodePathName(DecodePath path) {
  switch (path) {
    case DecodePath::kWhole:
      return "whole";
    case DecodePath::kDcScans:
      return "dc_scans";
    case DecodePath::kRestartWindow:
      return "restart_window";
    case DecodePath::kBaseline:
      return "baseline";
  }
  return "unknown";
}

SampleProcessor::SampleProcessor() : impl_(std::make_unique<Impl>()) {}
SampleProcessor::~SampleProcessor() = default;

void SampleProcessor::set_skip_unneeded_scans(bool on) { impl_->skip_unneeded_scans = on; }

void SampleProcessor::set_inputs_are_baseline_copies(bool on) {
  impl_->inputs_are_baseline_copies = on;
}

bool SampleProcessor::TrimBuffers(size_t max_bytes) {
  Impl& m = *impl_;
  bool big = false;
  auto trim = [&](auto& v) {
    if (v.capacity() * sizeof(v[0]) > max_bytes) {
      std::decay_t<decltype(v)>().swap(v);
      big = true;
    }
  };
  trim(m.chunk);
  trim(m.region);
  trim(m.row_ptrs);
  trim(m.rgb_row);
  trim(m.hpass);
  trim(m.image);
  trim(m.spare);
  trim(m.acc);
  trim(m.blur);
  trim(m.scratch8);
  trim(m.mix_start);
  trim(m.mix_acc);
  if (big) {
    for (auto& d : m.decoders) d.reset();  // made again on first use
    m.other = nullptr;
  }
  return big;
}

void SampleProcessor::set_boxes(const float* xyxy, uint32_t count) {
  impl_->boxes = xyxy;
  impl_->box_count = xyxy != nullptr ? count : 0;
}

absl::Status SampleProcessor::Process(const uint8_t* jpeg, size_t size, const PipelineParams& p,
                                      const SampleKey& key, void* out, size_t capacity,
                                      SampleResult* result, SampleSteps* drawn) {
  Impl& im = *impl_;
  SampleSteps* steps = drawn != nullptr ? drawn : &im.drawn;
  steps->count = 0;
  return im.Run(jpeg, size, p, out, result, [&](uint32_t h, uint32_t w) {
    result->drawn_height = h;
    result->drawn_width = w;
    absl::Status s = DrawSteps(p, h, w, key, steps, im.boxes, im.box_count);
    if (!s.ok()) return s;
    return im.Execute(p, *steps, out, capacity, result);
  });
}

absl::Status SampleProcessor::ProcessSteps(const uint8_t* jpeg, size_t size,
                                           const PipelineParams& p, const SampleSteps& steps,
                                           void* out, size_t capacity, SampleResult* result) {
  Impl& im = *impl_;
  return im.Run(jpeg, size, p, out, result,
                [&](uint32_t, uint32_t) { return im.Execute(p, steps, out, capacity, result); });
}

}  // namespace stoker::image
