#include "server/image/steps.h"

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/image/ops/boxes.h"
#include "server/image/ops/ops.h"
#include "server/image/ops/perspective.h"
#include "server/image/ops/policy.h"
#include "server/image/ops/rng.h"
#include "server/image/ops/transform.h"
#include "server/image/param_checks.h"

namespace stoker::image {
namespace {

using namespace internal;  // NOLINT: param_checks.h, this folder's own

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

bool PerspectiveStepCoeffs(const Step& s, uint32_t height, uint32_t width, double coeffs[8]) {
  if (height == 0 || width == 0) return false;
  const double w = width - 1.0, h = height - 1.0;
  const double start[8] = {0, 0, w, 0, w, h, 0, h};
  double end[8];
  for (int k = 0; k < 8; ++k) end[k] = s.corners[k];
  return PerspectiveCoeffs(start, end, coeffs);
}

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
      case StepKind::kBoxBlur:
        if (!(s.sigma >= 0 && s.sigma <= kMaxBoxBlurRadius)) {
          return StepError(i, s, absl::StrCat("radius must be in [0, ", kMaxBoxBlurRadius, "]"));
        }
        break;
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
        if (s.bits > kMaxPosterizeBits) {
          return StepError(i, s, absl::StrCat("bits must be in 0..", kMaxPosterizeBits));
        }
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
      case StepKind::kElastic: {
        bool ok = ValidAffineInterpolation(s.interpolation);
        for (float v : s.elastic) ok = ok && Finite(v);
        for (int a = 2; a < 4; ++a) {
          ok = ok && s.elastic[a] >= 0 && s.elastic[a] <= kMaxElasticSigma;
        }
        if (!ok) {
          return StepError(i, s, absl::StrCat("needs finite alpha, sigma in [0, ", kMaxElasticSigma,
                                              "], nearest or bilinear"));
        }
        for (int a = 2; a < 4; ++a) {
          // torch's reflect padding needs the pad to be smaller than the side.
          const uint32_t k = s.elastic[a] > 0 ? ElasticKernelSize(s.elastic[a]) : 1;
          if (k / 2 >= w || k / 2 >= h) {
            return StepError(i, s,
                             absl::StrCat("sigma ", s.elastic[a], " blurs with a ", k, "x", k,
                                          " kernel, which needs an image larger than half of it "
                                          "on each axis, got ", w, "x", h, " (width x height)"));
          }
        }
        break;
      }
      case StepKind::kPerspective: {
        double coeffs[8];
        if (!ValidAffineInterpolation(s.interpolation) ||
            !PerspectiveStepCoeffs(s, static_cast<uint32_t>(h), static_cast<uint32_t>(w),
                                   coeffs)) {
          return StepError(i, s, "needs corners that give a perspective transform, and nearest "
                                 "or bilinear");
        }
        break;
      }
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
    case StepKind::kBoxBlur:
      return "box_blur";
    case StepKind::kChannelPermute:
      return "permute";
    case StepKind::kPerspective:
      return "perspective";
    case StepKind::kElastic:
      return "elastic";
  }
  return "unknown";
}

absl::Status DrawSteps(const PipelineParams& p, uint32_t height, uint32_t width,
                       const SampleKey& key, SampleSteps* steps, const float* boxes,
                       uint32_t box_count) {
  steps->count = 0;
  if (height == 0 || width == 0) return absl::InvalidArgumentError("empty image");
  // The output's index above the epoch's 32 bits: output 0 draws as a
  // single-output pipeline does.
  KeyedRng rng(key.seed, key.epoch | (uint64_t{key.output} << 32), key.dataset_index);
  uint32_t h = height, w = width;
  const uint32_t op_count = std::min(p.op_count, kMaxOps);
  // One op's steps; a composition's ops are drawn by the loop after this.
  auto draw = [&](uint32_t i) -> absl::Status {
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
      case OpKind::kImageFilterGaussianBlur:
        if (ChooseFlip(op.p, rng)) {
          add(StepKind::kBoxBlur).sigma = std::clamp(
              static_cast<float>(rng.Uniform(op.sigma[0], op.sigma[1])), op.sigma[0], op.sigma[1]);
        }
        break;
      case OpKind::kElasticTransform: {
        // get_params' two torch.rand fields come from one seed drawn here.
        Step& s = add(StepKind::kElastic);
        s.elastic[0] = op.elastic_alpha[0], s.elastic[1] = op.elastic_alpha[1];
        s.elastic[2] = op.elastic_sigma[0], s.elastic[3] = op.elastic_sigma[1];
        s.noise_seed = rng.Next();
        s.interpolation = op.interpolation;
        for (int c = 0; c < 3; ++c) s.fill[c] = op.fill[c];
        break;
      }
      case OpKind::kRandomPerspective: {
        // forward(): rand(1) < p, then get_params' eight randints, corner by
        // corner (top-left, top-right, bottom-right, bottom-left), x then y.
        if (!ChooseFlip(op.p, rng)) break;
        const int64_t half_w = w / 2, half_h = h / 2;
        const int64_t dw = static_cast<int64_t>(double{op.distortion} * static_cast<double>(half_w));
        const int64_t dh = static_cast<int64_t>(double{op.distortion} * static_cast<double>(half_h));
        const auto between = [&rng](int64_t lo, int64_t hi) {  // randint(lo, hi): [lo, hi)
          return static_cast<int32_t>(lo + static_cast<int64_t>(rng.Below(static_cast<uint64_t>(hi - lo))));
        };
        const int64_t W = w, H = h;
        Step& s = add(StepKind::kPerspective);
        s.corners[0] = between(0, dw + 1), s.corners[1] = between(0, dh + 1);
        s.corners[2] = between(W - dw - 1, W), s.corners[3] = between(0, dh + 1);
        s.corners[4] = between(W - dw - 1, W), s.corners[5] = between(H - dh - 1, H);
        s.corners[6] = between(0, dw + 1), s.corners[7] = between(H - dh - 1, H);
        s.interpolation = op.interpolation;
        for (int c = 0; c < 3; ++c) s.fill[c] = op.fill[c];
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
      case OpKind::kPad:
        if (op.padding[0] != 0 || op.padding[1] != 0 || op.padding[2] != 0 ||
            op.padding[3] != 0) {
          add_pad(op.padding[0], op.padding[1], op.padding[2], op.padding[3], op.padding_mode,
                  op.fill);
        }
        break;
      case OpKind::kRandomApply:
      case OpKind::kRandomChoice:
      case OpKind::kRandomOrder:  // ValidateParams refuses one inside another
        return OpError(i, op.kind, "a composition inside a composition");
      case OpKind::kNone:
        return absl::InvalidArgumentError(absl::StrCat("ops[", i, "]: no op"));
    }
    return absl::OkStatus();
  };
  for (uint32_t i = 0; i < op_count; ++i) {
    const OpParams& op = p.ops[i];
    if (!IsComposition(op.kind)) {
      if (absl::Status st = draw(i); !st.ok()) return st;
      continue;
    }
    // Which of its ops run, in which order: RandomApply all of them when
    // its one draw is below p (torchvision: none when p < rand), RandomChoice
    // one by its weights, RandomOrder all in a uniform permutation.
    const uint32_t n = std::min(op.children, op_count - 1 - i);
    uint32_t order[kMaxChildren];
    uint32_t run = 0;
    if (op.kind == OpKind::kRandomApply) {
      if (ChooseFlip(op.p, rng)) {
        for (uint32_t k = 0; k < n; ++k) order[run++] = k;
      }
    } else if (op.kind == OpKind::kRandomChoice) {
      double total = 0;
      for (uint32_t k = 0; k < n; ++k) total += op.weights[k];
      const double u = rng.Uniform() * total;
      double below = 0;
      uint32_t pick = 0;  // the last op of positive weight, should rounding leave u past all
      for (uint32_t k = 0; k < n; ++k) pick = op.weights[k] > 0 ? k : pick;
      for (uint32_t k = 0; k < n; ++k) {
        below += op.weights[k];
        if (u < below && op.weights[k] > 0) {
          pick = k;
          break;
        }
      }
      order[run++] = pick;
    } else {  // RandomOrder: Fisher-Yates
      for (uint32_t k = 0; k < n; ++k) order[k] = k;
      for (uint32_t k = n; k > 1; --k) std::swap(order[k - 1], order[rng.Below(k)]);
      run = n;
    }
    for (uint32_t r = 0; r < run; ++r) {
      if (absl::Status st = draw(i + 1 + order[r]); !st.ok()) return st;
    }
    i += n;
  }
  return absl::OkStatus();
}

}  // namespace stoker::image
