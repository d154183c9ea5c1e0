#include "server/image/pipeline_params.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/image/ops/policy.h"
#include "server/image/param_checks.h"
#include "stoker/ring_layout.h"

namespace stoker::image {
namespace {

using namespace internal;  // NOLINT: param_checks.h, this folder's own


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
          !(op.side_range[0] <= op.side_range[1]) || op.side_range[1] > kMaxZoomOutSide) {
        return bad(absl::StrCat("need 1 <= side_range[0] <= side_range[1] <= ", kMaxZoomOutSide));
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
      if (op.iou_option_count < 1 || op.iou_option_count > kMaxIoUOptions) {
        return bad(absl::StrCat("1..", kMaxIoUOptions, " sampler_options"));
      }
      for (uint32_t k = 0; k < op.iou_option_count; ++k) {
        if (!Finite(op.iou_options[k]) || op.iou_options[k] < 0) {
          return bad("sampler_options must be >= 0");
        }
      }
      if (op.iou_trials < 1 || op.iou_trials > kMaxIoUTrials) {
        return bad(absl::StrCat("trials must be in 1..", kMaxIoUTrials));
      }
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
    case OpKind::kPad:
      for (uint32_t v : op.padding) {
        if (v > kMaxOpSide) return bad("padding must be in 0..65500");
      }
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
    case OpKind::kImageFilterGaussianBlur:
      if (!(op.sigma[0] >= 0 && op.sigma[0] <= op.sigma[1] &&
            op.sigma[1] <= kMaxBoxBlurRadius)) {
        return bad(absl::StrCat("radius must be [min, max], 0 <= min <= max <= ",
                                kMaxBoxBlurRadius));
      }
      if (!(op.p >= 0.0f && op.p <= 1.0f)) return bad("p must be in [0, 1]");
      return absl::OkStatus();
    case OpKind::kElasticTransform:
      for (int a = 0; a < 2; ++a) {
        if (!Finite(op.elastic_alpha[a])) return bad("alpha must be finite");
        if (!(op.elastic_sigma[a] >= 0 && op.elastic_sigma[a] <= kMaxElasticSigma)) {
          return bad(absl::StrCat("sigma must be in [0, ", kMaxElasticSigma, "]"));
        }
      }
      if ((op.elastic_sigma[0] == 0) != (op.elastic_sigma[1] == 0)) {
        return bad("sigma: both 0 or both > 0");
      }
      if (!ValidAffineInterpolation(op.interpolation)) {
        return bad("interpolation must be nearest or bilinear");
      }
      return absl::OkStatus();
    case OpKind::kRandomPerspective:
      if (!(op.p >= 0 && op.p <= 1)) return bad("p must be in [0, 1]");
      if (!(op.distortion >= 0 && op.distortion <= 1)) {
        return bad("distortion_scale must be in [0, 1]");
      }
      if (!ValidAffineInterpolation(op.interpolation)) {
        return bad("interpolation must be nearest or bilinear");
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
      if (op.kind == OpKind::kRandomPosterize && op.bits > kMaxPosterizeBits) {
        return bad(absl::StrCat("bits must be in 0..", kMaxPosterizeBits));
      }
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
        if (op.severity < 1 || op.severity > kMaxAugMixSeverity) {
          return bad(absl::StrCat("severity must be in 1..", kMaxAugMixSeverity));
        }
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
    case OpKind::kRandomApply:
    case OpKind::kRandomChoice:
    case OpKind::kRandomOrder: {
      if (op.children < 1 || op.children > kMaxChildren) {
        return bad(absl::StrCat("holds 1..", kMaxChildren, " ops"));
      }
      if (op.kind == OpKind::kRandomApply && !(op.p >= 0.0f && op.p <= 1.0f)) {
        return bad("p must be in [0, 1]");
      }
      double sum = 0;
      for (uint32_t k = 0; k < kMaxChildren; ++k) {
        const float w = op.weights[k];
        if (!Finite(w) || w < 0 || (k >= op.children && w != 0)) {
          return bad("weights must be finite, >= 0, one per op");
        }
        sum += w;
      }
      if (op.kind == OpKind::kRandomChoice && !(sum > 0)) return bad("weights must sum to > 0");
      return absl::OkStatus();
    }
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
    case OpKind::kRandomApply:
    case OpKind::kRandomChoice:
    case OpKind::kRandomOrder:
      return 0;  // its ops count their own
    default:
      return 1;
  }
}

}  // namespace

uint32_t OutputCount(const PipelineParams& p) {
  if (p.view_count == 0) return 1;
  uint32_t n = 0;
  for (uint32_t v = 0; v < std::min(p.view_count, kMaxViews); ++v) n += p.views[v].copies;
  return n;
}

uint32_t ViewOfOutput(const PipelineParams& p, uint32_t k) {
  for (uint32_t v = 0; v < std::min(p.view_count, kMaxViews); ++v) {
    if (k < p.views[v].copies) return v;
    k -= p.views[v].copies;
  }
  return 0;
}

void ViewPipeline(const PipelineParams& p, uint32_t v, PipelineParams* out) {
  const ViewParams& view = p.views[v];
  *out = p;
  out->view_count = 0;
  out->op_count = view.op_count;
  std::copy_n(p.ops + view.first_op, view.op_count, out->ops);
  out->out_height = view.out_height;
  out->out_width = view.out_width;
}

namespace {

absl::Status ValidateViews(const PipelineParams& p) {
  if (p.view_count > kMaxViews) {
    return absl::InvalidArgumentError(absl::StrCat("at most ", kMaxViews, " views"));
  }
  if (p.op_count > kMaxOps) {
    return absl::InvalidArgumentError(absl::StrCat("at most ", kMaxOps, " ops, got ", p.op_count));
  }
  uint32_t next_op = 0, outputs = 0;
  for (uint32_t v = 0; v < p.view_count; ++v) {
    const ViewParams& view = p.views[v];
    if (view.first_op != next_op || view.op_count > p.op_count - next_op) {
      return absl::InvalidArgumentError(
          absl::StrCat("view ", v, ": its ops do not follow the view before it's"));
    }
    next_op += view.op_count;
    if (view.copies == 0 || view.copies > kMaxViews - outputs) {
      return absl::InvalidArgumentError(
          absl::StrCat("view ", v, ": 1..", kMaxViews, " copies, and at most ", kMaxViews,
                       " outputs over all views"));
    }
    outputs += view.copies;
    if (view.out_height == 0 || view.out_width == 0) {
      return absl::InvalidArgumentError(absl::StrCat("view ", v, " needs its output size"));
    }
    PipelineParams one;
    ViewPipeline(p, v, &one);
    for (uint32_t i = 0; i < one.op_count; ++i) {
      if (one.ops[i].kind == OpKind::kRandomIoUCrop) {
        return absl::InvalidArgumentError(
            absl::StrCat("view ", v, ": RandomIoUCrop needs boxes, which views do not carry"));
      }
    }
    if (absl::Status s = ValidateParams(one); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("view ", v, ": ", s.message()));
    }
  }
  if (next_op != p.op_count) {
    return absl::InvalidArgumentError("ops past the last view's");
  }
  if (p.out_height != p.views[0].out_height || p.out_width != p.views[0].out_width) {
    return absl::InvalidArgumentError("the output shape is not the first view's");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateParams(const PipelineParams& p) {
  if (p.view_count != 0) return ValidateViews(p);
  if (ring::DTypeBytes(p.dtype) == 0) return absl::InvalidArgumentError("unknown dtype");
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
    if (IsComposition(op.kind)) {
      if (op.children >= p.op_count - i) return OpError(i, op.kind, "its ops are missing");
      for (uint32_t k = i + 1; k <= i + op.children; ++k) {
        const OpKind child = p.ops[k].kind;
        if (IsComposition(child) || child == OpKind::kRandomErasing) {
          return OpError(i, op.kind, absl::StrCat("cannot hold ", OpKindName(child)));
        }
      }
    }
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
        // The canvas is int(side * r), r <= side_range[1] <= kMaxZoomOutSide.
        const double r = op.side_range[1];
        if (h != 0) h = static_cast<uint64_t>(std::ceil(static_cast<double>(h) * r));
        if (w != 0) w = static_cast<uint64_t>(std::ceil(static_cast<double>(w) * r));
        pixels = std::min<uint64_t>(
            p.max_decode_pixels,
            static_cast<uint64_t>(std::ceil(static_cast<double>(pixels) * r * r)));
        break;
      }
      case OpKind::kPad:
        if (h != 0 && w != 0) {
          h += uint64_t{op.padding[1]} + op.padding[3];
          w += uint64_t{op.padding[0]} + op.padding[2];
          pixels = h * w;
        } else {  // an image of unknown sides: only the cap holds
          pixels = p.max_decode_pixels;
        }
        break;
      default:  // the size stays (RandomIoUCrop only makes it smaller)
        break;
    }
    if (h != 0 && w != 0) pixels = std::min(pixels, h * w);
  }
  return std::min<uint64_t>(pixels, p.max_decode_pixels);
}

uint64_t MaxSampleBytes(const PipelineParams& p) {
  return MaxOutputPixels(p) * 3 * ring::DTypeBytes(p.dtype);
}

}  // namespace stoker::image
