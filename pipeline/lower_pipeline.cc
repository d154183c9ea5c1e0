#include "pipeline/lower_pipeline.h"

#include <algorithm>
#include <iterator>
#include <string>

#include "absl/strings/str_cat.h"
#include "pipeline/pipeline_spec.h"

namespace stoker {
namespace {

static_assert(pipeline::kMaxOutputSide == image::kMaxOutputSide &&
                  pipeline::kMaxOutputPixels == image::kMaxOutputPixels &&
                  pipeline::kMaxResizeSide == image::kMaxOpSide &&
                  pipeline::kMaxMaxDecodePixels == image::kMaxDecodePixelsLimit,
              "the request checks and the workers' own must hold the same limits");
static_assert(pipeline::kMaxSteps == image::kMaxSteps,
              "the contract's step budget and the worker's step array must agree");
static_assert(pipeline::kMaxOps == image::kMaxOps,
              "the contract's op limit and the worker's op array must agree");
static_assert(pipeline::kMaxViews == image::kMaxViews,
              "the contract's view limit and the worker's view table must agree");
static_assert(pipeline::kMaxShortestSizes == image::kMaxShortestSizes,
              "RandomShortestSize's size limit of the request checks and of the workers");
static_assert(pipeline::kMaxPolicyOps == image::kMaxPolicyOps &&
                  pipeline::kMaxAugMixWidth == image::kMaxAugMixWidth &&
                  pipeline::kMaxAugMixDepth == image::kMaxAugMixDepth &&
                  pipeline::kMaxMagnitudeBins == image::kMaxMagnitudeBins,
              "the policies' limits of the request checks and of the workers must agree");
static_assert(std::size(pipeline::kAutoAugmentPolicies) == 3 &&
                  static_cast<uint32_t>(image::AutoAugmentPolicy::kImageNet) == 1 &&
                  static_cast<uint32_t>(image::AutoAugmentPolicy::kCifar10) == 2 &&
                  static_cast<uint32_t>(image::AutoAugmentPolicy::kSvhn) == 3,
              "kAutoAugmentPolicies is lowered by index + 1 into image::AutoAugmentPolicy");
static_assert(std::size(pipeline::kPaddingModes) == 4 &&
                  static_cast<uint32_t>(image::PadMode::kConstant) == 0 &&
                  static_cast<uint32_t>(image::PadMode::kEdge) == 1 &&
                  static_cast<uint32_t>(image::PadMode::kReflect) == 2 &&
                  static_cast<uint32_t>(image::PadMode::kSymmetric) == 3,
              "kPaddingModes is lowered by index into image::PadMode");

absl::Status NotEffective(int i, std::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("ops[", i, "]: ", absl::string_view(what.data(), what.size()),
                   " (not an effective spec: give it to pipeline::Effective first)"));
}

template <typename Size>
bool TwoSides(const Size& size, image::OpParams* o) {
  if (size.size() != 2) return false;
  o->height = size.Get(0);
  o->width = size.Get(1);
  return true;
}

template <typename Range, typename T>
bool Pair(const Range& r, T (&out)[2]) {
  if (r.size() != 2) return false;
  out[0] = r.Get(0);
  out[1] = r.Get(1);
  return true;
}

template <typename Op>
bool Resampling(const Op& op, image::OpParams* o) {
  if (op.interpolation().empty() || !op.has_antialias()) return false;
  if (op.interpolation() == pipeline::kResizeInterpolations[1]) {
    if (!op.antialias()) return false;
    o->interpolation = image::Interpolation::kBicubic;
    return true;
  }
  o->interpolation =
      op.antialias() ? image::Interpolation::kAntialias : image::Interpolation::kBilinear;
  return true;
}

// The affine ops' and the policies' resampling, from its name.
bool AffineResampling(const std::string& name, image::OpParams* o) {
  if (name == pipeline::kAffineInterpolations[0]) {
    o->interpolation = image::Interpolation::kNearest;
  } else if (name == pipeline::kAffineInterpolations[1]) {
    o->interpolation = image::Interpolation::kBilinear;
  } else {
    return false;
  }
  return true;
}

template <typename Fill>
bool Fill3(const Fill& fill, image::OpParams* o) {
  if (fill.size() != 3) return false;
  for (int k = 0; k < 3; ++k) {
    if (fill.Get(k) > 255) return false;
    o->fill[k] = static_cast<uint8_t>(fill.Get(k));
  }
  return true;
}

// An optional [x, y] center; false if it is neither empty nor 2 values.
template <typename Center>
bool CenterOf(const Center& c, image::OpParams* o) {
  if (c.empty()) return true;
  if (!Pair(c, o->center)) return false;
  o->has_center = 1;
  return true;
}

absl::Status LowerOp(const v1::Op& op, int i, image::OpParams* o) {
  switch (op.op_case()) {
    case v1::Op::kRandomResizedCrop: {
      const auto& r = op.random_resized_crop();
      o->kind = image::OpKind::kRandomResizedCrop;
      if (!TwoSides(r.size(), o) || !Pair(r.scale(), o->scale) || !Pair(r.ratio(), o->ratio) ||
          !Resampling(r, o)) {
        return NotEffective(i,
                            "RandomResizedCrop needs size [h, w], scale, ratio, "
                            "interpolation and antialias");
      }
      return absl::OkStatus();
    }
    case v1::Op::kResize: {
      const auto& r = op.resize();
      o->kind = image::OpKind::kResize;
      if (r.size_size() == 1) {
        o->height = r.size(0);  // the shorter side
        o->width = 0;
        o->max_size = r.has_max_size() ? r.max_size() : 0;
      } else if (!TwoSides(r.size(), o)) {
        return NotEffective(i, "Resize needs size [s] or [h, w]");
      }
      if (!Resampling(r, o)) return NotEffective(i, "Resize needs interpolation and antialias");
      return absl::OkStatus();
    }
    case v1::Op::kRandomShortestSize: {
      const auto& r = op.random_shortest_size();
      o->kind = image::OpKind::kRandomShortestSize;
      if (r.min_size().empty() || r.min_size_size() > static_cast<int>(image::kMaxShortestSizes) ||
          !Resampling(r, o)) {
        return NotEffective(i, "RandomShortestSize needs 1..16 min_size, interpolation, antialias");
      }
      o->shortest_count = static_cast<uint32_t>(r.min_size_size());
      for (int k = 0; k < r.min_size_size(); ++k) o->shortest[k] = r.min_size(k);
      o->max_size = r.has_max_size() ? r.max_size() : 0;
      return absl::OkStatus();
    }
    case v1::Op::kRandomZoomOut: {
      const auto& r = op.random_zoom_out();
      o->kind = image::OpKind::kRandomZoomOut;
      if (!Fill3(r.fill(), o) || !Pair(r.side_range(), o->side_range) || !r.has_p()) {
        return NotEffective(i, "RandomZoomOut needs 3 fills, side_range and p");
      }
      o->p = r.p();
      return absl::OkStatus();
    }
    case v1::Op::kRandomIouCrop: {
      const auto& r = op.random_iou_crop();
      o->kind = image::OpKind::kRandomIoUCrop;
      if (!r.has_min_scale() || !r.has_max_scale() || !r.has_min_aspect_ratio() ||
          !r.has_max_aspect_ratio() || !r.has_trials() || r.sampler_options().empty() ||
          r.sampler_options_size() > 8) {
        return NotEffective(i, "RandomIoUCrop needs its scales, aspect ratios, options, trials");
      }
      o->iou_scale[0] = r.min_scale(), o->iou_scale[1] = r.max_scale();
      o->iou_aspect[0] = r.min_aspect_ratio(), o->iou_aspect[1] = r.max_aspect_ratio();
      o->iou_option_count = static_cast<uint32_t>(r.sampler_options_size());
      for (int k = 0; k < r.sampler_options_size(); ++k) o->iou_options[k] = r.sampler_options(k);
      o->iou_trials = r.trials();
      return absl::OkStatus();
    }
    case v1::Op::kRandomPhotometricDistort: {
      const auto& r = op.random_photometric_distort();
      o->kind = image::OpKind::kRandomPhotometricDistort;
      if (!Pair(r.brightness(), o->jitter[image::kBrightness]) ||
          !Pair(r.contrast(), o->jitter[image::kContrast]) ||
          !Pair(r.saturation(), o->jitter[image::kSaturation]) ||
          !Pair(r.hue(), o->jitter[image::kHue]) || !r.has_p()) {
        return NotEffective(i, "RandomPhotometricDistort needs its four ranges and p");
      }
      o->jitter_set = 0xf;
      o->p = r.p();
      return absl::OkStatus();
    }
    case v1::Op::kRandomResize: {
      const auto& r = op.random_resize();
      o->kind = image::OpKind::kRandomResize;
      o->resize_range[0] = r.min_size();
      o->resize_range[1] = r.max_size();
      if (!Resampling(r, o)) return NotEffective(i, "RandomResize needs interpolation and antialias");
      return absl::OkStatus();
    }
    case v1::Op::kCenterCrop:
      o->kind = image::OpKind::kCenterCrop;
      if (!TwoSides(op.center_crop().size(), o)) {
        return NotEffective(i, "CenterCrop needs size [h, w]");
      }
      return absl::OkStatus();
    case v1::Op::kRandomCrop: {
      const auto& r = op.random_crop();
      o->kind = image::OpKind::kRandomCrop;
      const auto mode = std::find(std::begin(pipeline::kPaddingModes),
                                  std::end(pipeline::kPaddingModes), r.padding_mode());
      if (!TwoSides(r.size(), o) || r.padding_size() != 4 || r.fill_size() != 3 ||
          mode == std::end(pipeline::kPaddingModes)) {
        return NotEffective(i,
                            "RandomCrop needs size [h, w], 4 paddings, 3 fills and a "
                            "padding_mode");
      }
      for (int k = 0; k < 4; ++k) o->padding[k] = r.padding(k);
      for (int k = 0; k < 3; ++k) {
        if (r.fill(k) > 255) return NotEffective(i, "RandomCrop's fill is over 255");
        o->fill[k] = static_cast<uint8_t>(r.fill(k));
      }
      o->pad_if_needed = r.pad_if_needed() ? 1 : 0;
      o->padding_mode = static_cast<image::PadMode>(mode - std::begin(pipeline::kPaddingModes));
      return absl::OkStatus();
    }
    case v1::Op::kPad: {
      const auto& r = op.pad();
      o->kind = image::OpKind::kPad;
      const auto mode = std::find(std::begin(pipeline::kPaddingModes),
                                  std::end(pipeline::kPaddingModes), r.padding_mode());
      if (r.padding_size() != 4 || !Fill3(r.fill(), o) || mode == std::end(pipeline::kPaddingModes)) {
        return NotEffective(i, "Pad needs 4 paddings, 3 fills and a padding_mode");
      }
      for (int k = 0; k < 4; ++k) o->padding[k] = r.padding(k);
      o->padding_mode = static_cast<image::PadMode>(mode - std::begin(pipeline::kPaddingModes));
      return absl::OkStatus();
    }
    case v1::Op::kRandomHorizontalFlip:
      o->kind = image::OpKind::kHorizontalFlip;
      if (!op.random_horizontal_flip().has_p())
        return NotEffective(i, "RandomHorizontalFlip needs p");
      o->p = op.random_horizontal_flip().p();
      return absl::OkStatus();
    case v1::Op::kRandomVerticalFlip:
      o->kind = image::OpKind::kVerticalFlip;
      if (!op.random_vertical_flip().has_p()) return NotEffective(i, "RandomVerticalFlip needs p");
      o->p = op.random_vertical_flip().p();
      return absl::OkStatus();
    case v1::Op::kColorJitter: {
      const auto& r = op.color_jitter();
      o->kind = image::OpKind::kColorJitter;
      const google::protobuf::RepeatedField<float>* factors[4] = {};
      factors[image::kBrightness] = &r.brightness();
      factors[image::kContrast] = &r.contrast();
      factors[image::kSaturation] = &r.saturation();
      factors[image::kHue] = &r.hue();
      for (uint32_t k = 0; k < 4; ++k) {
        if (factors[k]->empty()) continue;  // not made
        if (!Pair(*factors[k], o->jitter[k])) {
          return NotEffective(i, "ColorJitter's factors must be ranges [min, max] or empty");
        }
        o->jitter_set |= 1u << k;
      }
      return absl::OkStatus();
    }
    case v1::Op::kGrayscale:
      o->kind = image::OpKind::kGrayscale;
      if (op.grayscale().num_output_channels() != 3) {
        return NotEffective(i, "Grayscale needs num_output_channels 3");
      }
      return absl::OkStatus();
    case v1::Op::kRandomGrayscale:
      o->kind = image::OpKind::kRandomGrayscale;
      if (!op.random_grayscale().has_p()) return NotEffective(i, "RandomGrayscale needs p");
      o->p = op.random_grayscale().p();
      return absl::OkStatus();
    case v1::Op::kGaussianBlur: {
      const auto& r = op.gaussian_blur();
      o->kind = image::OpKind::kGaussianBlur;
      if (r.kernel_size_size() != 2 || !Pair(r.sigma(), o->sigma)) {
        return NotEffective(i, "GaussianBlur needs kernel_size [x, y] and sigma [min, max]");
      }
      o->kernel_x = r.kernel_size(0);
      o->kernel_y = r.kernel_size(1);
      return absl::OkStatus();
    }
    case v1::Op::kElasticTransform: {
      const auto& r = op.elastic_transform();
      o->kind = image::OpKind::kElasticTransform;
      if (!Pair(r.alpha(), o->elastic_alpha) || !Pair(r.sigma(), o->elastic_sigma) ||
          !AffineResampling(r.interpolation(), o) || !Fill3(r.fill(), o)) {
        return NotEffective(i,
                            "ElasticTransform needs alpha [x, y], sigma [x, y], interpolation "
                            "nearest or bilinear, and 3 fills");
      }
      return absl::OkStatus();
    }
    case v1::Op::kRandomPerspective: {
      const auto& r = op.random_perspective();
      o->kind = image::OpKind::kRandomPerspective;
      o->p = r.p();
      o->distortion = r.distortion_scale();
      if (!r.has_p() || !r.has_distortion_scale() || !AffineResampling(r.interpolation(), o) ||
          !Fill3(r.fill(), o)) {
        return NotEffective(i,
                            "RandomPerspective needs distortion_scale, p, interpolation nearest "
                            "or bilinear, and 3 fills");
      }
      return absl::OkStatus();
    }
    case v1::Op::kRandomRotation: {
      const auto& r = op.random_rotation();
      o->kind = image::OpKind::kRandomRotation;
      if (!Pair(r.degrees(), o->degrees) || !AffineResampling(r.interpolation(), o) || r.expand() ||
          !CenterOf(r.center(), o) || !Fill3(r.fill(), o)) {
        return NotEffective(i,
                            "RandomRotation needs degrees [min, max], interpolation nearest or "
                            "bilinear, expand false, center empty or [x, y], and 3 fills");
      }
      return absl::OkStatus();
    }
    case v1::Op::kRandomAffine: {
      const auto& r = op.random_affine();
      o->kind = image::OpKind::kRandomAffine;
      if (!Pair(r.degrees(), o->degrees) || !AffineResampling(r.interpolation(), o) ||
          !CenterOf(r.center(), o) || !Fill3(r.fill(), o) ||
          !(r.translate().empty() || Pair(r.translate(), o->translate)) ||
          !(r.scale().empty() || Pair(r.scale(), o->affine_scale)) ||
          !(r.shear().empty() || r.shear_size() == 2 || r.shear_size() == 4)) {
        return NotEffective(i,
                            "RandomAffine needs degrees [min, max], interpolation nearest or "
                            "bilinear, center empty or [x, y], 3 fills, translate and scale "
                            "empty or 2 values, shear empty, 2 or 4 values");
      }
      o->has_translate = r.translate().empty() ? 0 : 1;
      o->has_scale = r.scale().empty() ? 0 : 1;
      o->shear_count = static_cast<uint32_t>(r.shear_size());
      for (int k = 0; k < r.shear_size(); ++k) o->shear[k] = r.shear(k);
      return absl::OkStatus();
    }
    case v1::Op::kRandomPosterize:
      o->kind = image::OpKind::kRandomPosterize;
      if (!op.random_posterize().has_bits() || !op.random_posterize().has_p()) {
        return NotEffective(i, "RandomPosterize needs bits and p");
      }
      o->bits = op.random_posterize().bits();
      o->p = op.random_posterize().p();
      return absl::OkStatus();
    case v1::Op::kImageFilterGaussianBlur: {
      const auto& r = op.image_filter_gaussian_blur();
      o->kind = image::OpKind::kImageFilterGaussianBlur;
      if (!Pair(r.radius(), o->sigma) || !r.has_p()) {
        return NotEffective(i, "ImageFilterGaussianBlur needs radius [min, max] and p");
      }
      o->p = r.p();
      return absl::OkStatus();
    }
    case v1::Op::kRandomSolarize:
      o->kind = image::OpKind::kRandomSolarize;
      if (!op.random_solarize().has_threshold() || !op.random_solarize().has_p()) {
        return NotEffective(i, "RandomSolarize needs threshold and p");
      }
      o->threshold = op.random_solarize().threshold();
      o->p = op.random_solarize().p();
      return absl::OkStatus();
    case v1::Op::kRandomAdjustSharpness: {
      const auto& r = op.random_adjust_sharpness();
      o->kind = image::OpKind::kRandomAdjustSharpness;
      if (!r.has_sharpness_factor() || !r.has_p()) {
        return NotEffective(i, "RandomAdjustSharpness needs sharpness_factor and p");
      }
      o->sharpness_factor = r.sharpness_factor();
      o->p = r.p();
      return absl::OkStatus();
    }
    case v1::Op::kRandomAutocontrast:
      o->kind = image::OpKind::kRandomAutocontrast;
      if (!op.random_autocontrast().has_p()) return NotEffective(i, "RandomAutocontrast needs p");
      o->p = op.random_autocontrast().p();
      return absl::OkStatus();
    case v1::Op::kRandomEqualize:
      o->kind = image::OpKind::kRandomEqualize;
      if (!op.random_equalize().has_p()) return NotEffective(i, "RandomEqualize needs p");
      o->p = op.random_equalize().p();
      return absl::OkStatus();
    case v1::Op::kRandomInvert:
      o->kind = image::OpKind::kRandomInvert;
      if (!op.random_invert().has_p()) return NotEffective(i, "RandomInvert needs p");
      o->p = op.random_invert().p();
      return absl::OkStatus();
    case v1::Op::kAutoAugment: {
      const auto& r = op.auto_augment();
      o->kind = image::OpKind::kAutoAugment;
      const auto policy = std::find(std::begin(pipeline::kAutoAugmentPolicies),
                                    std::end(pipeline::kAutoAugmentPolicies), r.policy());
      if (policy == std::end(pipeline::kAutoAugmentPolicies) ||
          !AffineResampling(r.interpolation(), o) || !Fill3(r.fill(), o)) {
        return NotEffective(i, "AutoAugment needs a policy, interpolation and 3 fills");
      }
      o->policy = static_cast<image::AutoAugmentPolicy>(
          1 + (policy - std::begin(pipeline::kAutoAugmentPolicies)));
      return absl::OkStatus();
    }
    case v1::Op::kRandAugment: {
      const auto& r = op.rand_augment();
      o->kind = image::OpKind::kRandAugment;
      if (!r.has_num_ops() || !r.has_magnitude() || !r.has_num_magnitude_bins() ||
          !AffineResampling(r.interpolation(), o) || !Fill3(r.fill(), o)) {
        return NotEffective(i,
                            "RandAugment needs num_ops, magnitude, num_magnitude_bins, "
                            "interpolation and 3 fills");
      }
      o->num_ops = r.num_ops();
      o->magnitude = r.magnitude();
      o->num_magnitude_bins = r.num_magnitude_bins();
      return absl::OkStatus();
    }
    case v1::Op::kTrivialAugmentWide: {
      const auto& r = op.trivial_augment_wide();
      o->kind = image::OpKind::kTrivialAugmentWide;
      if (!r.has_num_magnitude_bins() || !AffineResampling(r.interpolation(), o) ||
          !Fill3(r.fill(), o)) {
        return NotEffective(i,
                            "TrivialAugmentWide needs num_magnitude_bins, interpolation and 3 "
                            "fills");
      }
      o->num_magnitude_bins = r.num_magnitude_bins();
      return absl::OkStatus();
    }
    case v1::Op::kAugMix: {
      const auto& r = op.aug_mix();
      o->kind = image::OpKind::kAugMix;
      if (!r.has_severity() || !r.has_mixture_width() || !r.has_chain_depth() || !r.has_alpha() ||
          !r.has_all_ops() || !AffineResampling(r.interpolation(), o) || !Fill3(r.fill(), o)) {
        return NotEffective(i,
                            "AugMix needs severity, mixture_width, chain_depth, alpha, all_ops, "
                            "interpolation and 3 fills");
      }
      o->severity = r.severity();
      o->mixture_width = r.mixture_width();
      o->chain_depth = r.chain_depth();
      o->alpha = r.alpha();
      o->all_ops = r.all_ops() ? 1 : 0;
      return absl::OkStatus();
    }
    case v1::Op::kRandomErasing: {
      const auto& r = op.random_erasing();
      o->kind = image::OpKind::kRandomErasing;
      if (!r.has_p() || !Pair(r.scale(), o->erase_scale) || !Pair(r.ratio(), o->erase_ratio) ||
          (r.value_random() ? r.value_size() != 0 : r.value_size() != 3)) {
        return NotEffective(i, "RandomErasing needs p, scale, ratio, and 3 values or value_random");
      }
      o->p = r.p();
      o->erase_random = r.value_random() ? 1 : 0;
      for (int k = 0; k < r.value_size(); ++k) o->erase_value[k] = r.value(k);
      return absl::OkStatus();
    }
    // The compositions: their ops follow them (LowerPipeline).
    case v1::Op::kRandomApply:
      o->kind = image::OpKind::kRandomApply;
      if (!op.random_apply().has_p()) return NotEffective(i, "RandomApply needs p");
      o->p = op.random_apply().p();
      o->children = static_cast<uint32_t>(op.random_apply().transforms_size());
      return absl::OkStatus();
    case v1::Op::kRandomChoice: {
      const v1::RandomChoice& r = op.random_choice();
      o->kind = image::OpKind::kRandomChoice;
      o->children = static_cast<uint32_t>(r.transforms_size());
      if (r.p_size() != r.transforms_size() || r.p_size() > int{image::kMaxChildren}) {
        return NotEffective(i, "RandomChoice needs one weight p per transform");
      }
      for (int k = 0; k < r.p_size(); ++k) o->weights[k] = r.p(k);
      return absl::OkStatus();
    }
    case v1::Op::kRandomOrder:
      o->kind = image::OpKind::kRandomOrder;
      o->children = static_cast<uint32_t>(op.random_order().transforms_size());
      return absl::OkStatus();
    case v1::Op::OP_NOT_SET:
      break;
  }
  return NotEffective(i, "no op set");
}

}  // namespace

absl::StatusOr<image::PipelineParams> LowerPipeline(const v1::PipelineSpec& effective) {
  image::PipelineParams p;
  // A composition is its own op, then its ops: the pipeline flat.
  uint32_t n = 0;
  auto lower = [&](const v1::Op& op, int i) -> absl::Status {
    if (n >= image::kMaxOps) {
      return absl::InvalidArgumentError(absl::StrCat(
          "more than the ", image::kMaxOps, " ops allowed (counting those in compositions)"));
    }
    return LowerOp(op, i, &p.ops[n++]);
  };
  auto lower_list = [&](const google::protobuf::RepeatedPtrField<v1::Op>& ops) -> absl::Status {
    for (int i = 0; i < ops.size(); ++i) {
      const v1::Op& op = ops.Get(i);
      if (absl::Status st = lower(op, i); !st.ok()) return st;
      if (const auto* children = pipeline::ComposedOps(op)) {
        for (const v1::Op& child : *children) {
          if (pipeline::ComposedOps(child) != nullptr) {
            return NotEffective(i, "a composition inside a composition");
          }
          if (absl::Status st = lower(child, i); !st.ok()) return st;
        }
      }
    }
    return absl::OkStatus();
  };
  if (absl::Status st = lower_list(effective.ops()); !st.ok()) return st;
  if (effective.views_size() > static_cast<int>(image::kMaxViews)) {
    return absl::InvalidArgumentError(
        absl::StrCat("more than the ", image::kMaxViews, " views allowed"));
  }
  for (int v = 0; v < effective.views_size(); ++v) {
    const v1::View& view = effective.views(v);
    image::ViewParams& vp = p.views[v];
    vp.first_op = n;
    if (absl::Status st = lower_list(view.ops()); !st.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("views[", v, "].", st.message()));
    }
    vp.op_count = n - vp.first_op;
    if (view.size_size() != 2 || view.count() == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "views[", v, "] needs its size [h, w] and a count (not an effective spec)"));
    }
    vp.out_height = view.size(0);
    vp.out_width = view.size(1);
    vp.copies = view.count();
  }
  p.view_count = static_cast<uint32_t>(effective.views_size());
  p.op_count = n;
  if (p.view_count > 0) {
    if (effective.size_size() != 0) {
      return absl::InvalidArgumentError("size must be empty beside views in an effective spec");
    }
    // The first view stands for the image where one output shape is asked.
    p.out_height = p.views[0].out_height;
    p.out_width = p.views[0].out_width;
  } else if (effective.size_size() == 2) {
    p.out_height = effective.size(0);
    p.out_width = effective.size(1);
  } else if (effective.size_size() != 0) {
    return absl::InvalidArgumentError(
        "size must be [h, w] or empty (any size) in an effective spec");
  }
  const v1::Output& out = effective.output();
  p.dtype = pipeline::DTypeFromName(out.dtype());
  p.layout = pipeline::LayoutFromName(out.layout());
  if (p.dtype == 0 || p.layout == 0 || out.mean_size() != 3 || out.std_size() != 3 ||
      effective.max_decode_pixels() == 0) {
    return absl::InvalidArgumentError(
        "the output needs a dtype, a layout, 3 means and 3 stds, and max_decode_pixels (not an "
        "effective spec: give it to pipeline::Effective first)");
  }
  for (int c = 0; c < 3; ++c) {
    p.mean[c] = out.mean(c);
    p.stdev[c] = out.std(c);
  }
  p.max_decode_pixels = effective.max_decode_pixels();
  p.exact_decode = effective.exact_decode() ? 1 : 0;
  p.apply_exif = effective.apply_exif_orientation() ? 1 : 0;
  p.mask_bpp = effective.mask_dtype() == "uint16" ? 2 : 1;
  p.mask_fill = effective.mask_fill();
  p.box_min_size = effective.box_min_size();
  p.box_min_visibility = effective.box_min_visibility();
  if (absl::Status st = image::ValidateParams(p); !st.ok()) return st;
  return p;
}

}  // namespace stoker
